"""The GPUs of one machine, as Kubernetes resources, and which server holds which device.

Why this module exists: in local mode user servers are processes on one workstation, and a GPU or
MIG slice is given to a server by setting CUDA_VISIBLE_DEVICES. The profile catalog must not care
which mode runs it, so the workstation's devices are described with the resource names the NVIDIA
device plugin advertises on Kubernetes (`nvidia.com/gpu`, `nvidia.com/mig-<g>g.<mem>gb` with the
MIG *mixed* strategy, `nvidia.com/gpu.shared` for time-sliced/MPS GPUs with renameByDefault), and
the local spawner plays the device plugin's part: it hands out devices exclusively (or up to
`replicas` owners per shared GPU) and rebuilds who holds what after a hub restart from what the
running servers report (docs/architecture.md, rule 4: the running processes are the truth).

Pure: standard library only (docs/architecture.md, rule 1). Discovery (NVML / nvidia-smi) lives in
`hub_ext.backends.local.gpus`. Methods are synchronous and atomic (they either change the state
completely or raise before changing anything); serialising concurrent callers is the caller's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .resources import NVIDIA_GPU, NVIDIA_GPU_SHARED, MigProfile, is_mig_resource, parse_mig_profile

__all__ = [
    "GPU",
    "MIG",
    "AssignmentError",
    "Assignments",
    "Conflict",
    "Device",
    "DevicesUnavailable",
    "Inventory",
    "ReconcileReport",
    "cuda_visible_devices",
    "mig_memory_gb",
    "mig_profile_name",
    "parse_cuda_visible_devices",
]

GPU = "gpu"
MIG = "mig"


@dataclass(frozen=True)
class Device:
    """One device a server can be given: a whole GPU or a MIG slice of one.

    `index` is the GPU's index (for a MIG slice, its parent's), which is what `nvidia-smi` shows;
    `uuid` is what goes into CUDA_VISIBLE_DEVICES, because indices are renumbered when MIG mode
    or CUDA_DEVICE_ORDER changes and UUIDs are not. `shared` is configuration, not discovery:
    `Inventory` sets it for the GPUs the admin declared time-sliced/MPS.
    """

    uuid: str
    index: int
    product: str
    kind: str = GPU
    mig_profile: str | None = None
    parent_uuid: str | None = None
    shared: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.uuid, str) or not self.uuid.strip() or self.uuid != self.uuid.strip():
            raise ValueError(f"device uuid must be a non-empty string without spaces, not {self.uuid!r}")
        if "," in self.uuid:
            raise ValueError(f"device uuid {self.uuid!r} contains a comma (CUDA_VISIBLE_DEVICES separator)")
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"device {self.uuid}: index must be a non-negative int, not {self.index!r}")
        if self.kind == GPU:
            if self.mig_profile is not None or self.parent_uuid is not None:
                raise ValueError(f"GPU {self.uuid}: a whole GPU has no MIG profile or parent")
        elif self.kind == MIG:
            if self.shared:
                raise ValueError(f"MIG device {self.uuid}: only whole GPUs can be shared")
            try:
                parse_mig_profile(self.mig_profile or "")
            except ValueError:
                raise ValueError(
                    f"MIG device {self.uuid}: profile {self.mig_profile!r} is not like 1g.18gb"
                ) from None
            if not self.parent_uuid:
                raise ValueError(f"MIG device {self.uuid}: parent_uuid is required")
            if not is_mig_resource(self.resource_name):  # e.g. longer than a resource name may be
                raise ValueError(f"MIG device {self.uuid}: {self.resource_name!r} is not a resource name")
        else:
            raise ValueError(f"device {self.uuid}: kind must be 'gpu' or 'mig', not {self.kind!r}")

    @property
    def resource_name(self) -> str:
        """The Kubernetes extended resource this device counts as.

        MIG profiles with attributes become dotted (`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`)
        because `+` is not allowed in a resource name (`hub_ext.core.resources`' grammar).
        """
        if self.kind == MIG:
            assert self.mig_profile is not None
            return parse_mig_profile(self.mig_profile).resource_name
        return NVIDIA_GPU_SHARED if self.shared else NVIDIA_GPU


def mig_memory_gb(mig_memory_mib: int, gpu_total_memory_bytes: int) -> int:
    """The `<mem>gb` of a MIG profile name from NVML figures, the way NVIDIA's tools compute it.

    The slice's share of the parent's memory is rounded up to eighths (MIG memory comes in
    eighths), times the parent's memory in whole GiB rounded up, then rounded half up: an H200
    slice of ~16.5 GiB on a 140.4 GiB GPU is "18gb", half of it is "71gb", not 70.
    """
    if mig_memory_mib <= 0 or gpu_total_memory_bytes <= 0:
        raise ValueError("MIG and GPU memory sizes must be positive")
    fraction = mig_memory_mib * 2**20 / gpu_total_memory_bytes
    eighths = math.ceil(fraction * 8) / 8
    total_gb = -(-gpu_total_memory_bytes // 2**30)
    return math.floor(eighths * total_gb + 0.5)


def mig_profile_name(
    gpu_slices: int, memory_gb: int, compute_slices: int | None = None, attributes: Iterable[str] = ()
) -> str:
    """`(1, 18)` -> "1g.18gb"; a compute instance smaller than its GPU instance -> "1c.2g.20gb"."""
    return str(MigProfile(gpu_slices, memory_gb, tuple(attributes), compute_slices))


# --------------------------------------------------------------------------- inventory


class Inventory:
    """The devices this machine offers, by resource name, with the admin's sharing configuration.

    - A GPU with MIG slices is offered only as its slices (the device plugin's mixed strategy):
      handing out the whole GPU would hand out every slice with it.
    - A GPU listed in `shared_gpus` (by UUID or by index) is offered as `shared_replicas` units of
      `nvidia.com/gpu.shared`, like the device plugin's time-slicing/MPS `replicas`.
    - Entries of `shared_gpus` that name no whole GPU here (a typo, a GPU that went away, a GPU now
      split into MIG slices) are ignored and listed in `ignored_shared` with the reason, so the
      hub starts and logs them instead of failing.
    """

    __slots__ = ("_by_resource", "_by_uuid", "devices", "ignored_shared", "shared_replicas")

    devices: tuple[Device, ...]
    shared_replicas: int
    ignored_shared: tuple[tuple[str, str], ...]

    def __init__(
        self,
        devices: Iterable[Device] = (),
        shared_gpus: Iterable[str | int] = (),
        shared_replicas: int = 1,
    ) -> None:
        if isinstance(shared_replicas, bool) or not isinstance(shared_replicas, int) or shared_replicas < 1:
            raise ValueError(f"shared_replicas must be an int >= 1, not {shared_replicas!r}")
        found = tuple(devices)
        seen: set[str] = set()
        for device in found:
            if device.uuid in seen:
                raise ValueError(f"device {device.uuid} is listed twice")
            seen.add(device.uuid)
        split = {d.parent_uuid for d in found if d.kind == MIG}
        gpus = [d for d in found if d.kind == GPU]
        shared: set[str] = set()
        ignored: list[tuple[str, str]] = []
        for key in shared_gpus:
            matches = [g for g in gpus if _names(g, key)]
            if not matches:
                ignored.append((str(key), "no GPU with this UUID or index on this machine"))
            elif any(g.uuid in split for g in matches):
                ignored.append((str(key), "this GPU is split into MIG slices; only whole GPUs are shared"))
            else:
                shared.update(g.uuid for g in matches)
        configured = []
        for device in found:
            is_shared = device.kind == GPU and device.uuid in shared
            if device.shared != is_shared:
                device = replace(device, shared=is_shared)
            configured.append(device)
        by_resource: dict[str, list[Device]] = {}
        for device in configured:
            if device.kind == GPU and device.uuid in split:
                continue
            by_resource.setdefault(device.resource_name, []).append(device)
        self.devices = tuple(configured)
        self.shared_replicas = shared_replicas
        self.ignored_shared = tuple(ignored)
        self._by_resource = MappingProxyType(
            {name: tuple(devs) for name, devs in sorted(by_resource.items())}
        )
        self._by_uuid = MappingProxyType({d.uuid: d for devs in by_resource.values() for d in devs})

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError("Inventory is immutable")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"Inventory({self.capacity()!r})"

    def resources(self) -> tuple[str, ...]:
        """The resource names offered here, sorted (empty on a machine without GPUs)."""
        return tuple(self._by_resource)

    def devices_for(self, resource_name: str) -> tuple[Device, ...]:
        """The offered devices of one resource, in discovery order."""
        return self._by_resource.get(resource_name, ())

    def device(self, uuid: str) -> Device | None:
        """The *offered* device with this UUID (a MIG-split parent GPU is not offered)."""
        return self._by_uuid.get(uuid)

    def words(self, uuid: str) -> str:
        """Which device this is in plain words, as the Cluster page and a user's home show what a
        server holds: "GPU 0 (NVIDIA H200)", "GPU 1 (NVIDIA H200), MIG slice 2 (1g.18gb)" (the
        slice's place among its GPU's offered slices, from 1), "GPU 2 (NVIDIA H200), shared";
        the UUID itself for a device this machine does not offer (any more)."""
        device = self._by_uuid.get(uuid)
        if device is None:
            return uuid
        words = f"GPU {device.index} ({device.product})"
        if device.kind == MIG:
            slices = [d.uuid for d in self.devices if d.kind == MIG and d.parent_uuid == device.parent_uuid]
            return f"{words}, MIG slice {slices.index(uuid) + 1} ({device.mig_profile})"
        return f"{words}, shared" if device.shared else words

    def units(self, device: Device) -> int:
        """How many servers may hold this device at once: replicas if shared, else 1."""
        return self.shared_replicas if device.shared else 1

    def capacity(self) -> dict[str, int]:
        """resource name -> how many can be given out in total (shared: replicas x shared GPUs)."""
        return {
            name: sum(self.units(d) for d in devs) for name, devs in self._by_resource.items()
        }

    def products_of(self, resource_name: str) -> tuple[str, ...]:
        """The GPU models behind a resource (sorted, unique): what the profile list shows."""
        return tuple(sorted({d.product for d in self.devices_for(resource_name)}))

    def product_of(self, resource_name: str) -> str | None:
        """The one GPU model behind a resource, or None if there are none or several."""
        products = self.products_of(resource_name)
        return products[0] if len(products) == 1 else None


def _names(gpu: Device, key: str | int) -> bool:
    if isinstance(key, bool):
        return False
    if isinstance(key, int):
        return gpu.index == key
    key = str(key).strip()
    return key == gpu.uuid or (key.isdigit() and int(key) == gpu.index)


# --------------------------------------------------------------------------- assignments


class AssignmentError(Exception):
    """A request for devices that cannot be met; `str()` is written for the student."""


class DevicesUnavailable(AssignmentError):
    """Not enough free devices of a resource on this machine right now."""

    def __init__(self, resource_name: str, requested: int, free: int, capacity: int, detail: str = ""):
        self.resource_name = resource_name
        self.requested = requested
        self.free = free
        self.capacity = capacity
        in_use = capacity - free
        if capacity == 0:
            message = f"This machine has no {resource_name}"
        elif free == 0:
            message = (
                f"All {capacity} {resource_name} on this machine are in use ({in_use} of {capacity})"
            )
        else:
            message = (
                f"Only {free} of {capacity} {resource_name} on this machine "
                f"{'is' if free == 1 else 'are'} free; {requested} requested"
            )
        if detail:
            message += f" ({detail})"
        super().__init__(message + ". Try again later or pick another profile.")


@dataclass(frozen=True)
class Conflict:
    """Two servers claim a device that only one (or only `replicas`) may hold; `kept_by` keeps it."""

    uuid: str
    resource_name: str
    kept_by: tuple[str, ...]
    refused: str

    def __str__(self) -> str:
        return (
            f"{self.refused} reports {self.resource_name} {self.uuid}, already held by "
            f"{', '.join(self.kept_by)}; not counted for {self.refused}"
        )


@dataclass(frozen=True)
class ReconcileReport:
    """What `Assignments.reconcile` did not take over, for the hub log."""

    conflicts: tuple[Conflict, ...] = ()
    dropped: tuple[tuple[str, str], ...] = ()
    """(owner, uuid) pairs naming no device this machine offers now."""

    @property
    def clean(self) -> bool:
        return not self.conflicts and not self.dropped


Slot = tuple[str, str]
"""(resource name, device uuid): one unit an owner holds."""


@dataclass
class Assignments:
    """Which owner (a server key such as "user/servername") holds which devices.

    Invariants, kept by every method: an exclusive device (whole GPU, MIG slice) has at most one
    owner; a shared GPU has at most `replicas` owners, each owner at most once; an owner holds a
    resource at most once per `assign` (asking again returns the same devices).
    """

    _slots: dict[str, tuple[Slot, ...]] = field(default_factory=dict)

    # -- queries
    def holdings(self, owner: str) -> tuple[str, ...]:
        """The device UUIDs `owner` holds, in the order they were given (empty if none)."""
        return tuple(uuid for _, uuid in self._slots.get(owner, ()))

    def slots(self, owner: str) -> tuple[Slot, ...]:
        return self._slots.get(owner, ())

    def owners(self) -> tuple[str, ...]:
        return tuple(self._slots)

    def owners_of(self, uuid: str) -> tuple[str, ...]:
        """Who holds this device (several for a shared GPU)."""
        return tuple(o for o, slots in self._slots.items() if any(u == uuid for _, u in slots))

    def snapshot(self) -> dict[str, list[str]]:
        """owner -> UUIDs: the shape running servers report and `reconcile` takes back."""
        return {owner: list(self.holdings(owner)) for owner in self._slots}

    def _load(self) -> dict[str, int]:
        load: dict[str, int] = {}
        for slots in self._slots.values():
            for _, uuid in slots:
                load[uuid] = load.get(uuid, 0) + 1
        return load

    def held(self, inventory: Inventory, resource_name: str) -> int:
        """Units of `resource_name` given out on devices the inventory offers."""
        load = self._load()
        return sum(min(load.get(d.uuid, 0), inventory.units(d)) for d in inventory.devices_for(resource_name))

    def free(self, inventory: Inventory, resource_name: str) -> int:
        """Units of `resource_name` that can still be given out: the profile list's "N free"."""
        load = self._load()
        return sum(
            max(inventory.units(d) - load.get(d.uuid, 0), 0) for d in inventory.devices_for(resource_name)
        )

    def free_all(self, inventory: Inventory) -> dict[str, int]:
        return {name: self.free(inventory, name) for name in inventory.resources()}

    # -- changes
    def assign(self, inventory: Inventory, owner: str, resource_name: str, count: int = 1) -> list[str]:
        """Give `owner` `count` units of `resource_name` and return their device UUIDs.

        Whole GPUs and MIG slices go to one owner only, first free in discovery order. Shared GPUs
        go to the least loaded ones (ties by GPU index), each owner at most once per GPU: a second
        replica of the same GPU would add nothing to CUDA_VISIBLE_DEVICES. Asking again for the
        same resource and count returns the same devices (a retried spawn must not take more);
        asking for a different count while holding some is an error (release first).
        """
        if not isinstance(owner, str) or not owner:
            raise ValueError("owner must be a non-empty string such as 'user/servername'")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be a non-negative int, not {count!r}")
        current = [uuid for name, uuid in self._slots.get(owner, ()) if name == resource_name]
        if current:
            if len(current) == count:
                return current
            raise AssignmentError(
                f"{owner} already holds {len(current)} {resource_name}; stop the server before "
                f"asking for {count}"
            )
        if count == 0:
            return []
        devices = inventory.devices_for(resource_name)
        capacity = sum(inventory.units(d) for d in devices)
        load = self._load()
        candidates = [d for d in devices if load.get(d.uuid, 0) < inventory.units(d)]
        free = sum(inventory.units(d) - load.get(d.uuid, 0) for d in candidates)
        if free < count:
            raise DevicesUnavailable(resource_name, count, free, capacity)
        if len(candidates) < count:  # shared only: enough replicas, too few distinct GPUs
            raise DevicesUnavailable(
                resource_name, count, free, capacity,
                detail=f"{count} different shared GPUs are needed and only {len(candidates)} have room",
            )
        if resource_name == NVIDIA_GPU_SHARED:
            candidates.sort(key=lambda d: (load.get(d.uuid, 0), d.index))
        chosen = [d.uuid for d in candidates[:count]]
        self._slots[owner] = (*self._slots.get(owner, ()), *((resource_name, u) for u in chosen))
        return chosen

    def release(self, owner: str) -> tuple[str, ...]:
        """Give back everything `owner` holds (server stopped); returns the UUIDs freed."""
        freed = self.holdings(owner)
        self._slots.pop(owner, None)
        return freed

    def reconcile(self, inventory: Inventory, held: Mapping[str, Iterable[str]]) -> ReconcileReport:
        """Replace the state with what running servers report (owner -> device UUIDs).

        Used after a hub restart: memory is gone, the servers still run with their
        CUDA_VISIBLE_DEVICES. Owners are taken in `held`'s order (pass the oldest server first):
        for a device claimed by more owners than it allows, the first ones keep it and the rest
        are returned as conflicts to log. UUIDs this machine no longer offers are dropped and
        reported. Duplicates within one owner count once.
        """
        slots: dict[str, list[Slot]] = {}
        load: dict[str, list[str]] = {}
        conflicts: list[Conflict] = []
        dropped: list[tuple[str, str]] = []
        for owner, uuids in held.items():
            mine = slots.setdefault(owner, [])
            for uuid in dict.fromkeys(uuids):
                device = inventory.device(uuid)
                if device is None:
                    dropped.append((owner, uuid))
                    continue
                holders = load.setdefault(uuid, [])
                if len(holders) >= inventory.units(device):
                    conflicts.append(Conflict(uuid, device.resource_name, tuple(holders), owner))
                    continue
                holders.append(owner)
                mine.append((device.resource_name, uuid))
        self._slots = {owner: tuple(s) for owner, s in slots.items() if s}
        return ReconcileReport(tuple(conflicts), tuple(dropped))

    def adopt(self, inventory: Inventory, owner: str, uuids: Iterable[str]) -> ReconcileReport:
        """Take over one running server's devices (a server found alive after a hub restart).

        Those already holding a device keep it; `owner`'s claims come last, so a conflict goes
        against the server being adopted. The report says what was not taken over.
        """
        held = self.snapshot()
        held.pop(owner, None)
        held[owner] = list(uuids)
        return self.reconcile(inventory, held)


def cuda_visible_devices(uuids: Iterable[str]) -> str:
    """CUDA_VISIBLE_DEVICES for these devices: their UUIDs, comma-separated, each once.

    CUDA accepts GPU-... and MIG-... UUIDs alike; an empty string hides every GPU, which is what a
    CPU-only server must get (unset would show it all of them).
    """
    seen: dict[str, None] = {}
    for uuid in uuids:
        uuid = uuid.strip()
        if not uuid or "," in uuid:
            raise ValueError(f"not a device UUID: {uuid!r}")
        seen.setdefault(uuid, None)
    return ",".join(seen)


def parse_cuda_visible_devices(value: str | None) -> list[str]:
    """The inverse of `cuda_visible_devices`, for reading back a running server's environment."""
    if not value:
        return []
    return list(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))


def product_label(product: str) -> str:
    """NVML/nvidia-smi names ("NVIDIA H200") as GPU feature discovery labels them ("NVIDIA-H200")."""
    return "-".join(product.split())


def matches_product(device_product: str, wanted: str | None) -> bool:
    """Whether a device of model `device_product` (as discovered, "NVIDIA H200") is of the model
    a profile or job names (`wanted`, a node label value such as "NVIDIA-H200"; None: any)."""
    return wanted is None or product_label(device_product) == product_label(wanted)
