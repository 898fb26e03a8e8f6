"""Prometheus metrics of classhub, computed from the store at each scrape.

Why computed, not counted in memory: the facts live in the database (docs/architecture.md, rule 4). Quotas
and reservations are rows; spawn denials are written by the spawner, which runs in the *hub*
process, into the audit log (action ``spawn_denied``, details ``{reason, course}``). A counter
kept in this service would never see them, and one kept in the hub would restart at zero with
it. Counting audit rows per reason is monotonic (the log is append-only), survives restarts of
either process, and agrees between several service replicas, which is what a Prometheus counter
needs; ``rate(classhub_spawns_denied_total[5m])`` works as usual.

Exposed:
- ``classhub_quota{course, resource}``: each course ceiling; ``resource`` is a Kubernetes resource
  name (cpu in cores, memory in bytes, GPUs and MIG slices as counts), or ``servers`` or
  ``gpu_hours_per_week``.
- ``classhub_usage{course, resource}``: what the course holds now (unreleased reservations), with
  ``servers`` and ``gpu_hours_per_week`` (GPU hours used this week) so that usage / quota lines up.
- ``classhub_spawns_denied_total{reason}``: spawns refused, by reason code (hub_ext.core.quota).
- ``classhub_culls_total{reason, resource}``, ``classhub_culler_gpu_hours_reclaimed_total``,
  ``classhub_culler_pending_warnings``: the idle culler (`CullCollector`).
- ``classhub_course_data_bytes{course}``, ``classhub_course_data_uploads_total{course}``,
  ``classhub_course_data_uploaded_bytes_total{course}``: course data folders (`CourseDataCollector`).
- ``classhub_server_devices{course, user, profile, resource}``: GPU devices held by running
  servers (`ServerDeviceCollector`), to join with the DCGM exporter's per-pod GPU metrics;
  ``profile`` is the slug the server was started with ("" when the ledger has none).

Scrapes read through the store's readers (they never wait on a writer) and count in SQL, on the
audit log's index by action: a scrape does not load every audit row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.core.quota import Usage
from hub_ext.core.resources import ResourceVector, is_gpu_resource
from hub_ext.store import AuditLog, Course, CourseQuota, Ledger, readers
from hub_ext.store.culler_models import CULLED_ACTION, CullWarning

SPAWN_DENIED = "spawn_denied"
COURSE_DATA_UPLOADED = "course_data_uploaded"
CULLED = CULLED_ACTION
SERVERS = "servers"
GPU_HOURS = "gpu_hours_per_week"


class StoreCollector(Collector):
    """Reads quotas, usage and denials from the classhub store when Prometheus scrapes."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = readers(sessions)
        self.ledger = Ledger(self.sessions)

    def collect(self) -> Iterator[Metric]:
        now = datetime.now(timezone.utc)
        quota = GaugeMetricFamily(
            "classhub_quota", "Course ceiling per resource (cpu in cores, memory in bytes, devices "
            "as counts; servers; gpu_hours_per_week).", labels=["course", "resource"],
        )
        usage = GaugeMetricFamily(
            "classhub_usage", "What a course holds now per resource, its running servers and its "
            "GPU hours this week (gpu_hours_per_week).", labels=["course", "resource"],
        )
        denied = CounterMetricFamily(
            "classhub_spawns_denied", "Spawns refused by classhub, by reason (from the audit log).",
            labels=["reason"],
        )
        with self.sessions() as session:
            courses = session.execute(
                select(Course.name, CourseQuota).outerjoin(CourseQuota, CourseQuota.course_id == Course.id)
                .order_by(Course.name)
            ).all()
            reason = AuditLog.details["reason"].as_string()
            denials = session.execute(
                select(reason, func.count()).where(AuditLog.action == SPAWN_DENIED).group_by(reason)
            ).all()
        by_course = self.ledger.usage_by_course(now)  # one query for every course
        for name, row in courses:
            if row is not None:
                limits = row.limits
                for resource in sorted(limits.limited):
                    quota.add_metric([name, resource], float(limits.ceiling(resource)))
                if limits.servers is not None:
                    quota.add_metric([name, SERVERS], limits.servers)
                if limits.gpu_hours_per_week is not None:
                    quota.add_metric([name, GPU_HOURS], float(limits.gpu_hours_per_week))
            held = by_course.get(name, Usage())
            for resource, amount in held.resources.items():
                usage.add_metric([name, resource], float(amount))
            usage.add_metric([name, SERVERS], held.servers)
            usage.add_metric([name, GPU_HOURS], float(held.gpu_hours_week))
        for code, count in sorted(denials, key=lambda d: str(d[0])):
            denied.add_metric([code or "unknown"], count)
        yield quota
        yield usage
        yield denied


class CullCollector(Collector):
    """Culls by reason and resource, and GPU-hours reclaimed, from the audit log at each scrape.

    Counted from the log, like the spawn denials: the culler is another process, and the log
    survives its restarts.
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = readers(sessions)

    def collect(self) -> Iterator[Metric]:
        culls = CounterMetricFamily(
            "classhub_culls", "Servers stopped by the classhub culler, by reason and main resource.",
            labels=["reason", "resource"],
        )
        hours = CounterMetricFamily(
            "classhub_culler_gpu_hours_reclaimed", "GPU-hours of idle holding ended by culls: devices "
            "held x idle time at the cull, summed (MIG slices and shares count as one device each).",
        )
        pending = GaugeMetricFamily("classhub_culler_pending_warnings", "Servers warned of a coming cull.")
        reason = AuditLog.details["reason"].as_string()
        resource = AuditLog.details["resource"].as_string()
        culled = AuditLog.action == CULLED
        with self.sessions() as session:
            rows = session.execute(
                select(reason, resource, func.count()).where(culled).group_by(reason, resource)
            ).all()
            gpu_hours = session.scalar(
                select(func.sum(AuditLog.details["gpu_hours"].as_float())).where(culled))
            warned = session.scalar(select(func.count()).select_from(CullWarning)) or 0
        for code, res, count in sorted(rows, key=lambda r: (str(r[0]), str(r[1]))):
            culls.add_metric([code or "unknown", res or "cpu"], count)
        hours.add_metric([], float(gpu_hours or 0))
        pending.add_metric([], warned)
        yield culls
        yield hours
        yield pending


class ServerDeviceCollector(Collector):
    """GPU devices held by each user's running servers, from the ledger, at each scrape.

    Why per user: NVIDIA's DCGM exporter labels GPU metrics with the pod, and a user's default
    server pod is ``jupyter-<user>``; joining on the user is how a dashboard shows GPU
    utilisation by course (helm-values/dashboards/). Why per profile too: device types alone
    cannot tell two profiles of the same device apart (a 1-GPU and a 2-GPU profile, two A100
    models); the profile label lets the same join show GPU use by profile. Reservations without
    a profile (made before the ledger recorded it) report ``profile=""``.
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.ledger = Ledger(sessions)  # it reads through the store's readers

    def collect(self) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "classhub_server_devices", "GPU devices (whole GPUs, MIG slices, shares) held by a user's "
            "running servers, per course, profile and resource.",
            labels=["course", "user", "profile", "resource"],
        )
        totals: dict[tuple[str, str, str, str], float] = {}
        for server in self.ledger.holdings(kind="server"):
            for resource, amount in ResourceVector.from_k8s(server.resources).items():
                if is_gpu_resource(resource):
                    key = (server.course or "", server.username, server.profile or "", resource)
                    totals[key] = totals.get(key, 0.0) + float(amount)
        for labels, amount in sorted(totals.items()):
            held.add_metric(list(labels), amount)
        yield held


class CourseDataCollector(Collector):
    """Course data folders: their size now (``classhub_course_data_bytes{course}``, from the
    folder store's cached sizes) and what was uploaded (``classhub_course_data_uploads_total`` and
    ``classhub_course_data_uploaded_bytes_total``, counted from the audit log like the denials).
    A scrape runs on a worker thread (MetricsHandler), so a size computed now is off the loop."""

    def __init__(self, sessions: sessionmaker[Session], size_of: Callable[[str], int] | None) -> None:
        self.sessions = readers(sessions)
        self.size_of = size_of

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("classhub_course_data_bytes", "Bytes in a course's data folder.",
                                 labels=["course"])
        uploads = CounterMetricFamily("classhub_course_data_uploads", "Files uploaded to a course's "
                                      "data folder (from the audit log).", labels=["course"])
        uploaded = CounterMetricFamily("classhub_course_data_uploaded_bytes", "Bytes uploaded to a "
                                       "course's data folder (from the audit log).", labels=["course"])
        course = AuditLog.details["course"].as_string()
        with self.sessions() as session:
            names = session.scalars(select(Course.name).order_by(Course.name)).all()
            rows = session.execute(
                select(course, func.count(), func.sum(AuditLog.details["bytes"].as_integer()))
                .where(AuditLog.action == COURSE_DATA_UPLOADED).group_by(course)).all()
        for name, count, total in sorted(rows, key=lambda r: str(r[0])):
            uploads.add_metric([name or ""], count)
            uploaded.add_metric([name or ""], float(total or 0))
        if self.size_of is not None:
            for name in names:
                size.add_metric([name], float(self.size_of(name)))
        yield size
        yield uploads
        yield uploaded


def registry_for(sessions: sessionmaker[Session]) -> CollectorRegistry:
    """A registry of its own (not the process-global one), so tests and apps do not mix."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(sessions))
    registry.register(CullCollector(sessions))
    registry.register(ServerDeviceCollector(sessions))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format (``text/plain; version=0.0.4``)."""
    return generate_latest(registry)
