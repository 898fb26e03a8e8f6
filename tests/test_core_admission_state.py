"""The loop's `ClusterState` keeps the cycle's structures between cycles and decides as if it had
built them afresh (docs/jobs-loop.md).

Why: at 5,000 nodes and 19,000 running jobs, building the assigner's node index and every running
job's release each cycle cost most of the cycle. `ClusterState` now changes them by events (a node
replaced, a job started, ended, preempted); a mistake there would change where jobs go or when a
reservation starts, silently. So after any sequence of events, the cycle on its snapshot must
decide exactly what it decides on a snapshot built by hand from the same nodes and running jobs,
and its index must be the one a fresh build gives (the order of nodes in a bucket is part of the
best-fit choice).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.admission import (
    CourseQuota,
    FreeIndex,
    NodeState,
    QueueSnapshot,
    RunningJob,
    Snapshot,
    admission_cycle,
)
from hub_ext.core.admission.snapshot import ClusterState
from hub_ext.core.jobs import Job, Role
from hub_ext.core.resources import CPU, NVIDIA_GPU, ResourceVector

pytestmark = pytest.mark.unit

G = NVIDIA_GPU
NOW = 50_000.0
MODELS = ("A100", "H200", None)


def rv(gpus, cpu=0) -> ResourceVector:
    return ResourceVector({G: gpus, CPU: cpu})


def a_node(name: str, size: int, model: str | None, schedulable: bool = True) -> NodeState:
    return NodeState(name, rv(size, 32), rv(size, 32), model, schedulable)


def view(index: FreeIndex) -> tuple:
    """What placement reads from an index: free capacity per node, and per GPU group its
    non-empty buckets with their nodes in the order `find` tries them."""
    groups = sorted(index._buckets, key=lambda g: (g[0], g[1] or ""))
    buckets = tuple(
        (group, tuple((amount, tuple(index._buckets[group][amount]))
                      for amount in index._keys[group] if index._buckets[group][amount]))
        for group in groups)
    return (tuple(index.names), tuple(index.products), tuple(index.ok), tuple(index.pods),
            tuple(tuple(sorted(f.items())) for f in index.free),
            tuple(b for b in buckets if b[1]))


def decisions(snapshot: Snapshot, queue: QueueSnapshot) -> tuple:
    result = admission_cycle(snapshot, queue)
    return (tuple((a.job.name, a.placement, a.borrowed, a.backfilled) for a in result.admitted),
            result.preemptions, result.reservations, result.examined, dict(result.pressure),
            tuple(result.waiting(job) for job in queue.jobs))


events = st.lists(st.one_of(
    st.tuples(st.just("job"), st.integers(1, 3), st.sampled_from([Fraction(1, 2), 1, 2, 4, 8]),
              st.sampled_from(MODELS), st.booleans()),
    st.tuples(st.just("end"), st.integers(0, 20)),
    st.tuples(st.just("preempt"), st.integers(0, 20)),
    st.tuples(st.just("node"), st.integers(0, 9), st.sampled_from([2, 4, 8]), st.sampled_from(MODELS),
              st.booleans()),
    st.tuples(st.just("drop"), st.integers(0, 9)),
    st.tuples(st.just("renew"),),
    st.tuples(st.just("snapshot"),),
), max_size=40)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([4, 8]), st.sampled_from(MODELS)), min_size=1, max_size=6),
       events, st.lists(st.tuples(st.integers(1, 2), st.sampled_from([1, 2, 4, 8])), min_size=1,
                        max_size=6))
def test_the_kept_state_decides_as_a_fresh_snapshot_after_any_events(sizes, happenings, asks):
    nodes = [a_node(f"n{i}", size, model) for i, (size, model) in enumerate(sizes)]
    cluster = ClusterState(nodes)
    made = 0
    for event in happenings:
        kind = event[0]
        if kind == "job":  # placed by the cycle itself, on the state's own snapshot
            _, replicas, gpus, model, borrowed = event
            job = Job(f"r{made}", "u", "c1", (Role("w", replicas, rv(gpus, 1), model),),
                      600.0 + 60 * made, NOW - 100, 0)
            made += 1
            result = admission_cycle(cluster.snapshot(NOW), QueueSnapshot.of([job]))
            for a in result.admitted:
                for _role, _r, name in a.placement.replicas:
                    cluster.adjust(name, -job.roles[0].request)
                cluster.start(RunningJob(job, a.placement.replicas, NOW - 50 * made, borrowed))
        elif kind in ("end", "preempt") and cluster.running:
            names = sorted(cluster.running)
            name = names[event[1] % len(names)]
            if kind == "preempt":
                cluster.preempt(name, NOW + 30)
            else:
                run = cluster.end(name)
                assert run is not None
                for node_name, held in run.per_node.items():
                    if node_name in {n.name for n in cluster.nodes}:
                        cluster.adjust(node_name, held)
        elif kind == "node":  # a watch event: a node replaced (capacity, model, cordon) or added
            _, k, size, model, schedulable = event
            name = f"n{k}"
            used = (cluster.node(name).allocatable - cluster.node(name).free
                    if name in {n.name for n in cluster.nodes} else rv(0))
            cluster.put_node(NodeState(name, rv(size, 32), (rv(size, 32) - used).clamp(), model,
                                       schedulable))
        elif kind == "drop" and len(cluster.nodes) > 1:
            cluster.drop_node(cluster.nodes[event[1] % len(cluster.nodes)].name)
        elif kind == "renew":  # the backend hands every node again, some as new objects
            cluster.set_nodes([n if k % 2 else NodeState(n.name, n.allocatable, n.free, n.gpu_product,
                                                         n.schedulable)
                               for k, n in enumerate(cluster.nodes)])
        elif kind == "snapshot":
            cluster.snapshot(NOW)
    queue = QueueSnapshot.of(Job(f"w{k}", f"u{k % 2}", "c1" if k % 2 else "c2",
                                 (Role("w", replicas, rv(gpus, 1)),), 900.0 + 100 * k, NOW - 400 + k, 0)
                             for k, (replicas, gpus) in enumerate(asks))
    courses = {"c1": CourseQuota(nominal=rv(4)), "c2": CourseQuota(nominal=rv(8))}
    kept = cluster.snapshot(NOW, courses)
    fresh = Snapshot(NOW, tuple(cluster.nodes), tuple(cluster.running.values()), courses)
    assert view(kept.free_index) == view(FreeIndex(fresh.nodes))
    assert kept.running_releases == fresh.running_releases
    assert (kept.preempted, kept.borrowing) == (fresh.preempted, fresh.borrowing)
    assert decisions(kept, queue) == decisions(fresh, queue)


def test_a_snapshot_keeps_its_picture_while_the_state_changes():
    """The loop decides in a worker thread: events after `snapshot()` must not reach it."""
    cluster = ClusterState([a_node("a", 8, "H200"), a_node("b", 8, "H200")])
    snapshot = cluster.snapshot(NOW)
    before = view(snapshot.free_index)
    cluster.adjust("a", -rv(8))
    cluster.put_node(a_node("b", 4, "A100"))
    cluster.snapshot(NOW)
    assert view(snapshot.free_index) == before
    one = Job("j", "u", "c1", (Role("w", 2, rv(8)),), 600.0, NOW, 0)
    assert admission_cycle(snapshot, QueueSnapshot.of([one])).admitted  # both nodes, as then
