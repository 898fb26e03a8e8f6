"""``classhub_submissions_total{course, late}``: assignment submissions, counted from the store.

Computed at each scrape from the submissions table (kept forever, so the count only grows, as a
Prometheus counter must), like every classhub metric (hub_ext.service.metrics): it survives
restarts and agrees between service replicas.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.store import Course, readers
from hub_ext.store.assignment_models import Assignment, Submission


class SubmissionCollector(Collector):
    """Counts submissions per course, on time and late, in one grouped query per scrape."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = readers(sessions)

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily("classhub_submissions", "Assignment submissions, by course and "
                                    "whether they were late.", labels=["course", "late"])
        with self.sessions() as session:
            rows = session.execute(
                select(Course.name, Submission.late, func.count())
                .join(Assignment, Assignment.course_id == Course.id)
                .join(Submission, Submission.assignment_id == Assignment.id)
                .group_by(Course.name, Submission.late).order_by(Course.name)
            ).all()
        for course, late, count in rows:
            total.add_metric([course, "true" if late else "false"], count)
        yield total


class GradingCollector(Collector):
    """``classhub_grading_jobs_total{course, outcome}``: every grading run (a regrade counts
    again), by how it ended: graded (every test ran), incomplete (some cells did not run: time
    limit, dead kernel, unreadable notebook), no-result (the grader ended without one), not-started
    (the job could not be submitted). Kept in each submission's grading history, so the count
    only grows."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = readers(sessions)

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily("classhub_grading_jobs", "Autograding runs of submissions, by "
                                    "course and outcome.", labels=["course", "outcome"])
        counts: dict[tuple[str, str], int] = {}
        with self.sessions() as session:
            rows = session.execute(
                select(Course.name, Submission.grading)
                .join(Assignment, Assignment.course_id == Course.id)
                .join(Submission, Submission.assignment_id == Assignment.id)
                .where(Assignment.autograde.is_not(None))
            ).all()
        for course, grading in rows:
            for outcome in (grading or {}).get("history", []):
                counts[(course, outcome)] = counts.get((course, outcome), 0) + 1
        for (course, outcome), count in sorted(counts.items()):
            total.add_metric([course, outcome], count)
        yield total
