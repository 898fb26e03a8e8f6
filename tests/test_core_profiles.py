"""The profile catalog: parsing, visibility, validation of choices, availability and proposals."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.backends.local.gpus import parse_nvidia_smi_list
from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.devices import Inventory
from hub_ext.core.profiles import (
    Catalog,
    CatalogError,
    ImagePolicy,
    Offer,
    OptionsError,
    Room,
    Viewer,
    parse_profile,
    propose_profiles,
    room_in_cluster,
    room_on_machine,
)

pytestmark = pytest.mark.unit

TORCH = "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-01"
SCIPY = "quay.io/jupyter/scipy-notebook:2025-06-01"

CATALOG = Catalog.from_config([
    {"slug": "cpu", "kind": "cpu", "default": True, "images": [SCIPY, TORCH]},
    {"slug": "h200", "kind": "gpu", "gpu_product": "NVIDIA-H200", "groups": ["cs101"],
     "cpu_guarantee": "4", "cpu_limit": "8", "mem_guarantee": "32Gi", "mem_limit": "64Gi",
     "images": [TORCH]},
    {"slug": "mig-1g", "kind": "mig", "mig_profile": "1g.18gb", "groups": ["cs101", "cs102"],
     "mem_guarantee": "4Gi", "mem_limit": "16Gi", "images": [TORCH]},
    {"slug": "mig-single", "kind": "mig", "mig_profile": "3g.40gb", "mig_strategy": "single",
     "gpu_product": "NVIDIA-A100-SXM4-80GB", "groups": ["cs102"]},
    {"slug": "shared", "kind": "shared", "roles": ["teacher", "ta"]},
    {"slug": "admin-8gpu", "kind": "gpu", "gpu_count": 8, "admin_only": True},
])
STUDENT_A = Viewer("ann", frozenset({"cs101"}))
STUDENT_B = Viewer("bob", frozenset({"cs102"}))
TEACHER_A = Viewer("tina", frozenset({"cs101"}), role="teacher")
ADMIN = Viewer("root", admin=True)


def slugs(viewer):
    return [p.slug for p in CATALOG.visible(viewer)]


def test_visibility_by_course_role_and_admin():
    assert slugs(STUDENT_A) == ["cpu", "h200", "mig-1g"]
    assert slugs(STUDENT_B) == ["cpu", "mig-1g", "mig-single"]
    assert slugs(TEACHER_A) == ["cpu", "h200", "mig-1g", "shared"]
    assert slugs(ADMIN) == [p.slug for p in CATALOG.profiles]
    assert slugs(Viewer("nobody")) == ["cpu"]


def test_resources_selectors_per_kind():
    by = {p.slug: p for p in CATALOG.profiles}
    assert dict(by["h200"].request) == {"cpu": 4, "memory": 32 * 2**30, "nvidia.com/gpu": 1}
    assert by["h200"].scheduling_selector == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert by["mig-1g"].gpu_resource == "nvidia.com/mig-1g.18gb"
    assert by["mig-1g"].scheduling_selector == {}
    # MIG single strategy: the slice is an nvidia.com/gpu on nodes labelled with the MIG product.
    assert by["mig-single"].gpu_resource == "nvidia.com/gpu"
    assert by["mig-single"].scheduling_selector == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    }
    assert by["shared"].gpu_resource == "nvidia.com/gpu.shared"
    assert "nvidia.com/gpu" not in by["cpu"].request
    assert by["admin-8gpu"].request["nvidia.com/gpu"] == 8


def test_default_selection_and_canonical_options():
    chosen = CATALOG.select(STUDENT_A, {})
    assert chosen.profile.slug == "cpu" and chosen.image == SCIPY
    assert chosen.to_user_options() == {"profile": "cpu", "image": SCIPY}
    chosen = CATALOG.select(STUDENT_A, {"profile": "mig-1g", "memory": "8Gi"})
    assert chosen.memory.limit == 8 * 2**30 and chosen.memory.guarantee == 4 * 2**30
    assert chosen.request["memory"] == 4 * 2**30
    assert CATALOG.select(STUDENT_A, chosen.to_user_options()) == chosen


TAMPERED = [
    ({"profile": "mig-single"}, "not available to you; choose one of: cpu, h200, mig-1g"),
    ({"profile": "admin-8gpu"}, "not available to you"),
    ({"profile": "shared"}, "not available to you"),
    ({"profile": "no-such"}, "not available to you"),
    ({"profile": "h200", "gpus": 8}, "unknown option(s) 'gpus'"),
    ({"profile": "h200", "privileged": True}, "unknown option(s) 'privileged'"),
    ({"profile": 7}, "must be a string"),
    ({"profile": ["h200"]}, "must be a string"),
    ({"profile": "mig-1g", "memory": "-4Gi"}, "between 4Gi and 16Gi"),
    ({"profile": "mig-1g", "memory": "1Ei"}, "between 4Gi and 16Gi"),
    ({"profile": "mig-1g", "memory": "lots"}, "not a Kubernetes quantity"),
    ({"profile": "mig-1g", "memory": 0}, "between 4Gi and 16Gi"),
    ({"profile": "mig-1g", "memory": True}, "must be a quantity"),
    ({"profile": "mig-1g", "cpu": "1000"}, "between 1 and 2"),
    ({"profile": "mig-1g", "cpu": {"$gt": 1}}, "must be a quantity"),
    ({"profile": "h200", "image": "docker.io/library/ubuntu:latest"}, "is not allowed for profile 'h200'"),
    ({"profile": "h200", "image": "x; rm -rf /"}, "is not a container image reference"),
    ({"profile": "h200", "image": "$(curl evil)"}, "is not a container image reference"),
    ({"profile": "h200", "image": "img:1\nprivileged: true"}, "is not a container image reference"),
    ({"profile": "h200", "image": "{a: b}"}, "is not a container image reference"),
    ({"profile": "h200\n- privileged"}, "not available to you"),
    ({"profile": "x" * 1000}, "too long"),
]


@pytest.mark.parametrize(("options", "message"), TAMPERED)
def test_tampered_options_are_refused_with_a_reason(options, message):
    with pytest.raises(OptionsError) as e:
        CATALOG.select(STUDENT_A, options)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@settings(max_examples=300)
@given(st.dictionaries(
    st.sampled_from(["profile", "image", "cpu", "memory", "x"]),
    st.one_of(st.text(max_size=40), st.integers(), st.none(), st.booleans(), st.lists(st.text())),
))
def test_any_input_is_either_a_valid_selection_or_a_clear_refusal(options):
    try:
        chosen = CATALOG.select(STUDENT_A, options)
    except OptionsError as e:
        assert str(e)
    else:
        assert chosen.profile.visible_to(STUDENT_A)
        assert chosen.memory.guarantee <= chosen.memory.limit <= chosen.profile.memory.limit


def test_image_policy_course_images_and_pattern():
    policy = ImagePolicy(extra_images=frozenset({"registry.uni.edu/cs101/env:3"}),
                         pattern=r"registry\.uni\.edu/cs101/[a-z0-9-]+:[a-z0-9.]+")
    assert CATALOG.select(STUDENT_A, {"profile": "h200", "image": "registry.uni.edu/cs101/env:3"},
                          policy).image == "registry.uni.edu/cs101/env:3"
    assert CATALOG.select(STUDENT_A, {"profile": "h200", "image": "registry.uni.edu/cs101/mine:1.0"},
                          policy).image.endswith("mine:1.0")
    with pytest.raises(OptionsError, match="or an image matching"):
        CATALOG.select(STUDENT_A, {"profile": "h200", "image": "registry.uni.edu/cs102/x:1"}, policy)


@pytest.mark.parametrize(("entry", "message"), [
    ({"slug": "Bad Slug"}, "slug must be lowercase"),
    ({"slug": "a", "kind": "tpu"}, "kind 'tpu' is not one of"),
    ({"slug": "a", "kind": "mig"}, "needs mig_profile"),
    ({"slug": "a", "kind": "mig", "mig_profile": "1g.18gb", "mig_strategy": "single"}, "needs gpu_product"),
    ({"slug": "a", "kind": "cpu", "gpu_count": 1}, "cannot have gpu_count"),
    ({"slug": "a", "kind": "gpu", "gpu_count": 0}, "needs gpu_count >= 1"),
    ({"slug": "a", "mem_limit": "1Gi", "mem_guarantee": "2Gi"}, "mem_limit must be at least"),
    ({"slug": "a", "mem_limit": "12Gb"}, "did you mean 12Gi"),
    ({"slug": "a", "images": "one:1"}, "images must be a list"),
    ({"slug": "a", "roles": ["dean"]}, "unknown role(s) dean"),
    ({"slug": "a", "gpu": 1}, "unknown field(s) gpu"),
])
def test_catalog_errors_name_the_profile_and_field(entry, message):
    with pytest.raises(CatalogError) as e:
        parse_profile(entry)
    assert message in str(e.value)


def test_duplicate_slugs_are_refused():
    with pytest.raises(CatalogError, match="used twice"):
        Catalog.from_config([{"slug": "a"}, {"slug": "a"}])


def test_defaults_keep_guarantee_below_limit():
    p = parse_profile({"slug": "a", "cpu_limit": "4", "mem_limit": "512Mi"})
    assert p.cpu.guarantee == 1 and p.cpu.limit == 4
    assert p.memory.guarantee == p.memory.limit == Fraction(512 * 2**20)


def test_offer_reason_for_a_full_profile():
    by = {p.slug: p for p in CATALOG.profiles}
    assert Offer(by["mig-1g"], 0).reason.startswith("none free right now")
    assert Offer(by["mig-1g"], 0).available is False
    assert Offer(by["cpu"], None).available is True


TWO_H200 = parse_profile({"slug": "h200-x2", "kind": "gpu", "gpu_product": "NVIDIA-H200",
                          "gpu_count": 2})
BIG_MEMORY = parse_profile({"slug": "big", "kind": "cpu", "mem_guarantee": "32Gi", "mem_limit": "32Gi"})
ASK = "; ask your admin to change the profile"


@pytest.mark.parametrize("offer, reason", [
    # free now: no reason
    (Offer(TWO_H200, 1, Room(1)), ""),
    (Offer(TWO_H200, None), ""),
    # busy: some would fit once others stop (or nobody knows how many would)
    (Offer(TWO_H200, 0, Room(2)),
     "none free right now: every nvidia.com/gpu that fits this profile is in use"),
    (Offer(TWO_H200, 0, Room(1, cluster=True)),
     "none free right now: every nvidia.com/gpu that fits this profile is in use"),
    (Offer(TWO_H200, 0), "none free right now: every nvidia.com/gpu that fits this profile is in use"),
    (Offer(BIG_MEMORY, 0), "none free right now: every capacity that fits this profile is in use"),
    # never: not even the empty machine (cluster) has room
    (Offer(TWO_H200, 0, Room(0, resource="nvidia.com/gpu", needed=Fraction(2), most=Fraction(1))),
     "this machine has no place for it: it needs 2 whole nvidia.com/gpu (NVIDIA-H200) and this machine has 1"
     + ASK),
    (Offer(TWO_H200, 0, Room(0)), "this machine has no place for it" + ASK),
    (Offer(TWO_H200, 0, Room(0, cluster=True, resource="nvidia.com/gpu", needed=Fraction(2),
                             most=Fraction(1))),
     "no node of this cluster has room for it: it needs 2 whole nvidia.com/gpu on one node and the most "
     "any node has is 1" + ASK),
    (Offer(BIG_MEMORY, 0, Room(0, cluster=True, resource="memory", needed=Fraction(32 * 2**30),
                               most=Fraction(16 * 2**30))),
     "no node of this cluster has room for it: it needs 32Gi memory on one node and the most any node "
     "has is 16Gi" + ASK),
    (Offer(TWO_H200, 0, Room(0, cluster=True, matching=False)),
     "no node of this cluster has room for it: no schedulable node matches its node selector and "
     "tolerations" + ASK),
    (Offer(TWO_H200, 0, Room(0, cluster=True)),
     "no node of this cluster has room for it: no node has all it asks for (CPU, memory, GPUs) at once"
     + ASK),
])
def test_offer_reason_tells_busy_from_never(offer, reason):
    """Why a profile is disabled: "wait" when it would fit an empty machine, "ask" when not."""
    assert offer.reason == reason
    assert offer.available is (reason == "")


def test_room_on_a_workstation_counts_the_devices_that_exist():
    """Two H200s, one split into 7 MIG slices: one whole H200, so two whole never fit."""
    devices = parse_nvidia_smi_list(
        (Path(__file__).parent / "data" / "nvidia-smi" / "h200-2gpu-7x1g.txt").read_text())
    inventory = Inventory(devices)
    by = {p.slug: p for p in CATALOG.profiles}
    assert room_on_machine(by["h200"], inventory) == Room(1)
    assert room_on_machine(TWO_H200, inventory) == Room(0, resource="nvidia.com/gpu", needed=2, most=1)
    assert room_on_machine(by["mig-1g"], inventory) == Room(7)
    assert room_on_machine(by["cpu"], inventory) is None
    a100 = parse_profile({"slug": "a100", "kind": "gpu", "gpu_product": "NVIDIA-A100"})
    assert room_on_machine(a100, inventory).fits == 0  # another model: none of those here
    shared = Inventory(devices, shared_gpus=[1], shared_replicas=4)  # GPU 1 is the whole one
    assert room_on_machine(by["shared"], shared) == Room(4)
    two_shares = parse_profile({"slug": "s2", "kind": "shared", "gpu_count": 2})
    assert room_on_machine(two_shares, shared).fits == 0  # two distinct GPUs, one is shared


def test_room_in_a_cluster_names_what_no_node_has():
    def gpu_node(name, gpus, memory="256Gi"):
        return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
                "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "32", "memory": memory, "pods": "110",
                                           "nvidia.com/gpu": str(gpus)},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
    busy = [{"spec": {"nodeName": "a", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
             "status": {"phase": "Running"}}]
    snap = CapacitySnapshot.from_k8s([gpu_node("a", 1), gpu_node("b", 1)], busy)
    by = {p.slug: p for p in CATALOG.profiles}
    assert room_in_cluster(by["h200"], snap) == Room(2, cluster=True)
    assert room_in_cluster(TWO_H200, snap) == Room(0, cluster=True, resource="nvidia.com/gpu", needed=2,
                                                   most=1)
    assert room_in_cluster(by["mig-single"], snap) == Room(0, cluster=True, matching=False)
    small = CapacitySnapshot.from_k8s([gpu_node("a", 2, memory="16Gi")], [])
    h200 = parse_profile({"slug": "h", "kind": "gpu", "gpu_product": "NVIDIA-H200", "mem_guarantee": "32Gi",
                          "mem_limit": "32Gi"})
    room = room_in_cluster(h200, small)
    assert (room.fits, room.resource, room.needed, room.most) == (0, "memory", 32 * 2**30, 16 * 2**30)


def test_proposals_cover_every_kind_and_parse():
    proposals = propose_profiles({
        "nvidia.com/gpu": ["NVIDIA-H200", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"],
        "nvidia.com/mig-1g.18gb": ["NVIDIA-H200"],
        "nvidia.com/gpu.shared": ["NVIDIA-L40S"],
    })
    catalog = Catalog.from_config(proposals)
    kinds = {(p.kind, p.gpu_resource, p.mig_strategy) for p in catalog.profiles}
    assert kinds == {
        ("cpu", None, None),
        ("gpu", "nvidia.com/gpu", None),
        ("mig", "nvidia.com/gpu", "single"),
        ("mig", "nvidia.com/mig-1g.18gb", "mixed"),
        ("shared", "nvidia.com/gpu.shared", None),
    }
    assert [p["slug"] for p in propose_profiles({})] == ["cpu"]
