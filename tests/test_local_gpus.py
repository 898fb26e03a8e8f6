"""GPU discovery for local mode (hub_ext.backends.local.gpus).

The nvidia-smi path is tested end to end: a stand-in `nvidia-smi` script prints a recorded output
(tests/data/nvidia-smi/) and exits with the real tool's status, and discovery runs it as a real
subprocess. NVML cannot run here (no GPU, no driver), so its path is driven by a small fake `pynvml`
that follows the documented call contract; it checks our translation (MIG naming, empty MIG slots,
fallbacks), not NVML itself.
"""

from __future__ import annotations

import asyncio
import logging
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from hub_ext.backends.local.gpus import (
    discover,
    discover_nvidia_smi,
    discover_nvml,
    parse_nvidia_smi_list,
)
from hub_ext.core.devices import GPU, MIG, Assignments, Inventory
from hub_ext.core.resources import NVIDIA_GPU, NVIDIA_GPU_SHARED

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "nvidia-smi"
MiB = 2**20

H200_GPU0 = "GPU-3a17f50e-2fa8-5ec3-8929-7ecf989934bb"
H200_GPU1 = "GPU-26fc62e2-2a15-5eb8-b8d1-400eaec00de5"


def fixture_text(name: str) -> str:
    return (DATA / name).read_text()


def fake_nvidia_smi(tmp_path: Path, fixture: str, exit_code: int = 0, stderr: str = "") -> list[str]:
    """A stand-in `nvidia-smi` that prints a recorded output and exits like the real one."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"cat '{DATA / fixture}'\n"
        + (f"echo '{stderr}' >&2\n" if stderr else "")
        + f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return [str(script), "-L"]


# --------------------------------------------------------------------------- parsing


def test_h200_two_gpus_one_split_into_seven_slices():
    devices = parse_nvidia_smi_list(fixture_text("h200-2gpu-7x1g.txt"))
    assert [(d.kind, d.index) for d in devices] == [(GPU, 0)] + [(MIG, 0)] * 7 + [(GPU, 1)]
    gpu0, first_slice = devices[0], devices[1]
    assert (gpu0.uuid, gpu0.product) == (H200_GPU0, "NVIDIA H200")
    assert first_slice.uuid == "MIG-3358c542-9dbd-59b7-b61c-6126ff5c2128"
    assert (first_slice.mig_profile, first_slice.parent_uuid) == ("1g.18gb", H200_GPU0)
    assert first_slice.product == "NVIDIA H200"
    inventory = Inventory(devices)
    assert inventory.capacity() == {NVIDIA_GPU: 1, "nvidia.com/mig-1g.18gb": 7}
    assert [d.uuid for d in inventory.devices_for(NVIDIA_GPU)] == [H200_GPU1]


def test_a100_mixed_profiles():
    devices = parse_nvidia_smi_list(fixture_text("a100-mixed.txt"))
    assert len(devices) == 11
    assert Inventory(devices).capacity() == {
        NVIDIA_GPU: 1,
        "nvidia.com/mig-1g.10gb": 4,
        "nvidia.com/mig-1g.10gb.me": 1,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-4g.40gb": 1,
    }
    assert {d.product for d in devices} == {"NVIDIA A100-SXM4-80GB"}
    assert {d.parent_uuid for d in devices if d.kind == MIG} == {d.uuid for d in devices[:6:5]}


def test_old_driver_mig_uuids_are_kept_verbatim():
    """R450/R460 printed MIG-GPU-<parent>/<gi>/<ci>; CUDA of that era accepts exactly that string."""
    devices = parse_nvidia_smi_list(fixture_text("a100-40gb-r460.txt"))
    parent = "GPU-97df4d26-0b9c-5daa-a2cc-df0733ec4042"
    migs = [d for d in devices if d.kind == MIG]
    assert [d.uuid for d in migs] == [f"MIG-{parent}/{gi}/0" for gi in (1, 5, 13, 14)]
    assert {d.parent_uuid for d in migs} == {parent}
    assert devices[0].product == "A100-SXM4-40GB"
    assert Inventory(devices).capacity() == {
        NVIDIA_GPU: 1,
        "nvidia.com/mig-1g.5gb": 2,
        "nvidia.com/mig-2g.10gb": 1,
        "nvidia.com/mig-3g.20gb": 1,
    }


def test_compute_instance_profiles():
    devices = parse_nvidia_smi_list(fixture_text("h100-compute-instances.txt"))
    assert Inventory(devices).capacity() == {"nvidia.com/mig-1c.3g.40gb": 3, "nvidia.com/mig-3g.40gb": 1}
    assert devices[0].product == "NVIDIA H100 80GB HBM3"


def test_single_consumer_gpu():
    (device,) = parse_nvidia_smi_list(fixture_text("rtx4090-single.txt"))
    assert (device.product, device.kind, device.index) == ("NVIDIA GeForce RTX 4090", GPU, 0)


@pytest.mark.parametrize("fixture", ["no-gpu.txt", "no-driver.txt", "garbage.txt"])
def test_outputs_without_devices_parse_to_nothing(fixture):
    assert parse_nvidia_smi_list(fixture_text(fixture)) == []


def test_garbage_lines_between_good_ones_are_skipped():
    orphan = "  MIG 1g.5gb Device 0: (UUID: bad)\n"
    text = "warning: something\n" + fixture_text("rtx4090-single.txt") + orphan
    (device,) = parse_nvidia_smi_list(text)
    assert device.product == "NVIDIA GeForce RTX 4090"


def test_repeated_uuids_keep_the_first():
    text = fixture_text("rtx4090-single.txt") + fixture_text("rtx4090-single.txt").replace("GPU 0", "GPU 1")
    (device,) = parse_nvidia_smi_list(text)
    assert device.index == 0


def test_mig_line_with_invalid_profile_is_skipped():
    text = fixture_text("rtx4090-single.txt") + "  MIG weird.profile Device 0: (UUID: MIG-1)\n"
    assert len(parse_nvidia_smi_list(text)) == 1


# --------------------------------------------------------------------------- the real subprocess path


@pytest.mark.parametrize(
    "fixture, capacity",
    [
        ("h200-2gpu-7x1g.txt", {NVIDIA_GPU: 1, "nvidia.com/mig-1g.18gb": 7}),
        ("rtx4090-single.txt", {NVIDIA_GPU: 1}),
        ("garbage.txt", {}),
    ],
)
def test_discover_runs_nvidia_smi(tmp_path, fixture, capacity):
    command = fake_nvidia_smi(tmp_path, fixture)
    assert Inventory(discover(command=command, use_nvml=False)).capacity() == capacity


def test_no_devices_found_exit_6_means_no_gpus(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    assert discover(command=fake_nvidia_smi(tmp_path, "no-gpu.txt", exit_code=6), use_nvml=False) == []
    assert "No devices were found" in caplog.text


def test_driver_not_loaded_exit_9_means_no_gpus(tmp_path):
    command = fake_nvidia_smi(tmp_path, "no-driver.txt", exit_code=9)
    assert discover_nvidia_smi(command) == []


def test_good_output_with_failing_exit_is_not_trusted(tmp_path):
    assert discover_nvidia_smi(fake_nvidia_smi(tmp_path, "h200-2gpu-7x1g.txt", exit_code=1)) == []


def test_missing_binary_means_no_gpus(tmp_path):
    assert discover(command=[str(tmp_path / "no-such-nvidia-smi"), "-L"], use_nvml=False) == []


def test_hanging_nvidia_smi_means_no_gpus(tmp_path):
    script = tmp_path / "slow-smi"
    script.write_text("#!/bin/sh\nexec sleep 5\n")
    script.chmod(0o755)
    assert discover_nvidia_smi([str(script)], timeout=0.3) == []


def test_unreadable_output_is_logged(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    assert discover_nvidia_smi(fake_nvidia_smi(tmp_path, "garbage.txt")) == []
    assert "could not read" in caplog.text


def test_discovered_devices_can_be_assigned(tmp_path):
    inventory = Inventory(
        discover(command=fake_nvidia_smi(tmp_path, "h200-2gpu-7x1g.txt"), use_nvml=False),
        shared_gpus=[1],
        shared_replicas=4,
    )
    assert inventory.capacity() == {NVIDIA_GPU_SHARED: 4, "nvidia.com/mig-1g.18gb": 7}
    state = Assignments()
    assert state.assign(inventory, "ana/", NVIDIA_GPU_SHARED) == [H200_GPU1]


# --------------------------------------------------------------------------- NVML path


class FakeNVML:
    """The part of `pynvml` discovery uses, answering like NVML does for a given machine.

    `gpus`: list of dicts {uuid, name, total_mib, mig: None (no MIG support) | list of slots,
    each None (empty) or (uuid, gi_slices, ci_slices, memory_mib)}.
    """

    NVML_DEVICE_MIG_ENABLE = 1

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    def __init__(self, gpus, init_error=None, fail_on=None, as_bytes=False):
        self.gpus = gpus
        self.init_error = init_error
        self.fail_on = fail_on
        self.as_bytes = as_bytes
        self.initialised = False
        self.shutdowns = 0

    def _s(self, text):
        return text.encode() if self.as_bytes else text

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error
        self.initialised = True

    def nvmlShutdown(self):
        self.shutdowns += 1
        self.initialised = False

    def nvmlDeviceGetCount(self):
        assert self.initialised
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.fail_on == index:
            raise self.NVMLError("GPU is lost")
        return ("gpu", index)

    def nvmlDeviceGetUUID(self, handle):
        if handle[0] == "gpu":
            return self._s(self.gpus[handle[1]]["uuid"])
        return self._s(self.gpus[handle[1]]["mig"][handle[2]][0])

    def nvmlDeviceGetName(self, handle):
        return self._s(self.gpus[handle[1]]["name"])

    def nvmlDeviceGetMigMode(self, handle):
        if self.gpus[handle[1]].get("mig") is None:
            raise self.NVMLError_NotSupported("Not Supported")
        return [1, 1] if self.gpus[handle[1]]["mig"] != "disabled" else [0, 0]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.gpus[handle[1]]["total_mib"] * MiB, free=0, used=0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return len(self.gpus[handle[1]]["mig"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if self.gpus[handle[1]]["mig"][index] is None:
            raise self.NVMLError_NotFound("Not Found")
        return ("mig", handle[1], index)

    def nvmlDeviceGetAttributes(self, handle):
        _, gi, ci, mib = self.gpus[handle[1]]["mig"][handle[2]]
        return SimpleNamespace(gpuInstanceSliceCount=gi, computeInstanceSliceCount=ci, memorySizeMB=mib)


def h200_nvml(**kwargs) -> FakeNVML:
    slots = [(f"MIG-h200-{n}", 1, 1, 16384) for n in range(7)]
    return FakeNVML(
        [
            {"uuid": H200_GPU0, "name": "NVIDIA H200", "total_mib": 143771, "mig": [*slots, None]},
            {"uuid": H200_GPU1, "name": "NVIDIA H200", "total_mib": 143771, "mig": "disabled"},
        ],
        **kwargs,
    )


def test_nvml_lists_gpus_and_mig_slices_like_nvidia_smi():
    nvml = h200_nvml()
    devices = discover_nvml(nvml)
    from_smi = parse_nvidia_smi_list(fixture_text("h200-2gpu-7x1g.txt"))
    assert Inventory(devices).capacity() == Inventory(from_smi).capacity()
    assert devices[1].uuid == "MIG-h200-0" and devices[1].parent_uuid == H200_GPU0
    assert nvml.shutdowns == 1


def test_nvml_names_mixed_profiles_from_memory_and_slices():
    slots = [
        ("MIG-a", 3, 3, 40192),
        ("MIG-b", 2, 2, 19968),
        None,
        ("MIG-c", 3, 1, 40192),
        ("MIG-d", 1, 1, 9728),
    ]
    a100 = {"uuid": "GPU-a100", "name": "NVIDIA A100-SXM4-80GB", "total_mib": 81920, "mig": slots}
    nvml = FakeNVML([a100])
    assert [d.mig_profile for d in discover_nvml(nvml) if d.kind == MIG] == [
        "3g.40gb",
        "2g.20gb",
        "1c.3g.40gb",
        "1g.10gb",
    ]


def test_nvml_gpu_without_mig_support_is_offered_whole():
    rtx = {"uuid": "GPU-4090", "name": "NVIDIA GeForce RTX 4090", "total_mib": 24564, "mig": None}
    nvml = FakeNVML([rtx])
    assert Inventory(discover_nvml(nvml)).capacity() == {NVIDIA_GPU: 1}


def test_nvml_gpu_in_mig_mode_without_instances_is_not_offered(caplog):
    nvml = FakeNVML([{"uuid": "GPU-empty", "name": "NVIDIA H200", "total_mib": 143771, "mig": [None] * 7}])
    assert discover_nvml(nvml) == []
    assert "without MIG devices" in caplog.text


def test_nvml_old_bindings_returning_bytes():
    devices = discover_nvml(h200_nvml(as_bytes=True))
    assert devices[0].product == "NVIDIA H200" and devices[0].uuid == H200_GPU0


def test_nvml_init_failure_falls_back_to_nvidia_smi(tmp_path):
    nvml = h200_nvml(init_error=FakeNVML.NVMLError("Driver Not Loaded"))
    assert discover_nvml(nvml) is None
    devices = discover(command=fake_nvidia_smi(tmp_path, "rtx4090-single.txt"), nvml=nvml)
    assert [d.product for d in devices] == ["NVIDIA GeForce RTX 4090"]


def test_nvml_failure_while_listing_falls_back_and_shuts_down(tmp_path):
    nvml = h200_nvml(fail_on=1)
    devices = discover(command=fake_nvidia_smi(tmp_path, "no-gpu.txt", exit_code=6), nvml=nvml)
    assert devices == []
    assert nvml.shutdowns == 1


def test_nvml_preferred_over_nvidia_smi(tmp_path):
    devices = discover(command=fake_nvidia_smi(tmp_path, "rtx4090-single.txt"), nvml=h200_nvml())
    assert {d.product for d in devices} == {"NVIDIA H200"}


def test_one_look_at_the_pool_reads_the_process_table_once(monkeypatch):
    """The pool learns of job replicas' GPUs from the process table (every process's
    environment): one read per look, not one per device, and `free`/`assign` answer from it."""
    from hub_ext.backends.local import gpu_pool

    pool = gpu_pool.GPUPool(gpu_pool.GPUPool.shared(
        ["cat", str(DATA / "h200-2gpu-7x1g.txt")], use_nvml=False).inventory)
    mig = "MIG-3358c542-9dbd-59b7-b61c-6126ff5c2128"
    reads = []

    def job_devices(hub: str | None = None) -> set[str]:  # the process table: a replica holds a MIG slice
        reads.append(1)
        return {mig}

    monkeypatch.setattr(gpu_pool, "job_devices", job_devices)
    looked = asyncio.run(pool.look())
    assert looked.free("nvidia.com/mig-1g.18gb") == 6 and looked.free("nvidia.com/mig-1g.18gb") == 6
    assert len(reads) == 1
    assert mig not in asyncio.run(pool.look()).assign("ann/", "nvidia.com/mig-1g.18gb", 6)
    assert len(reads) == 2


def test_a_slow_process_table_does_not_hold_the_hubs_loop(monkeypatch):
    """On a busy machine reading every process's environment takes seconds; the hub's event loop
    (every page, every start) keeps running while a look reads it."""
    from hub_ext.backends.local import gpu_pool

    pool = gpu_pool.GPUPool(gpu_pool.GPUPool.shared(
        ["cat", str(DATA / "h200-2gpu-7x1g.txt")], use_nvml=False).inventory)
    # A process table whose read ends only when the loop has run something else meanwhile (a
    # page's callback): a read on the loop itself would wait for that in vain, until its deadline.
    page_served = threading.Event()
    served_during_read: list[bool] = []

    def slow_read(hub: str | None = None) -> set:
        served_during_read.append(page_served.wait(20))
        return set()

    monkeypatch.setattr(gpu_pool, "job_devices", slow_read)

    async def main() -> int:
        look = asyncio.ensure_future(pool.look())
        asyncio.get_running_loop().call_soon(page_served.set)  # the loop's next callback
        return (await look).free("nvidia.com/mig-1g.18gb")

    assert asyncio.run(main()) == 7
    assert served_during_read == [True], "the loop waited for the process table's read"
