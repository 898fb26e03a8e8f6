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
