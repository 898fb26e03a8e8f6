"""/metrics content, read from the store the spawner writes, with the service app in this process.

The service's authenticated paths need a hub (test_service_authz.py, test_service_courses.py);
the anonymous mode (authenticate_metrics=False, what a Prometheus on a private network scrapes)
does not, so here the real app runs in-process against a real sqlite store and the hub URL
points nowhere: nothing on these paths may need the hub.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext import store
from hub_ext.core.profiles import Catalog, Viewer
from hub_ext.core.quota import parse_limits, week_window
from hub_ext.core.resources import ResourceVector
from hub_ext.service.app import ClasshubService
from spawner import quota
from tests.hubproc import free_port

pytestmark = pytest.mark.unit

PREFIX = "/services/classhub/"


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'classhub.sqlite'}"


@pytest.fixture
def seeded(db_url):
    """Two courses as the API and the spawner leave them: ceilings, reservations, denials."""
    sessions = store.connect(db_url)
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        cs = store.ensure_course(session, "cs101", now)
        bio = store.ensure_course(session, "bio201", now)
        for course, user in ((cs, "sam"), (cs, "sue"), (bio, "bo")):
            store.add_member(session, course, user, "student")
        store.set_course_limits(
            session, cs,
            parse_limits({"resources": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 4,
                                        "nvidia.com/mig-1g.18gb": 14, "nvidia.com/gpu.shared": 0},
                          "servers": 20, "gpu_hours_per_week": 100}),
            actor="admin", now=now,
        )
    ledger = store.Ledger(sessions)
    start = max(now - timedelta(minutes=30), week_window(now)[0])  # GPU time inside this week
    ledger.reserve("sam", "cs101", "server:sam/", ResourceVector({"cpu": "2", "nvidia.com/gpu": 1}), start)
    ledger.reserve("sue", "cs101", "server:sue/", ResourceVector({"cpu": "500m", "memory": "4Gi"}), now)
    with sessions.begin() as session:
        for reason, course in (("course_resource", "cs101"), ("course_resource", "cs101"),
                               ("user_servers", "bio201")):
            session.add(store.AuditLog(at=now, actor="hub", action="spawn_denied",
                                       details={"reason": reason, "course": course}))
        session.add(store.AuditLog(at=now, actor="admin", action="quota.course.set", details={}))
    sessions.kw["bind"].dispose()
    return (now - start).total_seconds() / 3600


@pytest.fixture
async def service(monkeypatch, db_url):
    """The real service app on a free port; the hub API it would ask is unreachable."""
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t" * 32)
    monkeypatch.setenv("JUPYTERHUB_API_URL", f"http://127.0.0.1:{free_port()}/hub/api")
    monkeypatch.setenv("JUPYTERHUB_CLIENT_ID", "service-classhub")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", PREFIX)

    def start(**traits) -> str:
        app = ClasshubService(db_url=db_url, **traits).make_app()
        port = free_port()
        servers.append(app.listen(port, "127.0.0.1"))
        return f"http://127.0.0.1:{port}{PREFIX}"

    servers: list = []
    yield start
    for server in servers:
        server.stop()


async def fetch(url: str) -> tuple[int, str, str]:
    try:
        r = await AsyncHTTPClient().fetch(url, raise_error=True)
    except HTTPClientError as e:
        return e.code, "", e.response.body.decode() if e.response else ""
    return r.code, r.headers.get("Content-Type", ""), r.body.decode()


async def test_anonymous_metrics_report_quota_usage_and_denials(service, seeded):
    gpu_hours = seeded
    code, content_type, text = await fetch(service(authenticate_metrics=False) + "metrics")
    assert code == 200
    assert content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def quota(course, resource):
        return samples.get(("classhub_quota", (("course", course), ("resource", resource))))

    def usage(course, resource):
        return samples.get(("classhub_usage", (("course", course), ("resource", resource))))

    assert quota("cs101", "cpu") == 64
    assert quota("cs101", "memory") == 256 * 2**30
    assert quota("cs101", "nvidia.com/gpu") == 4
    assert quota("cs101", "nvidia.com/mig-1g.18gb") == 14
    assert quota("cs101", "nvidia.com/gpu.shared") == 0  # "no shared GPUs" is a ceiling too
    assert quota("cs101", "servers") == 20
    assert quota("cs101", "gpu_hours_per_week") == 100
    assert quota("bio201", "cpu") is None  # no ceiling: nothing to report

    assert usage("cs101", "cpu") == 2.5
    assert usage("cs101", "memory") == 4 * 2**30
    assert usage("cs101", "nvidia.com/gpu") == 1
    assert usage("cs101", "servers") == 2
    assert usage("cs101", "gpu_hours_per_week") == pytest.approx(gpu_hours, abs=0.01)
    assert usage("bio201", "servers") == 0

    denied = {k[1]: v for k, v in samples.items() if k[0] == "classhub_spawns_denied_total"}
    assert denied == {(("reason", "course_resource"),): 2, (("reason", "user_servers"),): 1}


async def test_metrics_require_a_token_by_default(service, seeded):
    code, _, body = await fetch(service() + "metrics")
    assert code == 401
    assert "read:metrics" in body


async def test_openapi_is_served_without_login(service):
    code, content_type, body = await fetch(service() + "api/openapi.json")
    assert code == 200 and content_type.startswith("application/json")
    assert '"/api/courses/{course}/roster"' in body


async def test_server_devices_name_the_profile_each_server_was_started_with(service, db_url):
    """Two profiles of the same device type (one and two whole GPUs) are one line by device type;
    the profile label, recorded by the spawner's own reservation, tells them apart."""
    sessions = store.connect(db_url)
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        cs = store.ensure_course(session, "cs101", now)
        for user in ("sam", "sue", "bo", "jo"):
            store.add_member(session, cs, user, "student")
    catalog = Catalog.from_config([
        {"slug": "h200", "kind": "gpu", "groups": ["cs101"]},
        {"slug": "h200-x2", "kind": "gpu", "gpu_count": 2, "groups": ["cs101"]},
    ])
    for user, slug in (("sam", "h200"), ("sue", "h200-x2")):
        selection = catalog.select(Viewer(user, frozenset({"cs101"})), {"profile": slug})
        assert await quota.reserve(db_url, user, "", selection) == "cs101"
    ledger = store.Ledger(sessions)
    # A server reserved before the ledger recorded profiles, and a job: no profile.
    ledger.reserve("bo", "cs101", "server:bo/", ResourceVector({"nvidia.com/gpu": 1}), now)
    ledger.reserve("jo", "cs101", "job:7", ResourceVector({"nvidia.com/gpu": 4}), now, kind="job")
    sessions.kw["bind"].dispose()
    store.shared(db_url).kw["bind"].dispose()

    code, _, text = await fetch(service(authenticate_metrics=False) + "metrics")
    assert code == 200
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "classhub_server_devices"]
    held = {(s.labels["user"], s.labels["profile"]): (s.labels["course"], s.labels["resource"], s.value)
            for s in family.samples}
    assert held == {("sam", "h200"): ("cs101", "nvidia.com/gpu", 1.0),
                    ("sue", "h200-x2"): ("cs101", "nvidia.com/gpu", 2.0),
                    ("bo", ""): ("cs101", "nvidia.com/gpu", 1.0)}
