"""Ports for the processes the tests start, below the kernel's ephemeral range.

Why: a port found by binding port 0 and closing the socket is free only for a moment. Under
``make test`` several pytest-xdist workers start hubs, proxies and servers at once, and every
outgoing connection also takes an ephemeral port, so "a free port" could be taken again before
the hub bound it (seen: the proxy's ``EADDRINUSE``, a hub that never answered). The kernel never
hands out ports below ``net.ipv4.ip_local_port_range`` (32768 by default), so each pytest process
claims a block of its own below it, holding a lock on the block's file for as long as it lives,
and takes the block's ports in turn, skipping one that is bound: no two processes (workers of one
run, two runs side by side, a flake check's parallel runs) pick the same port, and no outgoing
connection takes it.
"""

from __future__ import annotations

import fcntl
import itertools
import tempfile
from pathlib import Path
from typing import IO

from hub_ext.ports import first_free

FIRST = 20000
BLOCK = 500
BLOCKS = 24  # 20000-31999: below the default ephemeral range
#: One folder for the whole machine (ports are the machine's), whatever TMPDIR a test process
#: has: a child pytest with a TMPDIR of its own (tests/test_hub_versions.py) took block 0 beside
#: a worker that held it, and both started hubs on port 20000.
LOCKS = Path("/tmp" if Path("/tmp").is_dir() else tempfile.gettempdir()) / "classhub-test-ports"

_claimed: tuple[int, IO[str]] | None = None
_next = itertools.count()


def _block() -> int:
    """The block this process holds (claimed at first use; the lock ends with the process)."""
    global _claimed
    if _claimed is None:
        LOCKS.mkdir(exist_ok=True)
        for block in range(BLOCKS):
            lock = open(LOCKS / f"{block}.lock", "w")  # noqa: SIM115 - held while we live
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                continue
            _claimed = (block, lock)
            break
        else:
            raise RuntimeError(f"all {BLOCKS} test port blocks are taken by other test processes")
    return _claimed[0]


def free_port() -> int:
    """A port nobody listens on, from this process's block (each used once before wrapping)."""
    start = FIRST + _block() * BLOCK
    port = first_free(start + next(_next) % BLOCK for _ in range(BLOCK))
    if port is None:
        raise RuntimeError(f"no free port in {start}-{start + BLOCK - 1}")
    return port
