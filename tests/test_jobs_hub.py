"""Distributed jobs through a real hub (``classhub local``) with an injected 3-GPU inventory.

What a student or teacher would notice: a 2-replica job submitted through the API meets at its
master and ends succeeded, its logs readable per replica; a job by profile gets that profile's
GPU per replica; a 3-GPU job waits while a notebook
holds one of the 3 GPUs (no replica runs), says why and where it stands, and starts when the
notebook stops; cancel leaves no process; a job beyond the course quota is refused with a
sentence; a student never sees another student's job, the course's TA and teacher do, and
only the owner, the teacher and admins cancel.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from hub_ext.backends.local.jobs import job_processes
from tests.hubproc import HubSession, api, hub_with_config, start_server, traits, wait_for

pytestmark = pytest.mark.hub

DATA = Path(__file__).parent / "data" / "jobs"
INVENTORY = DATA / "three-h200.txt"
RENDEZVOUS = DATA / "rendezvous.py"
GPU_PROFILE = "nvidia-h200-gpu"


CONFIG = f"""
c.ClasshubLocalSpawner.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]
c.ClasshubLocalSpawner.use_nvml = False
c.ClasshubLocalSpawner.profiles = [
    {{"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True}},
    {{"slug": {GPU_PROFILE!r}, "display_name": "Whole H200", "kind": "gpu", "gpu_product": "NVIDIA-H200",
     "cpu_guarantee": "500m", "cpu_limit": "2", "mem_guarantee": "1Gi", "mem_limit": "4Gi"}},
]
"""
#: The service discovers the same GPUs as the spawner; jobs cycle fast and stop fast in tests.
JOBS = {"ClasshubJobs": {"gpu_discovery_command": ["cat", str(INVENTORY)], "use_nvml": False,
                         "interval": 0.5, "grace": 2}}


@pytest.fixture(scope="module")
def hub(hub_root):
    hub = hub_with_config(hub_root, "jobs", CONFIG + traits(JOBS))
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str]:
    return {u: HubSession(hub, u).new_token() for u in ("admin", "teacher1", "ta1", "student1", "student2")}


def command(*args: str) -> list[str]:
    return [sys.executable, str(RENDEZVOUS), *args]


def job(hub, token: str, job_id: str) -> dict:
    r = api(hub, "GET", f"jobs/{job_id}", token)
    assert r.status_code == 200, r.text
    return r.json()


def ended(hub, token, job_id, timeout=90) -> dict:
    return wait_for(lambda: (j := job(hub, token, job_id))["state"] in ("succeeded", "failed", "cancelled")
                    and j, timeout, f"job {job_id} to end", interval=0.25)


def test_a_two_replica_job_meets_at_its_master_and_its_logs_show_the_ranks(hub, tokens):
    body = {"id": "ddp-1", "name": "ddp", "command": command(), "replicas": 2,
            "resources": {"nvidia.com/gpu": 1}}
    r = api(hub, "POST", "jobs", tokens["student1"], json=body)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert r.json()["state"] == "queued" and r.json()["course"] == "demo101"
    again = api(hub, "POST", "jobs", tokens["student1"], json=body)
    assert again.status_code == 200 and again.json()["id"] == job_id  # idempotent
    done = ended(hub, tokens["student1"], job_id)
    assert done["state"] == "succeeded", done["events"]
    assert [r["state"] for r in done["replicas"]] == ["succeeded", "succeeded"]
    assert [r["rank"] for r in done["replicas"]] == [0, 1]
    assert len({r["gpus"][0] for r in done["replicas"]}) == 2
    log0 = api(hub, "GET", f"jobs/{job_id}/logs?role=worker&index=0", tokens["student1"])
    assert log0.status_code == 200 and "rank 0 of 2 ready; ranks seen [0, 1]" in log0.text
    log1 = api(hub, "GET", f"jobs/{job_id}/logs?index=1&follow=1", tokens["student1"])
    assert "rank 1 of 2 ready" in log1.text
    # the log is the service's (a 0600 file in its 0700 folder), not a file in the home
    kept = hub.data_dir / "jobs" / job_id
    assert (kept / "worker-0.log").stat().st_mode & 0o777 == 0o600
    assert (kept.stat().st_mode & 0o777, kept.parent.stat().st_mode & 0o777) == (0o700, 0o700)
    assert not (hub.data_dir / "homes" / "student1" / ".classhub" / "jobs").exists()


def test_a_job_by_profile_gives_each_replica_what_a_notebook_of_that_profile_gets(hub, tokens):
    student = tokens["student1"]
    r = api(hub, "POST", "jobs", student, json={"name": "by-profile", "command": command(),
                                                "replicas": 2, "profile": GPU_PROFILE})
    assert r.status_code == 201, r.text
    assert r.json()["profile"] == "Whole H200"
    assert r.json()["roles"][0]["resources"] == {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    done = ended(hub, student, r.json()["id"])
    assert done["state"] == "succeeded", done["events"]
    assert "(profile Whole H200)" in done["events"][0]["message"]
    gpus = [replica["gpus"] for replica in done["replicas"]]
    assert [len(g) for g in gpus] == [1, 1] and gpus[0] != gpus[1]
    log = api(hub, "GET", f"jobs/{done['id']}/logs?index=1", student).text
    assert f"gpus {gpus[1][0]}" in log  # CUDA_VISIBLE_DEVICES: the one GPU of its profile
    r = api(hub, "POST", "jobs", student, json={"command": ["true"], "profile": "h100"})
    assert r.status_code == 400
    assert f"choose one of: cpu, {GPU_PROFILE}" in r.json()["message"], r.text
    r = api(hub, "POST", "jobs", student, json={"command": ["true"], "profile": GPU_PROFILE,
                                                "resources": {"cpu": "1"}})
    assert r.status_code == 400 and "either profile or resources" in r.json()["message"], r.text


def test_a_three_gpu_job_waits_for_a_notebooks_gpu_then_starts(hub, tokens):
    admin = tokens["admin"]
    r = requests.post(f"{hub.url}/hub/api/users/student2/server",
                      headers={"Authorization": f"token {tokens['student2']}"},
                      json={"user_options": {"profile": GPU_PROFILE}}, timeout=60)
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: requests.get(f"{hub.url}/hub/api/users/student2",
                                  headers={"Authorization": f"token {admin}"}, timeout=10)
             .json()["servers"].get("", {}).get("ready"), 90, "student2's GPU notebook")
    r = api(hub, "POST", "jobs", tokens["student1"],
            json={"name": "big", "command": command(), "replicas": 3, "resources": {"nvidia.com/gpu": 1}})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    waiting = wait_for(lambda: (j := job(hub, tokens["student1"], job_id))["reason_code"] and j, 30,
                       "a reason")
    assert waiting["state"] == "queued" and waiting["reason_code"] == "capacity"
    assert "nvidia.com/gpu" in waiting["reason"] and "1st in demo101's queue" in waiting["reason"]
    assert waiting["queue_position"] == 1 and waiting["replicas"] == []
    assert job_processes(job_id) == []  # no replica started: all or nothing
    r = requests.delete(f"{hub.url}/hub/api/users/student2/server",
                        headers={"Authorization": f"token {tokens['student2']}"}, timeout=60)
    assert r.status_code in (202, 204)
    done = ended(hub, tokens["student1"], job_id)
    assert done["state"] == "succeeded", done["events"]
    assert len({r["gpus"][0] for r in done["replicas"]}) == 3


def test_cancel_stops_every_replica_and_leaves_no_process(hub, tokens):
    r = api(hub, "POST", "jobs", tokens["student1"],
            json={"name": "long", "command": command("600"), "replicas": 2, "resources": {"cpu": "1"}})
    job_id = r.json()["id"]
    wait_for(lambda: job(hub, tokens["student1"], job_id)["state"] == "running", 60, "running")
    assert len(job_processes(job_id)) >= 2
    # The course cannot be deleted from under a running job (its processes would be orphaned).
    gone = api(hub, "DELETE", "courses/demo101", tokens["admin"])
    assert gone.status_code == 409 and f"job:{job_id}" in gone.json()["message"], gone.text
    # Another student neither sees nor cancels it; the TA sees it; the teacher may cancel it.
    assert api(hub, "GET", f"jobs/{job_id}", tokens["student2"]).status_code == 404
    assert api(hub, "POST", f"jobs/{job_id}/cancel", tokens["student2"]).status_code == 404
    assert api(hub, "GET", f"jobs/{job_id}", tokens["ta1"]).status_code == 200
    ta_cancel = api(hub, "POST", f"jobs/{job_id}/cancel", tokens["ta1"])
    assert ta_cancel.status_code == 403 and "teachers of demo101" in ta_cancel.json()["message"]
    queue = api(hub, "GET", "jobs?course=demo101&state=running", tokens["ta1"]).json()
    assert job_id in [j["id"] for j in queue["jobs"]]
    other = api(hub, "GET", "jobs?course=demo101", tokens["student2"])
    assert other.status_code == 403 and "job queue of demo101" in other.json()["message"]
    assert api(hub, "GET", "jobs", tokens["student2"]).json()["jobs"] == []  # only their own
    r = api(hub, "POST", f"jobs/{job_id}/cancel", tokens["teacher1"])
    assert r.status_code == 202, r.text
    done = ended(hub, tokens["student1"], job_id, timeout=30)
    assert done["state"] == "cancelled"
    assert "cancelled by teacher1" in done["events"][-1]["message"]
    assert job_processes(job_id) == []


def gpu_free_now(session: HubSession) -> str:
    """What the spawn form says of the whole-GPU profile, e.g. "1 free now"."""
    html = session.get(f"/hub/spawn/{session.username}").text
    found = re.search(rf'data-profile="{GPU_PROFILE}".*?(\d+ free now)', html, re.S)
    assert found, html[:3000]
    return found.group(1)


def test_a_running_jobs_gpus_show_as_taken_in_the_spawn_form(hub, tokens):
    student2 = HubSession(hub, "student2")
    assert gpu_free_now(student2) == "3 free now"
    r = api(hub, "POST", "jobs", tokens["student1"],
            json={"name": "holds-two", "command": command("600"), "replicas": 2,
                  "resources": {"nvidia.com/gpu": 1}})
    job_id = r.json()["id"]
    wait_for(lambda: job(hub, tokens["student1"], job_id)["state"] == "running", 60, "running")
    assert gpu_free_now(student2) == "1 free now"
    assert api(hub, "POST", f"jobs/{job_id}/cancel", tokens["student1"]).status_code == 202
    ended(hub, tokens["student1"], job_id, timeout=30)
    wait_for(lambda: gpu_free_now(student2) == "3 free now", 30, "the job's GPUs free again")


def test_bad_submissions_get_a_sentence(hub, tokens):
    student = tokens["student1"]
    r = api(hub, "POST", "jobs", student, json={"command": "python train.py"})
    assert r.status_code == 400 and "command must be a list" in r.json()["message"]
    r = api(hub, "POST", "jobs", student, json={"command": ["true"], "replicas": 4,
                                                "resources": {"nvidia.com/gpu": 1}})
    assert r.status_code == 400 and "can never start" in r.json()["message"]
    r = api(hub, "POST", "jobs", student, json={"command": ["true"], "priority": 5})
    assert r.status_code == 403 and "priority" in r.json()["message"]
    r = api(hub, "POST", "jobs", student, json={"command": ["true"], "course": "bio999"})
    assert r.status_code == 403
    assert api(hub, "POST", "jobs", None, json={"command": ["true"]}).status_code == 401
    r = api(hub, "PUT", "courses/demo101/quota", tokens["admin"],
            json={"resources": {"nvidia.com/gpu": 1}})
    assert r.status_code == 200, r.text
    try:
        r = api(hub, "POST", "jobs", student, json={"command": ["true"], "replicas": 2,
                                                    "resources": {"nvidia.com/gpu": 1}})
        assert r.status_code == 400
        assert "your course may use at most 1 nvidia.com/gpu" in r.json()["message"], r.text
    finally:
        api(hub, "PUT", "courses/demo101/quota", tokens["admin"], json={"resources": {}})


def test_metrics_count_jobs_per_course(hub, tokens):
    text = requests.get(f"{hub.url}/services/classhub/metrics",
                        headers={"Authorization": f"token {tokens['admin']}"}, timeout=30).text
    for name in ("classhub_job_queue_length{course=\"demo101\"}", "classhub_job_wait_seconds_bucket",
                 "classhub_job_gpu_hours_total{course=\"demo101\"}",
                 "classhub_job_admissions_total{course=\"demo101\"",
                 "classhub_job_preemptions_total{course=\"demo101\""):
        assert name in text, name


def test_the_cli_in_a_terminal_of_the_users_server_needs_no_setup(hub, tokens):
    """A terminal of the server inherits the server's environment: its token and the service's
    address. `classhub job` run with exactly that environment, in a folder of the home."""
    server = start_server(hub, "student1", tokens["student1"])
    admin = tokens["admin"]
    state = requests.get(f"{hub.url}/hub/api/users/student1", headers={"Authorization": f"token {admin}"},
                         timeout=10).json()["servers"][""]["state"]
    raw = Path(f"/proc/{state['pid']}/environ").read_bytes().split(b"\0")
    env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    assert server["ready"] and "CLASSHUB_SERVICE_API_URL" in env
    lab = Path(env["HOME"]) / "lab1"
    lab.mkdir(exist_ok=True)
    (lab / "train.py").write_text(RENDEZVOUS.read_text())
    cli = [sys.executable, "-m", "hub_ext", "job"]

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], env=env, cwd=lab, capture_output=True, text=True,
                              timeout=timeout)

    done = run("submit", "--name", "cli", "--replicas", "2", "--wait", "--", "python", "train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.split(":", 1)[0]
    assert "queued in demo101 (2 x 1 cpu)" in done.stdout and ": succeeded" in done.stdout
    logs = run("logs", job_id)
    assert "rank 0 of 2 ready; ranks seen [0, 1]" in logs.stdout
    assert job_id in run("list").stdout
    show = run("show", job_id)
    assert "worker-1 (rank 1): succeeded" in show.stdout and "admitted: all 2 replicas" in show.stdout
    outside = subprocess.run([*cli, "list"], env={"PATH": env["PATH"]}, capture_output=True, text=True,
                             timeout=60)
    assert outside.returncode == 1 and "--url" in outside.stderr
