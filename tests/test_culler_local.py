"""The idle culler end to end in local mode: a real hub, real servers, the culler service.

The GPU inventory is injected (2 H200s, one split into 7 MIG slices), as in
tests/test_local_gpu_profiles.py. Timeouts are the real ones (minutes); the tests move the
culler's clock forward (its ``clock_file``) and wait for a cycle that decided at the moved time,
instead of sleeping through idle windows. What a user notices:
an idle GPU server is stopped after a warning they could see; a training run with nobody
watching is not; an admin's persistent demo server is not; a student refused a GPU gets one
after the culler frees an idle holder.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest
import requests
import websocket

from tests.hubproc import BUSY_MACHINE, HubSession, LocalHub, api, traits, wait_for

pytestmark = pytest.mark.hub

INVENTORY = Path(__file__).parent / "data" / "nvidia-smi" / "h200-2gpu-7x1g.txt"
GPU = "nvidia-h200-gpu"
MIG = "mig-1g-18gb"


def make_hub(root: Path, name: str, culler: dict) -> LocalHub:
    """A hub whose culler runs with ``culler`` settings and a clock file (``hub.clock``)."""
    data_dir = root / name
    data_dir.mkdir()
    culler = {**culler, "clock_file": str(data_dir / "culler-clock")}
    (data_dir / "jupyterhub_config.py").write_text(
        BUSY_MACHINE + f"c.ClasshubLocalSpawner.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]\n"
        "c.ClasshubLocalSpawner.use_nvml = False\n" + traits({"ClasshubCuller": culler})
    )
    hub = LocalHub(data_dir=data_dir).start()
    hub.clock = Path(culler["clock_file"])
    return hub


def move_clock(hub: LocalHub, seconds: float, wait: bool = True) -> None:
    """Run the culler's clock ``seconds`` ahead of the wall clock and wait until a cycle that
    decided at that time has finished (each cycle's log line names its offset)."""
    logged = hub.log_path.stat().st_size  # only cycles logged from now on count
    tmp = hub.clock.with_suffix(".tmp")
    tmp.write_text(f"{seconds}\n")
    os.replace(tmp, hub.clock)  # the culler never reads half a number
    if seconds and wait:
        line = f"cycle (clock {seconds:+g}s)".encode()

        def cycled() -> bool:
            with open(hub.log_path, "rb") as log:
                log.seek(logged)
                return line in log.read()

        wait_for(cycled, 60, f"a culler cycle at +{seconds:g}s", interval=0.25)


@pytest.fixture(scope="module")
def culled_hub(hub_root):
    """Every kind idle after 10 min, warned 5 min before, a cycle every second; every server the
    culler would warn or cull is asked for its activity report first."""
    hub = make_hub(hub_root, "culler-e2e", {
        "interval": 1, "warn_before": 300, "reclaim_after": 3600, "ask_servers": "candidates",
        "idle_timeouts": {"gpu": 600, "mig": 600, "shared": 600, "cpu": 600},
    })
    yield hub
    hub.stop()


def spawn(hub: LocalHub, user: str, token: str, profile: str) -> requests.Response:
    return requests.post(f"{hub.url}/hub/api/users/{user}/server",
                         json={"user_options": {"profile": profile}},
                         headers={"Authorization": f"token {token}"}, timeout=60)


def server(hub: LocalHub, user: str, token: str) -> dict | None:
    model = requests.get(f"{hub.url}/hub/api/users/{user}", headers={"Authorization": f"token {token}"},
                         timeout=10).json()
    return model["servers"].get("")


def ready(hub: LocalHub, user: str, token: str) -> dict:
    return wait_for(lambda: (s := server(hub, user, token)) and s.get("ready") and s, 60,
                    f"{user}'s server to be ready", interval=0.25)


def audit_culls(hub: LocalHub) -> list[dict]:
    """The culls in the classhub store's audit log (what an admin's report reads)."""
    from sqlalchemy import select

    from hub_ext import store

    sessions = store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}")
    with sessions() as session:
        rows = session.scalars(select(store.AuditLog).where(store.AuditLog.action == "server_culled")).all()
        out = [{**r.details, "at": r.at} for r in rows]
    sessions.kw["bind"].dispose()
    return out


def culler_processes(hub: LocalHub) -> list[psutil.Process]:
    """The hub's ``python -m culler`` service processes."""
    found = []
    for p in hub.descendants():
        try:
            if p.cmdline()[1:3] == ["-m", "culler"] and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def metrics(hub: LocalHub, admin_token: str) -> str:
    r = requests.get(f"{hub.url}/services/classhub/metrics",
                     headers={"Authorization": f"token {admin_token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def test_idle_gpu_server_is_warned_then_culled_and_persistent_server_is_kept(culled_hub):
    hub = culled_hub
    admin = HubSession(hub, "admin")
    admin_token = admin.new_token()
    student = HubSession(hub, "student1")
    token = student.new_token()
    teacher_token = HubSession(hub, "teacher1").new_token()

    # An admin marks teacher1's default server persistent (a demo site) before it starts.
    r = api(hub, "PUT", "culling/persistent", admin_token,
            json={"user": "teacher1", "server_name": "", "persistent": True, "note": "open day demo"})
    assert r.status_code == 200, r.text
    assert api(hub, "PUT", "culling/persistent", token, json={"user": "student1"}).status_code == 403

    assert spawn(hub, "teacher1", teacher_token, "cpu").status_code in (201, 202)
    ready(hub, "teacher1", teacher_token)
    assert spawn(hub, "student1", token, GPU).status_code in (201, 202)
    ready(hub, "student1", token)

    # 5 min 10 s later: the warning comes first, in the API (for JupyterLab) and on the hub's
    # home page.
    move_clock(hub, 310)
    warning = wait_for(lambda: api(hub, "GET", "culling/me", token).json()["warnings"], 30,
                       "a cull warning for student1")[0]
    assert warning["server_name"] == "" and warning["seconds_left"] > 0
    assert "idle" in warning["message"]
    # the hub's banner reads the warnings every 2 s, off its event loop (hub_ext.hubside)
    wait_for(lambda: "will be stopped in about" in (text := student.get("/hub/home").text)
             and "classhub-cull-warning" in text, 30, "the warning on student1's hub home page")

    # The culler dies (the hub starts it again): the warning, kept in the store, still stands.
    (culler,) = culler_processes(hub)
    culler.kill()
    # The hub notices a dead service at its next poll (every 30 s, +10% jitter), then starts it.
    wait_for(lambda: [p for p in culler_processes(hub) if p.pid != culler.pid], 90,
             "the hub to restart the culler", interval=1)  # a scan of the hub's processes a second
    again = api(hub, "GET", "culling/me", token).json()["warnings"]
    assert not again or again[0]["warned_at"] == warning["warned_at"]

    # 6 min 40 s: warned only 90 s ago: still running, still warned.
    move_clock(hub, 400)
    assert server(hub, "student1", token)["ready"]
    assert [w["warned_at"] for w in api(hub, "GET", "culling/me", token).json()["warnings"]] == [
        warning["warned_at"]]

    # 10 min 20 s: the cull, no earlier than the 5 min warning time after the warning.
    move_clock(hub, 620)
    wait_for(lambda: server(hub, "student1", token) is None, 30, "student1's idle GPU server to be culled")
    assert api(hub, "GET", "culling/me", token).json()["warnings"] == []
    (cull,) = [c for c in audit_culls(hub) if c["user"] == "student1"]
    warned_at = datetime.fromisoformat(warning["warned_at"])
    assert (cull["at"] - warned_at).total_seconds() >= 300
    assert cull["reason"] == "idle" and cull["resource"] == "nvidia.com/gpu" and cull["kind"] == "gpu"
    text = metrics(hub, admin_token)
    assert 'classhub_culls_total{reason="idle",resource="nvidia.com/gpu"} 1.0' in text
    assert "classhub_culler_gpu_hours_reclaimed_total" in text

    # The persistent server, idle just as long, is still there, without any warning.
    assert server(hub, "teacher1", teacher_token)["ready"]
    me = api(hub, "GET", "culling/me", teacher_token).json()
    assert me["warnings"] == [] and me["persistent"] == [""]
    assert not [c for c in audit_culls(hub) if c["user"] == "teacher1"]
    move_clock(hub, 0)
    requests.delete(f"{hub.url}/hub/api/users/teacher1/server",
                    headers={"Authorization": f"token {teacher_token}"}, timeout=60)
    wait_for(lambda: server(hub, "teacher1", teacher_token) is None, 30, "teacher1's server to stop")


def execute(hub: LocalHub, user: str, token: str, kernel_id: str, code: str) -> None:
    """Send ``code`` to the kernel over its websocket, wait until it is busy, then disconnect."""
    url = f"{hub.url.replace('http', 'ws')}/user/{user}/api/kernels/{kernel_id}/channels"
    ws = websocket.create_connection(url, header=[f"Authorization: token {token}"], timeout=30)
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": user, "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3",
                   "date": datetime.now(timezone.utc).isoformat()},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = json.loads(ws.recv())
        if (msg.get("msg_type") == "status" and msg["parent_header"].get("msg_id") == msg_id
                and msg["content"]["execution_state"] == "busy"):
            break
    ws.close()  # nobody is watching any more


def test_busy_kernel_without_browser_is_not_culled_until_it_finishes(culled_hub, tmp_path):
    hub = culled_hub
    token = HubSession(hub, "student2").new_token()
    headers = {"Authorization": f"token {token}"}
    assert spawn(hub, "student2", token, MIG).status_code in (201, 202)
    ready(hub, "student2", token)
    base = f"{hub.url}/user/student2"
    r = requests.post(f"{base}/api/kernels", headers=headers, json={"name": "python3"}, timeout=60)
    assert r.status_code == 201, r.text
    kernel = r.json()["id"]
    done = tmp_path / "training-done"  # the run ends when the test says so
    execute(hub, "student2", token, kernel,
            f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.1)")

    # The server's own report says so (what the culler asks).
    report = requests.get(f"{base}/api/classhub/activity", headers=headers, timeout=10).json()
    assert report["kernels"] == {"total": 1, "busy": 1} and report["busy"] is True
    assert report["gpu"]["status"] == "unknown"  # no NVML on this machine: never an error
    assert requests.get(f"{base}/api/classhub/activity", timeout=10).status_code in (401, 403)

    # 15 min later, past the 10 min idle timeout and the 5 min warning, with the browser gone:
    # still running, no warning.
    move_clock(hub, 900)
    assert server(hub, "student2", token)["ready"], "a busy kernel's server was culled"
    assert api(hub, "GET", "culling/me", token).json()["warnings"] == []

    # Once the run is over, the server is idle like any other: warned, then culled.
    done.touch()
    wait_for(lambda: api(hub, "GET", "culling/me", token).json()["warnings"], 40, "a warning after the run")
    move_clock(hub, 1210)
    wait_for(lambda: server(hub, "student2", token) is None, 30, "the culled server")
    move_clock(hub, 0)
    (cull,) = [c for c in audit_culls(hub) if c["user"] == "student2"]
    assert cull["reason"] == "idle" and cull["kind"] == "mig"


@pytest.fixture(scope="module")
def pressure_hub(hub_root):
    """GPU servers are never idle long enough for a routine cull, but reclaimable after 5 min."""
    hub = make_hub(hub_root, "culler-pressure", {
        "interval": 600, "pressure_check_interval": 1, "warn_before": 600, "reclaim_after": 300,
        "idle_timeouts": {"gpu": 3600, "mig": 3600, "shared": 3600, "cpu": 3600},
    })
    yield hub
    hub.stop()


def test_gpu_spawn_refused_for_capacity_succeeds_after_one_reclaim(pressure_hub):
    hub = pressure_hub
    holder = HubSession(hub, "student1").new_token()
    waiting = HubSession(hub, "student2").new_token()
    assert spawn(hub, "student1", holder, GPU).status_code in (201, 202)
    ready(hub, "student1", holder)
    move_clock(hub, 310, wait=False)  # 5 min 10 s later: idle past the reclaim threshold

    r = spawn(hub, "student2", waiting, GPU)
    assert r.status_code == 409, r.text
    message = r.json()["message"]
    assert "none free right now" in message
    assert "Capacity is being reclaimed" in message and "retry in about 30 s" in message

    wait_for(lambda: server(hub, "student1", holder) is None, 30, "the idle GPU holder to be reclaimed")
    (cull,) = audit_culls(hub)
    assert cull["reason"] == "reclaim_for_pressure" and cull["resource"] == "nvidia.com/gpu"
    r = wait_for(lambda: (r := spawn(hub, "student2", waiting, GPU)).status_code in (201, 202) and r, 30,
                 "the retried GPU spawn to be accepted")
    ready(hub, "student2", waiting)
    requests.delete(f"{hub.url}/hub/api/users/student2/server",
                    headers={"Authorization": f"token {waiting}"}, timeout=60)
