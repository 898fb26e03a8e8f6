"""Quantities, resource vectors and pod requests (hub_ext.core.resources).

These are the numbers every quota, profile and admission decision is made of: a parsing slip
here refuses a student's spawn or lets a course exceed its GPUs.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace
from decimal import ROUND_UP, Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.resources import (
    AMD_GPU,
    CPU,
    HABANA_GAUDI,
    INTEL_GPU_I915,
    INTEL_GPU_XE,
    MAX_QUANTITY,
    MEMORY,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    VENDOR_GPU_RESOURCES,
    ZERO,
    MigProfile,
    ResourceVector,
    canonical_quantity,
    container_requests,
    format_quantity,
    gpu_kind,
    gpu_taint_key,
    gpu_tolerations,
    human_quantity,
    is_gpu_resource,
    is_known_resource,
    is_mig_resource,
    mig_resource_name,
    parse_mig,
    parse_mig_profile,
    parse_mig_resource,
    parse_quantity,
    parse_single_mig_product,
    pod_requests,
    pod_spec_requests,
    single_mig_product,
    sum_vectors,
    validate_resource_name,
)

pytestmark = pytest.mark.unit

GI = 2**30
MI = 2**20
MIG_1G = "nvidia.com/mig-1g.18gb"
MIG_3G = "nvidia.com/mig-3g.71gb"

# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4", 4),
        ("+4", 4),
        ("-4", -4),
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("2000m", 2),
        ("1n", Fraction(1, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1Ki", 1024),
        ("1Mi", MI),
        ("1Gi", GI),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1.5Gi", 1536 * MI),
        ("0.5Ki", 512),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("1.5e3", 1500),
        ("1.e3", 1000),
        ("-1.5k", -1500),
        ("007", 7),
        ("  2Gi ", 2 * GI),  # JSON decoding of a Quantity trims whitespace
        ("12.3456789012", Fraction(12345678902, 10**9)),  # below 1n: rounded up
        ("0.1n", Fraction(1, 10**9)),  # something asked for is never rounded to nothing
        (
            "-0.1n",
            Fraction(-1, 10**9),
        ),  # rounding is away from zero, like the API server
        ("1e-10", Fraction(1, 10**9)),
        ("0.0", 0),
        ("10E", 2**63 - 1),  # capped at 2^63-1 like resource.Quantity
        ("-10E", -(2**63 - 1)),
        ("1e100", 2**63 - 1),
        (4, 4),
        (0, 0),
    ],
)
def test_parse_quantity_accepts_what_kubernetes_accepts(text, expected):
    assert parse_quantity(text) == expected
    assert isinstance(parse_quantity(text), Fraction)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "abc",
        "Gi",
        "m",
        "-",
        "+",
        ".",
        "1.5.3",
        "1ki",
        "1KI",
        "1x",
        "1e",
        "1e1.5",
        "1Ee3",
        "--1",
        "+-1",
        "1m3",
        "1 Gi",
        "12Gb",
        "12GB",
        "12GiB",
        "1K",
        "1e9999",
        "0x10",
        "1_000",
        "١",  # noqa: RUF001 - a non-ASCII digit must be refused
    ],
)
def test_parse_quantity_rejects_what_kubernetes_rejects(text):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity") as info:
        parse_quantity(text)
    assert "use e.g. 512Mi, 2Gi, 500m, 4" in str(info.value)


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("12Gb", "did you mean 12Gi or 12G?"),
        ("12GB", "did you mean 12Gi or 12G?"),
        ("12GiB", "did you mean 12Gi?"),
        ("512mb", "did you mean 512Mi or 512M?"),
        ("1K", "did you mean 1Ki or 1k?"),
        ("2 Gi", "no spaces: write 2Gi"),
        ("1.5x", "unknown suffix 'x'"),
        ("abc", "it must start with a number"),
        ("1e9999", "exponent 9999 is out of range"),
        ("1" * 5000, "too many digits"),
    ],
)
def test_parse_errors_tell_what_was_probably_meant(text, hint):
    with pytest.raises(ValueError) as info:
        parse_quantity(text)
    assert hint in str(info.value)
    assert str(info.value).startswith(f"{text!r} is not a Kubernetes quantity: ")


@pytest.mark.parametrize("value", [True, 1.5, None, [1], b"1"])
def test_parse_quantity_refuses_other_types(value):
    with pytest.raises(TypeError):
        parse_quantity(value)


# --------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("value", "binary", "expected"),
    [
        (0, False, "0"),
        (Fraction(1, 2), False, "500m"),
        (2, False, "2"),
        (Fraction(2500, 1000), False, "2500m"),
        (1500, False, "1500"),
        (2000, False, "2k"),
        (3 * 10**9, False, "3G"),
        (Fraction(1, 10**9), False, "1n"),
        (Fraction(1, 10**6), False, "1u"),
        (Fraction(-1, 2), False, "-500m"),
        (10**21, False, "1000E"),
        ("1Ki", False, "1024"),
        ("1Gi", False, "1073741824"),
        (1024, True, "1Ki"),
        (1536 * MI, True, "1536Mi"),
        (8 * GI, True, "8Gi"),
        (512, True, "512"),
        (1500, True, "1500"),
        (2**70, True, "1024Ei"),
        (Fraction(1, 2), True, "500m"),
        (-1024, True, "-1Ki"),
        ("1.5Ki", True, "1536"),
    ],
)
def test_format_quantity_is_canonical(value, binary, expected):
    assert format_quantity(value, binary=binary) == expected


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (CPU, "0.5", "500m"),
        (CPU, "2000m", "2"),
        (CPU, 64, "64"),
        (MEMORY, "8Gi", "8Gi"),
        (MEMORY, "8G", "8G"),  # not "7812500Ki": the shorter exact spelling wins
        (MEMORY, "1.5Gi", "1536Mi"),
        (MEMORY, "1000", "1k"),
        (MEMORY, "1500", "1500"),
        (MEMORY, "130023424Ki", "124Gi"),
        ("ephemeral-storage", "10Gi", "10Gi"),
        ("hugepages-2Mi", "2Gi", "2Gi"),
        (NVIDIA_GPU, 1, "1"),
        (MIG_1G, "7", "7"),
    ],
)
def test_canonical_quantity_by_resource(name, value, expected):
    assert canonical_quantity(name, value) == expected


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (CPU, "500m", "0.5 CPU"),
        (CPU, "2", "2 CPU"),
        (CPU, "1m", "0.001 CPU"),
        (MEMORY, "8Gi", "8 GiB memory"),
        (MEMORY, "1.5Gi", "1.5 GiB memory"),
        (MEMORY, "512Mi", "512 MiB memory"),
        (MEMORY, "8G", "~7.45 GiB memory"),
        (MEMORY, "512", "512 B memory"),
        (MEMORY, "2Ti", "2 TiB memory"),
        ("ephemeral-storage", "10Gi", "10 GiB ephemeral storage"),
        (NVIDIA_GPU, 1, "1 nvidia.com/gpu"),
        (MIG_1G, 2, "2 nvidia.com/mig-1g.18gb"),
    ],
)
def test_human_quantity_reads_naturally(name, value, expected):
    assert human_quantity(name, value) == expected


# --------------------------------------------------------------------------- resource names


@pytest.mark.parametrize(
    "name",
    [
        CPU,
        MEMORY,
        "ephemeral-storage",
        "hugepages-2Mi",
        "pods",
        NVIDIA_GPU,
        NVIDIA_GPU_SHARED,
        MIG_1G,
        "nvidia.com/mig-7g.141gb",
        "example.com/foo_bar",
        "requests.nvidia.com/gpu",
        "a" * 63,
    ],
)
def test_valid_resource_names(name):
    assert validate_resource_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "it is empty"),
        ("/gpu", "empty prefix"),
        ("nvidia.com/", "it is empty"),
        ("NVIDIA.com/gpu", "lowercase DNS subdomain"),
        ("nvidia.com/gpu ", "at most 63 characters"),
        ("-cpu", "starting and ending"),
        ("nvidia.com/mig 1g", "letters, digits"),
        ("a" * 64, "at most 63 characters"),
        ("a/b/c", "lowercase DNS subdomain"),
    ],
)
def test_invalid_resource_names_say_why(name, why):
    with pytest.raises(ValueError, match="is not a valid resource name") as info:
        validate_resource_name(name)
    assert why in str(info.value)


def test_resource_name_must_be_a_string():
    with pytest.raises(TypeError):
        validate_resource_name(7)


def test_mig_resource_names_round_trip():
    assert parse_mig_resource(MIG_1G) == MigProfile(1, 18)
    assert parse_mig_resource("nvidia.com/mig-7g.141gb") == MigProfile(7, 141)
    assert mig_resource_name(3, 71) == MIG_3G
    assert str(MigProfile(2, 35)) == "2g.35gb"
    for compute, memory in [
        (1, 10),
        (1, 20),
        (2, 20),
        (3, 40),
        (4, 40),
        (7, 80),
        (4, 71),
    ]:
        assert parse_mig_resource(mig_resource_name(compute, memory)) == MigProfile(compute, memory)


@pytest.mark.parametrize(
    "name",
    [
        NVIDIA_GPU,
        "nvidia.com/mig-0g.5gb",
        "nvidia.com/mig-1g.18GB",
        "amd.com/mig-1g.5gb",
        "nvidia.com/mig-g.18gb",
        "cpu",
        # attributes are written as the device plugin writes them, or not at all
        "nvidia.com/mig-1g.10gb+me",  # "+" is not allowed in a resource name
        "nvidia.com/mig-1g.10gb.",
        "nvidia.com/mig-1g.10gb..me",
        "nvidia.com/mig-1g.10gb.1me",
        "nvidia.com/mig-1g.10gb.me.",
        "nvidia.com/mig-1g.10gb.me,gfx",
        "nvidia.com/mig-1g.10gb.me-",
        "nvidia.com/mig-1g.10gb.me+gfx",
        "nvidia.com/mig-1g.10gb-",
        "nvidia.com/mig-0c.1g.10gb",
        "nvidia.com/mig-1c.10gb",
        "nvidia.com/mig-1g.10gb." + "a" * 60,  # longer than a resource name may be
        "NVIDIA.com/mig-1g.10gb",
    ],
)
def test_not_mig_resources(name):
    assert not is_mig_resource(name)
    with pytest.raises(ValueError, match="is not a MIG resource"):
        parse_mig_resource(name)


def test_mig_resource_name_refuses_nonsense():
    with pytest.raises(ValueError):
        mig_resource_name(0, 5)
    with pytest.raises(TypeError):
        mig_resource_name(True, 5)
    with pytest.raises(TypeError):
        mig_resource_name(1, "5")


@pytest.mark.parametrize(
    ("name", "is_gpu"),
    [
        (NVIDIA_GPU, True),
        (NVIDIA_GPU_SHARED, True),
        (MIG_1G, True),
        (MIG_3G, True),
        ("nvidia.com/mig-1g.10gb.me", True),
        ("nvidia.com/mig-1g.24gb.me.all", True),
        ("nvidia.com/mig-1g.24gb-me", True),
        ("nvidia.com/mig-1c.2g.20gb", True),
        ("nvidia.com/mig-1g.18gb.shared", True),
        ("amd.com/gpu", True),
        ("gpu.intel.com/i915", True),
        ("gpu.intel.com/xe", True),
        ("habana.ai/gaudi", True),
        (CPU, False),
        (MEMORY, False),
        ("nvidia.com/gpu.foo", False),
        ("nvidia.com/gpus", False),
        ("nvidia.com/GPU", False),
        ("example.com/gpu", False),
        ("gpu.intel.com/millicores", False),  # a share of an Intel GPU's time, not a device
        ("amd.com/GPU", False),
        (None, False),
    ],
)
def test_is_gpu_resource(name, is_gpu):
    assert is_gpu_resource(name) is is_gpu


# --------------------------------------------------------------------------- the GPU grammar

ME = "nvidia.com/mig-1g.10gb.me"


@pytest.mark.parametrize(
    ("name", "profile", "nvidia_spelling"),
    [
        # what NVIDIA's device plugin advertises: its MIG profile with "+" written "."
        (ME, MigProfile(1, 10, ("me",)), "1g.10gb+me"),
        ("nvidia.com/mig-1g.18gb.me", MigProfile(1, 18, ("me",)), "1g.18gb+me"),
        ("nvidia.com/mig-1g.20gb", MigProfile(1, 20), "1g.20gb"),
        ("nvidia.com/mig-1g.20gb.me", MigProfile(1, 20, ("me",)), "1g.20gb+me"),
        ("nvidia.com/mig-1g.24gb.me.all", MigProfile(1, 24, ("me.all",)), "1g.24gb+me.all"),
        ("nvidia.com/mig-2g.48gb.gfx", MigProfile(2, 48, ("gfx",)), "2g.48gb+gfx"),
        ("nvidia.com/mig-1g.24gb-me", MigProfile(1, 24, ("-me",)), "1g.24gb-me"),
        # nvidia-smi's compute instances (local mode) and time-sliced slices (renameByDefault)
        ("nvidia.com/mig-1c.2g.20gb", MigProfile(2, 20, compute_slices=1), "1c.2g.20gb"),
        ("nvidia.com/mig-1g.18gb.shared", MigProfile(1, 18, shared=True), "1g.18gb"),
        ("nvidia.com/mig-1g.10gb.me.shared", MigProfile(1, 10, ("me",), shared=True), "1g.10gb+me"),
    ],
)
def test_mig_resources_with_attributes_are_mig_resources_and_gpus(name, profile, nvidia_spelling):
    assert is_mig_resource(name) and is_gpu_resource(name)
    assert parse_mig(name) == parse_mig_resource(name) == profile
    assert str(profile) == nvidia_spelling
    assert profile.resource_name == name
    assert parse_mig_profile(nvidia_spelling) == replace(profile, shared=False)
    assert gpu_taint_key(name) == NVIDIA_GPU


def test_mig_resource_names_keep_the_attributes():
    assert mig_resource_name(1, 10, ["me"]) == ME
    assert mig_resource_name(1, 10, "me") == ME  # one attribute, not the letters m and e
    assert mig_resource_name(1, 24, ["-me"]) == "nvidia.com/mig-1g.24gb-me"
    assert mig_resource_name(2, 20, compute_slices=1) == "nvidia.com/mig-1c.2g.20gb"
    assert mig_resource_name(3, 40, compute_slices=3) == "nvidia.com/mig-3g.40gb"
    assert mig_resource_name(1, 18, shared=True) == "nvidia.com/mig-1g.18gb.shared"
    assert MigProfile(1, 10, ("me",)).label == "1g.10gb.me"
    assert MigProfile(3, 40, compute_slices=3) == MigProfile(3, 40)


@pytest.mark.parametrize(
    ("text", "profile"),
    [
        ("1g.18gb", MigProfile(1, 18)),
        ("1g.10gb+me", MigProfile(1, 10, ("me",))),
        ("1g.10gb.me", MigProfile(1, 10, ("me",))),  # as resource names and node labels write it
        ("1g.24gb+me.all", MigProfile(1, 24, ("me.all",))),
        ("1g.24gb-me", MigProfile(1, 24, ("-me",))),
        ("1g.10gb+me,gfx", MigProfile(1, 10, ("me", "gfx"))),
        ("1c.2g.20gb", MigProfile(2, 20, compute_slices=1)),
    ],
)
def test_mig_profiles_as_nvidia_smi_writes_them(text, profile):
    assert parse_mig_profile(text) == profile


@pytest.mark.parametrize(
    "text",
    ["", "1g", "1g.18", "1g.18GB", "0g.5gb", "1g.5gb+", "1g.5gb+2me", "1g.5gb+me,me", "1g.5gb+me-gfx",
     "1g.5gb*me", " 1g.5gb", "nvidia.com/mig-1g.5gb", "1g.5gb.shared", None, 7],
)
def test_not_mig_profiles(text):
    with pytest.raises(ValueError, match="MIG"):
        parse_mig_profile(text)


def test_mig_profile_refuses_nonsense_attributes():
    with pytest.raises(ValueError, match="mix"):
        MigProfile(1, 10, ("me", "-gfx"))
    with pytest.raises(ValueError, match="not like me"):
        MigProfile(1, 10, ("m e",))
    with pytest.raises(ValueError, match="repeat"):
        MigProfile(1, 10, ("me", "me"))
    with pytest.raises(ValueError, match="sharing suffix"):
        MigProfile(1, 10, ("shared",))
    with pytest.raises(TypeError):
        MigProfile(1, 10, shared="yes")


@pytest.mark.parametrize(
    ("name", "kind", "taint"),
    [
        (NVIDIA_GPU, "gpu", NVIDIA_GPU),
        (NVIDIA_GPU_SHARED, "shared", NVIDIA_GPU),
        (MIG_1G, "mig", NVIDIA_GPU),
        (ME, "mig", NVIDIA_GPU),
        ("nvidia.com/mig-1g.18gb.shared", "shared", NVIDIA_GPU),
        (AMD_GPU, "gpu", AMD_GPU),
        (INTEL_GPU_I915, "gpu", INTEL_GPU_I915),
        (INTEL_GPU_XE, "gpu", INTEL_GPU_XE),
        (HABANA_GAUDI, "gpu", HABANA_GAUDI),
        (CPU, None, None),
        ("nvidia.com/gpus", None, None),
        ("example.com/fpga", None, None),
    ],
)
def test_gpu_kind_and_the_taint_its_nodes_carry(name, kind, taint):
    assert gpu_kind(name) == kind
    assert gpu_taint_key(name) == taint


def keys(tolerations):
    assert all(t["operator"] == "Exists" and t["effect"] == "NoSchedule" for t in tolerations)
    return [t["key"] for t in tolerations]


def test_gpu_tolerations_one_function_for_every_pod():
    assert keys(gpu_tolerations([NVIDIA_GPU])) == [NVIDIA_GPU]
    # NVIDIA's taint, and one keyed by the resource as ExtendedResourceToleration adds
    assert keys(gpu_tolerations(ME)) == [NVIDIA_GPU, ME]
    assert keys(gpu_tolerations([CPU, MEMORY, ME, NVIDIA_GPU])) == [NVIDIA_GPU, ME]
    assert keys(gpu_tolerations({"cpu": "4", AMD_GPU: "1"})) == [AMD_GPU]  # not nvidia.com/gpu
    assert keys(gpu_tolerations([AMD_GPU, MIG_1G, AMD_GPU])) == [AMD_GPU, NVIDIA_GPU, MIG_1G]
    assert gpu_tolerations(None) == gpu_tolerations([]) == gpu_tolerations([CPU]) == []


@pytest.mark.parametrize(
    ("name", "known"),
    [
        (CPU, True), (MEMORY, True), ("ephemeral-storage", True), ("pods", True),
        ("hugepages-2Mi", True), (ME, True), ("nvidia.com/mig-1g.24gb.me.all", True),
        ("nvidia.com/mig-1g.24gb-me", True), (NVIDIA_GPU_SHARED, True), (AMD_GPU, True),
        ("example.com/fpga", True),  # another vendor's extended resource, as written
        ("gpus", False), ("nvidia.com/gpus", False), ("nvidia.com/GPU", False),
        ("nvidia.com/mig-1g.10gb+me", False), ("nvidia.com/mig-1g", False),
    ],
)
def test_is_known_resource(name, known):
    assert is_known_resource(name) is known


def test_single_strategy_product_labels():
    profile = MigProfile(1, 10, ("me",))
    assert single_mig_product("NVIDIA-A100-SXM4-80GB", profile) == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me"
    label = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me"
    assert parse_single_mig_product(label) == ("NVIDIA-A100-SXM4-80GB", profile)
    assert parse_single_mig_product("NVIDIA-H200-MIG-1g.18gb-SHARED") == ("NVIDIA-H200", MigProfile(1, 18))
    for label in ("NVIDIA-H200", "NVIDIA-H200-MIG-junk", "-MIG-1g.18gb", ""):
        assert parse_single_mig_product(label) is None


# Names as the grammar writes them: each part drawn from what NVIDIA's tools may print.
attributes = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,4}(\.[A-Za-z0-9]{1,4}){0,2}", fullmatch=True)
mig_profiles = st.builds(
    MigProfile,
    compute=st.integers(1, 8),
    memory_gb=st.integers(1, 999),
    attributes=st.one_of(
        st.just(()),
        st.sampled_from([("me",), ("me.all",), ("gfx",), ("-me",)]),
        st.lists(attributes, min_size=1, max_size=3, unique=True).map(tuple),
        st.lists(attributes, min_size=1, max_size=2, unique=True).map(lambda a: tuple("-" + x for x in a)),
    ),
    compute_slices=st.none() | st.integers(1, 8),
    shared=st.booleans(),
).filter(lambda p: len(p.resource_name) <= len("nvidia.com/") + 63)


@st.composite
def grammar_names(draw):
    return draw(st.one_of(
        st.sampled_from(sorted({NVIDIA_GPU, NVIDIA_GPU_SHARED, *VENDOR_GPU_RESOURCES})),
        mig_profiles.map(lambda p: p.resource_name),
    ))


@settings(max_examples=300, deadline=None)
@given(mig_profiles)
def test_every_mig_name_the_grammar_writes_parses_back_to_itself(profile):
    name = profile.resource_name
    validate_resource_name(name)  # a name Kubernetes accepts
    assert is_mig_resource(name) and is_gpu_resource(name) and is_known_resource(name)
    parsed = parse_mig(name)
    assert parsed.resource_name == name
    if len(profile.attributes) <= 1:  # "+me,gfx" has no resource spelling of its own: ".me.gfx"
        assert parsed == profile
        assert parse_mig_profile(str(profile)) == replace(profile, shared=False)
        assert parse_mig_profile(profile.label) == replace(profile, shared=False)


@settings(max_examples=200, deadline=None)
@given(grammar_names())
def test_every_gpu_name_is_a_gpu_with_a_taint_and_its_tolerations(name):
    assert is_gpu_resource(name) and gpu_kind(name) in ("gpu", "mig", "shared")
    assert keys(gpu_tolerations([name, CPU]))[0] == gpu_taint_key(name)
    assert name in keys(gpu_tolerations([name]))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="nvidia.com/mig-0123456789cgb.+-meashrdxl", max_size=40))
def test_anything_the_grammar_accepts_it_writes_back_the_same(name):
    if is_mig_resource(name):
        assert parse_mig(name).resource_name == name
        assert validate_resource_name(name) == name


# --------------------------------------------------------------------------- ResourceVector


def test_vector_missing_resources_are_zero_and_zeros_are_dropped():
    v = ResourceVector({CPU: "500m", MEMORY: "0", NVIDIA_GPU: 0})
    assert v[CPU] == Fraction(1, 2)
    assert v[NVIDIA_GPU] == 0
    assert NVIDIA_GPU not in v and MEMORY not in v
    assert list(v) == [CPU] and len(v) == 1
    assert dict(v) == {CPU: Fraction(1, 2)}


def test_vector_equality_does_not_depend_on_spelling():
    a = ResourceVector({CPU: "1000m", MEMORY: "1Gi"})
    b = ResourceVector(cpu=1, memory=str(GI))
    c = ResourceVector([(MEMORY, "1024Mi"), (CPU, Fraction(1))])
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert len({a, b, c}) == 1
    assert a != ResourceVector(cpu=1)
    assert a != {CPU: 1, MEMORY: GI}  # a vector is not a dict, even with the same items


def test_no_float_drift():
    tenth = ResourceVector(cpu="0.1")
    assert tenth + tenth + tenth == ResourceVector(cpu="0.3")
    assert (tenth * 3).to_k8s() == {CPU: "300m"}


def test_vector_is_immutable():
    v = ResourceVector(cpu=1)
    with pytest.raises(AttributeError):
        v._items = {}
    with pytest.raises(AttributeError):
        v.extra = 1
    with pytest.raises(TypeError):
        v[CPU] = 2  # type: ignore[index]
    assert v == ResourceVector(cpu=1)


def test_vector_order_is_cpu_memory_then_names():
    v = ResourceVector({MIG_3G: 1, NVIDIA_GPU: 1, MEMORY: "1Gi", "aaa.io/x": 1, CPU: 1})
    assert list(v) == [CPU, MEMORY, "aaa.io/x", NVIDIA_GPU, MIG_3G]


def test_vector_construction_errors_name_the_resource():
    with pytest.raises(
        ValueError, match=r"^memory: '12Gb' is not a Kubernetes quantity"
    ):
        ResourceVector(memory="12Gb")
    with pytest.raises(ValueError, match="is not a valid resource name"):
        ResourceVector({"nvidia.com/GPU!": 1})
    with pytest.raises(TypeError, match=r"^cpu: .*floats"):
        ResourceVector(cpu=0.5)
    with pytest.raises(ValueError, match="given twice"):
        ResourceVector({CPU: 1}, cpu=2)
    with pytest.raises(ValueError, match="given twice"):
        ResourceVector([(CPU, 1), (CPU, 2)])
    with pytest.raises(TypeError):
        ResourceVector(cpu=None)


def test_vector_accepts_decimal_and_rounds_fractions_to_nano():
    assert ResourceVector(cpu=Decimal("0.25")) == ResourceVector(cpu="250m")
    assert ResourceVector(cpu=Fraction(1, 3))[CPU] == Fraction(333333334, 10**9)
    with pytest.raises(ValueError):
        ResourceVector(cpu=Decimal("NaN"))


def test_vector_algebra():
    a = ResourceVector({CPU: "2", MEMORY: "8Gi", NVIDIA_GPU: 1})
    b = ResourceVector({CPU: "500m", MEMORY: "2Gi", MIG_1G: 2})
    assert a + b == ResourceVector(
        {CPU: "2.5", MEMORY: "10Gi", NVIDIA_GPU: 1, MIG_1G: 2}
    )
    assert a - b == ResourceVector(
        {CPU: "1.5", MEMORY: "6Gi", NVIDIA_GPU: 1, MIG_1G: -2}
    )
    assert -b == ResourceVector({CPU: "-500m", MEMORY: "-2Gi", MIG_1G: -2})
    assert 3 * b == b * 3 == b + b + b
    assert 0 * a == ZERO
    assert a - a == ZERO and (a - a).is_zero()
    assert sum([a, b, b]) == a + b + b == sum_vectors([a, b, b])
    assert sum_vectors([]) == ZERO
    with pytest.raises(TypeError):
        a * Fraction(1, 2)
    with pytest.raises(TypeError):
        a * True
    with pytest.raises(TypeError):
        a + {CPU: 1}


def test_minimum_maximum_clamp_select():
    a = ResourceVector({CPU: "2", MEMORY: "-1Gi", NVIDIA_GPU: 1})
    b = ResourceVector({CPU: "1", MEMORY: "4Gi"})
    assert a.minimum(b) == ResourceVector({CPU: 1, MEMORY: "-1Gi"})
    assert a.maximum(b) == ResourceVector({CPU: 2, MEMORY: "4Gi", NVIDIA_GPU: 1})
    assert a.clamp() == ResourceVector({CPU: 2, NVIDIA_GPU: 1})
    assert a.clamp(upper=b) == ResourceVector(
        {CPU: 1}
    )  # capped, GPUs absent from upper -> 0
    assert a.select(is_gpu_resource) == ResourceVector({NVIDIA_GPU: 1})


def test_predicates():
    assert ZERO.is_zero() and not ZERO
    assert ResourceVector(cpu=1) and not ResourceVector(cpu=1).is_zero()
    assert ResourceVector(cpu=1).is_nonnegative() and ZERO.is_nonnegative()
    assert not ResourceVector(cpu=-1).is_nonnegative()


@pytest.mark.parametrize(
    ("request_", "available", "fits"),
    [
        ({}, {}, True),
        ({CPU: 1}, {CPU: 1}, True),
        ({CPU: "1001m"}, {CPU: 1}, False),
        (
            {NVIDIA_GPU: 1},
            {CPU: 64, MEMORY: "512Gi"},
            False,
        ),  # missing in available = 0
        ({CPU: 1}, {CPU: 2, NVIDIA_GPU: 8}, True),
        (
            {},
            {CPU: -1},
            False,
        ),  # an over-drawn budget fits nothing, not even the empty request
        ({CPU: -1}, {CPU: -1}, True),
        ({MIG_1G: 1}, {MIG_3G: 1}, False),  # a bigger slice is not a smaller slice
    ],
)
def test_fits_in(request_, available, fits):
    r, a = ResourceVector(request_), ResourceVector(available)
    assert r.fits_in(a) is fits
    assert (a - r).is_nonnegative() is fits
    assert r.shortfall(a).is_zero() is fits or a.is_nonnegative() is False


def test_shortfall_says_what_is_missing():
    request = ResourceVector({CPU: 4, NVIDIA_GPU: 2, MEMORY: "16Gi"})
    free = ResourceVector({CPU: 64, NVIDIA_GPU: 1, MEMORY: "8Gi"})
    assert request.shortfall(free) == ResourceVector({NVIDIA_GPU: 1, MEMORY: "8Gi"})
    assert str(request.shortfall(free)) == "8 GiB memory, 1 nvidia.com/gpu"


def test_k8s_conversion():
    v = ResourceVector.from_k8s({"cpu": "2000m", "memory": "8192Mi", MIG_1G: "1"})
    assert v.to_k8s() == {"cpu": "2", "memory": "8Gi", MIG_1G: "1"}
    assert ResourceVector.from_k8s(None) == ZERO
    assert ResourceVector.from_k8s({}) == ZERO
    # YAML `cpu: 0.5` / `nvidia.com/gpu: 1` arrive as numbers: read like the API server does
    assert ResourceVector.from_k8s({"cpu": 0.5, NVIDIA_GPU: 1}) == ResourceVector(
        cpu="500m", **{NVIDIA_GPU: 1}
    )
    assert ResourceVector.from_k8s({"cpu": 0.1}) == ResourceVector(cpu="100m")
    with pytest.raises(TypeError, match="mapping"):
        ResourceVector.from_k8s(["cpu", "1"])
    with pytest.raises(ValueError, match="nan"):
        ResourceVector.from_k8s({"cpu": float("nan")})
    negative = ResourceVector(cpu="-1.5", memory="-1Gi")
    assert negative.to_k8s() == {"cpu": "-1500m", "memory": "-1Gi"}


def test_human_and_repr():
    v = ResourceVector({CPU: 2, MEMORY: "8Gi", MIG_1G: 1})
    assert v.human() == str(v) == "2 CPU, 8 GiB memory, 1 nvidia.com/mig-1g.18gb"
    assert ZERO.human() == "nothing"
    assert (
        repr(v)
        == "ResourceVector({'cpu': '2', 'memory': '8Gi', 'nvidia.com/mig-1g.18gb': '1'})"
    )


def test_vector_pickles_and_copies():
    v = ResourceVector({CPU: "250m", NVIDIA_GPU_SHARED: 1})
    assert pickle.loads(pickle.dumps(v)) == v
    assert copy.deepcopy(v) == v and copy.copy(v) == v
    assert ResourceVector(v) == v


# --------------------------------------------------------------------------- pod requests


def container(name, requests=None, limits=None, **extra):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources, **extra}


def test_containers_add_up():
    spec = {
        "containers": [
            container("notebook", {"cpu": "1", "memory": "4Gi"}),
            container("proxy", {"cpu": "100m", "memory": "64Mi"}),
        ]
    }
    assert pod_spec_requests(spec) == ResourceVector(
        cpu="1.1", memory=str(4 * GI + 64 * MI)
    )


def test_limit_without_request_means_request_equals_limit():
    c = container(
        "train",
        requests={"cpu": "1"},
        limits={"cpu": "4", "memory": "8Gi", NVIDIA_GPU: "1"},
    )
    assert container_requests(c) == ResourceVector(
        {CPU: 1, MEMORY: "8Gi", NVIDIA_GPU: 1}
    )
    assert container_requests({"name": "bare"}) == ZERO
    assert container_requests({"name": "none", "resources": None}) == ZERO
    assert (
        container_requests(
            {"name": "nulls", "resources": {"requests": None, "limits": None}}
        )
        == ZERO
    )


def test_init_containers_take_the_max_per_resource():
    spec = {
        "initContainers": [
            container("seed-home", {"cpu": "2", "memory": "512Mi"}),
            container("fetch", {"cpu": "500m", "memory": "6Gi"}),
        ],
        "containers": [
            container("notebook", {"cpu": "1", "memory": "4Gi", NVIDIA_GPU: "1"})
        ],
    }
    # cpu: init peak 2 > 1; memory: init peak 6Gi > 4Gi; GPU only in the container
    assert pod_spec_requests(spec) == ResourceVector(
        {CPU: 2, MEMORY: "6Gi", NVIDIA_GPU: 1}
    )


def test_sidecars_keep_running():
    spec = {
        "containers": [container("main", {"cpu": "1"})],
        "initContainers": [
            container("log-sidecar", {"cpu": "500m"}, restartPolicy="Always"),
            container("init-a", {"cpu": "2"}),
            container("mesh-sidecar", {"cpu": "250m"}, restartPolicy="Always"),
            container("init-b", {"cpu": "1"}),
        ],
    }
    # running: 1 + 0.5 + 0.25 = 1.75; init-a runs beside log-sidecar: 2.5 -> peak 2.5
    assert pod_spec_requests(spec) == ResourceVector(cpu="2.5")
    spec["initContainers"][1] = container("init-a", {"cpu": "1"})
    # now init peaks: 1.5 (init-a + log), 1.75 (init-b + both) -> running 1.75 wins
    assert pod_spec_requests(spec) == ResourceVector(cpu="1.75")


def test_overhead_is_added_after_the_init_max():
    spec = {
        "overhead": {"cpu": "250m", "memory": "160Mi"},
        "initContainers": [container("init", {"cpu": "3"})],
        "containers": [container("c", {"cpu": "1", "memory": "1Gi"})],
    }
    assert pod_spec_requests(spec) == ResourceVector(
        cpu="3.25", memory=str(GI + 160 * MI)
    )


def test_pod_level_resources_replace_cpu_and_memory():
    spec = {
        "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "8Gi"}},
        "containers": [
            container("a", {"cpu": "500m", "memory": "1Gi", NVIDIA_GPU: "1"}),
            container("b", {"cpu": "500m", "memory": "1Gi"}),
        ],
    }
    assert pod_spec_requests(spec) == ResourceVector(
        {CPU: 2, MEMORY: "8Gi", NVIDIA_GPU: 1}
    )


def test_pod_requests_reads_pod_objects_and_names_the_culprit():
    pod = {
        "metadata": {"name": "jupyter-ada", "namespace": "course-ml"},
        "spec": {"containers": [container("notebook", {MEMORY: "12Gb"})]},
    }
    with pytest.raises(ValueError) as info:
        pod_requests(pod)
    message = str(info.value)
    assert message.startswith(
        "pod course-ml/jupyter-ada: container 'notebook': memory: '12Gb'"
    )
    assert "did you mean 12Gi or 12G?" in message
    assert pod_requests({}) == ZERO
    assert pod_requests(
        {"spec": {"containers": [container("c", {"cpu": 1})]}}
    ) == ResourceVector(cpu=1)


# --------------------------------------------------------------------------- properties

SUFFIX_SCALE = {
    "": 1,
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}

nano_values = st.integers(min_value=-(10**27), max_value=10**27).map(
    lambda n: Fraction(n, 10**9)
)
resource_names = st.sampled_from(
    [CPU, MEMORY, NVIDIA_GPU, NVIDIA_GPU_SHARED, MIG_1G, MIG_3G, "pods"]
)
vectors = st.dictionaries(resource_names, nano_values, max_size=5).map(ResourceVector)
small_vectors = st.dictionaries(
    resource_names,
    st.integers(-(10**6), 10**6).map(lambda n: Fraction(n, 1000)),
    max_size=5,
).map(ResourceVector)
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None)


@PROPERTY_SETTINGS
@given(nano_values)
def test_decimal_format_round_trips(value):
    assert parse_quantity(format_quantity(value)) == value


@PROPERTY_SETTINGS
@given(st.one_of(nano_values, st.integers(-(2**63 - 1), 2**63 - 1).map(Fraction)))
def test_binary_format_round_trips(value):
    text = format_quantity(value, binary=True)
    assert parse_quantity(text) == value
    assert parse_quantity(canonical_quantity(MEMORY, value)) == value


@PROPERTY_SETTINGS
@given(
    st.sampled_from(["", "+", "-"]),
    st.text("0123456789", max_size=12),
    st.none() | st.text("0123456789", max_size=12),
    st.sampled_from(sorted(SUFFIX_SCALE)) | st.integers(-30, 30).map(lambda e: f"e{e}"),
)
def test_parse_agrees_with_a_decimal_oracle(sign, whole, frac, suffix):
    """Compare with an independent computation in `decimal`, following resource.Quantity."""
    number = whole + ("" if frac is None else "." + frac)
    text = sign + number + suffix
    if not whole and not frac:
        with pytest.raises(ValueError):
            parse_quantity(text)
        return
    with localcontext() as ctx:
        ctx.prec = 200
        base = Decimal(number if number != "." else "0")
        if suffix.startswith("e"):
            scaled = base.scaleb(int(suffix[1:]))
        else:
            scale = SUFFIX_SCALE[suffix]
            scaled = (
                base * Decimal(scale.numerator) / Decimal(scale.denominator)
                if isinstance(scale, Fraction)
                else base * scale
            )
        scaled = scaled.quantize(
            Decimal("1e-9"), rounding=ROUND_UP
        )  # up, away from zero
        expected = min(Fraction(scaled), MAX_QUANTITY)
    if sign == "-":
        expected = -expected
    assert parse_quantity(text) == expected


@PROPERTY_SETTINGS
@given(vectors, vectors, vectors)
def test_vector_group_laws(a, b, c):
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)
    assert a + ZERO == a == ZERO + a
    assert a - a == ZERO
    assert (a - b) + b == a
    negated = -a
    assert -negated == a
    assert negated + a == ZERO
    assert a - b == -(b - a)
    assert sum_vectors([a, b, c]) == a + b + c


@PROPERTY_SETTINGS
@given(vectors, vectors, st.integers(-5, 5))
def test_scaling_distributes(a, b, k):
    assert k * (a + b) == k * a + k * b
    assert (k + 1) * a == k * a + a


@PROPERTY_SETTINGS
@given(vectors, vectors)
def test_fits_in_is_nonnegative_difference(a, b):
    assert a.fits_in(b) == (b - a).is_nonnegative()
    assert a.fits_in(a)
    if b.is_nonnegative():
        assert a.fits_in(b) == a.shortfall(b).is_zero()


@PROPERTY_SETTINGS
@given(small_vectors, small_vectors, small_vectors)
def test_fits_in_is_a_partial_order(a, b, c):
    if a.fits_in(b) and b.fits_in(c):
        assert a.fits_in(c)
    if a.fits_in(b) and b.fits_in(a):
        assert a == b
    assert a.minimum(b).fits_in(a) and a.minimum(b).fits_in(b)
    assert a.fits_in(a.maximum(b)) and b.fits_in(a.maximum(b))


@PROPERTY_SETTINGS
@given(vectors, vectors)
def test_min_max_clamp_laws(a, b):
    assert a.minimum(b) + a.maximum(b) == a + b
    assert a.clamp().is_nonnegative()
    assert a.clamp() - (-a).clamp() == a  # positive part minus negative part
    upper = b.clamp()
    assert a.clamp(upper).fits_in(upper)
    assert a.clamp(upper).is_nonnegative()


@PROPERTY_SETTINGS
@given(vectors)
def test_k8s_round_trip_and_hash(a):
    assert ResourceVector.from_k8s(a.to_k8s()) == a
    assert hash(ResourceVector.from_k8s(a.to_k8s())) == hash(a)
    assert pickle.loads(pickle.dumps(a)) == a


@PROPERTY_SETTINGS
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from([CPU, MEMORY, NVIDIA_GPU]),
            st.integers(0, 10**6).map(lambda n: f"{n}m"),
            max_size=3,
        ),
        max_size=6,
    )
)
def test_pod_requests_ignore_container_order(requests):
    containers = [container(f"c{i}", r) for i, r in enumerate(requests)]
    total = pod_spec_requests({"containers": containers})
    assert total == pod_spec_requests({"containers": list(reversed(containers))})
    assert total == sum_vectors(ResourceVector.from_k8s(r) for r in requests)


def test_core_modules_import_only_the_standard_library():
    """docs/architecture.md, rule 1: hub_ext/core imports nothing outside the stdlib and itself."""
    import ast
    import sys
    from pathlib import Path

    from tests.sources import parse_module

    core = Path(__file__).resolve().parent.parent / "hub_ext" / "core"
    for module in ("resources.py", "capacity.py"):
        tree = parse_module(core / module)
        for stmt in ast.walk(tree):
            if isinstance(stmt, ast.Import):
                roots = [alias.name.split(".")[0] for alias in stmt.names]
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
                roots = [(stmt.module or "").split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in sys.stdlib_module_names or root == "__future__", (
                    module,
                    root,
                )
