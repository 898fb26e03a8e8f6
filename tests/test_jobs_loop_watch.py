"""The job loop looks at the cluster through watches, not a list per cycle or per submit.

What an admin of a large cluster would notice: a job service that lists every node and pod of
the cluster every few seconds (and for every submit, and the pods of every running job) loads
the API server and slows down with the cluster. Here the product's loop and Kubernetes backend
run against the fake cluster (which records every request it serves) with a job running and a
job waiting; over several cycles and a submit, the fake serves no list call at all, and the
loop still sees what changes: the running job's end (from the pod watch) and the room it frees,
into which the waiting job starts.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

import kubernetes_asyncio
import pytest

from hub_ext.backends.kubernetes.jobs import KubernetesJobs
from hub_ext.core import jobs as J
from hub_ext.service.jobs.bodies import parse_submission
from hub_ext.service.jobs.loop import JobLoop
from hub_ext.service.jobs.records import JobStore
from hub_ext.store import Ledger, add_member, connect, ensure_course
from tests.kubefake import EXIT_AFTER_ANNOTATION, FakeCluster
from tests.kubefake.training import SCHEDULER_NAME, TrainingOperator

pytestmark = pytest.mark.cluster

NS = "classhub"
NOW = datetime.now(timezone.utc)
NODES = [{"name": name, "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"},
          "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}} for name in ("gpu-a", "gpu-b")]


@pytest.fixture
def cluster(tmp_path_factory):
    with FakeCluster(nodes=NODES) as fake:
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        fake.create("namespaces", {"metadata": {"name": NS}}, None)
        TrainingOperator(fake)
        yield fake


@pytest.fixture
def store(tmp_path):
    sessions = connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    with sessions.begin() as session:
        add_member(session, ensure_course(session, "gpu101", NOW), "ann", "student")
    yield JobStore(sessions, Ledger(sessions))
    sessions.kw["bind"].dispose()


def submit(store: JobStore, name: str, seconds: str) -> str:
    sub = parse_submission({"name": name, "command": ["python", "train.py"], "replicas": 2,
                            "resources": {"nvidia.com/gpu": 4, "cpu": "4", "memory": "16Gi"},
                            "env": {"RUN_SECONDS": seconds}})
    job = J.parse_job({**sub.job_fields, "name": sub.name}, owner="ann", course="gpu101",
                      submit_time=datetime.now(timezone.utc).timestamp(), default_max_runtime=600)
    return store.submit("ann", "gpu101", sub, job, datetime.now(timezone.utc))[0].job_id


def lists(requests: list[tuple[str, str]]) -> list[str]:
    """The list calls among `requests`: a GET of a collection that is not a watch."""
    out = []
    for method, path_qs in requests:
        url = urlsplit(path_qs)
        parts = [p for p in url.path.split("/") if p]
        collection = parts[-1] in ("pods", "nodes", "pytorchjobs", "podgroups", "trainjobs")
        watching = parse_qs(url.query).get("watch", ["false"])[0].lower() in ("true", "t", "1")
        if method == "GET" and collection and not watching:
            out.append(path_qs)
    return out


async def cycles_until(loop: JobLoop, predicate, timeout: float = 60.0) -> int:
    deadline = asyncio.get_running_loop().time() + timeout
    n = 0
    while not await asyncio.to_thread(predicate):
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await loop.cycle()
        n += 1
        await asyncio.sleep(0.1)
    return n


async def test_cycles_and_submits_list_nothing_and_still_see_a_job_end(cluster, store):
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    client = kubernetes_asyncio.client
    backend = KubernetesJobs(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace=NS,
                             image="img", scheduler=SCHEDULER_NAME,
                             pod_annotations={EXIT_AFTER_ANNOTATION: "4"})
    loop = JobLoop(store, backend, interval=0.2, grace=1.0)
    async with api:
        first = submit(store, "first", "4")  # both nodes' GPUs for ~4 s
        await cycles_until(loop, lambda: store.get(first).state == J.RUNNING)
        seen = len(cluster.requests)
        second = submit(store, "second", "1")  # waits for the first one's GPUs
        await loop.known_nodes()  # what a submit through the API asks
        for _ in range(5):
            await loop.cycle()
            await asyncio.sleep(0.1)
        record = store.get(second)
        assert record.state == J.QUEUED and record.reason_code in ("reserved", "capacity"), record.reason
        assert store.get(first).state == J.RUNNING
        quiet = cluster.requests[seen:]
        assert lists(quiet) == [], lists(quiet)
        # the pod watch sees the first job end; the room it frees goes to the second
        n = await cycles_until(loop, lambda: store.get(second).state == J.SUCCEEDED)
        assert store.get(first).state == J.SUCCEEDED
        after = cluster.requests[seen:]
        assert lists(after) == [], lists(after)
        assert n >= 5  # several cycles ran meanwhile, none of them listing
    await backend.close()
