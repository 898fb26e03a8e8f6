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
        if not psutil.pid_exists(pid) or _is_zombie(pid):
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


def _is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
