"""The job service's settings (`ClasshubJobs`) and the one object handlers and the loop share.

Every knob is a trait (docs/architecture.md, rule 5), set as ``c.ClasshubJobs.<name>`` in
``jupyterhub_config.py`` (z2jh: ``hub.config.ClasshubJobs``); ``configure()`` hands the section to
the classhub service (hub_ext.envtraits).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker
from traitlets import Bool, CaselessStrEnum, Dict, Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from hub_ext.backends.jobs import JobBackend
from hub_ext.core.admission import (
    RESERVATION_AGING,
    RESERVATION_DEPTH,
    STARVING_RESERVATIONS,
    policy_problem,
)
from hub_ext.envtraits import apply_env
from hub_ext.service.jobs.loop import JobLoop, course_limits
from hub_ext.service.jobs.records import JobStore
from hub_ext.service.jobs.shares import parse_shares, with_shares
from hub_ext.store import Ledger

__all__ = ["ClasshubJobs", "JobService"]


class _CommandList(List):
    """A command given as JSON (``["cat", "/x"]``) or as a shell line (``nvidia-smi -L``)."""

    def from_string(self, s: str) -> Any:
        s = s.strip()
        return json.loads(s) if s.startswith("[") else shlex.split(s)


class ClasshubJobs(Configurable):
    """Distributed jobs: admission loop timing, defaults and limits, and where local jobs run."""

    interval = Float(3.0, config=True, help="Seconds between admission cycles (a submit, a cancel "
                     "and a job's end also start one).").tag(
        env="CLASSHUB_JOB_INTERVAL")
    grace = Float(10.0, config=True, help="Seconds a stopped job's replicas get after SIGTERM before "
                  "SIGKILL: on cancel, max_runtime and preemption.").tag(
        env="CLASSHUB_JOB_GRACE")
    default_max_runtime = Float(3600.0, config=True, help="max_runtime in seconds of a job that "
                                "gives none.").tag(
        env="CLASSHUB_JOB_DEFAULT_MAX_RUNTIME")
    max_runtime_limit = Float(86400.0, config=True, help="The longest max_runtime a job may ask "
                              "for, in seconds.").tag(
        env="CLASSHUB_JOB_MAX_RUNTIME_LIMIT")
    homes_dir = Unicode("", config=True, help="Local mode: the folder of the users' homes, as "
                        "ClasshubLocalSpawner.homes_dir; jobs run in their "
                        "owner's home there.").tag(env="CLASSHUB_HOMES_DIR")
    state_dir = Unicode("", config=True, help="Local mode: the service's own folder (made 0700) for "
                        "the jobs' logs and bookkeeping, <state_dir>/<job id>/; never inside a home, "
                        "where its owner could plant links (default: 'jobs' beside homes_dir).").tag(
        env="CLASSHUB_JOB_STATE_DIR")
    gpu_discovery_command = _CommandList(
        Unicode(), ["nvidia-smi", "-L"], config=True,
        help="Local mode: the command listing the GPUs when NVML is not available, as "
        "ClasshubLocalSpawner.gpu_discovery_command.",
    ).tag(env="CLASSHUB_GPU_DISCOVERY_COMMAND")
    use_nvml = Bool(True, config=True, help="Local mode: ask NVML for the GPUs first.").tag(
        env="CLASSHUB_USE_NVML")
    system_users = Bool(False, config=True, help="Local mode: run each job as its owner's Unix "
                        "account, as ClasshubLocalSpawner.system_users.").tag(
        env="CLASSHUB_SYSTEM_USERS")
    grader_user = Unicode("nobody", config=True, help="Local mode with system_users: the Unix "
                          "account grading and competition jobs run under, one job at a time (issue "
                          "34: neither a student's nor the service's). Make it an account of "
                          "classhub's alone, such as classhub-grader: when a job ends, every "
                          "process the account started meanwhile is killed (nobody: a warning at "
                          "start). Without system_users "
                          'grading runs as the hub\'s account (docs/teachers/autograding.md, "Isolation").')
    system_user_prefix = Unicode("jupyter-", config=True, help="Local mode: prefix of the users' "
                                 "Unix accounts.").tag(
        env="CLASSHUB_SYSTEM_USER_PREFIX")

    namespace = Unicode("", config=True, help="Kubernetes mode: the namespace of the jobs' "
                        "PyTorchJobs or TrainJobs (default: the hub's, $POD_NAMESPACE).").tag(
        env="CLASSHUB_JOB_NAMESPACE")
    image = Unicode("quay.io/jupyter/pytorch-notebook:latest", config=True,
                    help="Kubernetes mode: the image of the jobs' containers.").tag(
        env="CLASSHUB_JOB_IMAGE")
    scheduler_name = Unicode("", config=True, help="Kubernetes mode: the gang scheduler that binds "
                             "the jobs' PodGroups (scheduler-plugins: scheduler-plugins-scheduler); "
                             "empty: the default scheduler.").tag(
        env="CLASSHUB_JOB_SCHEDULER")
    kueue_queue = Unicode("", config=True, help="Kubernetes mode: hand admission to Kueue, with "
                          "this LocalQueue per course ({course} is replaced, e.g. {course}-queue); "
                          "empty: classhub admits.").tag(
        env="CLASSHUB_JOB_KUEUE_QUEUE")
    kueue_cluster_queue = Unicode("classhub", config=True, help="Kubernetes mode with kueue_queue: "
                                  "the one ClusterQueue every course's LocalQueue feeds (classhub "
                                  "makes the LocalQueues; course quotas are counted by classhub only, "
                                  "docs/kueue.md).")
    course_shares = Dict(config=True, help="Each course's guaranteed share, e.g. "
                         '{"bio101": {"nvidia.com/gpu": 4}}: jobs beyond it run on idle capacity of '
                         "others and are preempted (after grace seconds, then requeued) when a course "
                         "within its share needs it; without one every GPU job borrows. Not a ceiling: "
                         "course quotas are. Without Kueue only (docs/kueue.md).")

    reservation_depth = Integer(
        RESERVATION_DEPTH, config=True,
        help="How many blocked jobs hold a reservation at once: none of them starts later than its "
        "first reservation, and nothing is backfilled that would delay one. 1 is EASY backfilling "
        "(only the first blocked job is protected: more small jobs start, but big jobs behind it "
        "can wait far longer); more protects more jobs and leaves more GPUs idle before a big job "
        "starts (docs/admission.md, \"Choosing the trade-off\").")
    reservation_aging = Float(
        RESERVATION_AGING, config=True,
        help="Seconds after which a waiting job's turn for a reservation follows submit order "
        "instead of fair order across courses.")
    starving_reservations = Integer(
        STARVING_RESERVATIONS, config=True,
        help="How many reservations beyond reservation_depth go to starving jobs of a whole "
        "node's GPUs or more (waited an hour and longer than 90 % of recent jobs); 0: none, so "
        "such jobs wait their turn among the reservation_depth.")

    #: Each policy setting and the argument of the admission cycle it becomes (whose bounds apply).
    _POLICY = {"reservation_depth": "depth", "reservation_aging": "aging",
               "starving_reservations": "starving_extra"}

    @validate(*_POLICY)
    def _valid_policy(self, proposal: Any) -> float:
        name = proposal["trait"].name
        problem = policy_problem(self._POLICY[name], proposal["value"])
        if problem:
            raise TraitError(f"ClasshubJobs.{name} {problem}")
        return proposal["value"]

    @validate("course_shares")
    def _valid_shares(self, proposal: Any) -> dict:
        try:
            parse_shares(proposal["value"])
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal["value"]

    isolate_jobs = Bool(True, config=True, help="Kubernetes mode: fence each job's replicas with "
                        "a NetworkPolicy of its own: they accept connections only from their own "
                        "job's pods and reach only those, DNS and public addresses (not other users' "
                        "pods, the cluster's private networks or the cloud's metadata server). Needs "
                        "the networkpolicies rule of helm-values/jobs-rbac.yaml and a network plugin "
                        "that enforces NetworkPolicies; False: replicas are reachable as any pod of the "
                        "namespace (docs/deploy-jobs.md).")
    job_kind = CaselessStrEnum(
        ["pytorchjob", "trainjob"], "pytorchjob", config=True,
        help="Kubernetes mode: what a job becomes: pytorchjob (kubeflow.org/v1, the training operator) "
        "or trainjob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2, on the ClusterTrainingRuntime "
        "training_runtime).").tag(env="CLASSHUB_JOB_KIND")
    training_runtime = Unicode("torch-distributed", config=True, help="Kubernetes mode with "
                               "job_kind=trainjob: the ClusterTrainingRuntime the TrainJobs name in "
                               "spec.runtimeRef (torch-distributed: the one Kubeflow Trainer ships).").tag(
        env="CLASSHUB_JOB_RUNTIME")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        apply_env(self, given=kwargs)

    def kubernetes_backend(self, home_of: Any = None) -> JobBackend:
        """PyTorchJobs or TrainJobs in the cluster (clients made at first use); `home_of(user)`: the home
        volume of the user's notebook pod, from the hub (`HubAPI.home_volume`), which the
        replicas mount."""
        import os

        from hub_ext.backends.kubernetes.jobs import KubernetesJobs

        namespace = self.namespace or os.environ.get("POD_NAMESPACE", "default")
        return KubernetesJobs(namespace=namespace, image=self.image,
                              scheduler=self.scheduler_name or None, kueue_queue=self.kueue_queue or None,
                              kueue_cluster_queue=self.kueue_cluster_queue,
                              home_of=home_of, kind=self.job_kind.lower(), runtime=self.training_runtime,
                              isolate=self.isolate_jobs)

    def local_backend(self) -> JobBackend:
        """Processes on this machine, with the same GPUs the local spawner hands out."""
        from hub_ext.backends.local import gpus
        from hub_ext.backends.local.jobs import LocalJobs
        from hub_ext.core.devices import Inventory

        devices = gpus.discover(command=list(self.gpu_discovery_command), use_nvml=self.use_nvml)
        homes = Path(self.homes_dir or "homes")
        return LocalJobs(homes, Inventory(devices), system_users=self.system_users,
                         user_prefix=self.system_user_prefix, state_dir=self.state_dir or None,
                         hub_api_url=os.environ.get("JUPYTERHUB_API_URL"), grader_user=self.grader_user)


@dataclass
class JobService:
    """What the job handlers need: the records, the loop, the backend and the settings."""

    store: JobStore
    loop: JobLoop
    backend: JobBackend
    settings: ClasshubJobs

    @classmethod
    def make(cls, sessions: sessionmaker[Session], backend: JobBackend,
             settings: ClasshubJobs) -> JobService:
        store = JobStore(sessions, Ledger(sessions))
        policy = {arg: getattr(settings, name) for name, arg in ClasshubJobs._POLICY.items()}
        loop = JobLoop(store, backend, interval=settings.interval, grace=settings.grace, **policy,
                       delegate="Kueue" if settings.kueue_queue else None,
                       limits=with_shares(course_limits(store), parse_shares(settings.course_shares)))
        return cls(store, loop, backend, settings)

    def limits(self, courses: set[str], now: datetime) -> dict:
        return course_limits(self.store)(courses, now)

