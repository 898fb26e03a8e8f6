"""Stopping a local server together with everything it started (kernels, terminals)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable

import psutil


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of the process group ``pgid``."""
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


async def stop_process_group(
    pid: int, grace: float, reap: Callable[[], object] = lambda: None
) -> bool:
    """Stop the server ``pid`` gracefully, then kill whatever is left of its process group.

    Only the server gets SIGTERM: it shuts its kernels down cleanly itself (signalling them too
    would make it wait for replies that never come). A server is started in its own session,
    so after ``grace`` seconds every process left in its group (kernels, terminals) gets
    SIGKILL: nothing survives the server. ``reap`` collects the server's exit status so it does
    not linger as a zombie. Returns True when the group is gone.
    """
    pgid = pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap()
        if exited(pid):
            break
        await asyncio.sleep(0.05)
    for p in group_members(pgid):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        reap()
        if not group_members(pgid):
            return True
        await asyncio.sleep(0.05)
    return False


def exited(pid: int) -> bool:
    """True when ``pid`` has ended: no such process, or a zombie not yet reaped.

    Why a zombie counts: a server that outlived a hub restart is no longer the hub's child, so
    when it dies its new parent (init, or a container's first process) reaps it, which may take
    seconds; ``kill(pid, 0)`` succeeds on it all that time."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---- servers whose spawn a hub crash interrupted ------------------------------------------------
#
# The hub records a server's pid only after ``Popen`` returned; a hub killed in between leaves a
# server process nobody knows. So the server's own process writes "<pid> <start time>" into a
# record file before it runs anything (from the spawner's preexec function, in the child), and
# the spawner stops whatever that record names when the hub finds the server without a pid.
# The start time guards against a recycled pid.


def write_record(path: str) -> None:
    """Record the calling process (pid and start time) in ``path``; called in the child.

    A record that cannot be written never stops the server from starting: it only loses the
    crash cleanup for this start."""
    try:
        me = psutil.Process()
        with open(path, "w") as f:
            f.write(f"{me.pid} {me.create_time()!r}\n")
    except (OSError, psutil.Error):
        pass


def recorded_process(path: str) -> psutil.Process | None:
    """The live process a record names, or None (no record, gone, or the pid was reused)."""
    try:
        with open(path) as f:
            pid, created = f.read().split()
        p = psutil.Process(int(pid))
        if abs(p.create_time() - float(created)) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
            return p
    except (OSError, ValueError, psutil.Error):
        pass
    return None


async def stop_recorded(path: str, grace: float) -> bool:
    """Stop the process group a record names (if it still runs) and remove the record.

    Returns True when there was such a process. The record is read and removed on a worker
    thread (docs/architecture.md, rule 7)."""
    p = await asyncio.to_thread(recorded_process, path)
    if p is not None:
        await stop_process_group(p.pid, grace, reap=lambda: _reap(p.pid))
    await asyncio.to_thread(_remove, path)
    return p is not None


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if it is our child (a server started by this hub)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
