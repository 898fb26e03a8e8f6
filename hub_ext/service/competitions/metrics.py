"""``classhub_competition_submissions_total{course}``: accepted competition submissions, counted
from the store.

Computed at each scrape from the submissions table (kept forever, so the count only grows, as a
Prometheus counter must), like every classhub metric (hub_ext.service.metrics): it survives
restarts and agrees between service replicas. A refused file is stored nowhere, so not counted;
a notebook or a file a scoring script scores counts once scored (not while pending, nor failed).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.core.competitions import SCORED
from hub_ext.store import Course, readers
from hub_ext.store.competition_models import Competition, CompetitionSubmission


class CompetitionCollector(Collector):
    """Counts accepted competition submissions per course, in one grouped query per scrape."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = readers(sessions)

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily("classhub_competition_submissions", "Accepted (scored) competition "
                                    "submissions, by course.", labels=["course"])
        with self.sessions() as session:
            rows = session.execute(
                select(Course.name, func.count())
                .join(Competition, Competition.course_id == Course.id)
                .join(CompetitionSubmission, CompetitionSubmission.competition_id == Competition.id)
                .where(CompetitionSubmission.state == SCORED)
                .group_by(Course.name).order_by(Course.name)
            ).all()
        for course, count in rows:
            total.add_metric([course], count)
        yield total
