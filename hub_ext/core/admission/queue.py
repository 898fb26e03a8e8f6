"""Waiting jobs, one ordered queue per course: Kueue's queue manager, without the I/O.

Why a manager of its own: ordering 10,000 waiting jobs in every cycle would cost more than the
cycle itself. The manager keeps each course's queue sorted as jobs arrive and leave (binary
insertion), and hands the cycle an immutable `QueueSnapshot`. Within a course the order is
priority (higher first), then submit time, then name, so ties are broken the same way every time.
Across courses the cycle interleaves queues by Dominant Resource Fairness (`fairness.py`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from hub_ext.core.jobs import Job

__all__ = ["QueueManager", "QueueSnapshot", "queue_key"]


def queue_key(job: Job) -> tuple[int, float, str]:
    """The order inside a course: priority (higher first), submit time, name."""
    return (-job.priority, job.submit_time, job.name)


@dataclass(frozen=True)
class QueueSnapshot:
    """Each course's waiting jobs in queue order, frozen for one cycle."""

    by_course: Mapping[str, tuple[Job, ...]]
    _smallest: tuple[int | None] | None = None
    _shortest: float | None = None

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> QueueSnapshot:
        """Order `jobs` (any order in, the same snapshot out)."""
        manager = QueueManager()
        for job in jobs:
            manager.add(job)
        return manager.snapshot()

    def __len__(self) -> int:
        return sum(len(jobs) for jobs in self.by_course.values())

    @cached_property
    def position(self) -> Mapping[str, tuple[str, int]]:
        """job name -> (course, 1-based place in the course's queue)."""
        return MappingProxyType({
            job.name: (course, i + 1)
            for course, jobs in self.by_course.items()
            for i, job in enumerate(jobs)
        })

    @cached_property
    def jobs(self) -> Mapping[str, Job]:
        return MappingProxyType({job.name: job for jobs in self.by_course.values() for job in jobs})

    @cached_property
    def shortest_runtime(self) -> float:
        """The smallest max_runtime of any waiting job (inf when none waits)."""
        if self._shortest is not None:
            return self._shortest
        return min((job.max_runtime for jobs in self.by_course.values() for job in jobs),
                   default=float("inf"))

    @cached_property
    def smallest_gpu_need(self) -> int | None:
        """The fewest GPU devices (nano-units) any one replica of any waiting job asks for; None
        when a job has a CPU-only role. The cycle stops scanning once no node has that much free."""
        if self._smallest is not None:
            return self._smallest[0]
        return _smallest(job for jobs in self.by_course.values() for job in jobs)


def _need(job: Job) -> int | None:
    """The smallest key-resource amount of one replica of `job` (None: a CPU-only role)."""
    amounts = []
    for role in job.roles:
        if role.key_resource is None:
            return None
        amounts.append(dict(role.need)[role.key_resource])
    return min(amounts)


def _smallest(jobs: Iterable[Job]) -> int | None:
    smallest: int | None = None
    for job in jobs:
        need = _need(job)
        if need is None:
            return None
        if smallest is None or need < smallest:
            smallest = need
    return smallest


class QueueManager:
    """Keeps every course's queue sorted while jobs arrive and leave; `snapshot()` for a cycle.

    Pure (no I/O): the service's job loop owns one and feeds it with its submit, cancel and end
    events (docs/jobs-loop.md); bench/admission.py drives the same class.
    """

    def __init__(self) -> None:
        self._queues: dict[str, list[tuple[tuple[int, float, str], Job]]] = {}
        self._where: dict[str, tuple[str, tuple[int, float, str]]] = {}
        self._needs: Counter[int | None] = Counter()
        self._runtimes: Counter[float] = Counter()
        self._frozen: dict[str, tuple[Job, ...]] = {}
        """Each course's queue as the last snapshot froze it; a course is frozen again only
        after a job of it came or went (a cycle over 50,000 waiting jobs copies none of them)."""

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def add(self, job: Job) -> None:
        """Queue `job`; a job of the same name is replaced (a resubmission)."""
        if job.name in self._where:
            self.remove(job.name)
        key = queue_key(job)
        insort(self._queues.setdefault(job.course, []), (key, job), key=lambda entry: entry[0])
        self._frozen.pop(job.course, None)
        self._where[job.name] = (job.course, key)
        self._needs[_need(job)] += 1
        self._runtimes[job.max_runtime] += 1

    def remove(self, name: str) -> Job | None:
        """Take a job out (admitted, cancelled); None when it was not queued."""
        found = self._where.pop(name, None)
        if found is None:
            return None
        course, key = found
        queue = self._queues[course]
        index = bisect_left(queue, key, key=lambda entry: entry[0])
        job = queue.pop(index)[1]
        self._frozen.pop(course, None)
        if not queue:
            del self._queues[course]
        for counter, value in ((self._needs, _need(job)), (self._runtimes, job.max_runtime)):
            counter[value] -= 1
            if not counter[value]:
                del counter[value]
        return job

    def snapshot(self) -> QueueSnapshot:
        needs = self._needs
        smallest = None if None in needs else min(needs, default=None)  # type: ignore[type-var]
        frozen = self._frozen
        for course, queue in self._queues.items():
            if course not in frozen:
                frozen[course] = tuple(job for _, job in queue)
        return QueueSnapshot(
            MappingProxyType({course: frozen[course] for course in sorted(self._queues)}),
            (smallest,),
            min(self._runtimes, default=float("inf")),
        )
