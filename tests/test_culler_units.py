"""The culler's pieces without a hub: facts from hub models and the store, course policy merging,
the Prometheus query (against a tiny real HTTP server), the server extension's GPU and kernel
reports (NVML and the kernel manager replaced by plain objects: no GPU on the test machines).

What an admin would notice when these fail: a course's longer timeout ignored for GPU servers,
a GPU pod culled because Prometheus answered NaN or was down, a server's activity endpoint that
crashes on a machine without NVIDIA drivers.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from culler import facts as F
from culler.app import ClasshubCuller
from hub_ext.core.culling import CullPolicy, resolve_policy
from hub_ext.singleuser.activity import gpu_activity, kernel_activity
from tests.hubproc import free_port

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("resources, kind", [
    ({"cpu": "1", "memory": "2Gi"}, "cpu"),
    ({"cpu": "1", "nvidia.com/gpu": "2"}, "gpu"),
    ({"nvidia.com/mig-1g.18gb": "1"}, "mig"),
    ({"nvidia.com/gpu.shared": "1"}, "shared"),
    ({"nvidia.com/mig-1g.10gb.me": "1"}, "mig"),  # a MIG slice with attributes is a GPU
    ({"amd.com/gpu": "1"}, "gpu"),  # another vendor's GPU was a CPU server here
])
def test_kind_from_the_devices_a_server_holds(resources, kind):
    assert F.kind_of(F.device_units(resources)) == kind


def test_facts_from_a_hub_model_and_a_reservation():
    user = {"name": "ann", "servers": {}}
    server = {"started": "2026-11-30T10:00:00.000000Z", "last_activity": "2026-11-30T11:00:00Z",
              "ready": True, "pending": None}
    f = F.server_facts(user, "", server, reservation=({"cpu": "1", "nvidia.com/gpu": "1"}, "cs101"),
                       persistent=False, warned_at=None, gpu_utilization=42.0)
    assert (f.profile, f.course, f.gpu_utilization) == ("gpu", "cs101", 42.0)
    assert f.resources == (("nvidia.com/gpu", 1),)
    assert f.started_at == NOW - timedelta(hours=2)
    reported = F.with_report(f, {"kernels": {"total": 2, "busy": 1}, "last_kernel_activity":
                                 "2026-11-30T11:59:00+00:00", "gpu": {"status": "ok", "utilization": 80}})
    assert reported.busy_kernels == 1 and reported.gpu_utilization == 80.0
    assert reported.last_kernel_activity == NOW - timedelta(minutes=1)
    assert F.with_report(f, None) is f
    assert F.with_report(f, {"kernels": {"busy": -3}, "gpu": {"status": "unknown"}}).busy_kernels == 0


def test_only_ready_servers_are_considered():
    users = [{"name": "a", "servers": {"": {"ready": True, "pending": None, "started": "x"},
                                       "lab": {"ready": False, "pending": "spawn", "started": None}}},
             {"name": "b", "servers": {"": {"ready": True, "pending": "stop", "started": "x"}}}]
    assert [(u["name"], n) for u, n, _ in F.running_servers(users)] == [("a", "")]


def row(course, kind="", **fields):
    values = dict.fromkeys(("idle_timeout", "max_age", "never_cull", "warn_before", "pressure_min_idle"))
    values.update(fields)
    return SimpleNamespace(course=course, kind=kind, **values)


def test_course_policies_override_the_site_defaults_per_kind():
    site = {k: CullPolicy(idle_timeout=t, warn_before=300) for k, t in
            {"gpu": 1800, "mig": 3600, "shared": 3600, "cpu": 7200}.items()}
    policies = F.policies(site, [
        row("thesis", idle_timeout=4 * 3600),                 # every kind of the course
        row("thesis", "gpu", warn_before=900),                # and more warning for whole GPUs
        row("exam", "cpu", never_cull=True),
    ])

    def facts(kind, course=None):
        return SimpleNamespace(profile=kind, course=course)

    gpu_thesis = resolve_policy(facts("gpu", "thesis"), policies)
    assert (gpu_thesis.idle_timeout, gpu_thesis.warn_before) == (4 * 3600, 900)
    assert resolve_policy(facts("mig", "thesis"), policies).idle_timeout == 4 * 3600
    assert resolve_policy(facts("gpu"), policies).idle_timeout == 1800
    assert resolve_policy(facts("gpu", "exam"), policies).never_cull is False
    assert resolve_policy(facts("cpu", "exam"), policies).never_cull is True
    assert resolve_policy(facts("cpu", "exam"), policies).idle_timeout == 7200


class Prometheus:
    def __init__(self, payload) -> None:
        self.payload = payload
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(outer.payload).encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def culler(tmp_path, prometheus_url: str = "", **traits) -> ClasshubCuller:
    traits.setdefault("db_url", f"sqlite:///{tmp_path / 'c.sqlite'}")
    app = ClasshubCuller(config=Config({"ClasshubPrometheus": {"url": prometheus_url}}), **traits)
    app.initialize([])
    return app


async def test_gpu_utilisation_per_pod_from_prometheus(tmp_path):
    prom = Prometheus({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "jupyter-ann"}, "value": [1, "87.5"]},
        {"metric": {"pod": "jupyter-ann"}, "value": [1, "12"]},     # a second GPU: the busiest counts
        {"metric": {"pod": "jupyter-bob"}, "value": [1, "NaN"]},    # no sample yet: unknown
        {"metric": {"pod": "jupyter-cy"}, "value": [1, "150"]},     # clamped to 100
        {"metric": {"pod": "jupyter-dee"}, "value": [1, "busy"]},   # garbage: unknown
        {"metric": {}, "value": [1, "50"]},                         # no pod label: ignored
    ]}})
    try:
        assert await culler(tmp_path, prometheus_url=prom.url).gpu_by_pod() == {
            "jupyter-ann": 88.0, "jupyter-cy": 100.0}  # whole percents, as the Cluster page
    finally:
        prom.server.shutdown()
    # Prometheus down or not configured: nothing known, no exception
    assert await culler(tmp_path, prometheus_url=f"http://127.0.0.1:{free_port()}").gpu_by_pod() == {}
    assert await culler(tmp_path).gpu_by_pod() == {}


def test_unknown_kind_in_idle_timeouts_is_refused(tmp_path):
    with pytest.raises(Exception, match="unknown kinds"):
        ClasshubCuller(idle_timeouts={"tpu": 60})
    assert ClasshubCuller(idle_timeouts={"gpu": 60}).idle_timeouts["cpu"] == 7200


class FakeNVML:
    """pynvml's surface used by gpu_activity: devices with processes and a utilisation."""

    def __init__(self, devices, fail_init=False) -> None:
        self.devices = devices
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.devices[i]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p) for p in handle["pids"]]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=handle["util"])


def test_gpu_activity_of_the_servers_own_processes():
    nvml = FakeNVML([{"pids": [10, 11], "util": 93}, {"pids": [99], "util": 100}, {"pids": [], "util": 0}])
    assert gpu_activity({10, 12}, nvml) == {"status": "ok", "utilization": 93.0, "devices": 1, "processes": 1}
    assert gpu_activity({12}, nvml)["status"] == "none"
    unknown = gpu_activity({10}, FakeNVML([], fail_init=True))
    assert unknown["status"] == "unknown" and "Not Found" in unknown["reason"]
    broken = FakeNVML([{"pids": [10], "util": 1}])
    broken.nvmlDeviceGetUtilizationRates = lambda h: 1 / 0
    assert gpu_activity({10}, broken)["status"] == "unknown"


def test_gpu_activity_without_pynvml_installed():
    report = gpu_activity({1})
    assert report["status"] in ("unknown", "none", "ok")  # never raises, whatever the machine has


def test_kernel_activity_counts_busy_kernels_and_latest_activity():
    kernels = {
        "a": SimpleNamespace(execution_state="busy", last_activity=NOW - timedelta(minutes=5)),
        # jupyter-server's kernel times are naive UTC
        "b": SimpleNamespace(execution_state="idle",
                             last_activity=(NOW - timedelta(minutes=1)).replace(tzinfo=None)),
    }

    class Manager:
        def list_kernel_ids(self):
            return [*kernels, "gone"]

        def get_kernel(self, kid):
            return kernels[kid]

    report = kernel_activity(Manager())
    assert report == {"kernels": {"total": 2, "busy": 1},
                      "last_kernel_activity": (NOW - timedelta(minutes=1)).isoformat()}


def test_hub_page_announcement_escapes_and_counts_down(tmp_path):
    from hub_ext import store
    from hub_ext.hubside import Announcement
    from hub_ext.store import culler_models as cm

    url = f"sqlite:///{tmp_path / 'a.sqlite'}"
    now = datetime.now(timezone.utc)
    with store.connect(url).begin() as session:
        session.add(cm.CullWarning(username="ann", server_name="<b>lab</b>", warned_at=now,
                                   cull_at=now + timedelta(minutes=5, seconds=30), message="idle"))
    announce = Announcement(url, poll=False)
    assert announce(SimpleNamespace(name="ann")) == ""  # pages read what the reader read last
    announce.refresh()
    html = announce(SimpleNamespace(name="ann"))
    assert "will be stopped in about 5 min" in html and "&lt;b&gt;lab&lt;/b&gt;" in html and "<b>" not in html
    assert announce(SimpleNamespace(name="bob")) == ""
    assert announce(None) == ""
    broken = Announcement(f"sqlite:///{tmp_path}/missing/dir/x.sqlite", poll=False)
    broken.refresh()  # logged, never raised: the hub's pages still render
    assert broken(SimpleNamespace(name="ann")) == ""


def test_shortfalls_count_each_waiting_user_once_and_expire(tmp_path):
    from hub_ext import store
    from hub_ext.store import culler_models as cm

    sessions = store.connect(f"sqlite:///{tmp_path / 's.sqlite'}")
    gpu, mig = "nvidia.com/gpu", "nvidia.com/mig-1g.18gb"
    with sessions.begin() as session:
        for user, resource, units, age in [("ann", gpu, 1, 10), ("ann", gpu, 1, 5), ("bob", gpu, 2, 5),
                                           ("cy", mig, 1, 5), ("dee", gpu, 1, 4000)]:
            cm.record_shortfall(session, resource, units, user, NOW - timedelta(seconds=age))
    with sessions() as session:
        assert cm.open_shortfalls(session, NOW - timedelta(seconds=900)) == {gpu: 3, mig: 1}
    with sessions.begin() as session:
        cm.close_shortfalls(session, NOW)
    with sessions() as session:
        assert cm.open_shortfalls(session, NOW - timedelta(seconds=900)) == {}


def test_what_the_culler_reads_from_the_store_after_a_restart(tmp_path):
    """Everything an admin decided and the culler promised is in the store, so a new culler
    process decides exactly as the old one would have."""
    from hub_ext import store
    from hub_ext.core.culling import Window
    from hub_ext.store import culler_models as cm

    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    now = datetime.now(timezone.utc)
    sessions = store.connect(url)
    with sessions.begin() as session:
        course = store.ensure_course(session, "cs101", now)
        store.add_member(session, course, "ann", "student")
        session.add(store.Reservation(key="server:ann/", username="ann", course=course, started_at=now,
                                      resources={"cpu": "1", "nvidia.com/gpu": "1"}))
        cm.set_persistent(session, "demo", "", True, "admin", now, "open day")
        cm.set_course_policy(session, "cs101", "gpu", {"idle_timeout": 7200.0})
        session.add(cm.NoCullWindow(course="cs101", starts_at=now, ends_at=now + timedelta(hours=2),
                                    note="exam", created_by="teacher"))
        session.add(cm.NoCullWindow(course="cs101", starts_at=now - timedelta(hours=3),
                                    ends_at=now - timedelta(hours=1), created_by="teacher"))
        session.add(cm.CullWarning(username="bob", server_name="", warned_at=now,
                                   cull_at=now + timedelta(minutes=5)))
        cm.record_shortfall(session, "nvidia.com/gpu", 1, "cy", now)

    known = culler(tmp_path, db_url=url).read_store(now)
    assert known["reservations"] == {"server:ann/": ({"cpu": "1", "nvidia.com/gpu": "1"}, "cs101")}
    assert known["persistent"] == {("demo", "")}
    assert known["policies"][("gpu", "cs101")].idle_timeout == 7200
    assert known["policies"][("gpu", None)].idle_timeout == 1800
    assert known["windows"] == [Window("cs101", now, now + timedelta(hours=2), "exam")]
    assert known["warnings"][("bob", "")].warned_at == now
    assert known["pressure"] == {"nvidia.com/gpu": 1}


def test_the_clock_file_moves_the_culler_s_time_and_a_bad_file_means_real_time(tmp_path):
    clock = tmp_path / "clock"
    culler = ClasshubCuller(clock_file=str(clock))
    real = datetime.now(timezone.utc)
    assert abs((culler.now() - real).total_seconds()) < 5  # no file yet: the wall clock
    clock.write_text("3600\n")
    assert 3595 < (culler.now() - real).total_seconds() < 3605
    clock.write_text("an hour")
    assert abs((culler.now() - real).total_seconds()) < 5
    assert abs((ClasshubCuller().now() - real).total_seconds()) < 5  # no clock file configured


def test_a_servers_busy_check_is_set_in_its_own_configuration(monkeypatch, tmp_path):
    """A single-user server is configured as jupyter-server is: ``--ClasshubActivity.*`` (or its
    jupyter_server_config.py) sets how often it checks for busy kernels and what GPU use is busy;
    an old variable still set is named with the trait to use instead."""
    import logging

    from jupyter_server.serverapp import ServerApp

    monkeypatch.setenv("CLASSHUB_GPU_BUSY_PERCENT", "80")

    async def start() -> tuple[ServerApp, list[str]]:
        app = ServerApp()
        said: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: said.append(record.getMessage())
        app.log.addHandler(handler)
        app.initialize(argv=["--ServerApp.jpserver_extensions={'hub_ext.singleuser': True}",
                             "--ClasshubActivity.busy_check_interval=7",
                             "--ClasshubActivity.gpu_busy_percent=50", "--ServerApp.port=0",
                             f"--ServerApp.root_dir={tmp_path}"], new_httpserver=False)
        return app, said

    app, said = asyncio.run(start())
    settings = app.web_app.settings
    settings["classhub_busy_callback"].stop()
    assert settings["classhub_busy_callback"].callback_time == 7000
    assert settings["classhub_activity"].gpu_busy_percent == 50  # the trait, not the old variable
    assert any("CLASSHUB_GPU_BUSY_PERCENT is set, but classhub no longer reads it: set "
               "c.ClasshubActivity.gpu_busy_percent" in line for line in said), said
