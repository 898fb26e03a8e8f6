"""Local GPU inventory and exclusive device assignment (hub_ext.core.devices).

What a student would notice if these broke: two notebooks on one MIG slice (both slow, one out of
memory), a profile list saying "3 free" when none is, a spawn refused with an unreadable message,
or a hub restart that hands a running student's GPU to someone else.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.devices import (
    MIG,
    AssignmentError,
    Assignments,
    Device,
    DevicesUnavailable,
    Inventory,
    cuda_visible_devices,
    mig_memory_gb,
    mig_profile_name,
    parse_cuda_visible_devices,
)
from hub_ext.core.resources import NVIDIA_GPU, NVIDIA_GPU_SHARED, mig_resource_name

pytestmark = pytest.mark.unit

MIG_1G = mig_resource_name(1, 18)
MIG_3G = mig_resource_name(3, 71)
MiB = 2**20


def gpu(i: int, product: str = "NVIDIA H200") -> Device:
    return Device(uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", index=i, product=product)


def mig(parent: Device, n: int, profile: str = "1g.18gb") -> Device:
    return Device(
        uuid=f"MIG-{parent.index:04x}{n:04x}-0000-0000-0000-000000000000",
        index=parent.index,
        product=parent.product,
        kind=MIG,
        mig_profile=profile,
        parent_uuid=parent.uuid,
    )


def h200_machine(**config) -> Inventory:
    """The reference workstation: 2 H200, GPU 0 split into 7 x 1g.18gb, GPU 1 whole."""
    g0, g1 = gpu(0), gpu(1)
    return Inventory([g0, *(mig(g0, n) for n in range(7)), g1], **config)


# --------------------------------------------------------------------------- Device


def test_resource_names_match_the_device_plugin():
    g = gpu(0)
    assert g.resource_name == NVIDIA_GPU
    assert mig(g, 0).resource_name == "nvidia.com/mig-1g.18gb"
    assert mig(g, 0, "3g.71gb").resource_name == MIG_3G
    assert Device(uuid=g.uuid, index=0, product="x", shared=True).resource_name == NVIDIA_GPU_SHARED


def test_mig_profiles_with_attributes_or_compute_instances_become_valid_resource_names():
    g = gpu(0, "NVIDIA A100-SXM4-80GB")
    assert mig(g, 0, "1g.10gb+me").resource_name == "nvidia.com/mig-1g.10gb.me"
    assert mig(g, 0, "1c.3g.40gb").resource_name == "nvidia.com/mig-1c.3g.40gb"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"uuid": ""}, "non-empty"),
        ({"uuid": "GPU-a,GPU-b"}, "comma"),
        ({"index": -1}, "non-negative"),
        ({"index": True}, "non-negative"),
        ({"kind": "tpu"}, "kind"),
        ({"mig_profile": "1g.18gb"}, "no MIG profile"),
        ({"kind": MIG, "mig_profile": "big", "parent_uuid": "GPU-p"}, "not like 1g.18gb"),
        ({"kind": MIG, "mig_profile": "1g.18gb"}, "parent_uuid"),
        ({"kind": MIG, "mig_profile": "1g.18gb", "parent_uuid": "GPU-p", "shared": True}, "only whole"),
    ],
)
def test_device_rejects_nonsense(kwargs, message):
    fields = {"uuid": "GPU-1", "index": 0, "product": "NVIDIA H200", **kwargs}
    with pytest.raises(ValueError, match=message):
        Device(**fields)


def test_device_is_frozen():
    with pytest.raises(AttributeError):
        gpu(0).index = 3  # type: ignore[misc]


# --------------------------------------------------------------------------- MIG naming


@pytest.mark.parametrize(
    "mig_mib, total_mib, expected",
    [
        # H200 141 GB (143771 MiB): 1/8, 2/8, 4/8 and all of the memory
        (16384, 143771, 18),
        (32768, 143771, 35),
        (69888, 143771, 71),  # 70.5 rounds half up, as NVIDIA's tools do
        (143360, 143771, 141),
        # A100-SXM4-80GB (81920 MiB): 1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb
        (9728, 81920, 10),
        (19968, 81920, 20),
        (40192, 81920, 40),
        (80896, 81920, 80),
        # A100-SXM4-40GB (40960 MiB): 1g.5gb and 3g.20gb
        (4864, 40960, 5),
        (19968, 40960, 20),
    ],
)
def test_mig_memory_gb_names_profiles_like_nvidia_smi(mig_mib, total_mib, expected):
    assert mig_memory_gb(mig_mib, total_mib * MiB) == expected


def test_mig_memory_gb_rejects_nonpositive_sizes():
    with pytest.raises(ValueError):
        mig_memory_gb(0, 10 * MiB)


def test_mig_profile_name():
    assert mig_profile_name(1, 18) == "1g.18gb"
    assert mig_profile_name(3, 40, compute_slices=3) == "3g.40gb"
    assert mig_profile_name(3, 40, compute_slices=1) == "1c.3g.40gb"
    assert mig_profile_name(1, 10, attributes=["me"]) == "1g.10gb+me"


# --------------------------------------------------------------------------- Inventory


def test_two_gpus_one_split_into_seven_slices():
    inventory = h200_machine()
    assert inventory.capacity() == {NVIDIA_GPU: 1, MIG_1G: 7}
    assert inventory.resources() == (NVIDIA_GPU, MIG_1G)
    assert [d.index for d in inventory.devices_for(NVIDIA_GPU)] == [1]
    assert inventory.product_of(MIG_1G) == "NVIDIA H200"
    assert inventory.device(gpu(0).uuid) is None, "a split GPU is not offered whole"
    assert len(inventory.devices) == 9, "every discovered device stays visible for the dashboard"


def test_machine_without_gpus_offers_nothing():
    inventory = Inventory([])
    assert inventory.capacity() == {}
    assert inventory.resources() == ()
    assert Assignments().free(inventory, NVIDIA_GPU) == 0


def test_shared_gpus_by_uuid_or_index_count_replicas():
    g0, g1, g2 = gpu(0), gpu(1), gpu(2)
    inventory = Inventory([g0, g1, g2], shared_gpus=[g0.uuid, 2], shared_replicas=4)
    assert inventory.capacity() == {NVIDIA_GPU: 1, NVIDIA_GPU_SHARED: 8}
    assert inventory.device(g0.uuid).shared and inventory.device(g2.uuid).shared
    assert not inventory.device(g1.uuid).shared
    assert Inventory([g0, g1], shared_gpus=["1"], shared_replicas=2).capacity() == {
        NVIDIA_GPU: 1,
        NVIDIA_GPU_SHARED: 2,
    }


def test_shared_entries_that_name_no_whole_gpu_are_reported_not_fatal():
    inventory = h200_machine(shared_gpus=["GPU-typo", 0, 1], shared_replicas=3)
    assert inventory.capacity() == {NVIDIA_GPU_SHARED: 3, MIG_1G: 7}
    reasons = dict(inventory.ignored_shared)
    assert "no GPU" in reasons["GPU-typo"]
    assert "MIG" in reasons["0"]


def test_mixed_products_have_no_single_product():
    inventory = Inventory([gpu(0, "NVIDIA H200"), gpu(1, "NVIDIA A100-SXM4-80GB")])
    assert inventory.products_of(NVIDIA_GPU) == ("NVIDIA A100-SXM4-80GB", "NVIDIA H200")
    assert inventory.product_of(NVIDIA_GPU) is None
    assert inventory.product_of(MIG_1G) is None


def test_inventory_rejects_duplicate_devices_and_bad_replicas():
    with pytest.raises(ValueError, match="twice"):
        Inventory([gpu(0), gpu(0)])
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="shared_replicas"):
            Inventory([gpu(0)], shared_replicas=bad)


def test_inventory_is_immutable():
    inventory = h200_machine()
    with pytest.raises(AttributeError):
        inventory.shared_replicas = 9


# --------------------------------------------------------------------------- assign / release


def test_mig_slices_are_exclusive_until_all_are_taken():
    inventory, state = h200_machine(), Assignments()
    given_out = [state.assign(inventory, f"student{i}/", MIG_1G)[0] for i in range(7)]
    assert len(set(given_out)) == 7
    assert state.free(inventory, MIG_1G) == 0
    with pytest.raises(DevicesUnavailable) as refused:
        state.assign(inventory, "late/", MIG_1G)
    assert str(refused.value).startswith(
        "All 7 nvidia.com/mig-1g.18gb on this machine are in use (7 of 7)"
    )
    assert refused.value.free == 0 and refused.value.capacity == 7
    assert state.holdings("late/") == ()


def test_partial_shortage_message_says_how_many_are_free():
    inventory, state = h200_machine(), Assignments()
    state.assign(inventory, "a/", MIG_1G, 6)
    expected = r"Only 1 of 7 nvidia\.com/mig-1g\.18gb on this machine is free; 2 requested"
    with pytest.raises(DevicesUnavailable, match=expected):
        state.assign(inventory, "b/", MIG_1G, 2)
    assert state.free(inventory, MIG_1G) == 1, "a refused request takes nothing"


def test_resource_absent_from_this_machine():
    with pytest.raises(DevicesUnavailable, match=r"This machine has no nvidia\.com/mig-3g\.71gb"):
        Assignments().assign(h200_machine(), "a/", MIG_3G)


def test_whole_gpu_goes_to_one_owner():
    inventory, state = h200_machine(), Assignments()
    (uuid,) = state.assign(inventory, "alice/", NVIDIA_GPU)
    assert uuid == gpu(1).uuid
    with pytest.raises(DevicesUnavailable, match=r"All 1 nvidia.com/gpu .* \(1 of 1\)"):
        state.assign(inventory, "bob/", NVIDIA_GPU)
    assert state.owners_of(uuid) == ("alice/",)


def test_assign_is_idempotent_per_owner():
    inventory, state = h200_machine(), Assignments()
    first = state.assign(inventory, "alice/", MIG_1G, 2)
    assert state.assign(inventory, "alice/", MIG_1G, 2) == first
    assert state.free(inventory, MIG_1G) == 5
    with pytest.raises(AssignmentError, match="already holds 2"):
        state.assign(inventory, "alice/", MIG_1G, 3)


def test_one_owner_may_hold_several_resources_and_releases_them_together():
    inventory, state = h200_machine(), Assignments()
    a = state.assign(inventory, "alice/train", MIG_1G)
    b = state.assign(inventory, "alice/train", NVIDIA_GPU)
    assert state.holdings("alice/train") == (*a, *b)
    assert state.release("alice/train") == (*a, *b)
    assert state.free_all(inventory) == inventory.capacity()
    assert state.release("alice/train") == ()


def test_zero_count_and_bad_arguments():
    inventory, state = h200_machine(), Assignments()
    assert state.assign(inventory, "a/", MIG_1G, 0) == []
    assert state.owners() == ()
    with pytest.raises(ValueError):
        state.assign(inventory, "a/", MIG_1G, -1)
    with pytest.raises(ValueError):
        state.assign(inventory, "", MIG_1G)


def test_shared_gpus_fill_least_loaded_first_and_respect_replicas():
    g0, g1 = gpu(0), gpu(1)
    inventory = Inventory([g0, g1], shared_gpus=[0, 1], shared_replicas=2)
    state = Assignments()
    order = [state.assign(inventory, f"s{i}/", NVIDIA_GPU_SHARED)[0] for i in range(4)]
    assert order == [g0.uuid, g1.uuid, g0.uuid, g1.uuid]
    with pytest.raises(DevicesUnavailable, match=r"All 4 nvidia.com/gpu.shared .* \(4 of 4\)"):
        state.assign(inventory, "s4/", NVIDIA_GPU_SHARED)
    state.release("s1/")
    assert state.assign(inventory, "s5/", NVIDIA_GPU_SHARED) == [g1.uuid]


def test_shared_replicas_of_one_owner_are_on_different_gpus():
    g0, g1 = gpu(0), gpu(1)
    inventory = Inventory([g0, g1], shared_gpus=[0, 1], shared_replicas=3)
    state = Assignments()
    assert sorted(state.assign(inventory, "big/", NVIDIA_GPU_SHARED, 2)) == sorted([g0.uuid, g1.uuid])
    with pytest.raises(DevicesUnavailable, match="3 different shared GPUs are needed and only 2"):
        state.assign(inventory, "huge/", NVIDIA_GPU_SHARED, 3)


def test_free_ignores_holdings_on_devices_that_disappeared():
    inventory, state = h200_machine(), Assignments()
    (uuid,) = state.assign(inventory, "a/", NVIDIA_GPU)
    smaller = Inventory([d for d in inventory.devices if d.uuid != uuid])
    assert state.free(smaller, NVIDIA_GPU) == 0
    assert state.held(smaller, NVIDIA_GPU) == 0
    assert state.free(smaller, MIG_1G) == 7


# --------------------------------------------------------------------------- reconcile


def test_reconcile_after_restart_reproduces_holdings():
    inventory, before = h200_machine(), Assignments()
    before.assign(inventory, "alice/", MIG_1G, 2)
    before.assign(inventory, "bob/", NVIDIA_GPU)
    after = Assignments()
    report = after.reconcile(inventory, before.snapshot())
    assert report.clean
    assert after.snapshot() == before.snapshot()
    assert after.free_all(inventory) == before.free_all(inventory)


def test_reconcile_first_claimant_keeps_an_exclusive_device():
    inventory = h200_machine()
    whole = gpu(1).uuid
    state = Assignments()
    report = state.reconcile(inventory, {"old/": [whole], "new/": [whole, "GPU-gone"], "empty/": []})
    assert state.holdings("old/") == (whole,)
    assert state.holdings("new/") == ()
    assert state.owners() == ("old/",)
    (conflict,) = report.conflicts
    assert (conflict.uuid, conflict.kept_by, conflict.refused) == (whole, ("old/",), "new/")
    assert "already held by old/" in str(conflict)
    assert report.dropped == (("new/", "GPU-gone"),)
    assert not report.clean


def test_reconcile_drops_a_split_gpu_and_duplicates():
    inventory = h200_machine()
    slice0 = inventory.devices_for(MIG_1G)[0].uuid
    state = Assignments()
    report = state.reconcile(inventory, {"a/": [gpu(0).uuid, slice0, slice0]})
    assert state.holdings("a/") == (slice0,)
    assert report.dropped == (("a/", gpu(0).uuid),)


def test_reconcile_caps_shared_gpus_at_replicas():
    g0 = gpu(0)
    inventory = Inventory([g0], shared_gpus=[0], shared_replicas=2)
    state = Assignments()
    report = state.reconcile(inventory, {"a/": [g0.uuid], "b/": [g0.uuid], "c/": [g0.uuid]})
    assert state.owners() == ("a/", "b/")
    assert [c.refused for c in report.conflicts] == ["c/"]
    assert report.conflicts[0].kept_by == ("a/", "b/")


def test_reconcile_replaces_previous_state():
    inventory, state = h200_machine(), Assignments()
    state.assign(inventory, "ghost/", NVIDIA_GPU)
    state.reconcile(inventory, {})
    assert state.owners() == ()
    assert state.free(inventory, NVIDIA_GPU) == 1


def test_adopt_adds_one_server_and_loses_conflicts():
    inventory, state = h200_machine(), Assignments()
    (whole,) = state.assign(inventory, "alice/", NVIDIA_GPU)
    slice0 = inventory.devices_for(MIG_1G)[0].uuid
    report = state.adopt(inventory, "bob/", [whole, slice0])
    assert state.holdings("alice/") == (whole,)
    assert state.holdings("bob/") == (slice0,)
    assert [c.refused for c in report.conflicts] == ["bob/"]
    assert state.adopt(inventory, "bob/", [slice0]).clean, "adopting again is harmless"
    assert state.free(inventory, MIG_1G) == 6


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def test_cuda_visible_devices_round_trip():
    uuids = ["MIG-aaaa", "GPU-bbbb", "MIG-aaaa"]
    value = cuda_visible_devices(uuids)
    assert value == "MIG-aaaa,GPU-bbbb"
    assert parse_cuda_visible_devices(value) == ["MIG-aaaa", "GPU-bbbb"]
    assert cuda_visible_devices([]) == "", "a CPU-only server must see no GPU, not all of them"
    assert parse_cuda_visible_devices("") == [] and parse_cuda_visible_devices(None) == []
    assert parse_cuda_visible_devices(" GPU-1 , ,GPU-2") == ["GPU-1", "GPU-2"]
    with pytest.raises(ValueError):
        cuda_visible_devices(["GPU-1,GPU-2"])
    with pytest.raises(ValueError):
        cuda_visible_devices([" "])


# --------------------------------------------------------------------------- properties


@st.composite
def inventories(draw) -> Inventory:
    """Up to 4 GPUs, each whole, shared, or split into 1-7 slices of a few profiles."""
    devices, shared = [], []
    for i in range(draw(st.integers(0, 4))):
        g = gpu(i)
        devices.append(g)
        mode = draw(st.sampled_from(["whole", "shared", "mig"]))
        if mode == "shared":
            shared.append(i)
        elif mode == "mig":
            shapes = st.sampled_from(["1g.18gb", "2g.35gb", "3g.71gb"])
            profiles = draw(st.lists(shapes, min_size=1, max_size=7))
            devices.extend(mig(g, n, p) for n, p in enumerate(profiles))
    return Inventory(devices, shared_gpus=shared, shared_replicas=draw(st.integers(1, 4)))


RESOURCES = [NVIDIA_GPU, NVIDIA_GPU_SHARED, MIG_1G, "nvidia.com/mig-2g.35gb", MIG_3G]
OWNERS = [f"u{i}/" for i in range(6)]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.sampled_from(OWNERS), st.sampled_from(RESOURCES), st.integers(0, 3)),
        st.tuples(st.just("release"), st.sampled_from(OWNERS)),
    ),
    max_size=40,
)


def check_invariants(inventory: Inventory, state: Assignments) -> None:
    capacity = inventory.capacity()
    holders: dict[str, list[str]] = {}
    for owner in state.owners():
        uuids = state.holdings(owner)
        assert uuids, "an owner with nothing is not kept"
        assert len(set(uuids)) == len(uuids), "an owner holds a device at most once"
        for uuid in uuids:
            holders.setdefault(uuid, []).append(owner)
    for uuid, owners in holders.items():
        device = inventory.device(uuid)
        assert device is not None
        assert len(owners) <= inventory.units(device), f"{uuid} over-given: {owners}"
    for name in RESOURCES:
        free, held = state.free(inventory, name), state.held(inventory, name)
        assert free >= 0 and held >= 0
        assert free + held == capacity.get(name, 0)


@settings(max_examples=150, deadline=None)
@given(inventories(), operations)
def test_random_assign_release_keeps_invariants(inventory, ops):
    state = Assignments()
    for op in ops:
        if op[0] == "release":
            state.release(op[1])
        else:
            _, owner, name, count = op
            before = state.snapshot()
            try:
                got = state.assign(inventory, owner, name, count)
            except AssignmentError:
                assert state.snapshot() == before, "a refused assign changes nothing"
            else:
                assert len(got) == count
                assert state.assign(inventory, owner, name, count) == got, "idempotent"
                if count == 0:
                    assert state.snapshot() == before
        check_invariants(inventory, state)


@settings(max_examples=100, deadline=None)
@given(inventories(), operations)
def test_release_everyone_returns_full_capacity(inventory, ops):
    state = Assignments()
    for op in ops:
        if op[0] == "assign":
            with contextlib.suppress(AssignmentError):
                state.assign(inventory, *op[1:])
    for owner in state.owners():
        state.release(owner)
    assert state.free_all(inventory) == inventory.capacity()


@settings(max_examples=100, deadline=None)
@given(inventories(), operations)
def test_reconcile_after_simulated_restart_reproduces_state(inventory, ops):
    state = Assignments()
    for op in ops:
        if op[0] == "assign":
            with contextlib.suppress(AssignmentError):
                state.assign(inventory, *op[1:])
        else:
            state.release(op[1])
    # what running servers report: their CUDA_VISIBLE_DEVICES
    reported = {
        owner: parse_cuda_visible_devices(cuda_visible_devices(state.holdings(owner)))
        for owner in state.owners()
    }
    restarted = Assignments()
    report = restarted.reconcile(inventory, reported)
    assert report.clean
    assert restarted.snapshot() == state.snapshot()
    assert restarted.free_all(inventory) == state.free_all(inventory)
    check_invariants(inventory, restarted)


@settings(max_examples=100, deadline=None)
@given(
    inventories(),
    st.lists(
        st.tuples(st.sampled_from(OWNERS), st.lists(st.integers(0, 40), max_size=5)),
        max_size=8,
    ),
)
def test_reconcile_of_arbitrary_claims_never_over_gives(inventory, claims):
    """Servers may report anything (stale env, hand-edited env): the rebuilt state stays valid."""
    pool = [d.uuid for d in inventory.devices] + ["GPU-gone", "MIG-gone"]
    held = {owner: [pool[i % len(pool)] for i in picks] for owner, picks in claims}
    state = Assignments()
    report = state.reconcile(inventory, held)
    check_invariants(inventory, state)
    claimed = sum(len(set(uuids)) for uuids in held.values())
    kept = sum(len(state.holdings(o)) for o in state.owners())
    assert kept + len(report.conflicts) + len(report.dropped) == claimed


def test_a_device_in_words_names_its_gpu_its_model_and_its_slice():
    """What the Cluster page and a user's home say a local server holds."""
    inventory = Inventory([
        Device("GPU-a", 0, "NVIDIA H200"), Device("GPU-b", 1, "NVIDIA H200"),
        Device("MIG-1", 1, "NVIDIA H200", MIG, "1g.18gb", "GPU-b"),
        Device("MIG-2", 1, "NVIDIA H200", MIG, "3g.71gb", "GPU-b"),
    ], shared_gpus=[0])
    assert inventory.words("GPU-a") == "GPU 0 (NVIDIA H200), shared"
    assert inventory.words("MIG-1") == "GPU 1 (NVIDIA H200), MIG slice 1 (1g.18gb)"
    assert inventory.words("MIG-2") == "GPU 1 (NVIDIA H200), MIG slice 2 (3g.71gb)"
    assert inventory.words("GPU-gone") == "GPU-gone"  # no longer offered: its UUID
    assert Inventory([Device("GPU-c", 2, "NVIDIA A100")]).words("GPU-c") == "GPU 2 (NVIDIA A100)"
