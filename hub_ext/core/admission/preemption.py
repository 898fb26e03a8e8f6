"""Reclaiming borrowed capacity: which running jobs a course within its share may preempt.

Why: a course may run beyond its guaranteed share on idle capacity (borrowing within the cohort,
as in Kueue), which keeps GPUs busy at night; when a course that is within its share needs the
room back, jobs running on borrowed quota go first. The rules:
- only a job that keeps its course within its nominal share may preempt (a borrowing job waits);
- only jobs admitted as borrowed, of *other* courses that are still beyond their nominal share on
  a resource the preemptor needs, are victims; notebooks never are (they are not jobs: a waiting
  job may instead ask the culler's pressure reclaim for idle notebooks, `CycleResult.pressure`);
- victims are taken lowest priority first, then the most recently started (least work lost), then
  by name, only while their course stays beyond its share, until the preemptor fits; then every
  victim that is not needed is spared again (latest taken first), so the set is minimal in order;
- victims get a grace period (`Snapshot.grace`) to checkpoint; jobs already preempted are not
  preempted again, and their capacity counts as free when the grace ends;
- reclaiming goes first (`first_reclaimer`): the oldest course head within its quota and share
  that needs borrowed capacity back takes the cycle's reservation before any job that would
  borrow, the one holding it from the last cycle included; else a borrowing job waiting for the
  borrowed capacity to free up would keep the reservation, and the course within its share would
  wait for the borrowers to end instead of preempting them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from hub_ext.core.admission.assigner import FreeIndex
from hub_ext.core.admission.queue import queue_key
from hub_ext.core.admission.snapshot import RunningJob
from hub_ext.core.jobs import Job

__all__ = ["choose_victims", "first_reclaimer", "preemption_message"]


def choose_victims(
    job: Job,
    index: FreeIndex,
    running: Sequence[RunningJob],
    over_share: Callable[[str, Mapping[str, int]], bool],
    positions: Mapping[str, int],
) -> tuple[RunningJob, ...] | None:
    """The borrowed jobs to preempt so that all of `job`'s replicas fit, or None.

    `over_share(course, taken_back)` says whether `course` is still beyond its nominal share on a
    resource `job` needs once `taken_back` (nano-units) is subtracted from its usage.
    """
    candidates = sorted(
        (run for run in running
         if run.borrowed and not run.preempted and run.job.course != job.course),
        key=lambda run: (run.job.priority, -run.started, run.job.name),
    )
    if not candidates:
        return None
    sim = index.clone()
    taken_back: dict[str, dict[str, int]] = {}
    chosen: list[RunningJob] = []
    fitted = False
    for run in candidates:
        course = run.job.course
        if not over_share(course, taken_back.get(course, {})):
            continue
        _release(sim, run, positions)
        back = taken_back.setdefault(course, {})
        for held in run.held.values():
            for name, amount in held.items():
                back[name] = back.get(name, 0) + amount
        chosen.append(run)
        trial = sim.clone()
        if trial.place(job) is not None:
            fitted = True
            break
    if not fitted:
        return None
    # spare every victim that is not needed, latest taken first
    for run in reversed(list(chosen)):
        without = [other for other in chosen if other is not run]
        trial = index.clone()
        for other in without:
            _release(trial, other, positions)
        if trial.place(job) is not None:
            chosen = without
    return tuple(chosen)


def first_reclaimer(
    heads: Iterable[Job],
    may_reclaim: Callable[[Job], bool],
    victims: Callable[[Job], tuple[RunningJob, ...] | None],
) -> Job | None:
    """The job that reclaims borrowed capacity this cycle, or None: of the course `heads`, in
    queue order (priority, submit time, name), the first that `may_reclaim` (within its quota
    and its course's share, not fitting now) and for which `victims` finds jobs to preempt."""
    for job in sorted(heads, key=queue_key):
        if may_reclaim(job) and victims(job):
            return job
    return None


def _release(index: FreeIndex, run: RunningJob, positions: Mapping[str, int]) -> None:
    for node, held in run.held.items():
        i = positions.get(node)
        if i is not None:
            index.release(i, held)


def preemption_message(course: str, for_job: str, for_course: str, grace: float) -> str:
    """What a preempted job's owner reads in its events: why, for whom, how long it has to save a
    checkpoint, and that it keeps its place (a requeued job is ordered by its submit time)."""
    return (f"preempted: it runs on GPUs borrowed beyond course {course}'s guaranteed share, and "
            f"course {for_course}, within its share, needs them for job {for_job}; it gets "
            f"{grace:g} s after SIGTERM to save a checkpoint, then goes back to the queue in its "
            "place by submit time")
