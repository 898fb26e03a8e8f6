"""Which course goes next: Dominant Resource Fairness across courses.

Why DRF: courses ask for different mixes (one trains on whole H200s, another runs many MIG
slices with lots of CPU), so "fair" cannot be one resource's count. A course's dominant share is
the largest fraction of any cluster resource it holds (ledger usage: its notebooks and its jobs),
divided by its weight; the cycle always serves the course with the smallest dominant share next
(ties: course name), and charges every admission before choosing again, as Kueue's fair sharing
does. Inside a course the queue order (priority, submit time, name) is kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from hub_ext.core.admission.queue import QueueSnapshot
from hub_ext.core.jobs import Job

__all__ = ["FairOrder", "dominant_share"]


def dominant_share(usage: Mapping[str, int], totals: Mapping[str, int], weight: int = 1) -> float:
    """max over the cluster's resources of usage / total, divided by `weight` (0 for no usage)."""
    share = 0.0
    for name, amount in usage.items():
        total = totals.get(name, 0)
        if total > 0 and amount > 0:
            share = max(share, amount / total)
    return share / weight


class FairOrder:
    """Iterates waiting jobs in DRF order; `charge` an admission before taking the next job.

    `usage` (course -> nano-units held) is updated in place by `charge`.
    """

    def __init__(self, queues: QueueSnapshot, usage: dict[str, dict[str, int]],
                 totals: Mapping[str, int], weights: Mapping[str, int],
                 skip: set[str] | None = None) -> None:
        self._queues = queues.by_course
        self._usage = usage  # shared with the cycle, which reads it for borrowing decisions
        self._totals = totals
        self._weights = weights
        self.skip = set() if skip is None else skip
        """Jobs already considered (the reserved job, the global queue's head): passed over."""
        self._heap = [
            (self.share(course), course, 0) for course, jobs in self._queues.items() if jobs
        ]
        heapq.heapify(self._heap)

    def share(self, course: str) -> float:
        return dominant_share(self._usage.get(course, {}), self._totals, self._weights.get(course, 1))

    def charge(self, course: str, amounts: Mapping[str, int]) -> None:
        """Count an admission of `course` (nano-units) before the next choice."""
        used = self._usage.setdefault(course, {})
        for name, amount in amounts.items():
            used[name] = used.get(name, 0) + amount

    def __iter__(self) -> Iterator[Job]:
        heap = self._heap
        while heap:
            _, course, position = heapq.heappop(heap)
            jobs = self._queues[course]
            job = jobs[position]
            if job.name not in self.skip:
                yield job
            if position + 1 < len(jobs):
                heapq.heappush(heap, (self.share(course), course, position + 1))
