"""No blocking work on any event loop (docs/architecture.md, rule 7; issue 29).

A real hub with the classhub service, the culler and the students' servers runs under asyncio's
debug mode with a slow-callback threshold of 50 ms (tests/loopwatch/sitecustomize.py, loaded by
every one of those processes), through a small class start (a course, its members, two students
starting servers, one through the spawn page), a culler cycle that warns and then culls them while
something else holds the database, a template upload, a course data upload, an assignment, a
competition scored on 100000 ids and a job cycle. asyncio logs every callback that ran 50 ms or
more ("Executing <handle> took N seconds"); the watch says where each one was.
The test fails on every slow callback that was classhub's code (hub_ext/, spawner/, culler/).

Why 50 ms: a callback that long is felt by everyone the loop serves (a hub page, a spawn, a health
check answered a tenth of a second late), and a database or file call that waits for something
(a lock, a disk) easily takes that long, while classhub's own computation on the loop stays far
below it. Why this is not flaky on a busy 2-core CI machine: only the callback's own time counts,
not the time its thread waited for a CPU (the kernel's per-thread run-queue wait) nor garbage
collections (hub_ext/heap.py), and only callbacks whose samples mostly stand in classhub's code
(innermost frame that is classhub's or its host's: JupyterHub's, tornado's, KubeSpawner's
own slow work is theirs).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import culler
import hub_ext
import spawner
from hub_ext import store
from tests.hubproc import BUSY_MACHINE, HubSession, LocalHub, api, start_server, traits, wait_for

WATCH = Path(__file__).parent / "loopwatch"
CODE = [str(Path(m.__file__).parent) for m in (hub_ext, spawner, culler)]
SLOW = re.compile(r"Executing (.*) took (\d+\.\d+) seconds")
COURSE = "loops101"


def watched_env(folder: Path, out: Path, code: list[str] = CODE) -> dict[str, str]:
    """The environment that loads the watch (a copy in ``folder``, writing to ``out``) into a
    process and into every Python process it starts."""
    folder.mkdir(exist_ok=True)
    shutil.copy(WATCH / "sitecustomize.py", folder / "sitecustomize.py")
    (folder / "loopwatch.json").write_text(json.dumps({"dir": str(out), "seconds": 0.05, "code": code}))
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "PYTHONASYNCIODEBUG": "1"}


def records(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]


def slow_callbacks(out: Path) -> list[dict]:
    """Every slow callback the watch saw (a process also notes each event loop it made)."""
    return [r for r in records(out) if "wall" in r]


@pytest.mark.unit
def test_the_watch_blames_a_stall_in_classhub_code_and_not_one_in_its_host(tmp_path: Path):
    """The watch itself: a coroutine of "classhub" code that sleeps 200 ms on the loop is
    reported as classhub's, one that calls a host's (here tornado's) stalling code is not."""
    code = tmp_path / "fakeclasshub"
    code.mkdir()
    (code / "blocking.py").write_text("import time\n\nasync def stall():\n    time.sleep(0.2)\n")
    host = tmp_path / "tornado_side.py"
    script = textwrap.dedent(f"""
        import asyncio, sys, time
        sys.path.insert(0, {str(code)!r})
        import blocking
        from tornado.ioloop import PeriodicCallback, IOLoop

        async def main():
            await blocking.stall()
            # tornado's PeriodicCallback._run is the innermost host frame around this lambda's
            # time.sleep (the standard library belongs to its caller): the host's stall
            done = asyncio.Event()
            def tick():
                time.sleep(0.2)
                done.set()
            pc = PeriodicCallback(tick, 10)
            pc.start()
            await done.wait()
            pc.stop()

        asyncio.run(main())
    """)
    host.write_text(script)
    out = tmp_path / "watch"
    out.mkdir()
    env = {**os.environ, **watched_env(tmp_path / "hook", out, [str(code)])}
    run = subprocess.run([sys.executable, str(host)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert len(SLOW.findall(run.stderr)) >= 2, run.stderr  # asyncio's own warnings
    found = slow_callbacks(out)
    ours = [r for r in found if r["classhub"]]
    assert len(ours) == 1 and "blocking.py" in ours[0]["where"] and "stall" in ours[0]["where"], found
    assert any("tornado" in r["where"] and not r["classhub"] for r in found), found


@pytest.fixture(scope="module")
def watch_dir(hub_root: Path) -> Path:
    out = hub_root / "loopwatch"
    out.mkdir()
    return out


@pytest.fixture(scope="module")
def hub(hub_root: Path, watch_dir: Path):
    data = hub_root / "event-loops"
    data.mkdir()
    clock = data / "culler-clock"
    (data / "jupyterhub_config.py").write_text(BUSY_MACHINE + traits({
        "ClasshubJobs": {"interval": 0.5},
        "ClasshubCuller": {"interval": 1, "warn_before": 300, "ask_servers": "never",
                           "clock_file": str(clock),
                           "idle_timeouts": {"gpu": 600, "mig": 600, "shared": 600, "cpu": 600}}}))
    env = watched_env(hub_root / "loopwatch-hook", watch_dir)
    hub = LocalHub(data_dir=data, env=env).start()
    hub.clock = clock
    yield hub
    hub.stop()


def move_clock(hub: LocalHub, seconds: float) -> None:
    """The culler's clock ``seconds`` ahead; returns once a cycle decided at that time."""
    logged = hub.log_path.stat().st_size
    tmp = hub.clock.with_suffix(".tmp")
    tmp.write_text(f"{seconds}\n")
    os.replace(tmp, hub.clock)
    line = f"cycle (clock {seconds:+g}s)".encode()

    def cycled() -> bool:
        with open(hub.log_path, "rb") as log:
            log.seek(logged)
            return line in log.read()

    wait_for(cycled, 90, f"a culler cycle at +{seconds:g}s", interval=0.25)


def hold_the_database(hub: LocalHub, seconds: float) -> threading.Thread:
    """A classhub write (as a spawn's reservation or the service would) holding sqlite's one
    write lock for ``seconds``, in the background."""
    sessions = store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}")
    held = threading.Event()

    def hold() -> None:
        with sessions.begin() as session:
            session.add(store.AuditLog(at=datetime.now(timezone.utc), actor="test", action="holding",
                                       details={}))
            session.flush()
            held.set()
            time.sleep(seconds)  # the hold itself is the scenario: a writer keeping the lock this long

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(30)
    return thread


@pytest.mark.hub
def test_a_class_start_a_cull_a_template_upload_and_a_job_leave_no_slow_callback_in_classhub_code(
        hub: LocalHub, watch_dir: Path):
    tokens = {u: HubSession(hub, u).new_token() for u in ("admin", "teacher1")}
    # a class start: a course, its teacher and students, two servers (one through the spawn page)
    assert api(hub, "POST", "courses", tokens["admin"], json={"name": COURSE}).status_code == 201
    r = api(hub, "PUT", f"courses/{COURSE}/members", tokens["admin"], json={"add": [
        {"username": "teacher1", "role": "teacher"}, {"username": "student1", "role": "student"},
        {"username": "student2", "role": "student"}]})
    assert r.status_code == 200, r.text
    student1, student2 = HubSession(hub, "student1"), HubSession(hub, "student2")
    assert student1.get("/hub/spawn").status_code == 200  # one profile: the page starts it
    start_server(hub, "student2", student2.new_token())
    wait_for(lambda: student1.hub_api("GET", "users/student1").json()["servers"].get("", {}).get("ready"),
             90, "student1's server")
    assert student1.get("/hub/home").status_code == 200

    # a template upload
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for i in range(50):
            data = os.urandom(64 * 1024)
            info = tarfile.TarInfo(f"lab/data-{i}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions?profile=cpu", tokens["teacher1"],
            data=archive.getvalue(), headers={"Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text

    # an assignment: released from that template, a 3 MiB folder submitted, every submission zipped
    due = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    r = api(hub, "POST", f"courses/{COURSE}/assignments", tokens["teacher1"],
            json={"name": "lab1", "template": "lab1", "folder": "lab", "due_at": due})
    assert r.status_code == 201, r.text
    work = hub.data_dir / "homes" / "student2" / "lab"
    work.mkdir(parents=True, exist_ok=True)
    for i in range(50):
        (work / f"data-{i}.bin").write_bytes(os.urandom(64 * 1024))
    r = api(hub, "POST", f"courses/{COURSE}/assignments/lab1/submissions", student2.new_token())
    assert r.status_code == 201 and r.json()["files"] == 50, r.text
    r = api(hub, "GET", f"courses/{COURSE}/assignments/lab1/download", tokens["teacher1"])
    assert r.status_code == 200 and len(r.content) > 50 * 64 * 1024, r.text[:200]

    # a course data upload in two chunks, its listing and the members' home sizes (issue 35)
    data = os.urandom(8 * 1024 * 1024)
    for first in (0, 4 * 1024 * 1024):
        r = api(hub, "PUT", f"courses/{COURSE}/data/files/set/train.bin", tokens["teacher1"],
                data=data[first:first + 4 * 1024 * 1024], headers={
                    "Content-Type": "application/octet-stream",
                    "Content-Range": f"bytes {first}-{first + 4 * 1024 * 1024 - 1}/{len(data)}"})
        assert r.status_code in (200, 201), r.text
    assert api(hub, "GET", f"courses/{COURSE}/data", tokens["teacher1"]).json()["bytes"] == len(data)
    assert api(hub, "GET", f"courses/{COURSE}/storage", tokens["teacher1"]).status_code == 200

    # a competition: 100000 hidden labels, a predictions file of as many lines parsed and scored
    labels = "id,label\n" + "".join(f"{i},{i % 7}\n" for i in range(100_000))
    r = api(hub, "POST", f"courses/{COURSE}/competitions", tokens["teacher1"],
            json={"name": "big", "metric": "accuracy", "ends_at": due})
    assert r.status_code == 201, r.text
    r = api(hub, "PUT", f"courses/{COURSE}/competitions/big/labels", tokens["teacher1"], data=labels,
            headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    r = api(hub, "POST", f"courses/{COURSE}/competitions/big/submissions", student2.new_token(),
            data=labels.replace("id,label", "id,prediction"), headers={"Content-Type": "text/csv"})
    assert r.status_code == 201 and r.json()["public_score"] == 1.0, r.text

    # a job cycle: a student's job runs and ends
    job = api(hub, "POST", "jobs", student2.new_token(), json={
        "name": "hello", "course": COURSE, "command": [sys.executable, "-c", "print('hello')"]})
    assert job.status_code == 201, job.text
    owner = student2.new_token()
    wait_for(lambda: api(hub, "GET", f"jobs/{job.json()['id']}", owner).json()["state"] == "succeeded",
             90, "the job to succeed")

    # a cull: the servers idle 2 h are warned (the banner says so), then culled, while a classhub
    # write holds the database for a while during each cycle
    holder = hold_the_database(hub, 3.0)  # the next cycle (one a second) meets it
    move_clock(hub, 7200)
    holder.join()
    wait_for(lambda: "will be stopped in about" in student1.get("/hub/home").text, 30,
             "the culler's warning on student1's home page")
    holder = hold_the_database(hub, 3.0)
    move_clock(hub, 7200 + 600)
    holder.join()
    wait_for(lambda: not student1.hub_api("GET", "users/student1").json()["servers"], 60,
             "student1's server to be culled")

    # every process was watched: the hub, the service, the culler and the students' servers
    watched = " ".join(r["argv"] for r in records(watch_dir) if r.get("loop"))
    for process in ("classhub local", "hub_ext/service", "culler", "jupyterhub/singleuser"):
        assert process in watched, f"no event loop of {process} was watched: {watched}"
    log = hub.log_path.read_text(errors="replace")
    warnings = SLOW.findall(log)
    found = slow_callbacks(watch_dir)
    assert found or not warnings, "asyncio logged slow callbacks the watch did not see"
    ours = [r for r in found if r["classhub"]]
    summary = "\n".join(f"{r['argv']} pid {r['pid']}: {r['own']:.3f}s of its own ({r['wall']:.3f}s, "
                        f"cpu {r['cpu']:.3f}s) at {r['where']}\n    {r['handle'][:200]}" for r in ours)
    print(f"{len(warnings)} slow callbacks logged by asyncio, {len(found)} watched, {len(ours)} in "
          f"classhub code:\n{summary}")
    assert not ours, f"slow callbacks in classhub code:\n{summary}"
