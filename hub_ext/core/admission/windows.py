"""Course reservations for time windows: "8 x nvidia.com/gpu, Tuesdays 10:00-12:00".

Why: a lab session needs its GPUs at 10:00, not whenever a long job of another course ends. A job
of another course that would still run inside a window starts only if, during the window, the
reserved amount stays free of other courses' jobs: the jobs of other courses overlapping the
window, plus this one, must fit in the cluster's allocatable minus the reservation. In the window
the course's own notebooks and jobs find that capacity free; nothing restricts them.

Counted conservatively: every job of another course that overlaps a window counts as if it ran
for the whole window (a job ending at 10:30 and one starting at 11:00 both count). Notebooks are
not counted (nobody knows when they end); the culler keeps the course's own notebooks inside the
window and may reclaim idle ones of others under pressure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hub_ext.core.admission.assigner import nanos
from hub_ext.core.admission.snapshot import CourseWindow, RunningJob
from hub_ext.core.jobs import Job

__all__ = ["WindowBook"]


class WindowBook:
    """Per window still to come or running, what other courses' jobs hold inside it (nano-units)."""

    def __init__(self, windows: Iterable[CourseWindow], running: Iterable[RunningJob], now: float,
                 totals: Mapping[str, int]) -> None:
        self.windows = tuple(sorted((w for w in windows if w.end > now),
                                    key=lambda w: (w.start, w.end, w.course)))
        self.totals = totals
        self._limit = [{n: totals.get(n, 0) - a for n, a in nanos(w.resources).items()}
                       for w in self.windows]
        self._other: list[dict[str, int]] = [{} for _ in self.windows]
        if self.windows:
            for run in running:
                self.book(run.job, run.started, run.expected_end)

    def _others_overlapping(self, job: Job, start: float, end: float):
        """(index, window, the job's total need) for each window of another course that
        [start, end) overlaps; the need is computed once, and only when some window overlaps."""
        amounts = None
        for k, window in enumerate(self.windows):
            if window.course == job.course or not window.overlaps(start, end):
                continue
            if amounts is None:
                amounts = job.total_need
            yield k, window, amounts

    def blocking(self, job: Job, start: float, end: float) -> CourseWindow | None:
        """The first window of another course that running `job` over [start, end) would eat into."""
        if not self.windows:
            return None
        for k, window, amounts in self._others_overlapping(job, start, end):
            other = self._other[k]
            for name, limit in self._limit[k].items():
                if other.get(name, 0) + amounts.get(name, 0) > limit and amounts.get(name, 0) > 0:
                    return window
        return None

    def book(self, job: Job, start: float, end: float) -> None:
        """Count `job` over [start, end) in every window of another course it overlaps."""
        for k, _window, amounts in self._others_overlapping(job, start, end):
            other = self._other[k]
            for name, amount in amounts.items():
                other[name] = other.get(name, 0) + amount
