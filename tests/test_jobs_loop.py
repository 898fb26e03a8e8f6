"""The job service's admission loop with real processes and a real store, without a hub.

What a student would notice: a 2-replica job whose replicas find each other through
MASTER_ADDR/MASTER_PORT and report their ranks; a 3-GPU job on a machine with 2 free GPUs waits
(no replica starts) and says why; cancel and max_runtime leave no process behind; a quota refusal
is a sentence; the history tells what happened.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from traitlets.config import Config

from hub_ext import ports
from hub_ext.backends.local import gpus
from hub_ext.backends.local.jobs import LocalJobs, job_devices, job_processes, notebook_devices
from hub_ext.core import jobs as J
from hub_ext.core.devices import Inventory
from hub_ext.core.quota import parse_limits
from hub_ext.service.jobs.bodies import parse_submission
from hub_ext.service.jobs.loop import JobLoop
from hub_ext.service.jobs.records import JobStore, job_key
from hub_ext.service.jobs.settings import ClasshubJobs, JobService
from hub_ext.store import Ledger, add_member, connect, ensure_course, set_course_limits
from tests.hubproc import wait_for

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "jobs"
RENDEZVOUS = DATA / "rendezvous.py"
NOW = datetime.now(timezone.utc)


@pytest.fixture
def world(tmp_path):
    sessions = connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    with sessions.begin() as session:
        course = ensure_course(session, "demo101", NOW)
        add_member(session, course, "student1", "student")
        add_member(session, course, "student2", "student")
    inventory = Inventory(gpus.discover(command=["cat", str(DATA / "two-h200.txt")], use_nvml=False))
    # A hub of its own (no server carries this URL): GPU notebooks of the hubs other tests run on
    # this machine at the same time, with the same test UUIDs, are not this hub's holders.
    backend = LocalJobs(tmp_path / "homes", inventory, hub_api_url=f"http://{tmp_path.name}.invalid/hub/api/")
    store = JobStore(sessions, Ledger(sessions))
    loop = JobLoop(store, backend, interval=0.2, grace=2.0)
    yield store, loop, backend
    for proc in job_processes():
        if str(tmp_path) in " ".join(proc.cmdline()) or proc.cwd().startswith(str(tmp_path)):
            proc.kill()
    sessions.kw["bind"].dispose()


def submit(store: JobStore, owner: str, body: dict) -> str:
    sub = parse_submission(body)
    job = J.parse_job({**sub.job_fields, "name": sub.name}, owner=owner, course="demo101",
                      submit_time=NOW.timestamp(), default_max_runtime=600)
    record, _created = store.submit(owner, "demo101", sub, job, datetime.now(timezone.utc))
    return record.job_id


async def until(loop: JobLoop, predicate, timeout: float = 60.0):
    """Run cycles until `predicate()` holds (each cycle is real work; no fixed sleeps)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        await loop.cycle()
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.1)


def command(*args: str) -> list[str]:
    return [sys.executable, str(RENDEZVOUS), *args]


def test_two_replicas_meet_at_the_master_and_report_their_ranks(world):
    store, loop, backend = world
    job_id = submit(store, "student1", {"name": "ddp", "command": command(), "replicas": 2,
                                        "resources": {"nvidia.com/gpu": 1}})
    record = asyncio.run(until(loop, lambda: (r := store.get(job_id)).state in J.FINAL and r))
    assert record.state == J.SUCCEEDED, [e.message for e in record.events]
    folder = backend.state_dir / job_id
    logs = [(folder / f"worker-{i}.log").read_text() for i in (0, 1)]
    assert "rank 0 of 2 ready; ranks seen [0, 1]" in logs[0]
    assert "rank 1 of 2 ready" in logs[1]
    # the rendezvous port is one no kernel's port-0 bind can take before the master binds it
    master_port = int(logs[0].rsplit("master port ", 1)[1])
    assert master_port < ports.ephemeral_low(), master_port
    gpu_sets = {r.devices["gpu_uuids"][0] for r in record.replicas}
    assert len(gpu_sets) == 2  # each replica its own GPU
    assert [e.state for e in record.events] == ["queued", "admitted", "running", "succeeded"]
    assert Ledger(store.sessions).active() == []  # the job's reservation is released


def test_a_three_gpu_job_waits_on_two_gpus_and_says_why(world):
    store, loop, _ = world
    job_id = submit(store, "student1", {"name": "big", "command": command(), "replicas": 3,
                                        "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(loop.cycle())
    # 3 x 1 GPU on a 2-GPU machine can never start: refused at submit by the API (see
    # test_jobs_hub); the loop, given one anyway, keeps it queued with a reason and no replica.
    record = store.get(job_id)
    assert record.state == J.QUEUED and record.replicas == []
    assert record.reason_code == "capacity"
    assert not job_processes(job_id)


def test_cancel_and_max_runtime_leave_no_process(world):
    store, loop, backend = world
    long = submit(store, "student1", {"name": "long", "command": command("600"), "replicas": 2,
                                      "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(until(loop, lambda: store.get(long).state == J.RUNNING))
    assert len(job_processes(long)) >= 2
    held = {u for r in store.get(long).replicas for u in r.devices["gpu_uuids"]}
    # what this hub's notebook GPU pool must skip, and no other hub's
    assert len(held) == 2 and held <= job_devices(backend.hub_api_url)
    assert not held & job_devices("http://another-hub.invalid/hub/api/")
    store.request_stop(long, J.STOP_CANCEL, "student1", datetime.now(timezone.utc), "cancel")
    record = asyncio.run(until(loop, lambda: (r := store.get(long)).state in J.FINAL and r))
    assert record.state == J.CANCELLED
    assert job_processes(long) == []
    short = submit(store, "student2", {"name": "short", "command": command("600"), "replicas": 1,
                                       "resources": {"cpu": "1"}, "max_runtime": 2})
    record = asyncio.run(until(loop, lambda: (r := store.get(short)).state in J.FINAL and r))
    assert record.state == J.FAILED
    assert "max_runtime" in " ".join(e.message for e in record.events)
    assert job_processes(short) == []


def test_a_crash_while_a_job_ends_leaves_it_holding_or_ended_and_released(world, monkeypatch):
    """A job's end and the release of its reservation commit together: a crash between them (the
    release raising here, SIGKILL in test_jobs_restart.py) must not leave an ended job whose GPUs
    the ledger still counts against its course until a restarted loop's first cycle."""
    store, loop, _ = world
    job_id = submit(store, "student1", {"name": "long", "command": command("600"), "replicas": 1,
                                        "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(until(loop, lambda: store.get(job_id).state == J.RUNNING))

    def crash(*_args, **_kwargs):
        raise RuntimeError("the process died here")

    with monkeypatch.context() as patch:
        patch.setattr(Ledger, "_mark_released", staticmethod(crash))
        with pytest.raises(RuntimeError):
            store.finish(job_id, J.CANCELLED, datetime.now(timezone.utc), "cancelled")
    assert store.get(job_id).state == J.RUNNING  # nothing of the end was kept ...
    assert [r.key for r in store.ledger.active()] == [job_key(job_id)]  # ... and it still holds
    assert store.finish(job_id, J.CANCELLED, datetime.now(timezone.utc), "cancelled").state == J.CANCELLED
    assert store.ledger.active() == []


def test_a_quota_keeps_a_job_queued_with_the_ledgers_sentence(world):
    store, loop, _ = world
    with store.sessions.begin() as session:
        course = ensure_course(session, "demo101", NOW)
        set_course_limits(session, course, parse_limits({"resources": {"nvidia.com/gpu": 1}}),
                          actor="admin", now=NOW)
    job_id = submit(store, "student1", {"name": "two", "command": command(), "replicas": 2,
                                        "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(loop.cycle())
    record = store.get(job_id)
    assert record.state == J.QUEUED and record.reason_code == "course_quota"
    assert "demo101" in record.reason and "nvidia.com/gpu" in record.reason


def test_the_same_client_id_is_one_job(world):
    store, _, _ = world
    body = {"id": "run-1", "name": "ddp", "command": command(), "replicas": 1}
    assert submit(store, "student1", body) == submit(store, "student1", body)
    with pytest.raises(Exception, match="different job"):
        submit(store, "student1", {**body, "replicas": 2})
    assert submit(store, "student2", body) != submit(store, "student1", body)


def test_a_failed_replica_is_restarted_up_to_max_restarts(world, tmp_path):
    store, loop, backend = world
    flaky = ("import os, pathlib, sys; mark = pathlib.Path(os.environ['MARK'] + os.environ['RANK']); "
             "sys.exit(0) if mark.exists() else (mark.touch(), sys.exit(3))")
    job_id = submit(store, "student1", {"name": "flaky", "command": [sys.executable, "-c", flaky],
                                        "env": {"MARK": str(tmp_path / "failed-once-")},
                                        "replicas": 2, "resources": {"cpu": "1"}, "max_restarts": 1})
    record = asyncio.run(until(loop, lambda: (r := store.get(job_id)).state in J.FINAL and r))
    assert record.state == J.SUCCEEDED, [e.message for e in record.events]
    assert [r.restarts for r in record.replicas] == [1, 1]
    assert any("exited 3; restart 1 of 1" in e.message for e in record.events)
    folder = backend.state_dir / job_id
    assert (folder / "worker-0.exit.1").read_text().strip() == "3"  # the first run, kept
    broken = [sys.executable, "-c", "raise SystemExit(5)"]
    never = submit(store, "student1", {"name": "broken", "command": broken, "replicas": 1,
                                       "resources": {"cpu": "1"}, "max_restarts": 2})
    record = asyncio.run(until(loop, lambda: (r := store.get(never)).state in J.FINAL and r))
    assert record.state == J.FAILED and record.replicas[0].restarts == 2


def test_jobs_behind_the_head_of_the_queue_show_their_place_without_a_write_per_cycle(world):
    """With 50,000 waiting jobs a cycle cannot explain (and write) each one: the loop writes why
    the first `explain_limit` of a course wait; the jobs behind show their place from memory."""
    store, _, backend = world
    loop = JobLoop(store, backend, interval=0.2, grace=2.0, explain_limit=1)
    running = submit(store, "student1", {"name": "both", "command": command("600"), "replicas": 2,
                                         "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(until(loop, lambda: store.get(running).state == J.RUNNING))
    second = submit(store, "student2", {"name": "second", "command": command(), "replicas": 1,
                                        "resources": {"nvidia.com/gpu": 1}})
    third = submit(store, "student2", {"name": "third", "command": command(), "replicas": 1,
                                       "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(loop.cycle())
    head, behind = store.get(second), store.get(third)
    assert head.state == behind.state == J.QUEUED
    assert head.queue_position == 1 and head.reason_code in ("reserved", "capacity")
    assert behind.queue_position is None  # not written ...
    assert loop.position(third) == 2  # ... but known: the API shows it (JobsHandler.shown)
    store.request_stop(running, J.STOP_CANCEL, "student1", datetime.now(timezone.utc), "cancel")
    asyncio.run(until(loop, lambda: store.get(second).state in J.FINAL and store.get(third).state in J.FINAL))
    head, behind = store.get(second), store.get(third)
    assert head.state == behind.state == J.SUCCEEDED  # the room went to the waiting jobs ...
    assert head.admitted_at <= behind.admitted_at  # ... in order


def test_a_backend_counts_the_gpus_of_its_own_hubs_notebooks_only(world, tmp_path):
    """Two hubs on one machine (a test hub beside another, a staging hub): the GPU a server of
    the other hub holds is not held for this hub's jobs; one of this hub's servers is."""
    _, _, backend = world
    uuid = "GPU-0a1b2c3d-0000-4000-8000-000000000001"
    env = {"PATH": os.environ["PATH"], "JUPYTERHUB_USER": "ann", "CUDA_VISIBLE_DEVICES": uuid}
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**env, "JUPYTERHUB_API_URL": "http://another-hub.invalid/hub/api/"})
    try:
        wait_for(lambda: uuid in notebook_devices(), 10, "the other hub's server to run")
        assert asyncio.run(backend.nodes({}))[0].free["nvidia.com/gpu"] == 2
        ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                env={**env, "JUPYTERHUB_API_URL": backend.hub_api_url})
        try:
            wait_for(lambda: uuid in notebook_devices(backend.hub_api_url), 10, "our server to run")
            assert asyncio.run(backend.nodes({}))[0].free["nvidia.com/gpu"] == 1
        finally:
            ours.kill()
    finally:
        other.kill()


def test_a_preemption_decided_on_a_stale_snapshot_never_cancels_a_waiting_job(world):
    """The loop decides preemptions on a snapshot; by the time it asks, the job may be back in
    the queue (preempted once already): the late request changes nothing, where a cancel of a
    queued job ends it at once."""
    store, _, _ = world
    waiting = submit(store, "student1", {"name": "w", "command": command(), "replicas": 1,
                                         "resources": {"cpu": "1"}})
    before = store.get(waiting)
    after = store.request_stop(waiting, J.STOP_PREEMPT, "classhub", datetime.now(timezone.utc), "preempted")
    assert after.state == J.QUEUED and after.stop_requested_at is None
    assert len(after.events) == len(before.events)
    cancelled = store.request_stop(waiting, J.STOP_CANCEL, "student1", datetime.now(timezone.utc), "cancel")
    assert cancelled.state == J.CANCELLED


def test_a_restarted_loop_knows_how_long_the_last_jobs_waited(world):
    """The starving bar of the admission cycle (docs/admission.md) is the recent admissions'
    waits: a service restart reads them from the store, so a big job that starved before the
    restart is still starving after it."""
    store, loop, backend = world
    first = submit(store, "student1", {"name": "a", "command": command(), "replicas": 2,
                                       "resources": {"nvidia.com/gpu": 1}})
    second = submit(store, "student2", {"name": "b", "command": command(), "replicas": 1,
                                        "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(until(loop, lambda: all(store.get(j).state in J.FINAL for j in (first, second))))
    records = sorted((store.get(j) for j in (first, second)), key=lambda r: r.admitted_at)
    expected = tuple((r.admitted_at - r.submitted_at).total_seconds() for r in records)
    assert store.recent_waits(10) == expected  # oldest first
    assert store.recent_waits(1) == expected[-1:]  # the last admissions
    assert len(loop._waits) == 2  # what the running loop carried from cycle to cycle

    restarted = JobLoop(store, backend, interval=0.2, grace=2.0)
    asyncio.run(restarted.cycle())
    assert restarted._waits == expected


@pytest.mark.parametrize("depth, second_code", [(1, "capacity"), (2, "reserved")])
def test_the_configured_reservation_depth_is_how_many_blocked_jobs_hold_one(world, depth, second_code):
    """`c.ClasshubJobs.reservation_depth` reaches the cycle the service's loop runs: with 1 (EASY
    backfilling) only the first blocked job holds a reservation; with 2 the next one does as well,
    and its owner reads "reserved" instead of waiting for capacity (docs/admission.md)."""
    _, _, backend = world
    settings = ClasshubJobs(config=Config({"ClasshubJobs": {"reservation_depth": depth, "interval": 0.2}}))
    service = JobService.make(world[0].sessions, backend, settings)
    store, loop = service.store, service.loop  # the loop hears of submits to its own store
    running = submit(store, "student1", {"name": "both", "command": command("600"), "replicas": 2,
                                         "resources": {"nvidia.com/gpu": 1}})
    asyncio.run(until(loop, lambda: store.get(running).state == J.RUNNING))
    waiting = [submit(store, "student2", {"name": f"w{k}", "command": command(), "replicas": 2,
                                          "resources": {"nvidia.com/gpu": 1}}) for k in (1, 2)]
    asyncio.run(until(loop, lambda: all(store.get(j).reason_code for j in waiting)))
    first, second = (store.get(j) for j in waiting)
    assert first.state == second.state == J.QUEUED
    assert first.reason_code == "reserved"
    assert second.reason_code == second_code, second.reason
    store.request_stop(running, J.STOP_CANCEL, "student1", datetime.now(timezone.utc), "cancel")
    asyncio.run(until(loop, lambda: store.get(running).state in J.FINAL))
