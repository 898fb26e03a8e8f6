"""The hub's one view of this machine's GPUs and which server holds which.

All ClasshubLocalSpawner instances of a hub share one pool (a spawner lives per user server),
so the exclusive hand-out of a device is decided in one place. The pool lives in the hub's
memory; after a hub restart it is rebuilt from the device UUIDs each running server recorded in
its spawner state (:meth:`GPUPool.adopt`), so the running servers are the source of truth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence

from hub_ext.backends.local import gpus
from hub_ext.backends.local.jobs import job_devices
from hub_ext.core.devices import Assignments, Inventory, matches_product, product_label

log = logging.getLogger(__name__)


#: The pool's owner name for GPUs that job replicas hold.
JOBS_OWNER = "classhub-jobs"


class GPUPool:
    """Inventory + assignments of one machine. Methods other than `look` are synchronous, hence
    atomic in the hub."""

    _pools: dict[tuple, GPUPool] = {}

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.assignments = Assignments()

    @classmethod
    def shared(
        cls,
        command: Sequence[str],
        shared_gpus: Iterable[str | int] = (),
        shared_replicas: int = 1,
        use_nvml: bool = True,
    ) -> GPUPool:
        """The pool for this configuration, discovered once per hub process."""
        key = (tuple(command), tuple(shared_gpus), shared_replicas, use_nvml)
        if key not in cls._pools:
            devices = gpus.discover(command=list(command), use_nvml=use_nvml)
            inventory = Inventory(devices, shared_gpus=key[1], shared_replicas=shared_replicas)
            for entry, why in inventory.ignored_shared:
                log.warning("classhub: shared GPU %s ignored: %s", entry, why)
            log.info("classhub: local GPU inventory %s", inventory.capacity())
            cls._pools[key] = cls(inventory)
        return cls._pools[key]

    def offered(self) -> dict[str, list[str]]:
        """resource name -> GPU product labels behind it (what profile proposals need)."""
        inventory = self.inventory
        return {r: [product_label(p) for p in inventory.products_of(r)] for r in inventory.resources()}

    async def look(self, hub: str | None = None) -> GPUPool:
        """The pool with the devices of running job replicas held again; `free` and `assign`
        answer from this look until the next one.

        Job replicas are started by the classhub service, so the hub learns of their GPUs from
        the process table: every process's environment, which on a busy machine takes tens of
        milliseconds to seconds. It is read in a worker thread, and the result is applied in
        one step of the hub's event loop, so a caller that assigns right after its look (no
        await in between) decides atomically. On the loop, 50 students starting at once held
        it for up to 45 s (one read per device), then 2.4 s (one read per look). `hub` (the
        hub's API URL) limits the jobs to that hub's (another hub on the machine has its own
        pool)."""
        self.hold_job_devices(await asyncio.to_thread(job_devices, hub))
        return self

    def free(self, resource_name: str, product: str | None = None) -> int:
        """Free units of a resource, 0 when ``product`` is given and none of them is that model."""
        if product is not None and not any(
                matches_product(p, product) for p in self.inventory.products_of(resource_name)):
            return 0
        return self.assignments.free(self.inventory, resource_name)

    def assign(self, owner: str, resource_name: str, count: int) -> list[str]:
        return self.assignments.assign(self.inventory, owner, resource_name, count)

    def hold_job_devices(self, by_jobs: set[str]) -> None:
        """Hold the devices that running job replicas use (``by_jobs``: their UUIDs, from
        `job_devices`): a GPU a job trains on is neither offered as free nor handed to a
        notebook."""
        self.assignments.release(JOBS_OWNER)
        held = [d.uuid for d in self.inventory.devices if d.uuid in by_jobs]
        if held:
            self.assignments.adopt(self.inventory, JOBS_OWNER, held)

    def release(self, owner: str) -> tuple[str, ...]:
        return self.assignments.release(owner)

    def adopt(self, owner: str, uuids: Iterable[str]) -> None:
        """Take over what a running server reports holding (after a hub restart)."""
        report = self.assignments.adopt(self.inventory, owner, uuids)
        for conflict in report.conflicts:
            log.warning("classhub: %s", conflict)
        for who, uuid in report.dropped:
            log.warning("classhub: %s reports %s, which this machine no longer offers", who, uuid)
