"""SIGKILL of the job service at any moment, then a restart: no job lost, none started twice.

The admission loop runs in a process of its own (tests/jobs_loop_proc.py, the product's loop and
local backend) and is killed with SIGKILL right after it recorded progress (an admission, a
start, an end: the moments between the ledger, the job record and the processes), then started
again, `ROUNDS` times, while jobs are queued, admitted, launched and finished. At the end every
job succeeded, every replica ran exactly once (each writes one line when it starts), and the
ledger holds nothing: on sqlite and on PostgreSQL.

Each loop process is forked from a server that imported the loop's modules once
(multiprocessing's forkserver): about 20 restarts would otherwise each spend a second of CPU on
the same imports. A forked process shares nothing with the killed one: its store, event loop and
backend are made anew in `tests.jobs_loop_proc.run`, as in a process started from scratch.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import func, select

from hub_ext.backends.local.jobs import job_processes
from hub_ext.core import jobs as J
from hub_ext.service.jobs.bodies import parse_submission
from hub_ext.service.jobs.records import JobStore
from hub_ext.store import Ledger, add_member, connect, ensure_course
from hub_ext.store.job_models import JobEvent
from tests import jobs_loop_proc
from tests.hubproc import wait_for
from tests.pg import database_url, postgres_server, postgres_url  # noqa: F401

# not unit: it starts the job loop as a process of its own, about 20 times (tests/conftest.py, TIERS)
pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = Path(__file__).parent / "data" / "jobs" / "two-h200.txt"
ROUNDS = int(os.environ.get("CLASSHUB_JOB_KILL_ROUNDS", "10"))  # 20 for the full proof
JOBS = 8
NOW = datetime.now(timezone.utc)


def events(store: JobStore) -> int:
    with store.sessions() as session:
        return session.scalar(select(func.count()).select_from(JobEvent)) or 0


def test_sigkill_at_any_moment_loses_no_job_and_starts_none_twice(database_url, tmp_path):  # noqa: F811
    sessions = connect(database_url)
    with sessions.begin() as session:
        course = ensure_course(session, "demo101", NOW)
        add_member(session, course, "student1", "student")
    store = JobStore(sessions, Ledger(sessions))
    starts = tmp_path / "starts.txt"
    script = ("import os, time; open(os.environ['STARTS'], 'a').write("
              "os.environ['CLASSHUB_JOB_ID'] + ' ' + os.environ['RANK'] + '\\n'); time.sleep(1.5)")
    ids = []
    for n in range(JOBS):
        sub = parse_submission({"id": f"run-{n}", "name": "sweep",
                                  "command": [sys.executable, "-c", script],
                                  "env": {"STARTS": str(starts)}, "replicas": 2,
                                  "resources": {"cpu": "100m", "nvidia.com/gpu": 1 if n % 2 else 0}})
        job = J.parse_job({**sub.job_fields, "name": sub.name}, owner="student1", course="demo101",
                          submit_time=NOW.timestamp(), default_max_runtime=600)
        ids.append(store.submit("student1", "demo101", sub, job, datetime.now(timezone.utc))[0].job_id)
    homes = tmp_path / "homes"
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(["tests.jobs_loop_proc"])

    def loop_process(env: dict[str, str]) -> multiprocessing.process.BaseProcess:
        """``python -m tests.jobs_loop_proc DB HOMES INVENTORY`` in ROOT with ``env`` added."""
        proc = forkserver.Process(target=jobs_loop_proc.run, args=(
            database_url, str(homes), str(INVENTORY), str(ROOT), env))
        proc.start()
        return proc

    kills = 0
    try:
        for _ in range(ROUNDS):
            if all(store.get(i).state in J.FINAL for i in ids):
                break
            seen = events(store)
            # as under a hub: JupyterHub gives the service its hub's API URL (here a hub of its
            # own, so other tests' GPU notebooks on this machine are not this hub's holders)
            proc = loop_process({"JUPYTERHUB_API_URL": f"http://{tmp_path.name}.invalid/hub/api/"})
            try:  # kill right after the loop recorded something: mid-admission, mid-launch, mid-end
                wait_for(lambda seen=seen, proc=proc: events(store) > seen or proc.exitcode is not None,
                         60, "progress")
            finally:
                proc.kill()  # SIGKILL
                proc.join()
                kills += 1
        proc = loop_process({})  # the last one runs until everything ended
        wait_for(lambda: all(store.get(i).state in J.FINAL for i in ids), 180, "every job to end")
    finally:
        proc.kill()
        proc.join()
        for leftover in job_processes():
            if str(homes) in (leftover.environ().get("HOME") or ""):
                leftover.kill()
    records = [store.get(i) for i in ids]
    assert kills >= min(ROUNDS, 5)
    assert [r.state for r in records] == [J.SUCCEEDED] * JOBS, [
        (r.job_id, r.state, [e.message for e in r.events]) for r in records if r.state != J.SUCCEEDED]
    lines = sorted(starts.read_text().split("\n")[:-1])
    expected = sorted(f"{i} {rank}" for i in ids for rank in (0, 1))
    assert lines == expected  # every replica started exactly once: none lost, none twice
    assert Ledger(sessions).active() == []
    assert job_processes() == [] or all(str(homes) not in (p.environ().get("HOME") or "")
                                        for p in job_processes())
    sessions.kw["bind"].dispose()
