"""Race-free quotas through a real hub: 50 students of one course ask for a GPU share at once.

The course may use 4 ``nvidia.com/gpu.shared``; the machine has 50. Whatever the timing, exactly
4 servers start and 46 spawns are refused with the course's quota sentence, on sqlite and on
PostgreSQL, round after round; the ledger always agrees with what runs.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from hub_ext import store
from hub_ext.core.quota import parse_limits
from tests.hubproc import HubSession, LocalHub, wait_for
from tests.pg import postgres_server  # noqa: F401 - fixture

STUDENTS = [f"u{i:02d}" for i in range(50)]
COURSE = "gpu101"
ROUNDS = int(os.environ.get("CLASSHUB_QUOTA_ROUNDS", "3"))
INVENTORY = Path(__file__).parent / "data" / "nvidia-smi" / "h200-2gpu-7x1g.txt"
MESSAGE = f"Course {COURSE} uses 4 of its 4 nvidia.com/gpu.shared"

CONFIG = f"""
from hub_ext import demo
c.DemoAuthenticator.accounts = demo.DEMO_ACCOUNTS + {STUDENTS!r}
c.JupyterHub.load_groups = {{{COURSE!r}: {{"users": {STUDENTS!r}}}}}
c.ClasshubLocalSpawner.gpu_discovery_command = ["cat", {str(INVENTORY)!r}]
c.ClasshubLocalSpawner.use_nvml = False
c.ClasshubLocalSpawner.shared_gpus = [1]
c.ClasshubLocalSpawner.shared_replicas = 50
c.ClasshubLocalSpawner.profiles = [
    {{"slug": "share", "kind": "shared", "default": True, "cpu_guarantee": "100m",
      "mem_guarantee": "64Mi", "groups": [{COURSE!r}]}},
]
c.JupyterHub.concurrent_spawn_limit = 0
"""


def seed(db_url: str) -> None:
    now = datetime.now(timezone.utc)
    sessions = store.connect(db_url)
    with sessions.begin() as session:
        course = store.ensure_course(session, COURSE, now)
        for name in STUDENTS:
            store.add_member(session, course, name, "student")
        store.set_course_limits(session, course, parse_limits({"resources": {"nvidia.com/gpu.shared": 4}}),
                                actor="test", now=now)


def active(db_url: str) -> list[str]:
    return sorted(r.key for r in store.Ledger(store.connect(db_url, migrate=False)).active())


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def quota_hub(request, hub_root):
    data_dir = hub_root / f"quota-{request.param}"
    data_dir.mkdir()
    if request.param == "sqlite":
        db_url = f"sqlite:///{data_dir / 'classhub.sqlite'}"
    else:
        db_url = request.getfixturevalue("postgres_server").create_database()
    seed(db_url)
    (data_dir / "jupyterhub_config.py").write_text(CONFIG)
    hub = LocalHub(data_dir=data_dir, extra_args=["--db-url", db_url],
                   # reconcile the ledger quickly after the hub restarts
                   env={"CLASSHUB_RECONCILE_INTERVAL": "1", "CLASSHUB_RECONCILE_GRACE": "2"}).start()
    hub.db_url = db_url
    yield hub
    hub.stop()


def user_server(hub, token, name):
    model = requests.get(f"{hub.url}/hub/api/users/{name}", timeout=10,
                         headers={"Authorization": f"token {token}"}).json()
    return model["servers"].get("")


@pytest.mark.timeout(120 + 45 * ROUNDS)
def test_fifty_concurrent_spawns_admit_exactly_the_quota(quota_hub):
    hub = quota_hub
    token = HubSession(hub, "admin").new_token()
    headers = {"Authorization": f"token {token}"}

    def spawn(name):
        r = requests.post(f"{hub.url}/hub/api/users/{name}/server", headers=headers, timeout=120)
        return name, r.status_code, r.text

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        for round_number in range(ROUNDS):
            results = list(pool.map(spawn, STUDENTS))
            started = sorted(n for n, status, _ in results if status in (201, 202))
            refused = [(n, status, text) for n, status, text in results if status not in (201, 202)]
            assert len(started) == 4, (round_number, started, refused[:3])
            assert len(refused) == 46
            for _, status, text in refused:
                assert status == 403, text
                assert MESSAGE in text, text
            for name in started:
                wait_for(lambda n=name: (user_server(hub, token, n) or {}).get("ready"), 60,
                         f"{name}'s server")
            assert active(hub.db_url) == [f"server:{n}/" for n in started]
            list(pool.map(lambda n: requests.delete(f"{hub.url}/hub/api/users/{n}/server",
                                                    headers=headers, timeout=60), started))
            for name in started:
                wait_for(lambda n=name: user_server(hub, token, n) is None, 60, f"{name} to stop")
            assert active(hub.db_url) == []


def cmdline(p) -> str:
    try:
        return " ".join(p.cmdline())
    except Exception:  # gone or a zombie
        return ""


def test_sigkill_in_the_middle_of_spawns_then_restart_reconciles(quota_hub):
    hub = quota_hub
    token = HubSession(hub, "admin").new_token()
    headers = {"Authorization": f"token {token}"}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=10)
    for name in STUDENTS[:10]:
        pool.submit(requests.post, f"{hub.url}/hub/api/users/{name}/server", headers=headers,
                    timeout=30)
    # Kill the hub and its services (classhub, culler) without warning as soon as spawns hold
    # reservations.
    wait_for(lambda: active(hub.db_url), 30, "the first reservation")
    procs = hub.descendants()
    os.kill(hub.proc.pid, signal.SIGKILL)
    for p in procs:
        if "hub_ext.service" in cmdline(p) or "-m culler" in cmdline(p):
            p.kill()
    hub.proc.wait()
    pool.shutdown(wait=True, cancel_futures=True)
    held_at_kill = active(hub.db_url)
    assert 1 <= len(held_at_kill) <= 4

    hub.start()
    token = HubSession(hub, "admin").new_token()
    headers = {"Authorization": f"token {token}"}

    seen: list = []

    def settled():
        """Each interrupted spawn has ended one way (README, "Courses and quotas"): its server is
        ready (the hub adopted it) or gone, and the ledger holds exactly the ready ones."""
        servers = {n: user_server(hub, token, n) for n in STUDENTS}
        seen[:] = [{n: s for n, s in servers.items() if s is not None}, active(hub.db_url)]
        if any(s is not None and not s.get("ready") for s in servers.values()):
            return None
        running = {f"server:{n}/" for n, s in servers.items() if s is not None}
        return [running] if running == set(active(hub.db_url)) else None  # (truthy when empty)

    try:
        [running] = wait_for(settled, 120, "every interrupted spawn to end and the ledger to match")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen: servers {seen[0]}, ledger {seen[1]}") from None
    assert len(running) <= 4
    # a student whose spawn was lost starts again, and gets the quota the lost spawn held
    retry = next(n for n in STUDENTS[:10] if f"server:{n}/" not in running)
    r = requests.post(f"{hub.url}/hub/api/users/{retry}/server", headers=headers, timeout=60)
    if len(running) == 4:  # every held reservation became a running server: the course is full
        assert r.status_code == 403 and MESSAGE in r.text, r.text
        retried = []
    else:
        assert r.status_code in (201, 202), r.text
        wait_for(lambda: (user_server(hub, token, retry) or {}).get("ready"), 120, f"{retry} ready")
        retried = [retry]
    for name in [*retried, *(k.removeprefix("server:").removesuffix("/") for k in running)]:
        requests.delete(f"{hub.url}/hub/api/users/{name}/server", headers=headers, timeout=60)
    wait_for(lambda: not active(hub.db_url), 60, "every reservation released")
    for p in procs:
        if "jupyterhub.singleuser" in cmdline(p) and p.is_running():
            p.kill()
