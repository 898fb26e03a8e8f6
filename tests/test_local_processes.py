"""A local server found dead after a hub restart: its process is no longer the hub's child, so
when it dies another process (init, a container's first process) reaps it, which may take
seconds. Until then it is a zombie that ``kill(pid, 0)`` still finds: the spawner must see it as
ended, or the dead server keeps its GPU (hub_ext.backends.local.processes.exited)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import psutil
import pytest

from hub_ext.backends.local import processes
from spawner.local import ClasshubLocalSpawner
from tests.hubproc import wait_for

pytestmark = pytest.mark.unit


def _zombie() -> int:
    """A child of this process that has exited and is not reaped yet."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10, "the child to exit",
             interval=0.01)
    return pid


def test_a_zombie_has_exited_and_a_running_process_has_not():
    pid = _zombie()
    try:
        os.kill(pid, 0)  # what JupyterHub's poll asks: the zombie still "exists"
        assert processes.exited(pid)
    finally:
        os.waitpid(pid, 0)
    assert processes.exited(pid)  # reaped: no such process
    assert not processes.exited(os.getpid())


async def test_a_server_that_is_a_zombie_polls_as_stopped():
    pid = _zombie()
    try:
        spawner = ClasshubLocalSpawner(user=SimpleNamespace(name="student1"))
        spawner.load_state({"pid": pid})  # as after a hub restart: no Popen handle, only the pid
        assert spawner.pid == pid
        assert await spawner.poll() == 0
        assert not spawner.pid  # cleared: the hub drops the server and frees what it held
    finally:
        os.waitpid(pid, 0)


async def test_a_running_server_polls_as_running():
    pid = os.fork()
    if pid == 0:
        signal.pause()  # runs until the test kills it
        os._exit(0)
    try:
        spawner = ClasshubLocalSpawner(user=SimpleNamespace(name="student1"))
        spawner.load_state({"pid": pid})
        assert await spawner.poll() is None
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
