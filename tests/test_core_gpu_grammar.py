"""One GPU resource grammar (hub_ext.core.resources), asked by every user of a GPU decision.

What an admin would notice if this failed: a course quota on `nvidia.com/mig-1g.10gb.me` refused
as "unknown resource", GPU-hours that leave media-extension slices out, a workstation whose
`1g.10gb+me` slice is offered but never counted as a GPU, a notebook or job pod asking for such a
slice (or for `amd.com/gpu`) that never schedules on the tainted GPU nodes.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.backends.local.gpus import discover_nvml, parse_nvidia_smi_list
from hub_ext.core import quota
from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.culling import held_gpus, server_kind
from hub_ext.core.devices import GPU, MIG, Device, Inventory, mig_profile_name
from hub_ext.core.profiles import Catalog, CatalogError, parse_profile, pod_settings, propose_profiles
from hub_ext.core.resources import (
    AMD_GPU,
    NVIDIA_GPU,
    MigProfile,
    ResourceVector,
    gpu_kind,
    gpu_taint_key,
    is_gpu_resource,
    is_mig_resource,
    parse_mig,
    validate_resource_name,
)
from hub_ext.service.courses import unknown_resources
from tests.test_core_capacity import node
from tests.test_local_gpus import FakeNVML

pytestmark = pytest.mark.unit

ME = "nvidia.com/mig-1g.10gb.me"
UTC = timezone.utc


def keys(tolerations):
    return [t["key"] for t in tolerations]


# ------------------------------------------------------------------------------- devices


# What NVIDIA's tools print for a slice: go-nvlib's attributes, and any others of its grammar.
nvidia_attributes = st.one_of(
    st.just(()),
    st.sampled_from([("me",), ("me.all",), ("gfx",)]),
    st.lists(st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,3}(\.[A-Za-z0-9]{1,3})?", fullmatch=True),
             min_size=1, max_size=2, unique=True).map(tuple),
)


@st.composite
def local_devices(draw) -> list[Device]:
    """A workstation: whole GPUs (some shared) and GPUs split into slices of any profile."""
    devices: list[Device] = []
    for index in range(draw(st.integers(1, 3))):
        gpu = Device(uuid=f"GPU-{index}", index=index, product="NVIDIA H200")
        devices.append(gpu)
        for n in range(draw(st.integers(0, 3))):
            g = draw(st.integers(1, 7))
            attributes = draw(nvidia_attributes)
            if draw(st.booleans()):  # a slice without them, as nvidia-smi writes 1g.24gb-me
                attributes = tuple("-" + a for a in attributes)
            profile = mig_profile_name(
                g, draw(st.integers(1, 200)), compute_slices=draw(st.none() | st.integers(1, g)),
                attributes=attributes,
            )
            devices.append(Device(uuid=f"MIG-{index}-{n}", index=index, product="NVIDIA H200", kind=MIG,
                                  mig_profile=profile, parent_uuid=gpu.uuid))
    return devices


@settings(max_examples=200, deadline=None)
@given(local_devices(), st.data())
def test_every_name_devices_can_produce_is_a_gpu_of_the_grammar(devices, data):
    whole = [d.index for d in devices if d.kind == GPU]
    inventory = Inventory(devices, shared_gpus=data.draw(st.lists(st.sampled_from(whole), max_size=2)))
    names = {d.resource_name for d in inventory.devices} | set(inventory.resources())
    for name in names:
        validate_resource_name(name)
        assert is_gpu_resource(name), name
        assert gpu_taint_key(name) == NVIDIA_GPU
        assert quota.gpu_amount(ResourceVector({name: 1})) == 1
    for device in inventory.devices:
        if device.kind == MIG:
            assert is_mig_resource(device.resource_name)
            assert parse_mig(device.resource_name).label == device.resource_name.removeprefix(
                "nvidia.com/mig-")


def test_nvidia_smi_slices_with_attributes_are_gpus():
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
        "  MIG 1g.10gb+me    Device  0: (UUID: MIG-0001)\n"
        "  MIG 1g.20gb       Device  1: (UUID: MIG-0002)\n"
        "  MIG 1g.24gb+me.all Device  2: (UUID: MIG-0003)\n"
        "  MIG 1g.24gb-me    Device  3: (UUID: MIG-0004)\n"
        "  MIG 1c.2g.20gb    Device  4: (UUID: MIG-0005)\n"
    )
    inventory = Inventory(parse_nvidia_smi_list(text))
    assert sorted(inventory.resources()) == [
        "nvidia.com/mig-1c.2g.20gb", ME, "nvidia.com/mig-1g.20gb", "nvidia.com/mig-1g.24gb-me",
        "nvidia.com/mig-1g.24gb.me.all",
    ]
    assert all(gpu_kind(name) == "mig" for name in inventory.resources())


class AttributedNVML(FakeNVML):
    """NVML that also answers which GPU instance profile a slice is (id 7: 1-slice REV1, +me)."""

    def __init__(self, gpus, profile_ids, **kwargs):
        super().__init__(gpus, **kwargs)
        self.profile_ids = profile_ids

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return handle[2]

    def nvmlDeviceGetGpuInstanceById(self, parent, gi_id):
        return (parent[1], gi_id)

    def nvmlGpuInstanceGetInfo(self, instance):
        profile_id = self.profile_ids[instance[1]]
        if profile_id is None:
            raise self.NVMLError("Insufficient Permissions")
        return type("Info", (), {"profileId": profile_id})()


def test_nvml_names_media_extension_slices_like_the_device_plugin():
    slots = [("MIG-me", 1, 1, 9728), ("MIG-plain", 1, 1, 9728), ("MIG-noperm", 1, 1, 9728),
             ("MIG-all", 1, 1, 9728), ("MIG-nome", 1, 1, 9728)]
    nvml = AttributedNVML([{"uuid": "GPU-h100", "name": "NVIDIA H100 80GB HBM3", "total_mib": 81559,
                            "mig": slots}], profile_ids=[7, 0, None, 15, 13])
    names = {d.uuid: d.resource_name for d in discover_nvml(nvml) if d.kind == MIG}
    assert names == {"MIG-me": ME, "MIG-plain": "nvidia.com/mig-1g.10gb",
                     "MIG-noperm": "nvidia.com/mig-1g.10gb",  # NVML would not say: the plain name
                     "MIG-all": "nvidia.com/mig-1g.10gb.me.all", "MIG-nome": "nvidia.com/mig-1g.10gb-me"}


# ------------------------------------------------------------------------------- quotas


def test_a_course_quota_on_a_media_extension_slice_parses_and_fits():
    limits = quota.parse_limits({"resources": {ME: 2}})
    assert limits.ceiling(ME) == 2 and limits.to_dict()["resources"] == {ME: "2"}
    assert unknown_resources(limits.limited) == []
    assert unknown_resources([ME, "nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb-me",
                              "amd.com/gpu", "nvidia.com/gpus", "nvidia.com/mig-1g.10gb+me"]) == [
        "nvidia.com/gpus", "nvidia.com/mig-1g.10gb+me"]
    one = ResourceVector({"cpu": "1", ME: 1})
    user = (quota.Limits(), quota.Usage())
    assert quota.admit(one, user, (limits, quota.Usage(ResourceVector({ME: 1}), 1)), "cs101")
    refused = quota.admit(one, user, (limits, quota.Usage(ResourceVector({ME: 2}), 2)), "cs101")
    assert not refused and refused.reason_code == quota.COURSE_RESOURCE
    assert "2 of its 2 nvidia.com/mig-1g.10gb.me" in refused.message


def test_gpu_hours_count_media_extension_slices_and_other_vendors():
    start = datetime(2025, 3, 3, tzinfo=UTC)
    hour = timedelta(hours=1)
    intervals = [
        (start, start + 2 * hour, ResourceVector({ME: 1, "cpu": "4"})),
        (start, start + hour, ResourceVector({AMD_GPU: 2})),
        (start, start + hour, ResourceVector({"nvidia.com/mig-1g.24gb-me": 1})),
        (start, start + 5 * hour, ResourceVector({"cpu": "8"})),
    ]
    assert quota.gpu_seconds(intervals, start, start + 7 * 24 * hour) == Fraction(5 * 3600)
    exhausted = quota.Limits(gpu_hours_per_week=Fraction(1))
    decision = quota.admit(ResourceVector({ME: 1}), (exhausted, quota.Usage(gpu_hours_week=Fraction(1))),
                           None, "cs101")
    assert decision.reason_code == quota.USER_GPU_HOURS


# ------------------------------------------------------------------------------- culling


def test_the_culler_sees_what_kind_of_gpu_a_server_holds():
    assert server_kind({ME: 1}) == "mig"
    assert server_kind({"nvidia.com/mig-1g.18gb.shared": 1}) == "shared"
    assert server_kind({AMD_GPU: 1, "cpu": 2}) == "gpu"
    assert server_kind({ME: 1, NVIDIA_GPU: 1}) == "gpu"
    assert server_kind({"cpu": 2, "memory": 4}) == server_kind({}) == "cpu"
    assert held_gpus({ME: 1, "cpu": 4, AMD_GPU: 0, "habana.ai/gaudi": 2}) == {ME: 1, "habana.ai/gaudi": 2}


# ------------------------------------------------------------------------------- profiles, capacity


def test_a_mig_profile_with_attributes_asks_for_its_resource_and_tolerates_its_taints():
    for written in ("1g.10gb+me", "1g.10gb.me"):
        profile = parse_profile({"slug": "me", "kind": "mig", "mig_profile": written})
        assert profile.gpu_resource == ME and profile.mig_profile == "1g.10gb+me"
        settings_ = pod_settings(profile)
        assert settings_["resources"] == {ME: "1"}
        assert keys(settings_["tolerations"]) == [NVIDIA_GPU, ME]
    single = parse_profile({"slug": "s", "kind": "mig", "mig_profile": "1g.10gb+me",
                            "mig_strategy": "single", "gpu_product": "NVIDIA-A100-SXM4-80GB"})
    assert single.scheduling_selector == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me"}
    assert keys(pod_settings(single)["tolerations"]) == [NVIDIA_GPU]


def test_another_vendors_gpu_tolerates_its_own_taint_only():
    profile = parse_profile({"slug": "amd", "kind": "shared", "gpu_resource": AMD_GPU})
    assert keys(pod_settings(profile)["tolerations"]) == [AMD_GPU]
    with pytest.raises(CatalogError, match="is not a GPU resource"):
        parse_profile({"slug": "x", "kind": "shared", "gpu_resource": "cpu"})


def test_proposals_and_capacity_know_slices_with_attributes():
    proposals = propose_profiles({ME: ["NVIDIA-H100"], "nvidia.com/gpu": ["NVIDIA-A100-MIG-1g.10gb.me"],
                                  AMD_GPU: ["AMD-MI300X"]})
    catalog = Catalog.from_config(proposals)
    assert {(p.kind, p.gpu_resource, p.mig_strategy) for p in catalog.profiles} == {
        ("cpu", None, None), ("mig", ME, "mixed"), ("mig", NVIDIA_GPU, "single")}
    snapshot = CapacitySnapshot.from_k8s([
        node("h100", {"cpu": "32", "memory": "128Gi", ME: "2", "nvidia.com/mig-1g.20gb": "1"}),
        node("a100", {"cpu": "32", "memory": "128Gi", NVIDIA_GPU: "7"},
             labels={"nvidia.com/gpu.product": "NVIDIA-A100-MIG-1g.10gb.me"}),
        node("mi300", {"cpu": "32", "memory": "128Gi", AMD_GPU: "8"}),
    ], [])
    h100, a100, mi300 = (snapshot.node(n) for n in ("h100", "a100", "mi300"))
    assert h100.mig_strategy == "mixed" and set(h100.gpu_resources) == {ME, "nvidia.com/mig-1g.20gb"}
    assert a100.single_mig_profile == MigProfile(1, 10, ("me",))
    assert mi300.gpu_resources == (AMD_GPU,)
