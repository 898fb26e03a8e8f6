"""Local mode with an injected GPU inventory: 2 H200s, one split into 7 MIG 1g.18gb slices.

A real hub hands devices out exclusively through CUDA_VISIBLE_DEVICES, shows how many are free,
refuses what is taken, releases on stop, and rebuilds the assignment after a hub restart.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import requests

from hub_ext.backends.local.gpu_pool import GPUPool
from hub_ext.core.profiles import Catalog, propose_profiles
from tests.hubproc import HubSession, LocalHub, wait_for

pytestmark = pytest.mark.hub

DATA = Path(__file__).parent / "data" / "nvidia-smi"
INVENTORY = DATA / "h200-2gpu-7x1g.txt"
WHOLE_GPU = "GPU-26fc62e2-2a15-5eb8-b8d1-400eaec00de5"
MIG = "mig-1g-18gb"
GPU = "nvidia-h200-gpu"


def test_a_machine_without_gpus_offers_cpu_profiles_only():
    pool = GPUPool(GPUPool.shared(["cat", str(DATA / "no-gpu.txt")], use_nvml=False).inventory)
    assert pool.offered() == {}
    assert [p.slug for p in Catalog.from_config(propose_profiles(pool.offered())).profiles] == ["cpu"]
    missing = GPUPool.shared(["/nonexistent/nvidia-smi", "-L"], use_nvml=False)
    assert missing.offered() == {}


@pytest.fixture(scope="module")
def gpu_hub(hub_root):
    data_dir = hub_root / "gpus"
    data_dir.mkdir()
    (data_dir / "jupyterhub_config.py").write_text(
        f"c.ClasshubLocalSpawner.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]\n"
        "c.ClasshubLocalSpawner.use_nvml = False\n"
        "c.JupyterHub.cleanup_servers = False  # servers survive a hub restart\n"
    )
    hub = LocalHub(data_dir=data_dir).start()
    yield hub
    admin = HubSession(hub, "admin").new_token() if hub.proc.poll() is None else None
    if admin:
        for user in ("student1", "student2", "teacher1", "ta1"):
            requests.delete(f"{hub.url}/hub/api/users/{user}/server",
                            headers={"Authorization": f"token {admin}"}, timeout=30)
    hub.stop()


def server_state(hub, admin_token, user):
    model = requests.get(f"{hub.url}/hub/api/users/{user}",
                         headers={"Authorization": f"token {admin_token}"}, timeout=10).json()
    return model["servers"].get("", {}).get("state") or {}


def process_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def form(session: HubSession) -> str:
    r = session.get(f"/hub/spawn/{session.username}")
    assert r.status_code == 200
    return r.text


def free_counts(html: str) -> dict[str, str]:
    found = re.findall(r'data-profile="([a-z0-9-]+)".*?class="classhub-free">([^<]*)<', html, re.S)
    return dict(found)


def spawn(hub, user, token, options):
    return requests.post(f"{hub.url}/hub/api/users/{user}/server",
                         headers={"Authorization": f"token {token}"},
                         json={"user_options": options}, timeout=60)


def test_exclusive_assignment_release_and_restart(gpu_hub):
    hub = gpu_hub
    admin = HubSession(hub, "admin").new_token()
    sessions = {u: HubSession(hub, u) for u in ("student1", "student2", "teacher1")}
    tokens = {u: s.new_token() for u, s in sessions.items()}

    counts = free_counts(form(sessions["student1"]))
    assert counts == {"cpu": "available", GPU: "1 free now", MIG: "7 free now"}

    r = spawn(hub, "student1", tokens["student1"], {"profile": MIG})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: server_state(hub, admin, "student1").get("pid"), 60, "student1's server", interval=0.25)
    state1 = server_state(hub, admin, "student1")
    mig_uuid = state1["gpu_uuids"][0]
    assert mig_uuid.startswith("MIG-")
    wait_for(lambda: process_env(state1["pid"]).get("CUDA_VISIBLE_DEVICES") == mig_uuid, 10,
             "the slice in the server's environment")

    r = spawn(hub, "student2", tokens["student2"], {"profile": GPU})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: server_state(hub, admin, "student2").get("pid"), 60, "student2's server", interval=0.25)
    state2 = server_state(hub, admin, "student2")
    assert state2["gpu_uuids"] == [WHOLE_GPU]
    assert process_env(state2["pid"])["CUDA_VISIBLE_DEVICES"] == WHOLE_GPU

    # The whole GPU is taken: the form disables it with a reason, the API refuses it.
    html = form(sessions["teacher1"])
    assert free_counts(html) == {"cpu": "available", GPU: "0 free now", MIG: "6 free now"}
    assert "none free right now" in html
    r = spawn(hub, "teacher1", tokens["teacher1"], {"profile": GPU})
    assert r.status_code == 409, r.text
    assert "none free right now" in r.json()["message"]

    # Stopping student2 gives the GPU back.
    r = requests.delete(f"{hub.url}/hub/api/users/student2/server",
                        headers={"Authorization": f"token {tokens['student2']}"}, timeout=60)
    assert r.status_code in (202, 204)
    wait_for(lambda: "pid" not in server_state(hub, admin, "student2"), 30, "student2 to stop")
    assert free_counts(form(sessions["teacher1"]))[GPU] == "1 free now"

    # Hub restart: student1's server keeps running and keeps its slice.
    assert not hub.stop(keep_servers=True).survivors
    assert os.path.exists(f"/proc/{state1['pid']}")
    hub.start()
    teacher = HubSession(hub, "teacher1")
    assert free_counts(form(teacher)) == {"cpu": "available", GPU: "1 free now", MIG: "6 free now"}

    # A server that died while the hub was down is found dead after the restart: slice released.
    assert not hub.stop(keep_servers=True).survivors
    os.killpg(state1["pid"], signal.SIGKILL)
    hub.start()
    teacher = HubSession(hub, "teacher1")
    assert free_counts(form(teacher)) == {"cpu": "available", GPU: "1 free now", MIG: "7 free now"}


def test_tampered_rest_spawns_get_400_and_start_nothing(gpu_hub):
    hub = gpu_hub
    session = HubSession(hub, "ta1")
    token = session.new_token()
    for options, message in [
        ({"profile": "no-such-profile"}, "not available to you"),
        ({"profile": MIG, "memory": "-1Gi"}, "must be between"),
        ({"profile": MIG, "memory": "100Ti"}, "must be between"),
        ({"profile": MIG, "cpu": "lots"}, "not a Kubernetes quantity"),
        ({"profile": MIG, "gpus": "8"}, "unknown option"),
        ({"profile": MIG, "image": "$(reboot)"}, "not a container image reference"),
        ({"profile": ["cpu"]}, "must be a string"),
    ]:
        r = spawn(hub, "ta1", token, options)
        assert r.status_code == 400, (options, r.status_code, r.text)
        assert message in r.json()["message"], (options, r.text)
        model = requests.get(f"{hub.url}/hub/api/users/ta1",
                             headers={"Authorization": f"token {token}"}, timeout=10).json()
        assert not model["servers"], f"{options} left a server behind"
    assert free_counts(form(session))[MIG] in ("7 free now", "6 free now")


def test_switching_profile_keeps_the_home_and_rolls_back_a_refused_switch(gpu_hub):
    hub = gpu_hub
    admin = HubSession(hub, "admin").new_token()
    token = HubSession(hub, "student2").new_token()
    headers = {"Authorization": f"token {token}"}
    r = spawn(hub, "student2", token, {"profile": "cpu"})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: server_state(hub, admin, "student2").get("pid"), 60, "student2's server", interval=0.25)
    contents = f"{hub.url}/user/student2/api/contents/notes.txt"
    wait_for(lambda: requests.put(contents, headers=headers, timeout=30,
                                  json={"type": "file", "format": "text", "content": "my notes"}
                                  ).status_code == 201, 30, "saving notes.txt")

    switch = f"{hub.url}/services/classhub/api/users/student2/server/profile"
    r = requests.put(switch, headers=headers, json={"profile": MIG}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["user_options"]["profile"] == MIG
    state = server_state(hub, admin, "student2")
    assert state["gpu_uuids"][0].startswith("MIG-")
    assert process_env(state["pid"])["CUDA_VISIBLE_DEVICES"] == state["gpu_uuids"][0]
    assert requests.get(contents, headers=headers, timeout=30).json()["content"] == "my notes"

    # A refused switch leaves the server as it was, with its slice and its files.
    r = requests.put(switch, headers=headers, json={"profile": "no-such"}, timeout=120)
    assert r.status_code == 400
    assert "not available to you" in r.json()["message"]
    back = server_state(hub, admin, "student2")
    assert back["gpu_uuids"][0].startswith("MIG-")
    assert requests.get(contents, headers=headers, timeout=30).json()["content"] == "my notes"

    # Nobody else may switch student2's server.
    other = HubSession(hub, "student1").new_token()
    r = requests.put(switch, headers={"Authorization": f"token {other}"}, json={"profile": "cpu"},
                     timeout=30)
    assert r.status_code == 403
    requests.delete(f"{hub.url}/hub/api/users/student2/server", headers=headers, timeout=60)
