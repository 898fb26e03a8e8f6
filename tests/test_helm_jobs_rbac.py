"""helm-values/jobs-rbac.yaml grants what the job service does, recorded, not listed by hand.

The job loop runs classhub's Kubernetes job backend against the fake cluster (with its
training-operator and Trainer stand-ins) through a job's whole life for each job kind: the home
claim checked, the job created suspended and admitted, its pods followed, its logs read, a second
job cancelled. Every request the fake served is turned into what kube-apiserver's authorizer would
ask RBAC (API group, resource or subresource, verb, namespace or cluster scope: the request-info
rules of k8s.io/apiserver ``RequestInfoFactory``), and each must be granted by the manifests a
deployer applies (docs/admins/kubernetes.md, "Deploy on Kubernetes"): ``jobs-rbac.yaml`` in the jobs'
namespace, and
``capacity-rbac.yaml`` cluster-wide. The Role must grant nothing beyond what was recorded but
reads of the objects classhub makes.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import kubernetes_asyncio
import pytest
import yaml

from hub_ext.backends.kubernetes.jobs import KubernetesJobs
from hub_ext.core import jobs as J
from hub_ext.service.jobs.bodies import parse_submission
from hub_ext.service.jobs.loop import JobLoop, launch_of
from hub_ext.service.jobs.records import JobStore
from hub_ext.store import Ledger, add_member, connect, ensure_course
from tests.helmchart import HELM_VALUES, read_yaml
from tests.kubefake import EXIT_AFTER_ANNOTATION, FakeCluster
from tests.kubefake.training import SCHEDULER_NAME, TrainingOperator

pytestmark = pytest.mark.cluster

#: The jobs' namespace of helm-values/jobs.yaml (the release namespace).
NS = read_yaml(HELM_VALUES / "jobs.yaml")["hub"]["config"]["ClasshubJobs"]["namespace"]
NOW = datetime.now(timezone.utc)
NODES = [{"name": name, "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"},
          "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}} for name in ("gpu-a", "gpu-b")]
READS = {"get", "list", "watch"}


class Access(NamedTuple):
    """What RBAC is asked for one request: ``namespace`` is None for a cluster-scoped request."""

    group: str
    resource: str
    verb: str
    namespace: str | None


def access(method: str, path_qs: str) -> Access:
    """The authorizer's attributes of a resource request (k8s.io/apiserver RequestInfoFactory):
    ``/api/v1/...`` is the core group, ``/apis/<group>/<version>/...`` another; then
    ``[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]``; GET of a name is get, of a
    collection list (watch with ``watch=true``), POST create, PUT update, PATCH patch, DELETE of a
    name delete, of a collection deletecollection."""
    url = urlsplit(path_qs)
    parts = [p for p in url.path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        assert parts[0] == "apis", path_qs
        group, rest = parts[1], parts[3:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watch = parse_qs(url.query).get("watch", ["false"])[0].lower() in ("true", "t", "1")  # Go ParseBool
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if verb is None:
        if method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            verb = "watch" if watch else ("get" if name else "list")
    return Access(group, resource, verb, namespace)


def granted(path: str) -> tuple[set[Access], list[dict[str, Any]]]:
    """What the Roles and ClusterRoles of a manifest file grant their bound subjects, and the
    subjects; a ClusterRole grants cluster-wide (namespace None stands for every namespace)."""
    docs = list(yaml.safe_load_all((HELM_VALUES / path).read_text()))
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out: set[Access] = set()
    subjects: list[dict[str, Any]] = []
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        where = role["metadata"].get("namespace") if role["kind"] == "Role" else None
        if binding["kind"] == "RoleBinding":
            assert where == binding["metadata"]["namespace"], "a RoleBinding grants in its own namespace"
        subjects += binding["subjects"]
        for rule in role["rules"]:
            out |= {Access(g, r, v, where) for g in rule["apiGroups"] for r in rule["resources"]
                    for v in rule["verbs"]}
    return out, subjects


def allows(grants: set[Access], wanted: Access) -> bool:
    return any((g.group, g.resource, g.verb) == wanted[:3] and g.namespace in (None, wanted.namespace)
               for g in grants)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=NODES) as fake:
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        fake.create("namespaces", {"metadata": {"name": NS}}, None)
        TrainingOperator(fake)
        fake.create("persistentvolumeclaims", {"metadata": {"name": "claim-ann"}, "spec": {
            "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}, NS)
        yield fake


def submit(store: JobStore, name: str) -> str:
    sub = parse_submission({"name": name, "command": ["python", "train.py"], "replicas": 2,
                            "resources": {"nvidia.com/gpu": 4, "cpu": "4", "memory": "16Gi"}})
    job = J.parse_job({**sub.job_fields, "name": sub.name}, owner="ann", course="gpu101",
                      submit_time=NOW.timestamp(), default_max_runtime=600)
    return store.submit("ann", "gpu101", sub, job, datetime.now(timezone.utc))[0].job_id


async def home_of(user: str) -> dict[str, Any]:
    """What the hub answers for ann's home (ClasshubKubeSpawner.home_volume)."""
    return {"namespace": NS, "volume": {"name": "home", "persistentVolumeClaim": {"claimName": "claim-ann"}},
            "mount": {"name": "home", "mountPath": "/home/jovyan"}}


async def until(loop: JobLoop, predicate, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(predicate):
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await loop.cycle()
        await asyncio.sleep(0.1)


async def one_life(cluster: FakeCluster, store: JobStore, kind: str) -> set[Access]:
    """A job run to its end with its logs read, a job cancelled while it runs, and a grading's
    inputs (a Secret) made and dropped; what RBAC was asked for on the way."""
    seen = len(cluster.requests)
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    client = kubernetes_asyncio.client
    async with api:
        for exit_after, end in (("1", J.SUCCEEDED), ("600", J.CANCELLED)):
            backend = KubernetesJobs(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace=NS,
                                     image="pytorch/pytorch:2.5.1", scheduler=SCHEDULER_NAME,
                                     pod_annotations={EXIT_AFTER_ANNOTATION: exit_after}, home_of=home_of,
                                     kind=kind)
            loop = JobLoop(store, backend, interval=0.2, grace=1.0)
            job_id = submit(store, f"{kind}-{exit_after}")
            await until(loop, lambda job_id=job_id: store.get(job_id).state in (J.RUNNING, J.SUCCEEDED))
            launch = launch_of(store.get(job_id))
            replica = launch.replicas[-1]
            await backend.logs(launch, replica.role, replica.index, 0, 1000)
            if end == J.CANCELLED:
                store.request_stop(job_id, J.STOP_CANCEL, "ann", datetime.now(timezone.utc), "cancel")
            await until(loop, lambda job_id=job_id, end=end: store.get(job_id).state == end)
        # what an autograded submission adds to a job's life: its inputs' Secret, made and dropped
        await backend.drop_sandbox(await backend.prepare_sandbox({"grading.json": b"{}"}))
    return {access(method, path) for method, path in cluster.requests[seen:]}


@pytest.fixture(scope="module")
def recorded(cluster, tmp_path_factory) -> dict[str, set[Access]]:
    """kind -> what the job service asked for in one_life."""
    out = {}
    for kind in ("pytorchjob", "trainjob"):
        sessions = connect(f"sqlite:///{tmp_path_factory.mktemp(kind) / 'classhub.sqlite'}")
        with sessions.begin() as session:
            add_member(session, ensure_course(session, "gpu101", NOW), "ann", "student")
        out[kind] = asyncio.run(one_life(cluster, JobStore(sessions, Ledger(sessions)), kind))
        sessions.kw["bind"].dispose()
    return out


def test_the_request_attributes_are_kube_apiservers():
    assert access("GET", "/api/v1/namespaces/ns/pods/p-0/log") == Access("", "pods/log", "get", "ns")
    assert access("GET", "/api/v1/pods?fieldSelector=x&watch=true") == Access("", "pods", "watch", None)
    assert access("PATCH", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j1") == Access(
        "kubeflow.org", "pytorchjobs", "patch", "ns")
    assert access("GET", "/api/v1/nodes") == Access("", "nodes", "list", None)
    assert access("DELETE", "/api/v1/namespaces/ns/pods") == Access("", "pods", "deletecollection", "ns")


@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob"])
def test_the_manifests_grant_every_request_of_a_jobs_life(recorded, kind):
    jobs, job_subjects = granted("jobs-rbac.yaml")
    capacity, capacity_subjects = granted("capacity-rbac.yaml")
    asked = recorded[kind]
    group, plural = {"pytorchjob": ("kubeflow.org", "pytorchjobs"),
                     "trainjob": ("trainer.kubeflow.org", "trainjobs")}[kind]
    # the life did what a job's life does: create, admit, follow, read logs, cancel
    assert {Access(group, plural, v, NS) for v in ("create", "patch", "delete")} <= asked
    # the loop follows nodes and pods by cluster-wide watches (docs/jobs-loop.md), never a list
    # of the job's pods per cycle
    assert {Access("", "pods/log", "get", NS), Access("", "pods", "watch", None),
            Access("", "nodes", "list", None), Access("", "nodes", "watch", None)} <= asked
    missing = sorted(a for a in asked if not allows(jobs | capacity, a))
    assert missing == [], f"the job service needs these and no manifest grants them: {missing}"
    # both manifests bind the chart's hub ServiceAccount of the release namespace
    assert job_subjects == capacity_subjects == [{"kind": "ServiceAccount", "name": "hub", "namespace": NS}]


def test_the_jobs_role_grants_nothing_the_service_does_not_do_but_reads_of_its_objects(recorded):
    jobs, _ = granted("jobs-rbac.yaml")
    asked = recorded["pytorchjob"] | recorded["trainjob"]
    assert all(g.namespace == NS for g in jobs), "the jobs' Role is namespaced: nothing cluster-wide"
    # the objects classhub makes may also be read (kubectl auth can-i, a restarted service)
    reads = {Access(g.group, g.resource, v, NS) for g in asked if g.namespace == NS
             and g.verb in ("create", "list") for v in READS}
    extra = sorted(jobs - asked - reads)
    assert extra == []
    # the floor: create, delete and watch on each job kind
    for group, plural in (("kubeflow.org", "pytorchjobs"), ("trainer.kubeflow.org", "trainjobs")):
        assert {Access(group, plural, v, NS) for v in ("create", "delete", "watch")} <= jobs
