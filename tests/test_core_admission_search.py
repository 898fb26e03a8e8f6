"""The reservation search (`backfill.earliest_start`) answers exactly as a replay of every release.

Why: at 5,000 nodes the search reads the running jobs' releases lazily (`InTimeOrder`) and puts a
release into its copy of the index only once the node could matter to the job (docs/jobs-loop.md).
A mistake there would move a reservation's time or nodes silently: a node's place in its bucket
is part of the best-fit choice, and a failed placement that is tried, or not, changes that order.
So over random clusters (GPU models, fractional GPUs, unschedulable nodes, nodes whose free
capacity names a GPU their allocatable does not), random running jobs ending at tied times and
random jobs (several roles, CPU-only roles, pinned placements, refused times, window ends), the
search must give what `replay`, the search as it was before (every release applied in time
order, a placement tried at every instant), gives: the time, the placement and what is left on
its nodes.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.admission import FreeIndex, NodeState, Placement, RunningJob, earliest_start
from hub_ext.core.admission.backfill import InTimeOrder, _place_pinned, _undo
from hub_ext.core.jobs import Job, Role
from hub_ext.core.resources import CPU, NVIDIA_GPU, ResourceVector

pytestmark = pytest.mark.unit

G = NVIDIA_GPU
MIG = "nvidia.com/mig-1g.10gb"
MODELS = ("A100", "H200", None)


def replay(job, index, releases, now, allowed=lambda t: True, extra_times=(), pinned=None,
           only_pinned=False):
    """The search before it was lazy: every release onto a copy, a placement tried each instant."""
    sim = index.clone()
    biggest = max(job.roles, key=lambda r: (dict(r.need).get(r.key_resource, 0) if r.key_resource else 0))
    key, product = biggest.key_resource, biggest.gpu_product
    amount = dict(biggest.need).get(key, 0) if key else 0
    room = [0] * len(sim.names)
    if key is not None:
        for i, free in enumerate(sim.free):
            if sim.ok[i] and product in (None, sim.products[i]):
                room[i] = free.get(key, 0) // amount
    capacity = sum(room)

    def attempt(t):
        placement = _place_pinned(sim, job, pinned) if pinned is not None else None
        if placement is None and only_pinned:
            return None
        if placement is None and key is not None and capacity < biggest.replicas:
            return None
        if placement is None:
            placement = sim.place(job)
        if placement is None:
            return None
        if not allowed(t):
            _undo(sim, job, placement)
            return None
        positions = sim.positions
        return t, placement, {positions[n]: dict(sim.free[positions[n]]) for n in placement.nodes}

    found = attempt(now) if allowed(now) else None
    if found:
        return found
    events = sorted(releases, key=lambda r: (r[0], r[1]))
    times = sorted({t for t in extra_times if t > now})
    k, w = 0, 0
    while k < len(events) or w < len(times):
        if w < len(times) and (k >= len(events) or times[w] < events[k][0]):
            t = times[w]
            w += 1
        else:
            t = events[k][0]
            while k < len(events) and events[k][0] == t:
                for i, held in events[k][2].items():
                    sim.release(i, held)
                    if key is not None and sim.ok[i] and product in (None, sim.products[i]):
                        new = sim.free[i].get(key, 0) // amount
                        capacity += new - room[i]
                        room[i] = new
                k += 1
            while w < len(times) and times[w] <= t:
                w += 1
        found = attempt(max(t, now))
        if found:
            return found
    return None


@st.composite
def roles(draw, name, most=3):
    replicas = draw(st.integers(1, most))
    kind = draw(st.sampled_from(["gpu", "gpu", "gpu", "mig", "cpu"]))
    if kind == "cpu":
        request = ResourceVector({CPU: draw(st.integers(1, 16))})
    else:
        amount = draw(st.sampled_from([Fraction(1, 2), 1, 1, 2, 4, 8])) if kind == "gpu" else \
            draw(st.integers(1, 3))
        request = ResourceVector({G if kind == "gpu" else MIG: amount, CPU: draw(st.integers(0, 8))})
    return Role(name, replicas, request, draw(st.sampled_from(MODELS)) if kind == "gpu" else None)


@st.composite
def jobs(draw, name, most=3):
    parts = [draw(roles("w", most))]
    if draw(st.integers(0, 3)) == 0:
        parts.append(draw(roles("ps")))
    return Job(name, "u", "c", tuple(parts), 100.0)


@st.composite
def searches(draw):
    nodes = []
    for i in range(draw(st.integers(1, 10))):
        gpus = draw(st.sampled_from([0, 2, 4, 8, 8]))
        alloc = {CPU: 32}
        if gpus:
            alloc[G] = gpus
        if draw(st.integers(0, 5)) == 0:
            alloc[MIG] = 7
        free = dict(alloc)
        if draw(st.integers(0, 12)) == 0:  # free names a GPU its allocatable does not
            free[G] = 2
        nodes.append(NodeState(f"n{i}", ResourceVector(alloc), ResourceVector(free),
                               draw(st.sampled_from(MODELS)), draw(st.integers(0, 6)) > 0))
    index = FreeIndex(nodes)
    releases = []
    for k in range(draw(st.integers(0, 30))):
        run = draw(jobs(f"r{k}", most=1))
        placement = index.place(run)
        if placement is not None:  # ends at a few distinct times: ties on purpose
            held = RunningJob(run, placement.replicas, 0.0).held
            releases.append((float(draw(st.integers(1, 6)) * 100), run.name,
                             {index.positions[node]: amounts for node, amounts in held.items()}))
    job = draw(jobs("x", most=6))
    pinned = None
    if draw(st.booleans()):
        replicas = FreeIndex(nodes).place(job)
        pinned = replicas if replicas is not None else Placement(
            tuple((role.name, r, draw(st.sampled_from([n.name for n in nodes])))
                  for role in job.roles for r in range(role.replicas)))
    where = [draw(st.integers(0, 2)) for _ in releases]  # before, in order, after
    return dict(
        job=job, index=index, releases=releases, where=where, pinned=pinned,
        only_pinned=pinned is not None and draw(st.booleans()),
        extra_times=[float(t * 50) for t in draw(st.lists(st.integers(0, 14), max_size=3))],
        refused={float(t * 50) for t in draw(st.lists(st.integers(0, 14), max_size=4))},
        now=float(draw(st.sampled_from([0, 0, 150]))),
    )


@st.composite
def crowded(draw):
    """Many 8-GPU nodes of one model full of 1- and 2-GPU jobs ending at a few instants, and a
    job of several 2- to 4-GPU replicas: several nodes reach its amount before it fits, so the
    order in which they do decides its nodes."""
    nodes = [NodeState(f"n{i}", ResourceVector({G: 8, CPU: 32}), ResourceVector({G: 8, CPU: 32}))
             for i in range(draw(st.integers(2, 12)))]
    index = FreeIndex(nodes)
    releases = []
    for k in range(draw(st.integers(4, 40))):
        run = Job(f"r{k}", "u", "c", (Role("w", 1, ResourceVector({G: draw(st.sampled_from([1, 1, 2]))})),),
                  100.0)
        placement = index.place(run)
        if placement is not None:
            held = RunningJob(run, placement.replicas, 0.0).held
            releases.append((float(draw(st.integers(1, 8)) * 100), run.name,
                             {index.positions[node]: amounts for node, amounts in held.items()}))
    job = Job("x", "u", "c", (Role("w", draw(st.integers(2, 6)),
                                   ResourceVector({G: draw(st.sampled_from([2, 3, 4]))})),), 100.0)
    pinned = None
    if draw(st.booleans()):  # a reservation of the last cycle, on nodes picked at random
        names = [node.name for node in nodes]
        pinned = Placement(tuple(("w", r, draw(st.sampled_from(names)))
                                 for r in range(job.roles[0].replicas)))
    return dict(job=job, index=index, releases=releases, where=[1] * len(releases), pinned=pinned,
                only_pinned=pinned is not None and draw(st.booleans()), extra_times=[],
                refused=set(), now=0.0)


@settings(max_examples=300, deadline=None)
@given(st.one_of(searches(), crowded()))
def test_the_search_gives_the_time_nodes_and_room_of_a_full_replay(case):
    ordered = sorted((r for r, w in zip(case["releases"], case["where"], strict=True) if w == 1),
                     key=lambda r: (r[0], r[1]))
    before = [r for r, w in zip(case["releases"], case["where"], strict=True) if w == 0]
    after = [r for r, w in zip(case["releases"], case["where"], strict=True) if w == 2]
    refused = case["refused"]
    args = dict(allowed=lambda t: t not in refused, extra_times=case["extra_times"],
                pinned=case["pinned"], only_pinned=case["only_pinned"])
    expected = replay(case["job"], case["index"], [*before, *ordered, *after], case["now"], **args)
    lazy = InTimeOrder(ordered, before) + after
    assert list(lazy) == sorted([*before, *ordered, *after], key=lambda r: (r[0], r[1]))
    assert earliest_start(case["job"], case["index"], lazy, case["now"], **args) == expected
    assert earliest_start(case["job"], case["index"], [*after, *ordered, *before], case["now"],
                          **args) == replay(case["job"], case["index"], [*after, *ordered, *before],
                                            case["now"], **args)


@settings(max_examples=200, deadline=None)
@given(st.one_of(searches(), crowded()))
def test_room_and_free_gpus_count_what_a_loop_over_every_node_counts(case):
    """The bucket sums the search and the culler's shortfall read are the loops they replace."""
    index = case["index"]
    gpus: dict[str, int] = {}
    for i, free in enumerate(index.free):
        if index.ok[i]:
            for name, amount in free.items():
                if name in (G, MIG):
                    gpus[name] = gpus.get(name, 0) + amount
    assert {n: a for n, a in index.free_gpus().items() if a} == {n: a for n, a in gpus.items() if a}
    for role in case["job"].roles:
        key = role.key_resource
        if key is None:
            continue
        amount = dict(role.need)[key]
        expected = sum(free.get(key, 0) // amount for i, free in enumerate(index.free)
                       if index.ok[i] and role.gpu_product in (None, index.products[i]))
        assert index.room(key, role.gpu_product, amount) == expected

