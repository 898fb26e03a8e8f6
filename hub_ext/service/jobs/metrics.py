"""Prometheus metrics of distributed jobs, computed from the store at each scrape.

Computed, not counted in memory, like the other classhub metrics: the job records and their
events are the truth (they survive a restart of the service, and several service replicas agree).
Names are a contract with the Grafana dashboards; never rename them.

- ``classhub_job_queue_length{course}``: jobs waiting now.
- ``classhub_job_wait_seconds{course}`` (histogram): submit to admission, one observation per
  admission of a job that is admitted or has run.
- ``classhub_job_gpu_hours_total{course}``: GPU-hours held by jobs (the ledger's kind="job"
  reservations), still-running ones counted up to now.
- ``classhub_job_admissions_total{course, reason}``: admissions; reason ``fits`` (on the course's
  share) or ``borrowed`` (on idle capacity of others).
- ``classhub_job_preemptions_total{course, reason}``: preemptions, by why (``reclaim``: a course
  within its share needed the capacity back).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.core import jobs as J
from hub_ext.store import Course, Ledger, readers
from hub_ext.store.job_models import JobEvent, JobRecord

__all__ = ["BUCKETS", "JobCollector"]

#: Wait-time buckets (seconds): a minute to a day.
BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)


class JobCollector(Collector):
    """Reads job records, events and job reservations when Prometheus scrapes."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = readers(sessions)
        self.ledger = Ledger(sessions)

    def collect(self) -> Iterator[Metric]:
        now = datetime.now(timezone.utc)
        queue = GaugeMetricFamily("classhub_job_queue_length", "Jobs waiting to be admitted.",
                                  labels=["course"])
        waits = HistogramMetricFamily("classhub_job_wait_seconds", "Seconds from submit to "
                                      "admission.", labels=["course"])
        hours = CounterMetricFamily("classhub_job_gpu_hours", "GPU-hours held by jobs.",
                                    labels=["course"])
        admissions = CounterMetricFamily("classhub_job_admissions", "Jobs admitted, by reason.",
                                         labels=["course", "reason"])
        preemptions = CounterMetricFamily("classhub_job_preemptions", "Jobs preempted, by reason.",
                                          labels=["course", "reason"])
        with self.sessions() as session:
            courses = list(session.scalars(select(Course.name).order_by(Course.name)))
            queued = dict(session.execute(
                select(Course.name, func.count()).join(JobRecord, JobRecord.course_id == Course.id)
                .where(JobRecord.state == J.QUEUED).group_by(Course.name)).all())
            waited = session.execute(
                select(Course.name, JobRecord.waited_seconds)
                .join(JobRecord, JobRecord.course_id == Course.id)
                .where(JobRecord.waited_seconds.is_not(None))).all()
            admitted = session.execute(
                select(Course.name, JobEvent.message, func.count())
                .join(JobRecord, JobRecord.course_id == Course.id)
                .join(JobEvent, JobEvent.job_pk == JobRecord.id)
                .where(JobEvent.state == J.ADMITTED).group_by(Course.name, JobEvent.message)).all()
            preempted = dict(session.execute(
                select(Course.name, func.count()).join(JobRecord, JobRecord.course_id == Course.id)
                .join(JobEvent, JobEvent.job_pk == JobRecord.id)
                .where(JobEvent.state == J.PREEMPTED).group_by(Course.name)).all())
        held = self.ledger.gpu_seconds_by_course(None, now, now, kind="job")  # since the first job
        for course in courses:
            queue.add_metric([course], queued.get(course, 0))
            observed = sorted(w for c, w in waited if c == course)
            buckets = [(str(b), sum(1 for w in observed if w <= b)) for b in BUCKETS]
            buckets.append(("+Inf", len(observed)))
            waits.add_metric([course], buckets, sum_value=sum(observed))
            hours.add_metric([course], float(held.get(course, 0)) / 3600)
            counts = {"fits": 0, "borrowed": 0}
            for c, message, count in admitted:
                if c == course:
                    counts["borrowed" if "borrowed" in message else "fits"] += count
            for reason, count in counts.items():
                admissions.add_metric([course, reason], count)
            preemptions.add_metric([course, "reclaim"], preempted.get(course, 0))
        yield from (queue, waits, hours, admissions, preemptions)
