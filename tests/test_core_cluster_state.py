"""The job loop's memory between cycles: `ClusterState` and `QueueManager` kept by events.

What an operator would notice if this failed: a cycle deciding on a stale picture (a node that
left still offered, a job that ended still holding its GPUs, a job cancelled still queued), or a
cycle rebuilding everything each time (the 5,000-node figures of docs/jobs-loop.md)."""

from __future__ import annotations

import pytest

from hub_ext.core.admission import RunningJob, admission_cycle
from hub_ext.core.admission.queue import QueueManager
from hub_ext.core.admission.snapshot import ClusterState, NodeState
from hub_ext.core.jobs import Job, Role
from hub_ext.core.resources import NVIDIA_GPU, ResourceVector

pytestmark = pytest.mark.unit


def node(name: str, gpus: int = 8, free: int | None = None) -> NodeState:
    return NodeState(name, ResourceVector({NVIDIA_GPU: gpus}),
                     ResourceVector({NVIDIA_GPU: gpus if free is None else free}))


def job(name: str, gpus: int, submit: float = 0.0, course: str = "cs101") -> Job:
    return Job(name, "ann", course, (Role("worker", 1, ResourceVector({NVIDIA_GPU: gpus})),), 3600.0,
               submit)


def test_the_snapshot_follows_node_and_job_events_and_reuses_what_did_not_change():
    cluster = ClusterState([node("a"), node("b")])
    first = cluster.snapshot(0.0)
    assert cluster.snapshot(1.0).nodes is first.nodes  # nothing changed: the same tuple
    cluster.adjust("a", ResourceVector({NVIDIA_GPU: -8}))
    cluster.put_node(node("c", 4))
    cluster.drop_node("b")
    second = cluster.snapshot(2.0)
    assert [(n.name, n.free[NVIDIA_GPU]) for n in second.nodes] == [("a", 0), ("c", 4)]
    assert second.total_allocatable == ResourceVector({NVIDIA_GPU: 12})
    run = RunningJob(job("big", 8), (("worker", 0, "a"),), 0.0)
    cluster.start(run)
    assert cluster.snapshot(3.0).running == (run,)
    assert cluster.preempt("big", 30.0).ends_by == 30.0
    assert cluster.snapshot(4.0).running[0].preempted
    assert cluster.end("big") is not None and cluster.snapshot(5.0).running == ()
    assert cluster.preempt("big", 1.0) is None


def test_a_cycle_on_the_kept_picture_admits_into_the_room_an_ended_job_freed():
    cluster = ClusterState([node("a", free=0)])
    cluster.start(RunningJob(job("old", 8), (("worker", 0, "a"),), 0.0))
    queue = QueueManager()
    queue.add(job("new", 8, submit=1.0))
    assert admission_cycle(cluster.snapshot(10.0), queue.snapshot()).admitted == ()
    ended = cluster.end("old")
    for _node, held in ended.per_node.items():
        cluster.adjust(_node, held)
    [admission] = admission_cycle(cluster.snapshot(11.0), queue.snapshot()).admitted
    assert admission.job.name == "new" and admission.placement.replicas == (("worker", 0, "a"),)


def test_the_queue_snapshot_changes_only_where_jobs_came_or_went():
    queue = QueueManager()
    for k in range(5):
        queue.add(job(f"cs-{k}", 1, submit=float(k)))
        queue.add(job(f"ml-{k}", 1, submit=float(k), course="ml201"))
    before = queue.snapshot()
    queue.remove("cs-2")
    queue.add(job("cs-late", 1, submit=-1.0))
    after = queue.snapshot()
    assert after.by_course["ml201"] is before.by_course["ml201"]  # untouched course: not copied
    assert [j.name for j in after.by_course["cs101"]] == ["cs-late", "cs-0", "cs-1", "cs-3", "cs-4"]
    assert [j.name for j in before.by_course["cs101"]] == [f"cs-{k}" for k in range(5)]  # frozen
