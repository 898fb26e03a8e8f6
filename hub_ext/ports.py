"""Ports for what classhub starts on one machine, from outside the kernel's ephemeral range.

Why: the usual way to find a free port, binding port 0 and closing the socket, returns a port
from the kernel's ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by default),
free only at that moment. The kernel hands the same range to every other port-0 bind and every
outgoing connection, and each Jupyter kernel binds five such ports. Seen in CI: between
``classhub local`` choosing the hub's internal port and JupyterHub binding it, another user's
kernel took it; the hub exited ("address in use") and the proxy's error pages reached the
kernel's ZeroMQ socket. A port below the ephemeral range is never handed out by the kernel, so
only a process that asks for that very number can take it.

So the hub's internal port, the proxy's API, the classhub service, each single-user server
(`spawner.local`) and each job's rendezvous port come from `RANGE`: a random start per process,
then in turn (two ports chosen before either is bound never coincide), skipping one that is
bound. On a machine whose ephemeral range reaches below `RANGE`'s end there is no such shelter,
and `free_port` falls back to the kernel's choice (where the range cannot be read, as on macOS,
it is taken to start at its default, above `RANGE`). This module imports no classhub code.
"""

from __future__ import annotations

import itertools
import random
import socket
from collections.abc import Iterable
from pathlib import Path

#: Below the default ephemeral range and below the test suite's own ports (20000-31999,
#: tests/ports.py), so the hubs a test run starts do not take the ports its tests choose.
RANGE = range(10000, 20000)

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")

_next = itertools.count(random.randrange(len(RANGE)))


def ephemeral_low() -> int | None:
    """The lowest port the kernel hands out by itself, or None where that cannot be read."""
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def first_free(candidates: Iterable[int]) -> int | None:
    """The first of `candidates` nothing is bound to on 127.0.0.1 now, or None (the test suite's
    own port blocks, tests/ports.py, take theirs the same way)."""
    return next((port for port in candidates if _bindable(port)), None)


def free_port() -> int:
    """A TCP port free now on 127.0.0.1 that no port-0 bind or outgoing connection can take."""
    low = ephemeral_low()
    if low is None or low >= RANGE.stop:  # unreadable: every default range starts above it
        port = first_free(RANGE[next(_next) % len(RANGE)] for _ in range(len(RANGE)))
        if port is not None:
            return port
    # no shelter below the ephemeral range (or all of it bound): the kernel's choice
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
