"""The spawner's ledger helper process (spawner/ledger_process.py): it does the hub's ledger
writes, refuses with the quota's sentence, and never outlives the hub."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest
from tornado import web

from hub_ext import store
from hub_ext.core.profiles import Catalog, Viewer
from hub_ext.core.quota import parse_limits
from spawner import ledger_process, quota
from tests.kubefake.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _helper_pid() -> int:
    return os.getpid()


async def test_a_reservation_is_written_by_another_process_and_a_refusal_is_the_quota_sentence(tmp_path):
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    sessions = store.connect(url)
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        course = store.ensure_course(session, "cs101", now)
        store.add_member(session, course, "ann", "student")
        store.set_user_limits(session, course, "ann", parse_limits({"servers": 1}), actor="t", now=now)
    catalog = Catalog.from_config([{"slug": "cpu", "kind": "cpu", "groups": ["cs101"]}])
    selection = catalog.select(Viewer("ann", frozenset({"cs101"})), {"profile": "cpu"})
    try:
        assert await ledger_process.run(_helper_pid) != os.getpid()
        assert await quota.reserve(url, "ann", "", selection) == "cs101"
        with pytest.raises(web.HTTPError) as refused:
            await quota.reserve(url, "ann", "second", selection)
        assert refused.value.status_code == 403
        assert "server" in refused.value.log_message
        assert [r.key for r in store.Ledger(sessions).active()] == ["server:ann/"]
        await quota.release_now(url, "ann", "")
        assert store.Ledger(sessions).active() == []

        # The helper is killed (an OOM kill): the next start still reserves, in a new helper.
        killed = psutil.Process(await ledger_process.run(_helper_pid))
        killed.kill()
        killed.wait(timeout=30)
        assert await quota.reserve(url, "ann", "", selection) == "cs101"
        assert await ledger_process.run(_helper_pid) != killed.pid
        assert [r.key for r in store.Ledger(sessions).active()] == ["server:ann/"]
    finally:
        ledger_process.shutdown()
        sessions.kw["bind"].dispose()


def test_the_helper_exits_when_the_hub_is_killed(tmp_path):
    """A hub killed with SIGKILL cannot shut its helper down; the helper leaves by itself."""
    script = textwrap.dedent("""
        import asyncio, os, sys
        sys.path.insert(0, sys.argv[1])
        from spawner import ledger_process

        async def main():
            print(await ledger_process.run(os.getpid), flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
    """)
    hub = subprocess.Popen([sys.executable, "-c", script, str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        helper = psutil.Process(int(hub.stdout.readline()))
        assert helper.is_running() and helper.pid != hub.pid
        hub.send_signal(signal.SIGKILL)
        hub.wait(timeout=30)
        wait_for(lambda: not helper.is_running() or helper.status() == psutil.STATUS_ZOMBIE,
                 timeout=30, what="the ledger helper to exit after its hub was killed")
    finally:
        hub.kill()
        hub.wait()
        hub.stdout.close()
