"""hub_ext.ports: the ports classhub chooses for what it starts are ones no kernel hands out.

What a user would notice otherwise: a hub, server or job that fails to start ("address in use")
because a Jupyter kernel's port-0 bind took its port between the choice and the bind.
"""

from __future__ import annotations

import itertools
import socket

import pytest

from hub_ext import ports

pytestmark = pytest.mark.unit


def test_ports_come_from_below_the_ephemeral_range_and_do_not_repeat():
    low = ports.ephemeral_low()
    assert low is not None and low >= ports.RANGE.stop  # this machine has the shelter
    chosen = [ports.free_port() for _ in range(20)]
    assert all(port in ports.RANGE for port in chosen), chosen
    assert len(set(chosen)) == 20  # chosen before any is bound, yet never the same twice


def test_a_port_something_listens_on_is_skipped(monkeypatch):
    taken = next(p for p in ports.RANGE[:-1] if ports._bindable(p) and ports._bindable(p + 1))
    with socket.create_server(("127.0.0.1", taken)):
        monkeypatch.setattr(ports, "_next", itertools.count(ports.RANGE.index(taken)))
        assert ports.free_port() == taken + 1


def test_where_the_ephemeral_range_reaches_down_the_kernel_chooses(monkeypatch, tmp_path):
    real_low = ports.ephemeral_low()
    wide = tmp_path / "ip_local_port_range"
    wide.write_text("1024\t65535\n")  # as if the admin widened it: RANGE is no shelter
    monkeypatch.setattr(ports, "EPHEMERAL", wide)
    assert ports.ephemeral_low() == 1024
    # the kernel's own choice, from this machine's real ephemeral range, not RANGE's next turn
    assert ports.free_port() >= real_low
