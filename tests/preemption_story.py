"""The preemption story both run modes tell (tests/test_preemption_hub.py: local mode,
tests/test_preemption_kube_hub.py: Kubernetes mode on the fake cluster).

A course (`mine`) is guaranteed 2 GPUs (``c.ClasshubJobs.course_shares``) of 3; night101 has no
share. A student of `mine` (student2) has a GPU notebook open. At night owl of night101 trains on
the 2 idle GPUs (borrowed) and queues a small job behind. When student1 of `mine` submits a 1-GPU
job, owl's job gets SIGTERM, saves its checkpoint within the grace period
(``c.ClasshubJobs.grace``), goes back to the queue ahead of owl's later job, and its events say
why; student1's job starts; the notebook is never touched (the culler is asked for the missing GPU
instead). When student1's job ends, owl's job starts again before the later one and resumes from
its checkpoint. Every wait polls with a deadline.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import requests

from tests.hubproc import api, wait_for

GPU = "nvidia.com/gpu"
#: Trains until SIGTERM, then saves a checkpoint ($CKPT) and exits; started again, resumes.
TRAIN = [sys.executable, "-c", textwrap.dedent("""
    import os, pathlib, signal, sys, time
    ckpt = pathlib.Path(os.environ["CKPT"])
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
#: Runs until the test drops the file $RELEASE.
UNTIL_RELEASED = [sys.executable, "-c", "import os, pathlib, time\n"
                  "while not pathlib.Path(os.environ['RELEASE']).exists():\n    time.sleep(0.1)"]


def job(hub, token: str, job_id: str) -> dict:
    r = api(hub, "GET", f"jobs/{job_id}", token)
    assert r.status_code == 200, r.text
    return r.json()


def submit(hub, token: str, body: dict) -> str:
    r = api(hub, "POST", "jobs", token, json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def until(hub, token: str, job_id: str, predicate: Callable[[dict], bool], timeout: float, what: str) -> dict:
    """The job once `predicate(job)` holds, polled with a deadline; the job's state, reason and
    events in the failure."""
    seen: list[dict] = []

    def check() -> dict | None:
        seen[:] = [job(hub, token, job_id)]
        return seen[0] if predicate(seen[0]) else None

    try:
        return wait_for(check, timeout, what)
    except AssertionError as e:
        last = seen[0] if seen else {}
        raise AssertionError(f"{e}: {last.get('state')}, {last.get('reason')!r}, "
                             f"{[ev['message'] for ev in last.get('events', [])]}") from None


def notebook_ready(hub, admin: str, user: str) -> bool:
    model = requests.get(f"{hub.url}/hub/api/users/{user}", headers={"Authorization": f"token {admin}"},
                         timeout=10).json()
    return bool(model["servers"].get("", {}).get("ready"))


def start_gpu_notebook(hub, admin: str, token: str, user: str, profile: str) -> None:
    r = requests.post(f"{hub.url}/hub/api/users/{user}/server", headers={"Authorization": f"token {token}"},
                      json={"user_options": {"profile": profile}}, timeout=60)
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: notebook_ready(hub, admin, user), 90, f"{user}'s GPU notebook")


def tell(hub, tokens: dict[str, str], mine: str, grace: float, scratch: Path,
         notebook_kept: Callable[[], bool]) -> None:
    """The story (module docstring); `scratch`: a folder every job's process may write."""
    owl, student1 = tokens["owl"], tokens["student1"]
    ckpt, release = scratch / "borrow.ckpt", scratch / "release"
    env = {"CKPT": str(ckpt), "RELEASE": str(release)}

    # owl borrows the two idle GPUs, and queues a small job behind
    borrower = submit(hub, owl, {"name": "borrow", "command": TRAIN, "env": env,
                                 "resources": {GPU: 2, "cpu": "100m"}})
    running = until(hub, owl, borrower, lambda j: j["state"] == "running", 90, "owl's job to run")
    assert any("(on borrowed capacity)" in e["message"] for e in running["events"]), running["events"]
    later = submit(hub, owl, {"name": "small", "command": [sys.executable, "-c", "print('small job done')"],
                              "resources": {GPU: 1, "cpu": "100m"}})
    until(hub, owl, later, lambda j: bool(j["reason_code"]), 30, "owl's second job to wait")

    # student1, within the course's share, needs a GPU back
    claimed = submit(hub, student1, {"name": "mine", "command": UNTIL_RELEASED, "env": env,
                                     "max_runtime": 600, "resources": {GPU: 1, "cpu": "100m"}})
    until(hub, student1, claimed, lambda j: j["state"] == "running", 90, "student1's job to start")
    requeued = until(hub, owl, borrower, lambda j: j["state"] == "queued" and j["preemptions"] == 1
                     and j["queue_position"] == 1, 30, "owl's job back in the queue, first")
    messages = [e["message"] for e in requeued["events"]]
    why = next(m for m in messages if m.startswith("preempted: "))
    assert "beyond course night101's guaranteed share" in why and f"job {claimed}" in why, why
    assert f"course {mine}, within its share" in why and f"{grace:g} s after SIGTERM" in why, why
    assert messages[-2:] == ["preempted; every replica stopped", "back in the queue after preemption"]
    assert ckpt.read_text() == "step 42"  # the grace let it checkpoint
    behind = job(hub, owl, later)
    assert behind["queue_position"] == 2, behind  # submitted later: it stays behind
    assert notebook_kept()  # notebooks are never preempted
    # the culler was asked to reclaim idle notebooks' GPUs for the jobs next in line (none was
    # idle long enough: the notebook stays)
    wait_for(lambda: re.search(r"ClasshubCuller\] cycle: .* pressure \{'nvidia.com/gpu': \d+\}",
                               hub.log_path.read_text(errors="replace")), 30, "the culler's pressure cycle")
    assert notebook_kept()

    # student1's job ends: owl's job starts again, before the later one, and resumes
    release.write_text("")
    ended = until(hub, student1, claimed, lambda j: j["state"] in ("succeeded", "failed"), 60,
                  "student1's job to end")
    assert ended["state"] == "succeeded", ended["events"]
    done = until(hub, owl, borrower, lambda j: j["state"] in ("succeeded", "failed"), 90, "owl's job to end")
    assert done["state"] == "succeeded", done["events"]
    log = api(hub, "GET", f"jobs/{borrower}/logs?index=0", owl).text
    assert "resumed from step 42" in log, log
    small = until(hub, owl, later, lambda j: j["state"] == "succeeded", 90, "the small job")
    assert small["started_at"] > done["started_at"]
