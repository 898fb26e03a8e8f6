"""Stopping a local server together with everything it started (kernels, terminals)."""

from __future__ import annotations

import asyncio
import os
import signal
import time


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is still running."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def stop_process_group(pgid: int, grace: float) -> bool:
    """SIGTERM the whole group, wait up to ``grace`` seconds, then SIGKILL what is left.

    A server is started in its own session, so its kernels and terminals share its process
    group; signalling the group (not just the server) is what leaves no orphan behind.
    Returns True when the group is gone.
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return True
            await asyncio.sleep(0.05)
    return not group_alive(pgid)
