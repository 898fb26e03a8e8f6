"""Which GPUs and MIG slices this machine has: NVML first, `nvidia-smi -L` otherwise.

Why this module exists: local mode hands devices to servers with CUDA_VISIBLE_DEVICES, so it
needs their UUIDs and, for MIG slices, their profiles (which become `nvidia.com/mig-<profile>`
resources, the names Kubernetes uses). NVML (the `pynvml` module of `nvidia-ml-py`) is the
authoritative source when installed; `nvidia-smi -L` ships with every driver and says the same
for our purpose. A machine without a driver, without GPUs, or whose tools print something we
cannot read offers CPU profiles only: discovery never raises, it logs and returns [].

The result feeds `hub_ext.core.devices.Inventory`; everything about who gets what is decided there.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from hub_ext.core.devices import GPU, MIG, Device, mig_memory_gb, mig_profile_name

__all__ = ["DEFAULT_COMMAND", "discover", "discover_nvidia_smi", "discover_nvml", "parse_nvidia_smi_list"]

log = logging.getLogger(__name__)

DEFAULT_COMMAND: tuple[str, ...] = ("nvidia-smi", "-L")

# GPU 0: NVIDIA H200 (UUID: GPU-5f3c1d2e-...)
_GPU_LINE = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s+\(UUID:\s*(GPU-[^\s)]+)\)\s*$")
#   MIG 1g.18gb     Device  0: (UUID: MIG-0a1b2c3d-...)          (R470 and later)
#   MIG 1g.10gb Device 0: (UUID: MIG-GPU-<gpu-uuid>/7/0)         (R450/R460)
_MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(MIG-[^\s)]+)\)\s*$")


def parse_nvidia_smi_list(text: str) -> list[Device]:
    """Devices from `nvidia-smi -L` output; lines that are neither GPU nor MIG lines are skipped.

    MIG lines belong to the GPU line above them; a MIG line with no GPU above, or with a profile
    that is not a MIG profile, is skipped with a warning rather than guessed at.
    """
    devices: list[Device] = []
    parent: Device | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        gpu = _GPU_LINE.match(line)
        if gpu:
            try:
                parent = Device(uuid=gpu.group(3), index=int(gpu.group(1)), product=gpu.group(2), kind=GPU)
            except ValueError as exc:
                log.warning("nvidia-smi line %d skipped: %s", number, exc)
                parent = None
                continue
            devices.append(parent)
            continue
        mig = _MIG_LINE.match(line)
        if mig and parent is not None:
            try:
                devices.append(
                    Device(
                        uuid=mig.group(3),
                        index=parent.index,
                        product=parent.product,
                        kind=MIG,
                        mig_profile=mig.group(1),
                        parent_uuid=parent.uuid,
                    )
                )
            except ValueError as exc:
                log.warning("nvidia-smi line %d skipped: %s", number, exc)
            continue
        log.debug("nvidia-smi line %d not understood: %r", number, line)
    return _unique(devices)


def discover_nvidia_smi(command: Sequence[str] = DEFAULT_COMMAND, timeout: float = 20.0) -> list[Device]:
    """Run `nvidia-smi -L` (or `command`) and parse it; [] when it is missing or fails.

    nvidia-smi exits non-zero with "No devices were found" (6) or when the driver is not loaded
    (9): both mean this machine has no GPU to offer, not that the hub is broken.
    """
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("no GPUs: %s could not run (%s)", command[0] if command else "?", exc)
        return []
    if done.returncode != 0:
        reason = (done.stdout + done.stderr).strip().splitlines()
        log.info("no GPUs: %s exited %d: %s", " ".join(command), done.returncode, reason[0] if reason else "")
        return []
    devices = parse_nvidia_smi_list(done.stdout)
    if not devices and done.stdout.strip():
        log.warning("no GPUs: could not read the output of %s", " ".join(command))
    return devices


def discover_nvml(nvml: Any | None = None) -> list[Device] | None:
    """Devices from NVML, or None when NVML is not usable here (then nvidia-smi is asked).

    `nvml` is the `pynvml` module (imported when not given). MIG profiles are named from the
    slice's memory size and GPU instance slice count (`nvmlDeviceGetAttributes`) and, for the
    attributes (+me, +me.all, +gfx, -me), from its GPU instance's profile id, the way NVIDIA's
    go-nvlib names them; where NVML does not say (older drivers, no permission), none are added.
    """
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[import-not-found,no-redef]
        except Exception:  # an ImportError, or a broken install: either way, no NVML
            return None
    try:
        nvml.nvmlInit()
    except Exception as exc:
        log.info("NVML not usable (%s); asking nvidia-smi", exc)
        return None
    try:
        devices: list[Device] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpu = Device(
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                index=index,
                product=_text(nvml.nvmlDeviceGetName(handle)),
                kind=GPU,
            )
            if not _mig_enabled(nvml, handle):
                devices.append(gpu)
                continue
            slices = _mig_devices(nvml, handle, gpu)
            if not slices:  # MIG on, no instances created: CUDA cannot use this GPU at all
                log.warning("GPU %d (%s) is in MIG mode without MIG devices; not offered", index, gpu.uuid)
                continue
            devices.append(gpu)
            devices.extend(slices)
        return _unique(devices)
    except Exception as exc:
        log.warning("NVML failed while listing devices (%s); asking nvidia-smi", exc)
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            log.debug("nvmlShutdown failed", exc_info=True)


def discover(
    command: Sequence[str] = DEFAULT_COMMAND, nvml: ModuleType | Any | None = None, use_nvml: bool = True
) -> list[Device]:
    """This machine's GPUs and MIG slices: NVML if it works, else `command` (nvidia-smi -L)."""
    if use_nvml:
        found = discover_nvml(nvml)
        if found is not None:
            return found
    return discover_nvidia_smi(command)


# --------------------------------------------------------------------------- NVML details


def _text(value: str | bytes) -> str:
    """Old pynvml versions return bytes, newer ones str."""
    return value.decode() if isinstance(value, bytes) else value


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    """Current MIG mode; GPUs without MIG raise NotSupported, which means "no"."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        return False
    return bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _mig_devices(nvml: Any, handle: Any, gpu: Device) -> list[Device]:
    """The MIG slices that exist on a MIG-enabled GPU (empty slots raise NotFound: skipped)."""
    total_bytes = nvml.nvmlDeviceGetMemoryInfo(handle).total
    slices = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:
            continue
        attrs = nvml.nvmlDeviceGetAttributes(mig)
        profile = mig_profile_name(
            attrs.gpuInstanceSliceCount,
            mig_memory_gb(attrs.memorySizeMB, total_bytes),
            compute_slices=attrs.computeInstanceSliceCount,
            attributes=_mig_attributes(nvml, handle, mig),
        )
        slices.append(
            Device(
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                index=gpu.index,
                product=gpu.product,
                kind=MIG,
                mig_profile=profile,
                parent_uuid=gpu.uuid,
            )
        )
    return slices


# NVML_GPU_INSTANCE_PROFILE_* ids (nvml.h) of slices with attributes, as go-nvlib's NewMigProfile
# names them: 1/2-slice REV1 "+me", GFX "+gfx", NO_ME "-me", ALL_ME "+me.all".
_GI_PROFILE_ATTRIBUTES: dict[int, tuple[str, ...]] = {
    7: ("me",), 8: ("me",), 10: ("gfx",), 11: ("gfx",), 12: ("gfx",),
    13: ("-me",), 14: ("-me",), 15: ("me.all",), 16: ("me.all",),
}


def _mig_attributes(nvml: Any, parent: Any, mig: Any) -> tuple[str, ...]:
    """The attributes of a MIG slice's profile, from its GPU instance's profile id; () when NVML
    cannot tell (an old driver or pynvml without these calls, or no permission to ask)."""
    try:
        instance = nvml.nvmlDeviceGetGpuInstanceById(parent, nvml.nvmlDeviceGetGpuInstanceId(mig))
        return _GI_PROFILE_ATTRIBUTES.get(int(nvml.nvmlGpuInstanceGetInfo(instance).profileId), ())
    except Exception as exc:  # NVMLError, AttributeError of old bindings: the plain profile then
        log.debug("MIG profile attributes not known (%s)", exc)
        return ()


def _unique(devices: list[Device]) -> list[Device]:
    """Drop repeated UUIDs (keep the first): the Inventory refuses duplicates."""
    seen: set[str] = set()
    out = []
    for device in devices:
        if device.uuid in seen:
            log.warning("device %s listed twice; keeping the first", device.uuid)
            continue
        seen.add(device.uuid)
        out.append(device)
    return out
