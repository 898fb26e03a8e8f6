"""Kubernetes resource quantities and resource vectors, computed exactly.

Why this module exists: every decision classhub makes about compute (may this spawn start, does
this job fit, how many MIG slices are free now, is this course over its quota) is arithmetic on
Kubernetes resource quantities. Floats drift (three times 0.1 CPU is not 0.3 CPU in binary
floating point), and a quota that is off by one millicore refuses a student for nothing. So
quantities are parsed the way kube-apiserver parses them (`resource.Quantity`) and are kept as
`fractions.Fraction`; sums, differences and comparisons are exact.

Value model (mirrors `resource.Quantity`):
- the smallest unit is 1n (10^-9): finer values are rounded *up*, away from zero, the way the API
  server does it ("if you ask for some resource you get some");
- magnitudes above 2^63-1 are capped at 2^63-1, as the API server does.

Pure: standard library only (docs/architecture.md, rule 1), so quota and admission decisions built on it can
be unit-tested and benchmarked without a hub or a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any

__all__ = [
    "AMD_GPU",
    "CPU",
    "EPHEMERAL_STORAGE",
    "GPU_TAINT_KEYS",
    "HABANA_GAUDI",
    "INTEL_GPU_I915",
    "INTEL_GPU_XE",
    "MAX_QUANTITY",
    "MEMORY",
    "MIG_PRODUCT_MARKER",
    "NVIDIA_GPU",
    "NVIDIA_GPU_SHARED",
    "NVIDIA_GPU_TAINT",
    "PODS",
    "VENDOR_GPU_RESOURCES",
    "ZERO",
    "MigProfile",
    "QuantityLike",
    "ResourceVector",
    "canonical_quantity",
    "container_requests",
    "format_quantity",
    "gpu_kind",
    "gpu_taint_key",
    "gpu_tolerations",
    "human_quantity",
    "is_extended_resource",
    "is_gpu_resource",
    "is_gpu_taint",
    "is_known_resource",
    "is_mig_resource",
    "mig_resource_name",
    "parse_mig",
    "parse_mig_profile",
    "parse_mig_resource",
    "parse_quantity",
    "parse_single_mig_product",
    "pod_requests",
    "pod_spec_requests",
    "single_mig_product",
    "sum_vectors",
    "validate_resource_name",
]

# --------------------------------------------------------------------------- resource names

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"
"""Whole GPUs, and MIG slices under the MIG *single* strategy (the product label then says -MIG-)."""
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"
"""Time-sliced or MPS replicas when the device plugin runs with renameByDefault."""

# k8s IsQualifiedName: optional DNS-1123 subdomain prefix and '/', then a name of at most 63
# characters made of alphanumerics, '-', '_' and '.', starting and ending alphanumeric.
_QUALIFIED_NAME_PART = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*\Z"
)

# Resources whose natural unit is the byte: they are written with binary suffixes (Gi) when exact.
_BYTE_RESOURCES = frozenset({MEMORY, EPHEMERAL_STORAGE, "storage"})


def _is_byte_resource(name: str) -> bool:
    return (
        name in _BYTE_RESOURCES
        or name.startswith("hugepages-")
        or name.endswith("/memory")
    )


@lru_cache(maxsize=4096)
def validate_resource_name(name: str) -> str:
    """Return `name` if it is a valid Kubernetes resource name, else raise ValueError.

    Kubernetes accepts qualified names only (`cpu`, `memory`, `nvidia.com/gpu`,
    `nvidia.com/mig-1g.18gb`); catching a typo such as `nvidia.com/GPU ` here gives the teacher a
    message at configuration time instead of a pod that never schedules.
    """
    if not isinstance(name, str):
        raise TypeError(f"resource name must be a string, not {type(name).__name__}")
    hint = "use e.g. cpu, memory, nvidia.com/gpu, nvidia.com/mig-1g.18gb"
    prefix, slash, short = name.rpartition("/")
    if slash:
        if not prefix:
            raise ValueError(
                f"{name!r} is not a valid resource name: empty prefix before '/'; {hint}"
            )
        if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            raise ValueError(
                f"{name!r} is not a valid resource name: prefix {prefix!r} must be a lowercase DNS "
                f"subdomain (at most 253 characters of a-z, 0-9, '-' and '.'); {hint}"
            )
    if not short:
        raise ValueError(f"{name!r} is not a valid resource name: it is empty; {hint}")
    if len(short) > 63 or not _QUALIFIED_NAME_PART.match(short):
        raise ValueError(
            f"{name!r} is not a valid resource name: {short!r} must be at most 63 characters of "
            f"letters, digits, '-', '_' and '.', starting and ending with a letter or digit; {hint}"
        )
    return name


# --------------------------------------------------------------------------- GPU resource names
#
# The one grammar of GPU and accelerator resource names (docs/architecture.md, rule 4): device
# discovery, profiles, quotas, GPU-hours, capacity, culling and the tolerations of notebook and job
# pods all ask these functions, so a name is a GPU everywhere or nowhere. The names are the ones
# the device plugins advertise:
#
#   nvidia.com/gpu                       whole GPUs (and MIG slices under the MIG *single* strategy)
#   nvidia.com/gpu.shared                time-sliced/MPS replicas (device plugin renameByDefault)
#   nvidia.com/mig-<g>g.<mem>gb          MIG slices, *mixed* strategy: nvidia.com/mig-1g.18gb
#   nvidia.com/mig-<g>g.<mem>gb.<attr>   with attributes; NVIDIA's "+" becomes "." as the device
#                                        plugin writes it: mig-1g.10gb.me (1g.10gb+me),
#                                        mig-1g.24gb.me.all (+me.all), mig-2g.48gb.gfx (+gfx)
#   nvidia.com/mig-<g>g.<mem>gb-<attr>   without an attribute: mig-1g.24gb-me (1g.24gb-me)
#   nvidia.com/mig-<c>c.<g>g.<mem>gb     a compute instance smaller than its GPU instance
#                                        (nvidia-smi's 1c.2g.20gb; local mode only)
#   nvidia.com/mig-....shared            a time-sliced MIG slice (renameByDefault)
#   amd.com/gpu, gpu.intel.com/i915, gpu.intel.com/xe, habana.ai/gaudi: other vendors' devices
#
# Nothing else under nvidia.com/ is a GPU (`nvidia.com/gpus` is a typo, not a resource).

AMD_GPU = "amd.com/gpu"
INTEL_GPU_I915 = "gpu.intel.com/i915"
INTEL_GPU_XE = "gpu.intel.com/xe"
HABANA_GAUDI = "habana.ai/gaudi"
VENDOR_GPU_RESOURCES = frozenset({AMD_GPU, INTEL_GPU_I915, INTEL_GPU_XE, HABANA_GAUDI})
"""Other vendors' device-plugin resources that hand out one accelerator each."""
NVIDIA_GPU_TAINT = NVIDIA_GPU
"""The taint key NVIDIA GPU nodes carry (GPU Operator and cloud node pools): `nvidia.com/gpu`."""
MIG_PRODUCT_MARKER = "-MIG-"
"""MIG single strategy: GPU feature discovery labels the product `<model>-MIG-<profile>`."""

_MIG_PREFIX = "nvidia.com/mig-"
_SHARED_SUFFIX = ".shared"
_SHARED_PRODUCT_SUFFIX = "-SHARED"
# NVIDIA's attribute grammar (go-nvlib): a letter, then letters and digits, dot-separated parts.
_ATTRIBUTE = r"[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)*"
_ATTRIBUTE_RE = re.compile(rf"-?{_ATTRIBUTE}\Z")
_MIG_SHAPE = r"(?:(?P<c>[1-9][0-9]*)c\.)?(?P<g>[1-9][0-9]*)g\.(?P<gb>[1-9][0-9]*)gb"
# A resource name has at most one attribute part: a "," would not be a valid resource name.
_MIG_RESOURCE_RE = re.compile(rf"nvidia\.com/mig-{_MIG_SHAPE}(?:(?P<sign>[.-])(?P<attrs>{_ATTRIBUTE}))?\Z")
# A profile as nvidia-smi and NVML write it (1g.10gb+me, 1g.24gb-me, 1g.10gb+me,gfx), or dotted.
_MIG_PROFILE_RE = re.compile(
    rf"{_MIG_SHAPE}(?:(?P<sign>[+.-])(?P<attrs>{_ATTRIBUTE}(?:,{_ATTRIBUTE})*))?\Z"
)


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG slice shape: `compute` GPU-instance slices (the `<g>g`), `memory_gb`, `attributes`.

    `attributes` are NVIDIA's profile attributes as written after the `+` (`("me",)`,
    `("me.all",)`, `("gfx",)`), or after the `-` with a leading "-" (`("-me",)`: a slice
    without media extensions). `compute_slices` is the `<c>c` of a compute instance smaller than
    its GPU instance (`1c.2g.20gb`; None otherwise). `shared`: the time-sliced resource
    (`....shared`). `str()` is NVIDIA's profile spelling (`1g.10gb+me`), `label` the dotted one of
    resource names and node labels (`1g.10gb.me`), `resource_name` the Kubernetes resource.
    """

    compute: int
    memory_gb: int
    attributes: tuple[str, ...] = ()
    compute_slices: int | None = None
    shared: bool = False

    def __post_init__(self) -> None:
        counts = (self.compute, self.memory_gb)
        for value in counts if self.compute_slices is None else (*counts, self.compute_slices):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"MIG compute and memory must be integers, got {value!r}")
            if value < 1:
                raise ValueError(f"MIG compute and memory must be positive, got {value!r}")
        if self.compute_slices == self.compute:  # 3c.3g.40gb is 3g.40gb, as NVIDIA writes it
            object.__setattr__(self, "compute_slices", None)
        attributes = (self.attributes,) if isinstance(self.attributes, str) else tuple(self.attributes)
        object.__setattr__(self, "attributes", attributes)
        for attribute in attributes:
            if not isinstance(attribute, str) or not _ATTRIBUTE_RE.match(attribute):
                raise ValueError(
                    f"MIG attribute {attribute!r} is not like me, me.all, gfx or -me "
                    "(a letter, then letters, digits and dots)"
                )
        if len(set(attributes)) != len(attributes):
            raise ValueError(f"MIG attributes {attributes!r} repeat one")
        if len({a.startswith("-") for a in attributes}) > 1:
            raise ValueError(f"MIG attributes {attributes!r} mix + and - attributes")
        if not isinstance(self.shared, bool):
            raise TypeError(f"shared must be True or False, not {self.shared!r}")
        if self.label.endswith(_SHARED_SUFFIX):  # would read back as the sharing suffix
            raise ValueError(
                f"MIG attributes {attributes!r}: 'shared' is the sharing suffix, not an attribute"
            )

    def _shape(self) -> str:
        shape = f"{self.compute}g.{self.memory_gb}gb"
        return shape if self.compute_slices is None else f"{self.compute_slices}c.{shape}"

    def __str__(self) -> str:
        """NVIDIA's profile spelling, as nvidia-smi prints it: `1g.18gb`, `1g.10gb+me`, `1g.24gb-me`."""
        if not self.attributes:
            return self._shape()
        if self.attributes[0].startswith("-"):
            return self._shape() + "-" + ",".join(a[1:] for a in self.attributes)
        return self._shape() + "+" + ",".join(self.attributes)

    @property
    def label(self) -> str:
        """The spelling of resource names and GPU feature discovery labels: `1g.10gb.me`."""
        return str(self).replace("+", ".").replace(",", ".")

    @property
    def resource_name(self) -> str:
        """The resource the device plugin advertises: `nvidia.com/mig-1g.10gb.me`."""
        return _MIG_PREFIX + self.label + (_SHARED_SUFFIX if self.shared else "")


def _mig_from_match(m: re.Match[str], shared: bool = False) -> MigProfile:
    attrs: tuple[str, ...] = ()
    if m.group("attrs"):
        parts = m.group("attrs").split(",")
        attrs = tuple("-" + a for a in parts) if m.group("sign") == "-" else tuple(parts)
    c = m.group("c")
    return MigProfile(int(m.group("g")), int(m.group("gb")), attrs, int(c) if c else None, shared)


@lru_cache(maxsize=4096)
def _parse_mig(name: str) -> MigProfile | None:
    """The MIG profile behind a resource name, or None (cached: names repeat in every loop)."""
    if not name.startswith(_MIG_PREFIX):
        return None
    shared = name.endswith(_SHARED_SUFFIX)
    m = _MIG_RESOURCE_RE.match(name.removesuffix(_SHARED_SUFFIX) if shared else name)
    if m is None:
        return None
    try:
        validate_resource_name(name)  # at most 63 characters after the "/"
        return _mig_from_match(m, shared)
    except ValueError:
        return None


def is_mig_resource(name: str) -> bool:
    """True for MIG *mixed*-strategy resources: `nvidia.com/mig-3g.71gb`, `nvidia.com/mig-1g.10gb.me`."""
    return isinstance(name, str) and _parse_mig(name) is not None


def parse_mig(name: str) -> MigProfile:
    """`nvidia.com/mig-1g.10gb.me` -> MigProfile(1, 10, ("me",)); ValueError for anything else.

    `mig_resource_name(...)` and `MigProfile.resource_name` write the names this reads.
    """
    return _found(
        _parse_mig(name) if isinstance(name, str) else None, name, "a MIG resource",
        "nvidia.com/mig-<g>g.<memory>gb with an optional .<attribute>, e.g. nvidia.com/mig-1g.18gb "
        "or nvidia.com/mig-1g.10gb.me",
    )


parse_mig_resource = parse_mig


def parse_mig_profile(text: str) -> MigProfile:
    """A MIG profile as nvidia-smi, NVML and admins write it -> MigProfile; ValueError otherwise.

    `1g.18gb`, `1c.2g.20gb`, `1g.10gb+me`, `1g.24gb+me.all`, `1g.24gb-me`, `1g.10gb+me,gfx`, and
    the dotted spelling of resource names and node labels (`1g.10gb.me`).
    """
    return _found(
        _parse_mig_profile(text) if isinstance(text, str) else None, text, "a MIG profile",
        "<g>g.<memory>gb with an optional +<attribute>, e.g. 1g.18gb, 3g.71gb or 1g.10gb+me",
    )


def _found(profile: MigProfile | None, text: object, what: str, expected: str) -> MigProfile:
    if profile is None:
        raise ValueError(f"{text!r} is not {what}: expected {expected}")
    return profile


@lru_cache(maxsize=1024)
def _parse_mig_profile(text: str) -> MigProfile | None:
    m = _MIG_PROFILE_RE.match(text)
    return None if m is None else _mig_from_match(m)


def mig_resource_name(
    compute: int,
    memory_gb: int,
    attributes: str | Iterable[str] = (),
    *,
    compute_slices: int | None = None,
    shared: bool = False,
) -> str:
    """(3, 71) -> `nvidia.com/mig-3g.71gb`; (1, 10, ["me"]) -> `nvidia.com/mig-1g.10gb.me`."""
    attrs = (attributes,) if isinstance(attributes, str) else tuple(attributes)
    return MigProfile(compute, memory_gb, attrs, compute_slices, shared).resource_name


def single_mig_product(product: str, profile: MigProfile) -> str:
    """The product label of a MIG *single*-strategy node: `NVIDIA-A100-SXM4-80GB-MIG-3g.40gb`."""
    return f"{product}{MIG_PRODUCT_MARKER}{profile.label}"


def parse_single_mig_product(label: str) -> tuple[str, MigProfile] | None:
    """`NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me[-SHARED]` -> ("NVIDIA-A100-SXM4-80GB", profile);
    None for a product label that names no MIG profile."""
    base, marker, shape = label.rpartition(MIG_PRODUCT_MARKER)
    if not marker or not base:
        return None
    try:
        return base, parse_mig_profile(shape.removesuffix(_SHARED_PRODUCT_SUFFIX))
    except ValueError:
        return None


def is_gpu_resource(name: str) -> bool:
    """True for every resource that hands out a GPU or a share of one: whole GPUs, MIG slices
    (with or without attributes), shared replicas, and other vendors' GPUs and accelerators.

    Quotas, GPU-hours, capacity, admission and the culler treat them all as GPU resources; CPU
    and memory are not.
    """
    return isinstance(name, str) and (
        name in (NVIDIA_GPU, NVIDIA_GPU_SHARED) or name in VENDOR_GPU_RESOURCES or is_mig_resource(name)
    )


def gpu_kind(name: str) -> str | None:
    """"gpu" (whole GPUs, any vendor), "mig" (MIG slices), "shared" (time-sliced/MPS replicas,
    of whole GPUs or of MIG slices) or None (not a GPU resource): the culler's profile kinds."""
    if name == NVIDIA_GPU_SHARED:
        return "shared"
    if name == NVIDIA_GPU or name in VENDOR_GPU_RESOURCES:
        return "gpu"
    mig = _parse_mig(name) if isinstance(name, str) else None
    if mig is None:
        return None
    return "shared" if mig.shared else "mig"


def gpu_taint_key(name: str) -> str | None:
    """The taint key the nodes offering resource `name` carry, or None for a non-GPU resource.

    NVIDIA's nodes are tainted `nvidia.com/gpu` whatever they offer (whole GPUs, MIG slices,
    shared replicas); other vendors' nodes by the resource name itself, the key Kubernetes'
    ExtendedResourceToleration admission plugin tolerates for a pod that asks for it.
    """
    if not is_gpu_resource(name):
        return None
    return NVIDIA_GPU_TAINT if name.startswith("nvidia.com/") else name


def gpu_tolerations(resource_names: str | Iterable[str] | None) -> list[dict[str, str]]:
    """Tolerations a pod that asks for these resources needs on GPU nodes (non-GPU names ignored).

    For each GPU resource: its nodes' taint (`gpu_taint_key`) and, as the
    ExtendedResourceToleration admission plugin adds them, one keyed by the resource name
    (`nvidia.com/mig-1g.10gb.me`). Each key once, in first-seen order. Notebook pods (profiles)
    and job pods both get theirs here.
    """
    if resource_names is None:
        names: Iterable[str] = ()
    elif isinstance(resource_names, str):
        names = (resource_names,)
    else:
        names = resource_names
    keys: dict[str, None] = {}
    for name in names:
        key = gpu_taint_key(name)
        if key is not None:
            keys.setdefault(key)
            keys.setdefault(name)
    return [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in keys]


_STANDARD_RESOURCES = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE, "storage", PODS})

#: The taint keys GPU nodes carry: NVIDIA's, and each other vendor's resource name.
GPU_TAINT_KEYS = frozenset({NVIDIA_GPU_TAINT, *VENDOR_GPU_RESOURCES})


def is_gpu_taint(key: str) -> bool:
    """Whether a node taint keyed `key` only keeps pods without GPUs off a GPU node (a GPU
    taint key, or a GPU resource's own name, ExtendedResourceToleration's key)."""
    return key in GPU_TAINT_KEYS or gpu_kind(key) is not None


def is_extended_resource(name: str) -> bool:
    """A device plugin's resource (a prefixed name outside ``kubernetes.io/``): Kubernetes does
    not overcommit these, so a container that requests one must set the same limit."""
    return "/" in name and not name.startswith("kubernetes.io/") and not name.startswith("hugepages-")


def is_known_resource(name: str) -> bool:
    """Whether a quota or a request may name `name`: Kubernetes' own resources (cpu, memory,
    ephemeral-storage, storage, pods, hugepages-<size>), a GPU of this grammar, or another
    vendor's extended resource (a prefixed name outside nvidia.com/, accepted as written).

    Under `nvidia.com/` only the device plugin's names exist, so a typo such as `nvidia.com/gpus`
    or `nvidia.com/GPU` is unknown: a ceiling on it would cap nothing.
    """
    if not isinstance(name, str):
        return False
    if "/" not in name:
        return name in _STANDARD_RESOURCES or name.startswith("hugepages-")
    if name.startswith("nvidia.com/"):
        return is_gpu_resource(name)
    return True


# --------------------------------------------------------------------------- quantities

MAX_QUANTITY = Fraction(2**63 - 1)
"""The API server caps parsed quantities at this magnitude (in base units)."""

_NANO = 10**9
_MAX_EXPONENT = (
    1000  # beyond this the value is capped or rounded anyway; bounds the work done
)

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
_DECIMAL_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]

_QUANTITY_RE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)\Z", re.DOTALL)
_EXPONENT_RE = re.compile(r"[eE]([+-]?[0-9]+)\Z")

QuantityLike = str | int | Fraction | Decimal
"""What may stand for a quantity: a Kubernetes string ("500m"), an int, a Fraction or a Decimal.

Floats are refused on purpose: they are the drift this module exists to avoid.
"""


def _round_to_nano(value: Fraction) -> Fraction:
    """Round away from zero to a multiple of 1n, like the API server."""
    if value.denominator != 1 and _NANO % value.denominator != 0:
        scaled = abs(value) * _NANO
        nanos = -(
            -scaled.numerator // scaled.denominator
        )  # ceiling of a positive Fraction
        value = Fraction(nanos if value > 0 else -nanos, _NANO)
    return value


def _cap(value: Fraction) -> Fraction:
    """Cap the magnitude at MAX_QUANTITY, as the API server does when it parses a quantity."""
    if value > MAX_QUANTITY:
        return MAX_QUANTITY
    if value < -MAX_QUANTITY:
        return -MAX_QUANTITY
    return value


def _quantity_error(text: str, why: str = "") -> ValueError:
    detail = f"{why}; " if why else ""
    return ValueError(
        f"{text!r} is not a Kubernetes quantity: {detail}use e.g. 512Mi, 2Gi, 500m, 4"
    )


def _suffix_hint(number: str, suffix: str) -> str:
    """A targeted hint for the usual mistakes: `12Gb`, `12GB`, `12GiB`, `1K`, `2 Gi`."""
    stripped = suffix.strip()
    if stripped != suffix and (
        stripped in _DECIMAL_SUFFIXES or stripped in _BINARY_SUFFIXES
    ):
        return f"no spaces: write {number}{stripped}"
    base = stripped[:-1] if len(stripped) > 1 and stripped[-1] in "bB" else stripped
    key = base.lower()
    binary = [s for s in _BINARY_SUFFIXES if s.lower() in (key, key + "i")]
    # "m" is milli: never suggest it for what was meant as megabytes
    decimal = [s for s in _DECIMAL_SUFFIXES if s not in ("", "m") and s.lower() == key]
    if not binary and not decimal:
        return ""
    choices = [number + s for s in binary + decimal]
    scales = [f"{s} = 2^{_BINARY_SUFFIXES[s]}" for s in binary]
    scales += [f"{s} = 10^{_DECIMAL_SUFFIXES[s]}" for s in decimal]
    return f"did you mean {' or '.join(choices)}? ({', '.join(scales)})"


def parse_quantity(text: str | int) -> Fraction:
    """Parse a Kubernetes quantity ("500m", "2Gi", "1e3", "-1.5k", "4") into an exact Fraction.

    Accepts exactly what `resource.ParseQuantity` accepts: an optional sign, digits with an
    optional decimal point, then one of the decimal SI suffixes (n u m k M G T P E), the binary
    suffixes (Ki Mi Gi Ti Pi Ei) or an exponent (e3, E-3). Surrounding whitespace is ignored, as
    in JSON decoding of a Quantity. Ints (YAML `cpu: 2`) are accepted too.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return _cap(Fraction(text))
    if not isinstance(text, str):
        raise TypeError(
            f"{text!r} is not a Kubernetes quantity: expected a string such as 512Mi, 2Gi, "
            f"500m, 4, not {type(text).__name__}"
        )
    return _parse_text(text)


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> Fraction:
    """The string grammar of parse_quantity; cached because clusters repeat a few spellings."""
    s = text.strip()
    m = _QUANTITY_RE.match(s)
    assert m is not None  # the pattern matches every string
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if not whole and not frac:
        raise _quantity_error(text, "it must start with a number")
    if len(whole) + len(frac) > _MAX_EXPONENT:
        raise _quantity_error(text, "too many digits")
    value = Fraction(int(whole + frac or "0"), 10 ** len(frac))
    if suffix in _DECIMAL_SUFFIXES:
        value *= Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        value *= 2 ** _BINARY_SUFFIXES[suffix]
    else:
        em = _EXPONENT_RE.match(suffix)
        if em is None:
            number = s[: len(s) - len(suffix)]
            raise _quantity_error(
                text, _suffix_hint(number, suffix) or f"unknown suffix {suffix!r}"
            )
        exponent = int(em.group(1))
        if abs(exponent) > _MAX_EXPONENT:
            raise _quantity_error(text, f"exponent {exponent} is out of range")
        value *= Fraction(10) ** exponent
    if sign == "-":
        value = -value
    return _cap(_round_to_nano(value))


def _coerce(value: QuantityLike) -> Fraction:
    """Turn any QuantityLike into an exact Fraction on the 1n grid.

    Strings are Kubernetes quantities (rounded and capped like the API server does); Python
    numbers are exact values and are only put on the 1n grid.
    """
    if isinstance(value, str):
        return parse_quantity(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    if isinstance(value, (Fraction, Decimal)):
        if isinstance(value, Decimal) and not value.is_finite():
            raise ValueError(f"{value!r} is not a finite quantity")
        return _round_to_nano(Fraction(value))
    if isinstance(value, float):
        raise TypeError(
            f"{value!r}: floats are not accepted as quantities because they drift; "
            "pass a string such as '0.5' or '500m', or a Fraction"
        )
    raise TypeError(
        f"{value!r} is not a quantity: expected str, int, Fraction or Decimal"
    )


def format_quantity(value: QuantityLike, *, binary: bool = False) -> str:
    """Canonical Kubernetes spelling of `value`, the way the API server writes it back.

    Decimal form: the largest SI suffix that keeps an integer mantissa ("0.5" -> "500m",
    "2000m" -> "2", "1500" -> "1500", "3e9" -> "3G"). With `binary=True`, integers of at least
    1024 use the largest binary suffix that divides them ("1.5Gi" -> "1536Mi"); other values fall
    back to the decimal form, as in `resource.Quantity`'s canonicalisation.
    `parse_quantity(format_quantity(q)) == q` for every quantity q.
    """
    v = _coerce(value)
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    magnitude = abs(v)
    if binary and magnitude.denominator == 1 and magnitude >= 1024:
        mantissa, power = magnitude.numerator, 0
        while power < len(_BINARY_BY_POWER) - 1 and mantissa % 1024 == 0:
            mantissa //= 1024
            power += 1
        return f"{sign}{mantissa}{_BINARY_BY_POWER[power]}"
    mantissa = int(magnitude * _NANO)  # exact: values live on the 1n grid
    exponent = -9
    while exponent < 18 and mantissa % 1000 == 0:
        mantissa //= 1000
        exponent += 3
    return f"{sign}{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


def canonical_quantity(name: str, value: QuantityLike) -> str:
    """The spelling classhub writes into pod specs for resource `name`.

    CPU and device counts use the decimal form ("500m", "2", "1"); byte-valued resources
    (memory, ephemeral-storage, hugepages-*) use the binary form ("8Gi", "1536Mi") unless the
    decimal form is strictly shorter ("8G" rather than "7812500Ki"); both are exact.
    """
    if _is_byte_resource(name):
        as_binary = format_quantity(value, binary=True)
        as_decimal = format_quantity(value)
        return as_decimal if len(as_decimal) < len(as_binary) else as_binary
    return format_quantity(value)


def _plain_decimal(value: Fraction) -> str:
    """Exact decimal notation of a value on the 1n grid: Fraction(1, 2) -> "0.5"."""
    sign = "-" if value < 0 else ""
    nanos = int(abs(value) * _NANO)
    whole, frac = divmod(nanos, _NANO)
    text = str(whole)
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return sign + text


def _approx_bytes(value: Fraction) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    magnitude = abs(value)
    power = 0
    while power < len(units) - 1 and magnitude >= 1024 ** (power + 1):
        power += 1
    scaled = magnitude / 1024**power
    rounded = round(scaled, 2)  # Fraction rounding: exact, half-even
    text = _plain_decimal(Fraction(rounded))
    approx = "~" if rounded != scaled else ""
    sign = "-" if value < 0 else ""
    return f"{approx}{sign}{text} {units[power]}"


def human_quantity(name: str, value: QuantityLike) -> str:
    """How a student reads one resource amount: "0.5 CPU", "8 GiB memory", "1 nvidia.com/gpu".

    Bytes are shown in binary units with at most two decimals; "~" marks a rounded figure so a
    message never claims more precision than it shows.
    """
    v = _coerce(value)
    if name == CPU:
        return f"{_plain_decimal(v)} CPU"
    if _is_byte_resource(name):
        label = name.replace("-", " ") if name != MEMORY else "memory"
        return f"{_approx_bytes(v)} {label}"
    return f"{_plain_decimal(v)} {name}"


# --------------------------------------------------------------------------- resource vectors


def _order(name: str) -> tuple[int, str]:
    """CPU, then memory, then everything else by name: the order people expect in messages."""
    return ({CPU: 0, MEMORY: 1}.get(name, 2), name)


class ResourceVector(Mapping[str, Fraction]):
    """An immutable, exact amount of several resources: {"cpu": 1/2, "nvidia.com/gpu": 1}.

    Missing resources are zero, like `collections.Counter`: `v["nvidia.com/gpu"]` is 0 when the
    vector does not mention GPUs, and zero entries are dropped so equal amounts compare equal
    however they were written. Entries may be negative (a difference that went below zero);
    `clamp()` brings them back to zero where that matters.

    Quotas, profile requests, node capacity and gang admission all use this one type, so "does
    this fit" means the same thing everywhere.
    """

    __slots__ = ("_hash", "_items")

    _items: dict[
        str, int
    ]  # exact amounts in nano-units (1n = 1): int arithmetic is fast
    _hash: int | None

    def __init__(
        self,
        values: Mapping[str, QuantityLike]
        | Iterable[tuple[str, QuantityLike]]
        | None = None,
        /,
        **named: QuantityLike,
    ) -> None:
        if isinstance(values, ResourceVector) and not named:
            items = dict(values._items)
        else:
            items = {}
            pairs: Iterable[tuple[str, QuantityLike]]
            if values is None:
                pairs = ()
            elif isinstance(values, Mapping):
                pairs = values.items()
            else:
                pairs = values
            for name, raw in (*pairs, *named.items()):
                validate_resource_name(name)
                if name in items:
                    raise ValueError(f"resource {name!r} is given twice")
                try:
                    items[name] = int(
                        _coerce(raw) * _NANO
                    )  # exact: _coerce is on the 1n grid
                except (ValueError, TypeError) as exc:
                    raise type(exc)(f"{name}: {exc}") from None
        object.__setattr__(self, "_items", _normalised(items))
        object.__setattr__(self, "_hash", None)

    @classmethod
    def _trusted(cls, items: dict[str, int]) -> ResourceVector:
        """Build from validated names and nano-unit ints (internal fast path for arithmetic)."""
        vector = object.__new__(cls)
        object.__setattr__(vector, "_items", _normalised(items))
        object.__setattr__(vector, "_hash", None)
        return vector

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ResourceVector is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ResourceVector is immutable")

    # -- Mapping protocol
    def __getitem__(self, name: str) -> Fraction:
        nanos = self._items.get(name)
        return Fraction(nanos, _NANO) if nanos else _FRACTION_ZERO

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceVector):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(frozenset(self._items.items())))
        return self._hash  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"ResourceVector({self.to_k8s()!r})"

    def __str__(self) -> str:
        return self.human()

    def __reduce__(self) -> tuple[Any, ...]:
        return (ResourceVector, (dict(self.items()),))

    # -- algebra
    def __add__(self, other: ResourceVector) -> ResourceVector:
        if not isinstance(other, ResourceVector):
            return NotImplemented
        items = dict(self._items)
        for name, amount in other._items.items():
            items[name] = items.get(name, 0) + amount
        return ResourceVector._trusted(items)

    def __radd__(self, other: object) -> ResourceVector:
        # lets built-in sum() start from 0
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: ResourceVector) -> ResourceVector:
        if not isinstance(other, ResourceVector):
            return NotImplemented
        items = dict(self._items)
        for name, amount in other._items.items():
            items[name] = items.get(name, 0) - amount
        return ResourceVector._trusted(items)

    def __neg__(self) -> ResourceVector:
        return ResourceVector._trusted(
            {name: -amount for name, amount in self._items.items()}
        )

    def __mul__(self, factor: int) -> ResourceVector:
        """`replicas * request`: integer multiples only, so values stay on the 1n grid."""
        if isinstance(factor, bool) or not isinstance(factor, int):
            return NotImplemented
        return ResourceVector._trusted(
            {name: amount * factor for name, amount in self._items.items()}
        )

    __rmul__ = __mul__

    def minimum(self, other: ResourceVector) -> ResourceVector:
        """Per-resource minimum (missing = 0)."""
        return self._combine(other, min)

    def maximum(self, other: ResourceVector) -> ResourceVector:
        """Per-resource maximum (missing = 0); used for init containers, which run one at a time."""
        return self._combine(other, max)

    def _combine(
        self, other: ResourceVector, op: Callable[[int, int], int]
    ) -> ResourceVector:
        mine, theirs = self._items, other._items
        return ResourceVector._trusted(
            {name: op(mine.get(name, 0), theirs.get(name, 0)) for name in mine | theirs}
        )

    def clamp(self, upper: ResourceVector | None = None) -> ResourceVector:
        """Negative entries become zero; with `upper`, entries are also capped at it (missing = 0).

        `(allocatable - used).clamp()` is what a node can still give: an over-committed node has
        nothing free, not a negative amount.
        """
        items = {name: amount for name, amount in self._items.items() if amount > 0}
        vector = ResourceVector._trusted(items)
        return vector if upper is None else vector.minimum(upper.clamp())

    def select(self, keep: Callable[[str], bool]) -> ResourceVector:
        """Only the resources whose names pass `keep`, e.g. `v.select(is_gpu_resource)`."""
        return ResourceVector._trusted(
            {n: a for n, a in self._items.items() if keep(n)}
        )

    # -- predicates
    def is_zero(self) -> bool:
        """True when every resource is zero (the empty request)."""
        return not self._items

    def is_nonnegative(self) -> bool:
        """True when no resource is negative; a valid request, limit or capacity is nonnegative."""
        return all(amount >= 0 for amount in self._items.values())

    def fits_in(self, available: ResourceVector) -> bool:
        """True when every resource is at most `available`'s (missing = 0).

        Equivalent to `(available - self).is_nonnegative()`, without building the difference.
        """
        for name, amount in self._items.items():
            if amount > available._items.get(name, 0):
                return False
        return not any(
            amount < 0 and name not in self._items for name, amount in available._items.items()
        )

    def shortfall(self, available: ResourceVector) -> ResourceVector:
        """What is missing for this request to fit in `available`: `(self - available).clamp()`.

        Gives messages like "needs 1 more nvidia.com/gpu" instead of a bare refusal.
        """
        return (self - available).clamp()

    # -- conversion
    @classmethod
    def from_k8s(
        cls, resources: Mapping[str, str | int | float] | None
    ) -> ResourceVector:
        """From a Kubernetes resource list such as `{"cpu": "500m", "memory": "2Gi"}` (None -> zero).

        Like the API server decoding JSON, a bare number (YAML `cpu: 0.5`) is read from its
        decimal spelling, so `0.5` means exactly 500m; only this JSON-facing door takes floats.
        """
        if resources is None:
            return ZERO
        if not isinstance(resources, Mapping):
            raise TypeError(
                "a resource list must be a mapping of name to quantity, "
                f"not {type(resources).__name__}"
            )
        return cls(
            (
                name,
                repr(raw)
                if isinstance(raw, (int, float)) and not isinstance(raw, bool)
                else raw,
            )
            for name, raw in resources.items()
        )

    def to_k8s(self) -> dict[str, str]:
        """Canonical Kubernetes resource list, e.g. `{"cpu": "500m", "memory": "8Gi"}`."""
        return {name: canonical_quantity(name, amount) for name, amount in self.items()}

    def human(self) -> str:
        """For students and teachers: "2 CPU, 8 GiB memory, 1 nvidia.com/mig-1g.18gb"."""
        if not self._items:
            return "nothing"
        return ", ".join(human_quantity(name, amount) for name, amount in self.items())


def _normalised(items: dict[str, int]) -> dict[str, int]:
    """Drop zeros and order names (cpu, memory, then by name) so output is deterministic."""
    return {name: items[name] for name in sorted(items, key=_order) if items[name] != 0}


_FRACTION_ZERO = Fraction(0)
ZERO = ResourceVector()
"""The empty request / no capacity."""


def sum_vectors(vectors: Iterable[ResourceVector]) -> ResourceVector:
    """Sum many vectors in one pass (cheaper than chaining `+`)."""
    items: dict[str, int] = {}
    for vector in vectors:
        for name, amount in vector._items.items():
            items[name] = items.get(name, 0) + amount
    return ResourceVector._trusted(items)


# --------------------------------------------------------------------------- pod requests

# Pod-level `spec.resources` (KEP-2837) may set these; they then replace the container sum.
_POD_LEVEL_RESOURCES = (CPU, MEMORY)


def _requests_with_limit_defaults(
    resources: Mapping[str, Any] | None,
) -> ResourceVector:
    """requests, where a limit without a request implies request = limit (API-server defaulting).

    Pods read back from the API already carry the defaulted requests; pod specs classhub builds
    itself have not been through the API server yet, so the defaulting is applied here too.
    """
    resources = resources or {}
    merged: dict[str, Any] = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return ResourceVector.from_k8s(merged)


def container_requests(container: Mapping[str, Any]) -> ResourceVector:
    """Effective requests of one container (k8s JSON), limits standing in for missing requests."""
    try:
        return _requests_with_limit_defaults(container.get("resources"))
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"container {container.get('name', '?')!r}: {exc}") from None


def pod_spec_requests(spec: Mapping[str, Any]) -> ResourceVector:
    """What the scheduler reserves on a node for a pod with this spec (k8s `PodRequests`).

    - regular containers run together: their requests add up;
    - init containers run one at a time before them: the pod needs the largest of them, or the
      containers' sum, whichever is larger, per resource;
    - sidecars (init containers with restartPolicy Always) keep running: they add to the
      containers' sum and to every later init container;
    - pod-level `spec.resources` requests, where set for cpu/memory, replace the container sum;
    - `spec.overhead` (RuntimeClass overhead) is added on top.
    Not modelled: in-place resize (status.allocatedResources), which is rare in classrooms.
    """
    total = sum_vectors(container_requests(c) for c in spec.get("containers") or ())
    init_containers = spec.get("initContainers")
    if init_containers:
        sidecars = ZERO
        init_peak = ZERO
        for container in init_containers:
            request = container_requests(container)
            if container.get("restartPolicy") == "Always":
                total = total + request
                sidecars = sidecars + request
                init_peak = init_peak.maximum(sidecars)
            else:
                init_peak = init_peak.maximum(request + sidecars)
        total = total.maximum(init_peak)
    if spec.get("resources"):
        pod_level = _requests_with_limit_defaults(spec["resources"]).select(
            lambda name: name in _POD_LEVEL_RESOURCES
        )
        if pod_level:
            total = total.select(lambda name: name not in pod_level) + pod_level
    overhead = spec.get("overhead")
    if overhead:
        total = total + ResourceVector.from_k8s(overhead)
    return total


def pod_requests(pod: Mapping[str, Any]) -> ResourceVector:
    """Effective requests of a pod given as k8s JSON (`{"metadata": ..., "spec": ...}`)."""
    try:
        return pod_spec_requests(pod.get("spec") or {})
    except (ValueError, TypeError) as exc:
        meta = pod.get("metadata") or {}
        where = f"{meta.get('namespace', '')}/{meta.get('name', '?')}".lstrip("/")
        raise type(exc)(f"pod {where}: {exc}") from None
