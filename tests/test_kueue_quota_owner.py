"""With Kueue, a course's quota is counted in exactly one place: classhub's ledger (docs/kueue.md).

On the fake cluster, serving Kueue's LocalQueue and ClusterQueue as kube-apiserver serves the
CRDs, with a Kueue stand-in (below) that admits what its ClusterQueue's nominal quota allows, as
Kueue's StrictFIFO ClusterQueue does. What an admin would notice: a course with an 8-GPU quota
whose student submits three 8-GPU jobs has one handed to Kueue and two waiting in classhub's queue
with the course-quota sentence (Kueue never sees them, so it never holds one for quota); the
ledger holds 8 GPUs for the course at every cycle, never 16; each job runs in turn. classhub makes
the course's LocalQueue, feeding the one ClusterQueue; a LocalQueue an admin pointed at a
per-course ClusterQueue gets no job, and the job says why (as when Kueue is not installed). The
RBAC file for Kueue grants what this path asks.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path

import kubernetes_asyncio
import pytest
import yaml

from hub_ext.backends.kubernetes.jobs import KUEUE_QUEUE_LABEL, KubernetesJobs
from hub_ext.backends.kubernetes.kueue import KUEUE_GROUP, KUEUE_VERSION
from hub_ext.core import jobs as J
from hub_ext.core.quota import parse_limits
from hub_ext.core.resources import ResourceVector, sum_vectors
from hub_ext.service.jobs.bodies import parse_submission
from hub_ext.service.jobs.loop import JobLoop
from hub_ext.service.jobs.records import JobStore, job_key
from hub_ext.store import Ledger, add_member, connect, ensure_course, set_course_limits
from tests.kubefake import EXIT_AFTER_ANNOTATION, FakeCluster
from tests.kubefake.training import TrainingOperator
from tests.test_helm_jobs_rbac import access, allows, granted

pytestmark = pytest.mark.cluster

NS = "classhub"
NOW = datetime.now(timezone.utc)
GPU = "nvidia.com/gpu"
NODES = [{"name": name, "allocatable": {"cpu": "32", "memory": "256Gi", GPU: "4"},
          "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}} for name in ("gpu-a", "gpu-b")]
HELM_VALUES = Path(__file__).parents[1] / "helm-values"
#: The shipped ClusterQueue: classhub's whole share of the cluster (every GPU), no course quota.
CLUSTER_QUEUE = next(d for d in yaml.safe_load_all((HELM_VALUES / "kueue-queues.yaml").read_text())
                     if d["kind"] == "ClusterQueue")
RBAC = HELM_VALUES / "jobs-kueue-rbac.yaml"


class KueueStandIn:
    """Kueue's part, for the test: a suspended PyTorchJob in a LocalQueue is admitted (un-suspended)
    when the LocalQueue's ClusterQueue has nominal quota left for all its replicas, oldest first,
    none past the first that does not fit (StrictFIFO). `held_for_quota`: the jobs it kept waiting
    for lack of quota."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.held_for_quota: set[str] = set()
        self.admitted: set[str] = set()

    def cycle(self) -> None:
        queues = {q["metadata"]["name"]: q["spec"]["clusterQueue"]
                  for q in self.cluster.list("localqueues", NS)}
        used: dict[str, ResourceVector] = {}
        waiting = []
        for obj in sorted(self.cluster.list("pytorchjobs", NS),
                          key=lambda o: o["metadata"]["creationTimestamp"]):
            queue = queues.get(obj["metadata"].get("labels", {}).get(KUEUE_QUEUE_LABEL, ""))
            if queue is None:
                continue  # Kueue: "LocalQueue doesn't exist", the workload is inadmissible
            finished = any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
                           for c in (obj.get("status") or {}).get("conditions", []))
            if not obj["spec"]["runPolicy"].get("suspend"):
                if not finished:
                    used[queue] = used.get(queue, ResourceVector()) + request(obj)
            else:
                waiting.append((queue, obj))
        for queue, obj in waiting:
            name = obj["metadata"]["name"]
            groups = self.cluster.get("clusterqueues", queue, None)["spec"]["resourceGroups"]
            nominal = ResourceVector.from_k8s({r["name"]: r["nominalQuota"] for group in groups
                                               for flavor in group["flavors"] for r in flavor["resources"]})
            after = used.get(queue, ResourceVector()) + request(obj)
            if not (nominal - after).is_nonnegative():
                self.held_for_quota.add(name)
                break
            used[queue] = after
            self.cluster.mutate("pytorchjobs", name,
                                lambda o: o["spec"]["runPolicy"].update(suspend=False), NS)
            self.admitted.add(name)


def request(obj: dict) -> ResourceVector:
    """What a PyTorchJob's replicas request together (Kueue's Workload podSets)."""
    return sum_vectors(
        ResourceVector.from_k8s(c["resources"]["requests"]) * spec.get("replicas", 1)
        for spec in obj["spec"]["pytorchReplicaSpecs"].values()
        for c in spec["template"]["spec"]["containers"])


@pytest.fixture
def cluster(tmp_path):
    with FakeCluster(nodes=NODES) as fake:
        fake.write_kubeconfig(tmp_path / "kubeconfig")
        fake.register_crd(KUEUE_GROUP, KUEUE_VERSION, "LocalQueue", "localqueues")
        fake.register_crd(KUEUE_GROUP, KUEUE_VERSION, "ClusterQueue", "clusterqueues", namespaced=False)
        fake.create("namespaces", {"metadata": {"name": NS}}, None)
        fake.create("clusterqueues", CLUSTER_QUEUE, None)
        TrainingOperator(fake)
        yield fake


@pytest.fixture
def store(tmp_path):
    sessions = connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    with sessions.begin() as session:
        course = ensure_course(session, "gpu101", NOW)
        add_member(session, course, "ann", "student")
        set_course_limits(session, course, parse_limits({"resources": {GPU: 8}}), actor="admin", now=NOW)
    yield JobStore(sessions, Ledger(sessions))
    sessions.kw["bind"].dispose()


def submit(store: JobStore, name: str) -> str:
    """ann's 2 x 4-GPU job (8 GPUs, the course's whole quota)."""
    sub = parse_submission({"name": name, "command": ["python", "train.py"], "replicas": 2,
                            "resources": {GPU: 4, "cpu": "4", "memory": "16Gi"}})
    job = J.parse_job({**sub.job_fields, "name": sub.name}, owner="ann", course="gpu101",
                      submit_time=NOW.timestamp(), default_max_runtime=600)
    return store.submit("ann", "gpu101", sub, job, datetime.now(timezone.utc))[0].job_id


async def make_loop(cluster: FakeCluster, store: JobStore):
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    client = kubernetes_asyncio.client
    backend = KubernetesJobs(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace=NS,
                             image="pytorch/pytorch:2.5.1", kueue_queue="{course}-queue",
                             kueue_cluster_queue="classhub",
                             pod_annotations={EXIT_AFTER_ANNOTATION: "2"})
    return JobLoop(store, backend, interval=0.2, grace=1.0, delegate="Kueue"), api


def course_gpus(store: JobStore) -> ResourceVector:
    usage, _ = store.ledger.usage_by_user(datetime.now(timezone.utc), course="gpu101")
    return usage.resources.select(lambda name: name == GPU)


async def test_a_courses_quota_is_held_by_classhub_alone_and_kueue_only_queues(cluster, store):
    kueue = KueueStandIn(cluster)
    seen = len(cluster.requests)
    loop, api = await make_loop(cluster, store)
    jobs = [submit(store, f"train-{i}") for i in range(3)]
    async with api:
        await loop.cycle()
        await loop.settle()  # launching is a step of its own after the cycle (docs/jobs-loop.md)
        first, *rest = [store.get(j) for j in jobs]
        # classhub handed the first over (reserved in its ledger) and holds the others for quota
        assert first.state == J.ADMITTED and "handed to Kueue" in first.events[-1].message
        for record in rest:
            assert (record.state, record.reason_code) == (J.QUEUED, "course_quota"), record.reason
            assert "gpu101" in record.reason and cluster.get("pytorchjobs", record.job_id, NS) is None
        assert store.ledger.held_keys(kind="job") == {job_key(jobs[0])}
        assert course_gpus(store) == ResourceVector({GPU: 8})
        # the course's LocalQueue, made by classhub, feeds the one ClusterQueue
        queue = cluster.get("localqueues", "gpu101-queue", NS)
        assert queue["spec"] == {"clusterQueue": "classhub"}
        assert queue["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "classhub"
        assert [q["metadata"]["name"] for q in cluster.list("clusterqueues", None)] == ["classhub"]

        deadline = asyncio.get_running_loop().time() + 120
        while not all(store.get(j).state == J.SUCCEEDED for j in jobs):
            assert asyncio.get_running_loop().time() < deadline, [store.get(j).state for j in jobs]
            kueue.cycle()
            await loop.cycle()
            await loop.settle()
            handed = {j for j in jobs if cluster.get("pytorchjobs", j, NS) is not None
                      and store.get(j).state in J.HOLDING}
            # one count of the quota: the ledger holds exactly the jobs handed over, 8 GPUs at most
            assert store.ledger.held_keys(kind="job") == {job_key(j) for j in handed}
            assert (ResourceVector({GPU: 8}) - course_gpus(store)).is_nonnegative()
            await asyncio.sleep(0.1)
    # each job ran in turn, and Kueue never held one for quota: classhub had held them
    assert kueue.admitted == set(jobs) and kueue.held_for_quota == set()
    assert store.ledger.held_keys(kind="job") == set() and course_gpus(store) == ResourceVector()
    asked = {access(method, path) for method, path in cluster.requests[seen:]}
    queue_calls = {a for a in asked if a.group == KUEUE_GROUP}
    assert {(a.resource, a.verb) for a in queue_calls} == {("localqueues", "get"), ("localqueues", "create")}
    grants, _ = granted(RBAC.name)
    assert [a for a in queue_calls if not allows(grants, a)] == []


async def test_a_localqueue_feeding_a_per_course_clusterqueue_gets_no_job_and_says_why(cluster, store):
    cluster.create("localqueues", {"metadata": {"name": "gpu101-queue"},
                                   "spec": {"clusterQueue": "gpu101-quota"}}, NS)
    loop, api = await make_loop(cluster, store)
    job_id = submit(store, "train")
    async with api:
        await loop.cycle()
        await loop.cycle()
    record = store.get(job_id)
    assert (record.state, record.reason_code) == (J.QUEUED, "kueue_queue")
    assert "ClusterQueue 'gpu101-quota', not to 'classhub'" in record.reason
    assert "kubectl -n classhub delete localqueue gpu101-queue" in record.reason
    assert cluster.get("pytorchjobs", job_id, NS) is None and store.ledger.held_keys(kind="job") == set()
    # the admin deletes it; classhub makes it anew, feeding the one ClusterQueue, and hands over
    cluster.delete("localqueues", "gpu101-queue", NS)
    loop, api = await make_loop(cluster, store)
    async with api:
        await loop.cycle()
    assert store.get(job_id).state == J.ADMITTED
    assert cluster.get("localqueues", "gpu101-queue", NS)["spec"]["clusterQueue"] == "classhub"


async def test_without_kueue_installed_the_job_waits_and_says_so(store, tmp_path):
    with FakeCluster(nodes=NODES) as bare:  # no Kueue CRDs served
        bare.write_kubeconfig(tmp_path / "bare-kubeconfig")
        bare.create("namespaces", {"metadata": {"name": NS}}, None)
        loop, api = await make_loop(bare, store)
        job_id = submit(store, "train")
        async with api:
            await loop.cycle()
        record = store.get(job_id)
        assert (record.state, record.reason_code) == (J.QUEUED, "kueue_queue")
        assert "Kueue is not installed in this cluster" in record.reason, record.reason
        assert bare.get("pytorchjobs", job_id, NS) is None and store.ledger.held_keys(kind="job") == set()
