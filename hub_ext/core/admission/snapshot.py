"""The immutable facts one admission cycle decides on: nodes, running jobs, quotas, windows.

Why a snapshot: as in Kueue's scheduler, a cycle reads one consistent picture and decides on it;
everything that changes the world (creating pods, writing the ledger, signalling victims) happens
elsewhere, after the decision (issue 17's service). Because the snapshot is plain frozen data, a
cycle is a pure function: tests and bench/admission.py build snapshots by hand.

- `NodeState`: one node's allocatable, what is free now (notebooks and running jobs already
  subtracted: the capacity snapshot counts every pod), its GPU model, whether new pods may land.
- `RunningJob`: an admitted job with its placement, start time, whether it runs on borrowed
  quota, and (once preempted) the time by which it is gone.
- `CourseQuota`: a course's guaranteed share (`nominal`, the share of the cohort it may always
  use), how far beyond it may borrow, its fairness `weight`, the ledger's hard ceilings and usage
  (`quota.Limits`/`quota.Usage`: servers and jobs share one ledger) and its users' limits.
- `CourseWindow`: capacity a course reserved for a time window (a lab session).
- `Snapshot`: all of the above at `now`, plus the job holding the reservation from the last cycle.
- `ClusterState`: the admission loop's picture between cycles (nodes and running jobs, changed by
  events: a node or pod watch, a job started or ended), from which each cycle's `Snapshot` is
  made without rebuilding what did not change. The service's loop and bench/admission.py both
  keep one (docs/jobs-loop.md).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta, tzinfo
from functools import cached_property
from operator import itemgetter
from types import MappingProxyType
from typing import TYPE_CHECKING

from hub_ext.core.admission.nodes import NodeState, Release
from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.jobs import Job
from hub_ext.core.quota import Limits, Usage
from hub_ext.core.resources import PODS, ZERO, ResourceVector, sum_vectors

if TYPE_CHECKING:  # made in functions: the assigner's index is built only when a cycle asks
    from hub_ext.core.admission.assigner import FreeIndex

_NANO = 10**9
_release_order = itemgetter(0, 1)
"""A release's (end, job name): the order in which backfill.py replays them."""

__all__ = [
    "ClusterState",
    "CourseQuota",
    "CourseWindow",
    "NodeState",
    "RunningJob",
    "Snapshot",
    "weekly_windows",
]


@dataclass(frozen=True)
class RunningJob:
    """An admitted job. `placement` is ((role, replica index, node), ...) as the cycle decided it."""

    job: Job
    placement: tuple[tuple[str, int, str], ...]
    started: float
    borrowed: bool = False
    ends_by: float | None = None
    """Set once the job is preempted: the end of its grace period."""

    @property
    def expected_end(self) -> float:
        """When the job is gone at the latest: its max_runtime, or the end of its grace period."""
        end = self.started + self.job.max_runtime
        return end if self.ends_by is None else min(end, self.ends_by)

    @property
    def preempted(self) -> bool:
        return self.ends_by is not None

    @cached_property
    def per_node(self) -> Mapping[str, ResourceVector]:
        """What the job holds on each node."""
        requests = {role.name: role.request for role in self.job.roles}
        held: dict[str, list[ResourceVector]] = {}
        for role, _index, node in self.placement:
            held.setdefault(node, []).append(requests[role])
        return MappingProxyType({node: sum_vectors(vs) for node, vs in held.items()})

    @cached_property
    def held(self) -> Mapping[str, Mapping[str, int]]:
        """What the job holds on each node in exact nano-units, one `pods` slot per replica
        included (released by the admission core's simulations when the job ends)."""
        needs = {role.name: role.need for role in self.job.roles}
        held: dict[str, dict[str, int]] = {}
        for role, _index, node in self.placement:
            on = held.setdefault(node, {})
            for name, amount in needs[role]:
                on[name] = on.get(name, 0) + amount
            on[PODS] = on.get(PODS, 0) + _NANO
        return MappingProxyType(held)

    def release(self, positions: Mapping[str, int]) -> Release:
        """(expected end, name, node position -> what it gives back then): how the cycle replays
        the job's end (backfill.py); nodes not in `positions` are left out."""
        return (self.expected_end, self.job.name,
                {positions[n]: h for n, h in self.held.items() if n in positions})


@dataclass(frozen=True)
class CourseQuota:
    """A course's share of the cohort (the whole cluster) and its ledger view.

    - `nominal`: the guaranteed share. Jobs that keep the course within it are never preempted;
      a job that takes the course beyond it (on any GPU resource, or on a resource `nominal`
      names) runs on *borrowed* idle capacity and may be preempted for a course within its share.
      A course without a `CourseQuota` has no guaranteed share: all its jobs borrow.
    - `borrowing_limit`: how far beyond `nominal` the course may go (None: as far as idle
      capacity allows).
    - `weight`: Dominant Resource Fairness divides the course's dominant share by it.
    - `limits`/`usage`: the ledger's hard ceilings and what servers and jobs hold now; never
      exceeded, borrowing or not. `users`: per-user (limits, usage) inside this course.
    """

    nominal: ResourceVector = ZERO
    borrowing_limit: ResourceVector | None = None
    weight: int = 1
    limits: Limits = field(default_factory=Limits)
    usage: Usage = field(default_factory=Usage)
    users: Mapping[str, tuple[Limits, Usage]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.nominal.is_nonnegative():
            raise ValueError("a course's nominal share must not be negative")
        if self.borrowing_limit is not None and not self.borrowing_limit.is_nonnegative():
            raise ValueError("a course's borrowing limit must not be negative")
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or self.weight < 1:
            raise ValueError(f"weight must be a whole number >= 1, not {self.weight!r}")


NO_QUOTA = CourseQuota()


@dataclass(frozen=True)
class CourseWindow:
    """`resources` held for `course` during [start, end): its notebooks and jobs find them free."""

    course: str
    resources: ResourceVector
    start: float
    end: float
    note: str = ""

    def __post_init__(self) -> None:
        if not self.end > self.start:
            raise ValueError(f"a window must end after it starts ({self.start} .. {self.end})")
        if not self.resources.is_nonnegative() or self.resources.is_zero():
            raise ValueError("a window must reserve some resources, e.g. 8 nvidia.com/gpu")

    def overlaps(self, start: float, end: float) -> bool:
        """True when [start, end) and the window share an instant."""
        return start < self.end and end > self.start


def weekly_windows(
    course: str,
    resources: ResourceVector,
    weekday: int,
    start: time,
    end: time,
    since: datetime,
    until: datetime,
    tz: tzinfo,
    note: str = "",
) -> tuple[CourseWindow, ...]:
    """Every occurrence of "Tuesdays 10:00-12:00" (weekday 1) in [since, until), in epoch seconds.

    Times are wall-clock times in `tz`, so a window stays at 10:00 across a DST change.
    """
    if not 0 <= weekday <= 6:
        raise ValueError(f"weekday must be 0 (Monday) to 6 (Sunday), not {weekday}")
    if not end > start:
        raise ValueError(f"a weekly window must end after it starts ({start} .. {end})")
    day = since.astimezone(tz).date() - timedelta(days=1)
    out = []
    while True:
        begin = datetime.combine(day, start, tzinfo=tz)
        if begin >= until:
            break
        finish = datetime.combine(day, end, tzinfo=tz)
        if day.weekday() == weekday and finish > since:
            out.append(CourseWindow(course, resources, begin.timestamp(), finish.timestamp(), note))
        day += timedelta(days=1)
    return tuple(out)


@dataclass(frozen=True)
class Snapshot:
    """Everything one admission cycle reads, at `now`. Build it, hand it over, never mutate it."""

    now: float
    nodes: tuple[NodeState, ...]
    running: tuple[RunningJob, ...] = ()
    courses: Mapping[str, CourseQuota] = field(default_factory=lambda: MappingProxyType({}))
    windows: tuple[CourseWindow, ...] = ()
    reserved_job: str | None = None
    """The job that held the reservation after the previous cycle: it keeps it until it starts."""
    reserved_placement: tuple[tuple[str, int, str], ...] = ()
    """Where that reservation was planned ((role, replica, node), ...): tried first, so that jobs
    backfilled around it cannot push it later by making the best-fit search pick other nodes."""
    grace: float = 30.0
    """Seconds a preempted job gets to checkpoint and stop."""
    reservations: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...] = ()
    """Every reservation after the previous cycle, in the order they were made: ((job,
    placement), ...) as `CycleResult.carried` gives them. Each is planned again first, on its
    nodes, so it can only move earlier (docs/admission.md). When empty, `reserved_job` and
    `reserved_placement` stand for a single one (the interface before conservative backfilling)."""
    recent_waits: tuple[float, ...] = ()
    """Seconds the last jobs admitted waited (submit to admission), oldest first, as
    `CycleResult.recent_waits` gives them: a job needing a whole node's GPUs that waited longer
    than most of them is starving and gets a reservation beyond the depth (docs/admission.md).
    Empty: no job counts as starving yet."""

    @property
    def kept_reservations(self) -> tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...]:
        if self.reservations:
            return self.reservations
        if self.reserved_job:
            return ((self.reserved_job, self.reserved_placement),)
        return ()

    def __post_init__(self) -> None:
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique in a snapshot")
        if self.grace < 0:
            raise ValueError(f"grace must be >= 0 seconds, not {self.grace}")

    def quota(self, course: str) -> CourseQuota:
        return self.courses.get(course, NO_QUOTA)

    @cached_property
    def total_allocatable(self) -> ResourceVector:
        return sum_vectors(node.allocatable for node in self.nodes if node.schedulable)

    @cached_property
    def free_index(self) -> FreeIndex:
        """The nodes' free capacity as the assigner searches it, node i being `nodes[i]`: read
        it, or `clone()` it to change it. Built here from every node unless `ClusterState` made
        the snapshot (it keeps the index between cycles and puts in only the changed nodes)."""
        from hub_ext.core.admission.assigner import FreeIndex

        return FreeIndex(self.nodes)

    @cached_property
    def running_releases(self) -> tuple[Release, ...]:
        """Each running job's `RunningJob.release` by `free_index`'s positions, in time order
        (end, then name: the order the reservation search replays them, so its sort finds them
        sorted). Kept by `ClusterState`: computed when a job starts, not every cycle."""
        positions = self.free_index.positions
        return tuple(sorted((run.release(positions) for run in self.running), key=_release_order))

    @cached_property
    def preempted(self) -> tuple[RunningJob, ...]:
        """The running jobs that were preempted (they stop by `ends_by`), in `running` order."""
        return tuple(run for run in self.running if run.preempted)

    @cached_property
    def borrowing(self) -> tuple[RunningJob, ...]:
        """The running jobs on borrowed capacity not preempted yet (those preemption may pick),
        in `running` order."""
        return tuple(run for run in self.running if run.borrowed and not run.preempted)

    @classmethod
    def from_capacity(
        cls,
        capacity: CapacitySnapshot,
        now: float,
        running: Iterable[RunningJob] = (),
        courses: Mapping[str, CourseQuota] | None = None,
        windows: Iterable[CourseWindow] = (),
        reserved_job: str | None = None,
        grace: float = 30.0,
        reserved_placement: tuple[tuple[str, int, str], ...] = (),
        reservations: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...] = (),
        recent_waits: tuple[float, ...] = (),
    ) -> Snapshot:
        """From the capacity snapshot the spawn form uses: notebooks' and jobs' pods are counted
        in each node's `free` already, so a job never lands on capacity a notebook holds."""
        nodes = tuple(NodeState.from_capacity(node) for node in capacity.nodes)
        return cls(
            now=now,
            nodes=nodes,
            running=tuple(running),
            courses=MappingProxyType(dict(courses or {})),
            windows=tuple(windows),
            reserved_job=reserved_job,
            reserved_placement=reserved_placement,
            grace=grace,
            reservations=reservations,
            recent_waits=recent_waits,
        )


class ClusterState:
    """Nodes and running jobs as events change them; `snapshot()` freezes them for one cycle.

    Why a class of its own: a cycle over 5,000 nodes and 19,000 running jobs must not rebuild
    5,000 node states and the running jobs from a database and a cluster list each time, nor the
    structures the cycle searches. The owner tells it what changed (`put_node`, `drop_node`,
    `adjust`, `set_nodes`, `start`, `end`, `preempt`); what a `Snapshot` holds is brought up to
    date only for what changed: the frozen tuples, the nodes' total, the assigner's `FreeIndex`
    (only the changed nodes are put in again, `FreeIndex.set_node`) and each running job's
    release (what it gives back on which node, when: computed when it starts). Who changes
    `free` is the owner's business: in Kubernetes the pods counted by a watch (the backend hands
    whole `NodeState`s), in bench/admission.py the simulated jobs (`adjust`). docs/jobs-loop.md
    has the figures.
    """

    def __init__(self, nodes: Iterable[NodeState] = ()) -> None:
        self._nodes: dict[str, NodeState] = {}
        self._running: dict[str, RunningJob] = {}
        self._node_tuple: tuple[NodeState, ...] | None = None
        self._running_tuple: tuple[RunningJob, ...] | None = None
        self._total: tuple[tuple[NodeState, ...], ResourceVector] | None = None
        self._index: FreeIndex | None = None
        """The nodes as the assigner indexes them, in `_nodes` order (None: build it again)."""
        self._changed: set[str] = set()
        """Nodes replaced since `_index` was last brought up to date (same names, same order)."""
        self._releases: list[Release] | None = None
        """Every running job's release by `_index`'s node positions, in time order (None: compute
        them again, after the nodes' order changed); `_release_keys` holds their (end, name)."""
        self._release_keys: list[tuple[float, str]] = []
        self._release_tuple: tuple[Release, ...] | None = None
        self._subsets: tuple[tuple[RunningJob, ...], tuple[RunningJob, ...]] | None = None
        """(preempted, borrowing) of `_running_tuple`, as `Snapshot.preempted`/`borrowing`."""
        self.set_nodes(nodes)

    # -- nodes
    def set_nodes(self, nodes: Iterable[NodeState]) -> None:
        """Replace every node; nothing is rebuilt when the same node objects come back, and only
        the replaced nodes are indexed again when the names come back in the same order."""
        given = tuple(nodes)
        current = self._node_tuple if self._node_tuple is not None else tuple(self._nodes.values())
        if len(given) == len(current) and all(a is b for a, b in zip(given, current, strict=True)):
            return
        if len(given) == len(current) and all(
                a.name == b.name for a, b in zip(given, current, strict=True)):
            self._changed.update(a.name for a, b in zip(given, current, strict=True) if a is not b)
        else:
            self._layout_changed()
        self._nodes = {node.name: node for node in given}
        self._node_tuple = given if len(self._nodes) == len(given) else None

    def _layout_changed(self) -> None:
        """A node came or went: positions move, so the index and the releases are made again."""
        self._index, self._releases, self._release_tuple = None, None, None
        self._release_keys = []
        self._changed.clear()

    def put_node(self, node: NodeState) -> None:
        """Add or replace one node (a watch event)."""
        old = self._nodes.get(node.name)
        if old is not node:
            if old is None:
                self._layout_changed()
            else:
                self._changed.add(node.name)
            self._nodes[node.name] = node
            self._node_tuple = None

    def drop_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._node_tuple = None
            self._layout_changed()

    def node(self, name: str) -> NodeState:
        return self._nodes[name]

    def adjust(self, name: str, delta: ResourceVector) -> None:
        """Change a node's free capacity by `delta` (a job placed there started or ended)."""
        node = self._nodes[name]
        self.put_node(NodeState(node.name, node.allocatable, node.free + delta, node.gpu_product,
                                node.schedulable))

    @property
    def nodes(self) -> tuple[NodeState, ...]:
        if self._node_tuple is None:
            self._node_tuple = tuple(self._nodes.values())
        return self._node_tuple

    def _free_index(self) -> FreeIndex:
        """The index of `nodes`, brought up to date (the changed nodes only)."""
        from hub_ext.core.admission.assigner import FreeIndex

        nodes = self.nodes
        if self._index is None:
            self._index = FreeIndex(nodes)
        elif self._changed:
            positions = self._index.positions
            for name in self._changed:
                self._index.set_node(positions[name], self._nodes[name])
        self._changed.clear()
        return self._index

    # -- running jobs
    def start(self, run: RunningJob) -> None:
        old = self._running.get(run.job.name)
        self._running[run.job.name] = run
        self._running_tuple = self._release_tuple = self._subsets = None
        if self._releases is not None and self._index is not None:
            if old is not None:  # replaced (preempted): its end moved
                self._forget(old)
            release = run.release(self._index.positions)
            key = _release_order(release)
            at = bisect_left(self._release_keys, key)
            self._release_keys.insert(at, key)
            self._releases.insert(at, release)

    def _forget(self, run: RunningJob) -> None:
        assert self._releases is not None
        at = bisect_left(self._release_keys, (run.expected_end, run.job.name))
        del self._release_keys[at], self._releases[at]

    def end(self, name: str) -> RunningJob | None:
        run = self._running.pop(name, None)
        if run is not None:
            self._running_tuple = self._release_tuple = self._subsets = None
            if self._releases is not None:
                self._forget(run)
        return run

    def preempt(self, name: str, ends_by: float) -> RunningJob | None:
        """Mark a running job preempted (gone by `ends_by`); None when it does not run."""
        run = self._running.get(name)
        if run is None:
            return None
        run = RunningJob(run.job, run.placement, run.started, run.borrowed, ends_by)
        self.start(run)
        return run

    @property
    def running(self) -> Mapping[str, RunningJob]:
        return MappingProxyType(self._running)

    # -- the cycle's picture
    def snapshot(self, now: float, courses: Mapping[str, CourseQuota] | None = None, *,
                 windows: Iterable[CourseWindow] = (), reserved_job: str | None = None,
                 reserved_placement: tuple[tuple[str, int, str], ...] = (),
                 reservations: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...] = (),
                 recent_waits: tuple[float, ...] = (), grace: float = 30.0) -> Snapshot:
        if self._running_tuple is None:
            self._running_tuple = tuple(self._running.values())
        nodes = self.nodes
        snapshot = Snapshot(now=now, nodes=nodes, running=self._running_tuple,
                            courses=MappingProxyType(dict(courses or {})), windows=tuple(windows),
                            reserved_job=reserved_job, reserved_placement=reserved_placement,
                            reservations=reservations, recent_waits=recent_waits, grace=grace)
        if self._total is None or self._total[0] is not nodes:
            self._total = (nodes, snapshot.total_allocatable)
        else:  # the same nodes as last cycle: their sum is known (a cached property's value)
            snapshot.__dict__["total_allocatable"] = self._total[1]
        index = self._free_index()
        if self._releases is None:
            positions = index.positions
            self._releases = sorted((run.release(positions) for run in self._running.values()),
                                    key=_release_order)
            self._release_keys = [_release_order(r) for r in self._releases]
            self._release_tuple = None
        if self._release_tuple is None:
            self._release_tuple = tuple(self._releases)
        if self._subsets is None:
            self._subsets = (snapshot.preempted, snapshot.borrowing)
        # a copy: the snapshot stays as it is while this state changes (copy on write: cheap)
        snapshot.__dict__["free_index"] = index.clone()
        snapshot.__dict__["running_releases"] = self._release_tuple
        snapshot.__dict__["preempted"], snapshot.__dict__["borrowing"] = self._subsets
        return snapshot
