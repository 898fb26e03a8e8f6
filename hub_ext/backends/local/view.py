"""This machine as the Cluster page shows it in local mode: one node with its GPUs (MIG slices
and shared GPUs as the local spawner offers them), CPUs and memory, and each GPU's use in
percent when NVML tells it.

Why here: only the backends look at the machine (docs/architecture.md, rule 2); the page's
arithmetic is hub_ext.core.cluster's.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from fractions import Fraction
from typing import Any

import psutil

from hub_ext.core.cluster import Device as ShownDevice
from hub_ext.core.devices import Inventory
from hub_ext.core.resources import ResourceVector

__all__ = ["MachineView"]


class MachineView:
    """What this machine has (fixed while the service runs) and its GPUs' use (read at most
    every ``ttl`` seconds, on a worker thread by the caller)."""

    def __init__(self, inventory: Inventory, name: str | None = None, ttl: float = 2.0) -> None:
        self.inventory = inventory
        self.name = name or socket.gethostname() or "this machine"
        self.ttl = ttl
        self._read_at = float("-inf")
        self._use: dict[str, int | None] = {}

    def allocatable(self) -> ResourceVector:
        """Every offered unit of every GPU resource (a shared GPU counts its replicas), the CPUs
        and the memory."""
        amounts: dict[str, int | Fraction] = dict(self.inventory.capacity())
        amounts["cpu"] = os.cpu_count() or 1
        amounts["memory"] = psutil.virtual_memory().total
        return ResourceVector(amounts)

    def devices(self) -> list[ShownDevice]:
        """Each device the spawner hands out, with its use (None where NVML says nothing: no
        NVML, or a MIG slice, whose use NVML does not report). Blocking: call on a thread."""
        if time.monotonic() - self._read_at > self.ttl:
            self._use = _utilisation([d.uuid for r in self.inventory.resources()
                                      for d in self.inventory.devices_for(r)])
            self._read_at = time.monotonic()
        return [ShownDevice(self.name, d.uuid, r, d.product, self._use.get(d.uuid))
                for r in self.inventory.resources() for d in self.inventory.devices_for(r)]


def _utilisation(uuids: list[str]) -> dict[str, int | None]:
    """GPU use in percent by UUID, from NVML (the ``nvidia-ml-py`` package) when it is there."""
    if not uuids:
        return {}
    try:
        import pynvml  # type: ignore[import-not-found]
        pynvml.nvmlInit()
    except Exception:  # no NVML: the page shows what is held, not how busy it is
        return {}
    found: dict[str, int | None] = {}
    try:
        for uuid in uuids:
            try:
                handle: Any = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                found[uuid] = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:  # a MIG slice, or a device that went away
                found[uuid] = None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return found
