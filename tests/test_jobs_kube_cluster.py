"""Distributed jobs in Kubernetes mode, against the fake cluster with its training-operator and
coscheduling stand-ins (tests/kubefake/training.py).

What a student or an admin would notice: a 2 x 4-GPU job becomes a PyTorchJob that waits
suspended until classhub admits it, then runs on the two nodes classhub chose, its pods bound all
at once, and ends succeeded; while a notebook holds one node's GPUs no PyTorchJob is even created
(the job waits in classhub's queue with a reason) and it starts when the notebook goes; cancel
removes the job's pods; the PodGroup is bound all or nothing. With ClasshubJobs.job_kind = trainjob the
same job is a Kubeflow Trainer v2 TrainJob, run by the stand-in as the trainer runs it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import kubernetes_asyncio
import pytest

from hub_ext.backends.kubernetes.jobs import KubernetesJobs
from hub_ext.core import jobs as J
from hub_ext.service.jobs.bodies import parse_submission
from hub_ext.service.jobs.loop import JobLoop
from hub_ext.service.jobs.records import JobStore
from hub_ext.store import Ledger, add_member, connect, ensure_course
from tests.hubproc import wait_for
from tests.kubefake import EXIT_AFTER_ANNOTATION, FakeCluster
from tests.kubefake.training import POD_GROUP_LABEL, SCHEDULER_NAME, TrainingOperator

pytestmark = pytest.mark.cluster

NS = "classhub"
NOW = datetime.now(timezone.utc)
NODES = [{"name": name, "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"},
          "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}} for name in ("gpu-a", "gpu-b")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=NODES) as fake:
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        fake.create("namespaces", {"metadata": {"name": NS}}, None)
        fake.register_crd("kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues")  # Kueue installed
        TrainingOperator(fake)
        yield fake


@pytest.fixture
def store(tmp_path):
    sessions = connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    with sessions.begin() as session:
        course = ensure_course(session, "gpu101", NOW)
        add_member(session, course, "ann", "student")
    yield JobStore(sessions, Ledger(sessions))
    sessions.kw["bind"].dispose()


def submit(store: JobStore, name: str, seconds: float = 1.0, workdir: str = "", gpus: int = 4) -> str:
    sub = parse_submission({"name": name, "command": ["python", "train.py"], "replicas": 2,
                              "resources": {"nvidia.com/gpu": gpus, "cpu": "4", "memory": "16Gi"},
                              "env": {"RUN_SECONDS": str(seconds)}, "workdir": workdir})
    job = J.parse_job({**sub.job_fields, "name": sub.name}, owner="ann", course="gpu101",
                      submit_time=NOW.timestamp(), default_max_runtime=600)
    return store.submit("ann", "gpu101", sub, job, datetime.now(timezone.utc))[0].job_id


async def run_until(loop: JobLoop, predicate, timeout: float = 60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        await loop.cycle()
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def make_loop(cluster, store, exit_after: str = "1", home_of=None,
                    kind: str = "pytorchjob") -> tuple[JobLoop, object]:
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    client = kubernetes_asyncio.client
    backend = KubernetesJobs(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace=NS,
                             image="pytorch/pytorch:2.5.1", scheduler=SCHEDULER_NAME,
                             pod_annotations={EXIT_AFTER_ANNOTATION: exit_after}, home_of=home_of, kind=kind)
    return JobLoop(store, backend, interval=0.2, grace=1.0), api


def job_pods(cluster, job_id: str) -> list[dict]:
    return [p for p in cluster.list("pods", NS)
            if (p["metadata"].get("labels") or {}).get("training.kubeflow.org/job-name") == job_id]


async def test_a_two_node_job_is_admitted_by_unsuspending_and_runs_on_the_chosen_nodes(cluster, store):
    loop, api = await make_loop(cluster, store)
    async with api:
        job_id = submit(store, "ddp")
        record = await run_until(loop, lambda: (r := store.get(job_id)).state == J.SUCCEEDED and r)
    obj = cluster.get("pytorchjobs", job_id, NS)
    assert obj["spec"]["runPolicy"]["suspend"] is False
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions["Created"] == "True" and conditions["Succeeded"] == "True"
    assert conditions["Suspended"] == "False"
    group = cluster.get("podgroups", job_id, NS)
    assert group["spec"]["minMember"] == 2 and group["status"]["phase"] == "Scheduled"
    pods = job_pods(cluster, job_id)
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert nodes == ["gpu-a", "gpu-b"]  # one per node: 4 GPUs each, as classhub placed them
    assert sorted(r.node for r in record.replicas) == nodes
    env = {e["name"]: e["value"] for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == f"{job_id}-master-0"
    assert {p["metadata"]["labels"][POD_GROUP_LABEL] for p in pods} == {job_id}
    assert Ledger(store.sessions).active() == []


async def test_a_job_waits_while_a_notebook_holds_a_node_and_nothing_is_created(cluster, store):
    notebook = {"metadata": {"name": "jupyter-bob", "annotations": {}},
                "spec": {"containers": [{"name": "notebook", "image": "x",
                                         "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "1"},
                                                       "limits": {"nvidia.com/gpu": "4"}}}]}}
    cluster.create("pods", notebook, NS)
    wait_for(lambda: cluster.get("pods", "jupyter-bob", NS)["spec"].get("nodeName"), 30, "the notebook")
    loop, api = await make_loop(cluster, store)
    async with api:
        job_id = submit(store, "wait")
        await loop.cycle()
        record = store.get(job_id)
        assert record.state == J.QUEUED and record.reason_code == "capacity"
        assert "4 free nvidia.com/gpu" in record.reason
        assert cluster.get("pytorchjobs", job_id, NS) is None and job_pods(cluster, job_id) == []
        cluster.delete("pods", "jupyter-bob", NS, grace=0)
        await run_until(loop, lambda: store.get(job_id).state == J.SUCCEEDED)


async def test_cancel_deletes_the_job_and_its_pods(cluster, store):
    loop, api = await make_loop(cluster, store, exit_after="600")
    async with api:
        job_id = submit(store, "long")
        await run_until(loop, lambda: store.get(job_id).state == J.RUNNING)
        assert len(job_pods(cluster, job_id)) == 2
        store.request_stop(job_id, J.STOP_CANCEL, "ann", datetime.now(timezone.utc), "cancel")
        await run_until(loop, lambda: store.get(job_id).state == J.CANCELLED)
    assert job_pods(cluster, job_id) == [] and cluster.get("pytorchjobs", job_id, NS) is None


def test_a_pod_group_is_bound_all_or_nothing(cluster):
    cluster.create("podgroups", {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                 "metadata": {"name": "gang"}, "spec": {"minMember": 3}}, NS)
    gpus = {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
    for i in range(3):  # 3 x 4 GPUs on 2 nodes of 4: never all at once
        cluster.create("pods", {"metadata": {"name": f"gang-{i}", "labels": {POD_GROUP_LABEL: "gang"}},
                                "spec": {"schedulerName": SCHEDULER_NAME, "containers": [
                                    {"name": "c", "image": "x", "resources": gpus}]}}, NS)
    wait_for(lambda: (cluster.get("podgroups", "gang", NS).get("status") or {}).get("phase") == "Pending",
             30, "the group to be refused")
    assert [p for p in cluster.list("pods", NS) if p["metadata"]["name"].startswith("gang-")
            and p["spec"].get("nodeName")] == []  # none bound, though two would fit
    cluster.delete("pods", "gang-2", NS, grace=0)
    cluster.mutate("podgroups", "gang", lambda o: o["spec"].update(minMember=2), NS)
    wait_for(lambda: all(cluster.get("pods", f"gang-{i}", NS)["spec"].get("nodeName") for i in (0, 1)),
             30, "both bound together")
    for i in (0, 1):
        cluster.delete("pods", f"gang-{i}", NS, grace=0)


async def test_with_kueue_the_job_waits_suspended_in_the_course_queue_until_kueue_admits_it(cluster, store):
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    client = kubernetes_asyncio.client
    backend = KubernetesJobs(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace=NS,
                             image="img", kueue_queue="{course}-queue",
                             pod_annotations={EXIT_AFTER_ANNOTATION: "1"})
    loop = JobLoop(store, backend, interval=0.2, grace=1.0, delegate="Kueue")
    async with api:
        job_id = submit(store, "kueue")
        await run_until(loop, lambda: cluster.get("pytorchjobs", job_id, NS) is not None)
        obj = cluster.get("pytorchjobs", job_id, NS)
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu101-queue"
        await loop.cycle()
        assert cluster.get("pytorchjobs", job_id, NS)["spec"]["runPolicy"]["suspend"] is True
        assert job_pods(cluster, job_id) == []  # classhub does not admit: Kueue does
        assert "handed to Kueue" in store.get(job_id).events[-1].message
        cluster.mutate("pytorchjobs", job_id, lambda o: o["spec"]["runPolicy"].update(suspend=False), NS)
        await run_until(loop, lambda: store.get(job_id).state == J.SUCCEEDED)  # Kueue admitted it


def home_answer(claim: str):
    """What the hub answers for ann (ClasshubKubeSpawner.home_volume) with her home on `claim`."""
    async def home_of(user: str) -> dict:
        return {"namespace": NS, "volume": {"name": "home", "persistentVolumeClaim": {"claimName": claim}},
                "mount": {"name": "home", "mountPath": "/home/jovyan"},
                "uid": 1000, "gid": 100, "fs_gid": 100}
    return home_of


def make_claim(cluster, name: str, mode: str) -> None:
    cluster.create("persistentvolumeclaims", {"metadata": {"name": name}, "spec": {
        "accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}}}, NS)


async def test_the_replicas_mount_the_owners_home_claim_and_start_in_the_submitted_folder(cluster, store):
    make_claim(cluster, "claim-ann", "ReadWriteMany")  # e.g. NFS: both nodes mount it at once
    loop, api = await make_loop(cluster, store, home_of=home_answer("claim-ann"))
    async with api:
        job_id = submit(store, "home", workdir="lab3")
        await run_until(loop, lambda: store.get(job_id).state == J.SUCCEEDED)
    pods = job_pods(cluster, job_id)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-a", "gpu-b"]
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert pod["spec"]["volumes"] == [{"name": "home",
                                           "persistentVolumeClaim": {"claimName": "claim-ann"}}]
        assert container["volumeMounts"] == [{"name": "home", "mountPath": "/home/jovyan"}]
        assert container["workingDir"] == "/home/jovyan/lab3"
        assert pod["spec"]["securityContext"]["fsGroup"] == 100


async def test_a_home_the_replicas_cannot_mount_refuses_the_job_with_a_sentence(cluster, store):
    make_claim(cluster, "claim-ann-rwo", "ReadWriteOnce")
    for claim, sentence in (("claim-ann-rwo", "your home volume claim-ann-rwo is ReadWriteOnce: one node at "
                             "a time can mount it, and this job's replicas are placed on gpu-a, gpu-b"),
                            ("claim-nobody", "your home volume claim-nobody does not exist yet")):
        loop, api = await make_loop(cluster, store, home_of=home_answer(claim))
        async with api:
            job_id = submit(store, f"refused-{claim}")
            record = await run_until(
                loop, lambda job_id=job_id: (r := store.get(job_id)).state == J.FAILED and r)
        assert any(sentence in e.message for e in record.events), [e.message for e in record.events]
        assert cluster.get("pytorchjobs", job_id, NS) is None  # nothing was created


async def test_a_trainjob_is_admitted_by_unsuspending_runs_on_the_chosen_nodes_and_cancel_deletes_it(
        cluster, store):
    loop, api = await make_loop(cluster, store, exit_after="600", kind="trainjob")
    async with api:
        job_id = submit(store, "trainer")
        record = await run_until(loop, lambda: (r := store.get(job_id)).state == J.RUNNING and r)
        obj = cluster.get("trainjobs", job_id, NS)
        assert obj["spec"]["suspend"] is False
        conditions = {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}
        assert conditions == {"Suspended": ("False", "Resumed")}  # it was created suspended
        pods = [p for p in cluster.list("pods", NS)
                if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == job_id]
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-a", "gpu-b"]
        assert sorted(r.node for r in record.replicas) == ["gpu-a", "gpu-b"]
        for pod in pods:
            assert pod["metadata"]["labels"]["classhub.io/job"] == job_id
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            assert (env["PET_NNODES"], env["PET_MASTER_PORT"], env["WORLD_SIZE"]) == ("2", "29500", "2")
            assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] == f"{job_id}-node-0-0.{job_id}"
        assert cluster.get("podgroups", job_id, NS) is None  # gang binding is the runtime's
        store.request_stop(job_id, J.STOP_CANCEL, "ann", datetime.now(timezone.utc), "cancel")
        await run_until(loop, lambda: store.get(job_id).state == J.CANCELLED)
    assert cluster.get("trainjobs", job_id, NS) is None
    assert [p for p in cluster.list("pods", NS)
            if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == job_id] == []


async def test_each_job_is_fenced_from_other_jobs_and_private_networks(cluster, store):
    """A job's replicas run code nobody authenticates to (torch's rendezvous store): another
    student's job must not reach them, nor they the cloud's metadata server or other users' pods.
    Each job gets a NetworkPolicy of its own, owned by the job (gone with it); kube-apiserver
    stores it (the fake validates it as it does), the network plugin enforces it."""
    import ipaddress

    from tests.kubefake.netpol import selects

    loop, api = await make_loop(cluster, store, exit_after="30")
    async with api:
        first, second = (submit(store, name, seconds=30, gpus=2) for name in ("one", "two"))
        await run_until(loop, lambda: all(store.get(j).state == J.RUNNING for j in (first, second)))
        policies = {p["metadata"]["name"]: p for p in cluster.list("networkpolicies", NS)}
        pods = {j: job_pods(cluster, j) for j in (first, second)}
        for job, other in ((first, second), (second, first)):
            fence = policies[f"classhub-job-{job}"]
            assert fence["metadata"]["ownerReferences"][0]["name"] == job
            labels = [p["metadata"]["labels"] for p in pods[job]]
            assert labels and all(selects(fence, lab) for lab in labels)  # every replica fenced
            assert not any(selects(fence, p["metadata"]["labels"]) for p in pods[other])
            spec = fence["spec"]
            assert spec["policyTypes"] == ["Ingress", "Egress"]
            peers = [peer for rule in spec["ingress"] for peer in rule["from"]]
            # only its own pods may connect: the other job's pods match no peer
            assert all("podSelector" in peer and "namespaceSelector" not in peer for peer in peers)
            assert not any(selects({"spec": peer}, p["metadata"]["labels"])
                           for peer in peers for p in pods[other])
            assert all(selects({"spec": peer}, lab) for peer in peers for lab in labels)
            blocks = [peer["ipBlock"] for rule in spec["egress"] for peer in rule.get("to", ())
                      if "ipBlock" in peer]
            for address in ("169.254.169.254", "10.1.2.3", "192.168.0.10", "100.64.3.4"):
                assert not any(ipaddress.ip_address(address) in ipaddress.ip_network(b["cidr"])
                               and not any(ipaddress.ip_address(address) in ipaddress.ip_network(x)
                                           for x in b.get("except", ())) for b in blocks), address
            assert any(ipaddress.ip_address("151.101.0.223") in ipaddress.ip_network(b["cidr"])
                       for b in blocks)  # public addresses (a package index) stay reachable
        store.request_stop(first, J.STOP_CANCEL, "ann", datetime.now(timezone.utc), "cancel")
        await run_until(loop, lambda: store.get(first).state == J.CANCELLED)
        # gone with its job (the garbage collector follows the owner reference)
        wait_for(lambda: f"classhub-job-{first}" not in
                 {p["metadata"]["name"] for p in cluster.list("networkpolicies", NS)}, 30,
                 "the cancelled job's policy to go")
        store.request_stop(second, J.STOP_CANCEL, "ann", datetime.now(timezone.utc), "cancel")
        await run_until(loop, lambda: store.get(second).state == J.CANCELLED)
