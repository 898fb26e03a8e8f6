"""Preemption end to end through a real hub in local mode (``classhub local``, 3 injected GPUs).

The story a student notices: demo101 is guaranteed 2 GPUs (``c.ClasshubJobs.course_shares``),
night101 nothing. At night owl of night101 trains on 2 idle GPUs (borrowed) and queues a small
job; student2 of demo101 has a GPU notebook open. When student1 of demo101 submits a 1-GPU job,
owl's job gets SIGTERM, saves its checkpoint within the grace period (``c.ClasshubJobs.grace``),
goes back to the queue ahead of owl's later job, and its events say why; student1's job starts;
the notebook is never touched (the culler is asked for the missing GPU instead). When student1's
job ends, owl's job starts again before the later one and resumes from its checkpoint.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
import requests

from tests.hubproc import HubSession, api, hub_with_config, wait_for

pytestmark = pytest.mark.hub

INVENTORY = Path(__file__).parent / "data" / "jobs" / "three-h200.txt"
GPU_PROFILE = "nvidia-h200-gpu"
GRACE = 3
CONFIG = f"""
c.ClasshubLocalSpawner.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]
c.ClasshubLocalSpawner.use_nvml = False
c.ClasshubLocalSpawner.profiles = [
    {{"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True}},
    {{"slug": {GPU_PROFILE!r}, "display_name": "Whole H200", "kind": "gpu", "gpu_product": "NVIDIA-H200"}},
]
c.ClasshubJobs.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]
c.ClasshubJobs.use_nvml = False
c.ClasshubJobs.interval = 0.5
c.ClasshubJobs.grace = {GRACE}
c.ClasshubJobs.course_shares = {{"demo101": {{"nvidia.com/gpu": 2}}}}
"""
#: Trains until SIGTERM, then saves a checkpoint and exits; started again, resumes from it.
TRAIN = [sys.executable, "-c", textwrap.dedent("""
    import pathlib, signal, sys, time
    ckpt = pathlib.Path("borrow.ckpt")
    if ckpt.exists():
        print("resumed from", ckpt.read_text(), flush=True)
        sys.exit(0)
    def save(*_):
        ckpt.write_text("step 42")
        print("SIGTERM: checkpoint saved", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, save)
    print("training on borrowed GPUs", flush=True)
    while True:
        time.sleep(0.1)
""")]
#: Runs until the test drops a file named `release` in the home.
UNTIL_RELEASED = [sys.executable, "-c", "import pathlib, time\n"
                  "while not pathlib.Path('release').exists():\n    time.sleep(0.1)"]


@pytest.fixture(scope="module")
def hub(hub_root):
    hub = hub_with_config(hub_root, "preemption", CONFIG)
    yield hub
    hub.stop()


def job(hub, token: str, job_id: str) -> dict:
    r = api(hub, "GET", f"jobs/{job_id}", token)
    assert r.status_code == 200, r.text
    return r.json()


def submit(hub, token: str, body: dict) -> str:
    r = api(hub, "POST", "jobs", token, json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_borrowing_job_is_preempted_requeued_in_its_place_and_resumes(hub):
    admin = HubSession(hub, "admin").new_token()
    assert api(hub, "POST", "courses", admin, json={"name": "night101"}).status_code == 201
    r = api(hub, "PUT", "courses/night101/members", admin,
            json={"add": [{"username": "owl", "role": "student"}]})
    assert r.status_code == 200, r.text
    owl, student1, student2 = (HubSession(hub, u).new_token() for u in ("owl", "student1", "student2"))

    # student2's GPU notebook: one of the three GPUs, counted in demo101's share
    r = requests.post(f"{hub.url}/hub/api/users/student2/server",
                      headers={"Authorization": f"token {student2}"},
                      json={"user_options": {"profile": GPU_PROFILE}}, timeout=60)
    assert r.status_code in (201, 202), r.text

    def notebook_ready() -> bool:
        model = requests.get(f"{hub.url}/hub/api/users/student2",
                             headers={"Authorization": f"token {admin}"}, timeout=10).json()
        return bool(model["servers"].get("", {}).get("ready"))

    wait_for(notebook_ready, 90, "student2's GPU notebook")

    # owl borrows the two idle GPUs, and queues a small job behind
    borrower = submit(hub, owl, {"name": "borrow", "command": TRAIN, "resources": {"nvidia.com/gpu": 2}})
    running = wait_for(lambda: (j := job(hub, owl, borrower))["state"] == "running" and j, 60,
                       "owl's job to run")
    assert any("(on borrowed capacity)" in e["message"] for e in running["events"]), running["events"]
    later = submit(hub, owl, {"name": "small", "command": [sys.executable, "-c", "print('small job done')"],
                              "resources": {"nvidia.com/gpu": 1}})
    wait_for(lambda: job(hub, owl, later)["reason_code"], 30, "owl's second job to wait")

    # student1 of demo101, within its share, needs a GPU back
    mine = submit(hub, student1, {"name": "mine", "command": UNTIL_RELEASED, "max_runtime": 600,
                                  "resources": {"nvidia.com/gpu": 1}})
    wait_for(lambda: job(hub, student1, mine)["state"] == "running", 60, "student1's job to start")
    requeued = wait_for(lambda: (j := job(hub, owl, borrower))["state"] == "queued" and j["preemptions"] == 1
                        and j["queue_position"] == 1 and j, 30, "owl's job back in the queue, first")
    messages = [e["message"] for e in requeued["events"]]
    why = next(m for m in messages if m.startswith("preempted: "))
    assert "beyond course night101's guaranteed share" in why and f"job {mine}" in why, why
    assert "course demo101, within its share" in why and f"{GRACE} s after SIGTERM" in why, why
    assert messages[-2:] == ["preempted; every replica stopped", "back in the queue after preemption"]
    home = hub.data_dir / "homes"
    assert (home / "owl" / "borrow.ckpt").read_text() == "step 42"  # the grace let it checkpoint
    assert job(hub, owl, later)["queue_position"] == 2  # submitted later: it stays behind
    assert notebook_ready()  # notebooks are never preempted
    # the culler was asked to reclaim idle notebooks' GPUs for the jobs next in line (none was
    # idle long enough: the notebook stays)
    wait_for(lambda: re.search(r"ClasshubCuller\] cycle: .* pressure \{'nvidia.com/gpu': \d+\}",
                               hub.log_path.read_text(errors="replace")), 30, "the culler's pressure cycle")
    assert notebook_ready()

    # student1's job ends: owl's job starts again, before the later one, and resumes
    (home / "student1" / "release").write_text("")
    assert wait_for(lambda: (j := job(hub, student1, mine))["state"] in ("succeeded", "failed") and j,
                    60, "student1's job to end")["state"] == "succeeded"
    done = wait_for(lambda: (j := job(hub, owl, borrower))["state"] in ("succeeded", "failed") and j,
                    60, "owl's job to end")
    assert done["state"] == "succeeded", done["events"]
    log = api(hub, "GET", f"jobs/{borrower}/logs?index=0", owl).text
    assert "resumed from step 42" in log, log
    small = wait_for(lambda: (j := job(hub, owl, later))["state"] == "succeeded" and j, 60, "the small job")
    assert small["started_at"] > done["started_at"]
