"""No starvation with high utilisation: one reservation for the first blocked job, then backfill.

The variant is EASY backfilling (Lifka's, as in Slurm's backfill scheduler and Kueue-free batch
systems) with a *sticky* reservation, placed on concrete nodes:
- the first job in fair order that passes its quotas but does not fit now gets a reservation: the
  earliest time `T` at which all of its replicas fit, found by replaying the ends of running jobs
  (their start + max_runtime, or the end of a preemption's grace) in time order on the free
  capacity, and the nodes it would use then;
- a later job is started now (backfilled) only if it fits now and cannot delay that reservation:
  either it ends by `T` (its max_runtime says so), or on every node the reservation uses, it fits in
  the capacity the reserved job will not need at `T` (`extra`). On other nodes the capacity free at
  `T` is at least what is free now, so nothing more needs checking there;
- the reservation is handed to the next cycle (`Snapshot.reserved_job`) and the job keeps it until
  it starts, so a job that got one cannot be overtaken for ever when shares shift between courses.

Why EASY and not conservative backfilling (a reservation for every waiting job): with max_runtimes
that students over-estimate, conservative backfilling plans a schedule that never happens and costs
a placement simulation per waiting job per cycle (10,000 of them); EASY protects exactly the job
that would otherwise starve, keeps the cycle to one simulation, and with exact runtimes the reserved
job never starts later than `T` (tested as a property).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from hub_ext.core.admission.assigner import FreeIndex, Placement
from hub_ext.core.jobs import Job

__all__ = ["Release", "Reservation", "earliest_start"]

Release = tuple[float, str, Mapping[int, Mapping[str, int]]]
"""(when, job name, node index -> what it gives back in nano-units)."""


@dataclass(frozen=True)
class Reservation:
    """The reserved job, when it starts at the latest (if max_runtimes hold), and where."""

    job: str
    start: float
    placement: Placement
    preempting: tuple[str, ...] = ()
    """Jobs preempted for it (it starts when their grace ends, or earlier)."""


def earliest_start(
    job: Job,
    index: FreeIndex,
    releases: Iterable[Release],
    now: float,
    allowed: Callable[[float], bool] = lambda t: True,
    extra_times: Iterable[float] = (),
    pinned: Placement | None = None,
) -> tuple[float, Placement, dict[int, dict[str, int]]] | None:
    """When all of `job`'s replicas fit, replaying `releases` on a copy of `index`.

    Returns (time, placement at that time, extra): `extra` maps each node of the placement to the
    capacity left on it at that time once the job is placed. `allowed(t)` may refuse a time (a
    window of another course); `extra_times` are more instants to try (window ends). None when
    the job never fits, even after every release (notebooks hold what it needs). A `pinned`
    placement (last cycle's reservation) is tried before the best-fit search at every instant.
    """
    sim = index.clone()
    events = sorted(releases, key=lambda r: (r[0], r[1]))
    times = sorted({t for t in extra_times if t > now})
    biggest = max(job.roles, key=lambda r: (dict(r.need).get(r.key_resource, 0) if r.key_resource else 0))
    key, product = biggest.key_resource, biggest.gpu_product
    amount = dict(biggest.need).get(key, 0) if key else 0
    # how many replicas of the biggest role the nodes could hold by its key resource alone: a
    # placement is only attempted once that necessary condition holds (cheap, updated per release)
    room = [0] * len(sim.names)
    if key is not None:
        for i, free in enumerate(sim.free):
            if sim.ok[i] and product in (None, sim.products[i]):
                room[i] = free.get(key, 0) // amount
    capacity = sum(room)

    def attempt(t: float) -> tuple[float, Placement, dict[int, dict[str, int]]] | None:
        placement = _place_pinned(sim, job, pinned) if pinned is not None else None
        if placement is None and key is not None and capacity < biggest.replicas:
            return None
        if placement is None:
            placement = sim.place(job)
        if placement is None:
            return None
        if not allowed(t):
            _undo(sim, job, placement)
            return None
        positions = {name: i for i, name in enumerate(sim.names)}
        extra = {positions[node]: dict(sim.free[positions[node]]) for node in placement.nodes}
        return t, placement, extra

    found = attempt(now) if allowed(now) else None
    if found:
        return found
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


def _undo(index: FreeIndex, job: Job, placement: Placement) -> None:
    needs = {role.name: role.need for role in job.roles}
    positions = {name: i for i, name in enumerate(index.names)}
    for role, _r, node in placement.replicas:
        index.take(positions[node], needs[role], -1)


def _place_pinned(index: FreeIndex, job: Job, pinned: Placement) -> Placement | None:
    """Take exactly the `pinned` nodes for `job`'s replicas, or take nothing."""
    needs = {role.name: role.need for role in job.roles}
    if sorted((r, k) for r, k, _ in pinned.replicas) != sorted(
        (role.name, k) for role in job.roles for k in range(role.replicas)
    ):
        return None
    positions = {name: i for i, name in enumerate(index.names)}
    taken = []
    for role, _k, node in pinned.replicas:
        i = positions.get(node)
        if i is None or not index.ok[i] or not index.fits(i, needs[role]):
            for j, back in reversed(taken):
                index.take(j, back, -1)
            return None
        index.take(i, needs[role])
        taken.append((i, needs[role]))
    return pinned
