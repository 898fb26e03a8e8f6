"""Ports for the processes the tests start, below the kernel's ephemeral range.

Why: a port found by binding port 0 and closing the socket is free only for a moment. Under
``make test`` several pytest-xdist workers start hubs, proxies and servers at once, and every
outgoing connection also takes an ephemeral port, so "a free port" could be taken again before
the hub bound it (seen: the proxy's ``EADDRINUSE``, a hub that never answered). The kernel never
hands out ports below ``net.ipv4.ip_local_port_range`` (32768 by default), so each worker takes
ports from a block of its own below it, in turn, skipping one that is bound: two workers never
pick the same port, and no outgoing connection takes it.
"""

from __future__ import annotations

import itertools
import os
import socket

FIRST = 20000
BLOCK = 1500
BLOCKS = 8  # 20000-31999: below the default ephemeral range


def _block() -> int:
    """This process's block: the xdist worker's number (gw0, gw1, ...), else one by pid (two
    pytest processes run side by side, e.g. a flake check beside a run)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return int(worker[2:]) % BLOCKS
    return os.getpid() % BLOCKS


_next = itertools.count()


def free_port() -> int:
    """A port nobody listens on, from this process's block (each used once before wrapping)."""
    start = FIRST + _block() * BLOCK
    for _ in range(BLOCK):
        port = start + next(_next) % BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}-{start + BLOCK - 1}")
