"""No starvation with high utilisation: conservative backfilling up to a reservation depth.

Why (docs/admission.md has the measurements): EASY backfilling (one reservation, for the first
blocked job) let every big job *behind* that one be pushed back by backfills again and again: on
a production trace at load 1.3 the p95 wait of jobs of 8 GPUs or more was 1.9 x strict FIFO's.
Here every blocked job, up to `depth` of them (`cycle.RESERVATION_DEPTH`), holds a reservation,
and nothing may delay any of them:

- a blocked job gets a reservation: the earliest time `T` at which all of its replicas fit, and
  the nodes it would use then, found by replaying the ends of running jobs (start + max_runtime,
  or the end of a preemption's grace) in time order (`earliest_start`). Every reservation made
  before it counts as holding its capacity from now until its own end, so the plan only ever
  frees capacity as time goes on (one replay per job) and the reservations fit together;
- with each reservation comes `extra`: per node it uses, what is left there at `T`. A job starts
  now (is backfilled) only if, for every reservation starting before it would end, it fits in
  that reservation's `extra` on the nodes they share; what it takes is subtracted from each;
- reservations are handed to the next cycle in their order (`Snapshot.reservations`) and planned
  again first, each on its own nodes first (`pinned`): it can only move earlier.

The guarantee (tested as a property): if running jobs end by their max_runtime and nodes keep
their capacity, a job never starts later than the first reservation it was given, whatever is
submitted after it (any priority, any course) and whatever is backfilled around it. Jobs beyond
the depth hold no reservation and get no such promise until they have one; a job that ends early
lets the plan move earlier, never later. Depth 1 is EASY backfilling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter

from hub_ext.core.admission.assigner import FreeIndex, Placement
from hub_ext.core.admission.nodes import Release
from hub_ext.core.jobs import Job

__all__ = ["InTimeOrder", "Release", "Reservation", "earliest_start"]

_in_time_order = itemgetter(0, 1)


@dataclass(frozen=True)
class Reservation:
    """The reserved job, when it starts at the latest (if max_runtimes hold), and where."""

    job: str
    start: float
    placement: Placement
    preempting: tuple[str, ...] = ()
    """Jobs preempted for it (it starts when their grace ends, or earlier)."""


class InTimeOrder:
    """Releases in the order the search replays them, merged as they are read.

    `ordered` is already in time order (end, then name): the snapshot's running releases, kept
    sorted by `ClusterState`. `before` (this cycle's admissions) and `after` (the reservations:
    `+ list` appends to it) are few and in no particular order. Iterating gives exactly
    `sorted([*before, *ordered, *after], key=(end, name))`, a stable sort, but lazily: a
    reservation search reads only the releases up to the time its job fits (a few thousand of
    ~19,000 at 5,000 nodes: docs/jobs-loop.md) and nothing sorts the long part again.
    """

    __slots__ = ("_after", "_before", "_ordered")

    def __init__(self, ordered: Sequence[Release], before: Iterable[Release] = (),
                 after: Iterable[Release] = ()) -> None:
        self._ordered, self._before, self._after = ordered, tuple(before), tuple(after)

    def __add__(self, more: Iterable[Release]) -> InTimeOrder:
        return InTimeOrder(self._ordered, self._before, (*self._after, *more))

    def __len__(self) -> int:
        return len(self._ordered) + len(self._before) + len(self._after)

    def __iter__(self) -> Iterator[Release]:
        if not self._before and not self._after:
            return iter(self._ordered)
        # (end, name, 0 before / 2 after, position): the stable sort's order among the few
        few = sorted([(r[0], r[1], 0, k, r) for k, r in enumerate(self._before)]
                     + [(r[0], r[1], 2, k, r) for k, r in enumerate(self._after)])
        return _merged(self._ordered, few)


def _merged(ordered: Sequence[Release], few: list[tuple[float, str, int, int, Release]]
            ) -> Iterator[Release]:
    j, n = 0, len(few)
    end, name, rank = few[0][0], few[0][1], few[0][2]
    for release in ordered:
        at = release[0]
        # a few-release goes first when it is earlier, or equal and from `before`
        while j < n and (end < at or (end == at and (name < release[1] or (
                name == release[1] and rank == 0)))):
            yield few[j][4]
            j += 1
            if j < n:
                end, name, rank = few[j][0], few[j][1], few[j][2]
        yield release
    for k in range(j, n):
        yield few[k][4]


def earliest_start(
    job: Job,
    index: FreeIndex,
    releases: Iterable[Release],
    now: float,
    allowed: Callable[[float], bool] = lambda t: True,
    extra_times: Iterable[float] = (),
    pinned: Placement | None = None,
    only_pinned: bool = False,
) -> tuple[float, Placement, dict[int, dict[str, int]]] | None:
    """When all of `job`'s replicas fit, replaying `releases` on a copy of `index`.

    Returns (time, placement at that time, extra): `extra` maps each node of the placement to the
    capacity left on it at that time once the job is placed. `allowed(t)` may refuse a time (a
    window of another course); `extra_times` are more instants to try (window ends). None when
    the job never fits, even after every release (notebooks hold what it needs). A `pinned`
    placement (last cycle's reservation) is tried before the best-fit search at every instant;
    with `only_pinned` it is the only one tried (a kept reservation moving to other nodes could
    take what a later one needs). `releases` in any order, or an `InTimeOrder` (read lazily).

    Why it is lazy (the same answer as replaying every release onto the copy, at a fraction of
    the cost: most of a 5,000-node cycle was this replay): when every role of the job is placed
    by the same GPU resource, the best-fit search only visits nodes with at least the smallest
    replica's amount of it free. A release on another node is only added up (`pending`) and
    put into the copy once that node reaches the amount, in the order of the releases that
    changed its amount (a node's place in its bucket is part of the best-fit choice, and a
    node goes to the end of its bucket when its amount changes). A placement is only tried at
    the instants it was before, on the same nodes in the same order.
    """
    sim = index.clone()
    biggest = max(job.roles, key=lambda r: (dict(r.need).get(r.key_resource, 0) if r.key_resource else 0))
    key, product = biggest.key_resource, biggest.gpu_product
    amount = dict(biggest.need).get(key, 0) if key else 0
    replicas = biggest.replicas
    # how many replicas of the biggest role the nodes could hold by its key resource alone: a
    # placement is only attempted once that necessary condition holds (cheap, updated per release)
    capacity = sim.room(key, product, amount) if key is not None else 0

    def attempt(t: float) -> tuple[float, Placement, dict[int, dict[str, int]]] | None:
        placement = _place_pinned(sim, job, pinned) if pinned is not None else None
        if placement is None and only_pinned:
            return None
        if placement is None and key is not None and capacity < replicas:
            return None
        if placement is None:
            placement = sim.place(job)
        if placement is None:
            return None
        if not allowed(t):
            _undo(sim, job, placement)
            return None
        positions = sim.positions
        extra = {positions[node]: dict(sim.free[positions[node]]) for node in placement.nodes}
        return t, placement, extra

    found = attempt(now) if allowed(now) else None
    if found:
        return found
    events = iter(releases) if isinstance(releases, InTimeOrder) else \
        iter(sorted(releases, key=_in_time_order))
    times = sorted({t for t in extra_times if t > now})
    free, ok, products = sim.free, sim.ok, sim.products
    lazy = key is not None and all(role.key_resource == key for role in job.roles)
    least = min(dict(role.need)[key] for role in job.roles) if lazy else 0
    cur: dict[int, int] = {}
    """Node -> its free amount of `key` with every release read so far (lazy)."""
    pending: dict[int, dict[str, int]] = {}
    """Node -> the sum of its releases read but not yet put into `sim` (lazy)."""
    ready: dict[int, None] = {}
    """The pending nodes the search may visit (`least` or more free: a pinned node with less
    fits no replica either), in the order of their last change of `key`: put into `sim` before
    the next placement is tried."""
    event = next(events, None)
    w = 0
    while event is not None or w < len(times):
        if w < len(times) and (event is None or times[w] < event[0]):
            t = times[w]
            w += 1
        else:
            t = event[0]
            while event is not None and event[0] == t:
                for i, held in event[2].items():
                    if not lazy:
                        if key is not None and ok[i] and product in (None, products[i]):
                            old = free[i].get(key, 0)
                            sim.release(i, held)
                            capacity += free[i].get(key, 0) // amount - old // amount
                        else:
                            sim.release(i, held)
                        continue
                    have = cur.get(i)
                    if have is None:
                        have = free[i].get(key, 0)
                    sums = pending.get(i)
                    if sums is None:
                        pending[i] = dict(held)
                    else:
                        for name, more in held.items():
                            sums[name] = sums.get(name, 0) + more
                    more = held.get(key, 0)
                    if more:
                        if ok[i] and product in (None, products[i]):
                            capacity += (have + more) // amount - have // amount
                        have += more
                        ready.pop(i, None)  # its amount changed: it goes last
                    cur[i] = have
                    if have >= least:
                        ready[i] = None
                event = next(events, None)
            while w < len(times) and times[w] <= t:
                w += 1
        if ready and (pinned is not None or capacity >= replicas):  # a placement is tried
            for i in ready:
                sim.release(i, pending.pop(i))
            ready.clear()
        found = attempt(max(t, now))
        if found:
            return found
    return None


def _undo(index: FreeIndex, job: Job, placement: Placement) -> None:
    needs = {role.name: role.need for role in job.roles}
    positions = index.positions
    for role, _r, node in placement.replicas:
        index.take(positions[node], needs[role], -1)


def _place_pinned(index: FreeIndex, job: Job, pinned: Placement) -> Placement | None:
    """Take exactly the `pinned` nodes for `job`'s replicas, or take nothing."""
    needs = {role.name: role.need for role in job.roles}
    if sorted((r, k) for r, k, _ in pinned.replicas) != sorted(
        (role.name, k) for role in job.roles for k in range(role.replicas)
    ):
        return None
    positions = index.positions
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
