"""Profiles: what a user may start (CPU only, a MIG slice, a GPU share, whole GPUs of a model).

The catalog is plain data (a list of dicts from traitlets config). This module parses it once,
decides who sees which profile, and turns a user's choice (from the spawn form or from REST
``user_options``) into a checked :class:`Selection`, or an :class:`OptionsError` whose message
says what is allowed. The form and the REST API share this code, so nothing a browser cannot
send gets through the API either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hub_ext.core import roles
from hub_ext.core.devices import Inventory, matches_product
from hub_ext.core.resources import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    ResourceVector,
    format_quantity,
    gpu_kind,
    gpu_tolerations,
    is_gpu_resource,
    is_mig_resource,
    parse_mig,
    parse_mig_profile,
    parse_quantity,
    parse_single_mig_product,
    single_mig_product,
)

KINDS = ("cpu", "gpu", "mig", "shared")
MIG_STRATEGIES = ("mixed", "single")
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

_SLUG = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# An OCI image reference: registry/path:tag or @digest; no spaces, quotes, shell or YAML syntax.
_IMAGE = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
_OPTION_KEYS = frozenset({"profile", "image", "cpu", "memory"})
_MAX_OPTION_TEXT = 256


class CatalogError(ValueError):
    """The admin's profile catalog is invalid; the message names the profile and the field."""


class OptionsError(ValueError):
    """A user's choice is not allowed; the message says what is allowed instead."""


@dataclass(frozen=True)
class Viewer:
    """Who is choosing: what visibility rules are checked against."""

    name: str
    groups: frozenset[str] = frozenset()
    role: str = roles.STUDENT
    admin: bool = False


@dataclass(frozen=True)
class Range:
    """A guarantee (what is reserved) and a limit (what may be used) of CPU or memory."""

    guarantee: Fraction
    limit: Fraction


@dataclass(frozen=True)
class Profile:
    """One entry of the catalog, validated."""

    slug: str
    display_name: str
    description: str
    kind: str
    gpu_resource: str | None
    gpu_count: int
    gpu_product: str | None
    mig_profile: str | None
    mig_strategy: str | None
    cpu: Range
    memory: Range
    shm_size: Fraction | None
    images: tuple[str, ...]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    groups: frozenset[str]
    roles: frozenset[str]
    admin_only: bool
    default: bool = False

    def visible_to(self, viewer: Viewer) -> bool:
        """Admins see everything; others need a listed group (course) and role, if any are set."""
        if viewer.admin:
            return True
        if self.admin_only:
            return False
        if self.groups and not (self.groups & viewer.groups):
            return False
        return not (self.roles and viewer.role not in self.roles)

    @property
    def request(self) -> ResourceVector:
        """What one server of this profile reserves: guarantees and its GPUs."""
        wanted: dict[str, Fraction | int] = {CPU: self.cpu.guarantee, MEMORY: self.memory.guarantee}
        if self.gpu_resource:
            wanted[self.gpu_resource] = self.gpu_count
        return ResourceVector(wanted)

    @property
    def scheduling_selector(self) -> dict[str, str]:
        """Node labels a server of this profile needs (configured ones plus the GPU model)."""
        selector = dict(self.node_selector)
        if self.kind == "gpu" and self.gpu_product:
            selector[GPU_PRODUCT_LABEL] = self.gpu_product
        if self.kind == "mig" and self.mig_strategy == "single":
            selector[GPU_PRODUCT_LABEL] = single_mig_product(
                self.gpu_product or "", parse_mig_profile(self.mig_profile or ""))
        elif self.kind == "mig" and self.gpu_product:
            selector[GPU_PRODUCT_LABEL] = self.gpu_product
        return selector

    def summary(self) -> str:
        """A one-line description of the resources, for the form and for messages."""
        cpu = format_quantity(self.cpu.limit)
        if self.cpu.guarantee != self.cpu.limit:
            cpu = f"{format_quantity(self.cpu.guarantee)}-{cpu}"
        parts = [f"{cpu} CPU", f"{format_quantity(self.memory.limit, binary=True)} memory"]
        if self.kind == "gpu":
            parts.append(f"{self.gpu_count} x {self.gpu_product or 'GPU'}")
        elif self.kind == "mig":
            parts.append(f"{self.gpu_count} x MIG {self.mig_profile}"
                         + (f" on {self.gpu_product}" if self.gpu_product else ""))
        elif self.kind == "shared":
            parts.append(f"{self.gpu_count} x shared GPU")
        return ", ".join(parts)


@dataclass(frozen=True)
class Selection:
    """A validated choice: the profile, the image, and the CPU/memory actually requested."""

    profile: Profile
    image: str | None
    cpu: Range
    memory: Range

    @property
    def request(self) -> ResourceVector:
        wanted: dict[str, Fraction | int] = {CPU: self.cpu.guarantee, MEMORY: self.memory.guarantee}
        if self.profile.gpu_resource:
            wanted[self.profile.gpu_resource] = self.profile.gpu_count
        return ResourceVector(wanted)

    def to_user_options(self) -> dict[str, str]:
        """The canonical ``user_options`` that reproduce this selection."""
        options = {"profile": self.profile.slug}
        if self.image:
            options["image"] = self.image
        if self.cpu != self.profile.cpu:
            options["cpu"] = format_quantity(self.cpu.limit)
        if self.memory != self.profile.memory:
            options["memory"] = format_quantity(self.memory.limit, binary=True)
        return options


@dataclass(frozen=True)
class ImagePolicy:
    """Which images a user may pick beyond the profile's own list."""

    extra_images: frozenset[str] = frozenset()  # e.g. images already used in the user's course
    pattern: str | None = None  # free-form images must match this (full match); None = not allowed

    def allows(self, image: str, profile: Profile) -> bool:
        if image in profile.images or image in self.extra_images:
            return True
        return self.pattern is not None and re.fullmatch(self.pattern, image) is not None


@dataclass(frozen=True)
class Catalog:
    """All profiles, in the admin's order."""

    profiles: tuple[Profile, ...] = field(default_factory=tuple)

    @classmethod
    def from_config(cls, entries: Sequence[Mapping[str, Any]]) -> Catalog:
        profiles = tuple(parse_profile(entry, i) for i, entry in enumerate(entries))
        seen: set[str] = set()
        for p in profiles:
            if p.slug in seen:
                raise CatalogError(f"profile slug {p.slug!r} is used twice; slugs must be unique")
            seen.add(p.slug)
        return cls(profiles)

    def visible(self, viewer: Viewer) -> list[Profile]:
        return [p for p in self.profiles if p.visible_to(viewer)]

    def for_course(self, course: str) -> Catalog:
        """The profiles a course offers: those listing no group, or listing the course."""
        return Catalog(tuple(p for p in self.profiles if not p.groups or course in p.groups))

    def default_for(self, viewer: Viewer) -> Profile | None:
        visible = self.visible(viewer)
        return next((p for p in visible if p.default), visible[0] if visible else None)

    def select(
        self, viewer: Viewer, options: Mapping[str, Any] | None, images: ImagePolicy = ImagePolicy()
    ) -> Selection:
        """Validate ``options`` (form or REST) for ``viewer``; raise OptionsError otherwise."""
        options = dict(options or {})
        unknown = sorted(set(map(str, options)) - _OPTION_KEYS)
        if unknown:
            raise OptionsError(
                f"unknown option(s) {', '.join(map(repr, unknown))}; "
                f"allowed options are {', '.join(sorted(_OPTION_KEYS))}"
            )
        visible = self.visible(viewer)
        if not visible:
            raise OptionsError("no profile is available to you; ask your teacher or an admin")
        names = ", ".join(p.slug for p in visible)
        slug = options.get("profile")
        if slug is None:
            profile = self.default_for(viewer)
            assert profile is not None
        else:
            slug = _text(slug, "profile")
            profile = next((p for p in visible if p.slug == slug), None)
            if profile is None:
                raise OptionsError(f"profile {_quote(slug)} is not available to you; choose one of: {names}")
        image = _choose_image(profile, options.get("image"), images)
        cpu = _choose_range(profile.cpu, options.get("cpu"), CPU, "cpu")
        memory = _choose_range(profile.memory, options.get("memory"), MEMORY, "memory")
        return Selection(profile=profile, image=image, cpu=cpu, memory=memory)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise OptionsError(f"option {name!r} must be a string, not {type(value).__name__}")
    if len(value) > _MAX_OPTION_TEXT:
        raise OptionsError(f"option {name!r} is too long ({len(value)} characters)")
    return value.strip()


def _quote(value: str) -> str:
    """Echo user input in a message without letting it forge the message (printable, short)."""
    shown = "".join(c if c.isprintable() else "?" for c in value)[:64]
    return repr(shown)


def _choose_image(profile: Profile, wanted: Any, policy: ImagePolicy) -> str | None:
    if wanted is None or wanted == "":
        return profile.images[0] if profile.images else None
    image = _text(wanted, "image")
    if not _IMAGE.match(image):
        raise OptionsError(f"{_quote(image)} is not a container image reference")
    if not policy.allows(image, profile):
        allowed = ", ".join(profile.images + tuple(sorted(policy.extra_images))) or "none"
        extra = f", or an image matching {policy.pattern!r}" if policy.pattern else ""
        raise OptionsError(
            f"image {_quote(image)} is not allowed for profile {profile.slug!r}; "
            f"choose one of: {allowed}{extra}"
        )
    return image


def _choose_range(base: Range, wanted: Any, resource: str, name: str) -> Range:
    """A user may ask for a limit between the profile's guarantee and its limit."""
    if wanted is None or wanted == "":
        return base
    if isinstance(wanted, bool) or not isinstance(wanted, (str, int)):
        raise OptionsError(f"option {name!r} must be a quantity such as '2' or '4Gi'")
    try:
        value = parse_quantity(_text(wanted, name) if isinstance(wanted, str) else wanted)
    except (ValueError, TypeError) as e:
        raise OptionsError(f"option {name!r}: {e}") from None
    binary = resource == MEMORY
    low = format_quantity(base.guarantee, binary=binary)
    high = format_quantity(base.limit, binary=binary)
    if value <= 0 or value < base.guarantee or value > base.limit:
        raise OptionsError(f"option {name!r} must be between {low} and {high} for this profile")
    return Range(guarantee=min(base.guarantee, value), limit=value)


# ---- parsing the catalog -------------------------------------------------------------------


def parse_profile(entry: Mapping[str, Any], position: int = 0) -> Profile:
    """One catalog entry -> Profile; CatalogError names the entry and the field at fault."""
    if not isinstance(entry, Mapping):
        raise CatalogError(f"profile #{position + 1} must be a mapping, not {type(entry).__name__}")
    slug = entry.get("slug")
    where = f"profile {slug!r}" if isinstance(slug, str) else f"profile #{position + 1}"

    def fail(msg: str) -> CatalogError:
        return CatalogError(f"{where}: {msg}")

    known = {
        "slug", "display_name", "description", "kind", "gpu_count", "gpu_product", "gpu_resource",
        "mig_profile", "mig_strategy", "cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit",
        "shm_size", "images", "node_selector", "tolerations", "groups", "roles", "admin_only",
        "default",
    }
    unknown = sorted(set(entry) - known)
    if unknown:
        raise fail(f"unknown field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(known))}")
    if not isinstance(slug, str) or not _SLUG.match(slug):
        raise fail("slug must be lowercase letters, digits and '-' (at most 63), e.g. 'h200-mig-1g'")
    kind = entry.get("kind", "cpu")
    if kind not in KINDS:
        raise fail(f"kind {kind!r} is not one of {', '.join(KINDS)}")

    gpu_count = entry.get("gpu_count", 0 if kind == "cpu" else 1)
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise fail("gpu_count must be a whole number >= 0")
    if kind == "cpu" and gpu_count:
        raise fail("a cpu profile cannot have gpu_count; use kind gpu, mig or shared")
    if kind != "cpu" and gpu_count < 1:
        raise fail(f"a {kind} profile needs gpu_count >= 1")
    product = entry.get("gpu_product")
    if product is not None and (not isinstance(product, str) or not product):
        raise fail("gpu_product must be a node label value such as 'NVIDIA-H200'")
    mig_profile = entry.get("mig_profile")
    mig_strategy = entry.get("mig_strategy", "mixed" if kind == "mig" else None)
    resource: str | None = None
    try:
        if kind == "gpu":
            resource = NVIDIA_GPU
        elif kind == "shared":
            resource = entry.get("gpu_resource", NVIDIA_GPU_SHARED)
            if not is_gpu_resource(resource):
                raise fail(f"gpu_resource {resource!r} is not a GPU resource; use e.g. "
                           f"{NVIDIA_GPU_SHARED}, nvidia.com/mig-1g.18gb.shared or amd.com/gpu")
        elif kind == "mig":
            try:
                mig = parse_mig_profile(mig_profile or "")
            except ValueError:
                raise fail("a mig profile needs mig_profile such as '1g.18gb', '3g.71gb' or "
                           "'1g.10gb+me'") from None
            mig_profile = str(mig)  # NVIDIA's spelling: "1g.10gb.me" is written "1g.10gb+me"
            if mig_strategy not in MIG_STRATEGIES:
                raise fail(f"mig_strategy must be one of {', '.join(MIG_STRATEGIES)}")
            if mig_strategy == "single":
                if not product:
                    raise fail("mig_strategy single needs gpu_product (e.g. 'NVIDIA-H200')")
                resource = NVIDIA_GPU
            else:
                resource = mig.resource_name
                if not is_mig_resource(resource):
                    raise fail(f"{resource!r} is longer than a Kubernetes resource name may be")
    except ValueError as e:
        if isinstance(e, CatalogError):
            raise
        raise fail(str(e)) from None
    if kind != "mig" and mig_profile is not None:
        raise fail("mig_profile only applies to kind mig")

    cpu = _range(entry, "cpu_guarantee", "cpu_limit", "1", "2", fail)
    memory = _range(entry, "mem_guarantee", "mem_limit", "1Gi", "2Gi", fail)
    shm = entry.get("shm_size")
    shm_size = _quantity(shm, "shm_size", fail) if shm is not None else None

    images = entry.get("images", [])
    if isinstance(images, str) or not isinstance(images, list) or not all(
        isinstance(i, str) and _IMAGE.match(i) for i in images
    ):
        raise fail("images must be a list of image references, e.g. 'quay.io/jupyter/scipy-notebook:latest'")
    node_selector = entry.get("node_selector", {})
    if not isinstance(node_selector, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in node_selector.items()
    ):
        raise fail("node_selector must map label names to string values")
    tolerations = entry.get("tolerations", [])
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise fail("tolerations must be a list of Kubernetes toleration objects")
    role_names = _string_set(entry.get("roles", []), "roles", fail)
    bad_roles = role_names - set(roles.ROLE_ORDER)
    if bad_roles:
        raise fail(f"unknown role(s) {', '.join(sorted(bad_roles))}; use {', '.join(roles.ROLE_ORDER)}")
    return Profile(
        slug=slug,
        display_name=str(entry.get("display_name") or slug),
        description=str(entry.get("description", "")),
        kind=kind,
        gpu_resource=resource,
        gpu_count=gpu_count,
        gpu_product=product,
        mig_profile=mig_profile,
        mig_strategy=mig_strategy if kind == "mig" else None,
        cpu=cpu,
        memory=memory,
        shm_size=shm_size,
        images=tuple(images),
        node_selector=dict(node_selector),
        tolerations=tuple(dict(t) for t in tolerations),
        groups=_string_set(entry.get("groups", []), "groups", fail),
        roles=role_names,
        admin_only=bool(entry.get("admin_only", False)),
        default=bool(entry.get("default", False)),
    )


def _quantity(value: Any, name: str, fail) -> Fraction:
    try:
        q = parse_quantity(value if isinstance(value, (str, int)) and not isinstance(value, bool) else "x")
    except ValueError as e:
        raise fail(f"{name}: {e}") from None
    if q <= 0:
        raise fail(f"{name} must be positive")
    return q


def _range(entry: Mapping[str, Any], g_key: str, l_key: str, g_default: str, l_default: str, fail) -> Range:
    """Guarantee and limit; missing ones default so that guarantee <= limit."""
    limit = _quantity(entry[l_key], l_key, fail) if l_key in entry else None
    if g_key in entry:
        guarantee = _quantity(entry[g_key], g_key, fail)
    else:
        guarantee = min(parse_quantity(g_default), limit) if limit is not None else parse_quantity(g_default)
    if limit is None:
        limit = max(guarantee, parse_quantity(l_default))
    if limit < guarantee:
        raise fail(f"{l_key} must be at least {g_key}")
    return Range(guarantee, limit)


def _string_set(value: Any, name: str, fail) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise fail(f"{name} must be a list of names")
    items = list(value)
    if not all(isinstance(v, str) for v in items):
        raise fail(f"{name} must be a list of names")
    return frozenset(items)


# ---- profiles of distributed jobs ----------------------------------------------------------------


def select_for_job(catalog: Catalog, viewer: Viewer, course: str, slug: Any) -> Selection:
    """A job replica's profile: the notebook's check (:meth:`Catalog.select`) on the profiles
    ``course`` offers, for ``viewer`` with their role in that course; OptionsError names the
    profiles they can choose for a job of that course."""
    offered = catalog.for_course(course)
    if isinstance(slug, str) and not any(p.slug == slug for p in offered.profiles) and any(
            p.slug == slug and p.visible_to(viewer) for p in catalog.profiles):
        names = ", ".join(p.slug for p in offered.visible(viewer)) or "none"
        raise OptionsError(f"course {course} does not offer profile {_quote(slug)}; "
                           f"choose one of: {names}")
    if slug is None:
        raise OptionsError("profile must name a profile, e.g. 'cpu'")
    return offered.select(viewer, {"profile": slug})


def job_role(selection: Selection) -> dict[str, Any]:
    """What one replica of a profile asks for, as a job role's fields: the profile's guarantees
    and GPUs as ``resources``, and the GPU model its pods need (``gpu_product``, the node label
    a notebook of that profile is pinned to) when it names one."""
    role: dict[str, Any] = {"resources": selection.request.to_k8s()}
    product = selection.profile.scheduling_selector.get(GPU_PRODUCT_LABEL)
    if product:
        role["gpu_product"] = product
    return role


def job_profile_record(selection: Selection) -> dict[str, Any]:
    """What a job keeps of a role's profile: its name for people, and what its pods get on
    Kubernetes besides the request (limits, node selector, tolerations), as a notebook would."""
    profile = selection.profile
    settings = pod_settings(profile)
    return {
        "slug": profile.slug, "display_name": profile.display_name, "summary": profile.summary(),
        "limits": {CPU: format_quantity(selection.cpu.limit),
                   MEMORY: format_quantity(selection.memory.limit, binary=True)},
        "node_selector": settings["node_selector"], "tolerations": settings["tolerations"],
    }


def resolve_job_roles(catalog: Catalog, viewer: Viewer, course: str,
                      roles: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Roles that name a ``profile`` get its request in its place (:func:`job_role`); returns
    the roles and, per role name, what the job keeps of its profile (:func:`job_profile_record`).
    OptionsError (with the role's name when the job has several) for a profile refused."""
    out: list[dict[str, Any]] = []
    records: dict[str, Any] = {}
    for raw in roles:
        role = dict(raw)
        if "profile" in role:
            try:
                selection = select_for_job(catalog, viewer, course, role.pop("profile"))
            except OptionsError as e:
                raise OptionsError(f"role {role.get('name')}: {e}" if len(roles) > 1 else str(e)) from None
            role.update(job_role(selection))
            records[str(role.get("name"))] = job_profile_record(selection)
        out.append(role)
    return out, records


# ---- what a profile means for a Kubernetes pod ---------------------------------------------------


def pod_settings(profile: Profile) -> dict[str, Any]:
    """The pod-level settings a profile adds: extended resources, scheduling, /dev/shm, env.

    Plain data (KubeSpawner trait values), so the same function serves the spawner, the
    capacity check ("N free now") and tests.
    """
    resources = {profile.gpu_resource: str(profile.gpu_count)} if profile.gpu_resource else {}
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if profile.shm_size:
        size = format_quantity(profile.shm_size, binary=True)
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    environment = {"CLASSHUB_PROFILE": profile.slug}
    if not profile.gpu_resource:
        # With the NVIDIA container runtime as default, "void" keeps GPUs out of CPU-only pods.
        environment["NVIDIA_VISIBLE_DEVICES"] = "void"
    return {
        "resources": resources,
        "node_selector": profile.scheduling_selector,
        "tolerations": [*(dict(t) for t in profile.tolerations), *gpu_tolerations(profile.gpu_resource)],
        "volumes": volumes,
        "volume_mounts": mounts,
        "environment": environment,
    }


# ---- availability and proposals -----------------------------------------------------------------


def viewer_from_hub(name: str, admin: bool, groups: Iterable[str],
                    courses: Mapping[str, roles.CourseStaff]) -> Viewer:
    """A Viewer from what the hub knows about a user (groups, admin flag, course staff)."""
    group_set = frozenset(groups)
    role = roles.overall_role(admin, roles.course_roles(name, group_set, courses))
    return Viewer(name=name, groups=group_set, role=role, admin=admin)


@dataclass(frozen=True)
class Room:
    """How many servers of a profile the machine or cluster holds when nothing runs on it.

    Why: "none free right now" is only true when some would fit once others stop; a profile
    that asks more of one machine than any machine has can never start, and its user must be
    told to ask the admin instead of to wait. ``resource``, ``needed`` and ``most`` name what
    no single machine (node) has enough of, for that sentence.
    """

    fits: int
    cluster: bool = False  # True: Kubernetes nodes; False: the one local machine
    matching: bool = True  # False: no machine (node) may take it at all (selector, taints)
    resource: str | None = None  # None with fits == 0: no one resource is short, their sum is
    needed: Fraction = Fraction(0)
    most: Fraction = Fraction(0)


def room_in_cluster(profile: Profile, snapshot: Any) -> Room:
    """The :class:`Room` of ``profile`` on a cluster (a ``CapacitySnapshot``): max_fit against
    the allocatable of the nodes its pods may use, and the first resource it needs more of than
    any such node has."""
    settings = pod_settings(profile)
    selector, tolerations = settings["node_selector"], settings["tolerations"]
    request = profile.request
    fits = snapshot.max_fit(request, selector, tolerations, when_empty=True)
    if fits:
        return Room(fits, cluster=True)
    if not snapshot.eligible_nodes(selector, tolerations):
        return Room(0, cluster=True, matching=False)
    names = [profile.gpu_resource] if profile.gpu_resource else []
    names += [n for n in request if n not in names]
    for name in names:
        most = snapshot.most_allocatable(name, selector, tolerations)
        if request[name] > most:
            return Room(0, cluster=True, resource=name, needed=Fraction(request[name]), most=most)
    return Room(0, cluster=True)


def room_on_machine(profile: Profile, inventory: Inventory) -> Room | None:
    """The :class:`Room` of ``profile`` on this workstation: the devices of its resource (and,
    for whole GPUs, of its model) that exist, divided by its count. A server needs its count of
    distinct devices (a shared GPU's replicas count once per server), so a profile asking more
    devices than exist fits nowhere however many replicas they have."""
    resource = profile.gpu_resource
    if not resource:
        return None  # CPU only: nothing classhub counts limits it
    product = profile.gpu_product if profile.kind == "gpu" else None
    devices = [d for d in inventory.devices_for(resource) if matches_product(d.product, product)]
    units = sum(inventory.units(d) for d in devices)
    fits = units // profile.gpu_count if len(devices) >= profile.gpu_count else 0
    if fits:
        return Room(fits)
    return Room(0, resource=resource, needed=Fraction(profile.gpu_count), most=Fraction(len(devices)))


def _amount(resource: str, value: Fraction) -> str:
    """A quantity as people read it next to its resource name (memory in Gi, counts as numbers)."""
    return format_quantity(value, binary=resource == MEMORY)


@dataclass(frozen=True)
class Offer:
    """A profile as shown to one user: how many are free now, or why it cannot be picked."""

    profile: Profile
    free: int | None  # None: not limited by anything classhub counts (e.g. CPU on a workstation)
    room: Room | None = None  # None: not known how many would fit on an empty machine/cluster

    @property
    def available(self) -> bool:
        return self.free is None or self.free > 0

    @property
    def fits_when_empty(self) -> int | None:
        """How many servers of this profile fit when nothing runs (None: not known)."""
        return None if self.room is None else self.room.fits

    @property
    def reason(self) -> str:
        """Why the profile cannot be picked: busy (wait, or the culler reclaims) or never
        possible here (the admin must change the profile or the hardware)."""
        if self.available:
            return ""
        if self.room is not None and self.room.fits == 0:
            return self._no_place(self.room)
        what = self.profile.gpu_resource or "capacity"
        return f"none free right now: every {what} that fits this profile is in use"

    def _no_place(self, room: Room) -> str:
        ask = "ask your admin to change the profile"
        profile = self.profile
        whole = "whole " if room.resource == profile.gpu_resource and profile.kind == "gpu" else ""
        if not room.cluster:
            if room.resource is None:
                return f"this machine has no place for it; {ask}"
            model = f" ({profile.gpu_product})" if whole and profile.gpu_product else ""
            return (f"this machine has no place for it: it needs {_amount(room.resource, room.needed)} "
                    f"{whole}{room.resource}{model} and this machine has "
                    f"{_amount(room.resource, room.most)}; {ask}")
        if not room.matching:
            return (f"no node of this cluster has room for it: no schedulable node matches its "
                    f"node selector and tolerations; {ask}")
        if room.resource is None:
            return (f"no node of this cluster has room for it: no node has all it "
                    f"asks for (CPU, memory, GPUs) at once; {ask}")
        return (f"no node of this cluster has room for it: it needs "
                f"{_amount(room.resource, room.needed)} {whole}{room.resource} on one node and "
                f"the most any node has is {_amount(room.resource, room.most)}; {ask}")


def propose_profiles(resources: Mapping[str, Iterable[str | None]]) -> list[dict[str, Any]]:
    """Catalog entries an admin could start from, given what a cluster or machine offers.

    ``resources`` maps a resource name (``nvidia.com/gpu``, ``nvidia.com/mig-1g.18gb``,
    ``nvidia.com/gpu.shared``) to the GPU products (node labels) that offer it.
    """
    proposals: list[dict[str, Any]] = [
        {"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True,
         "cpu_guarantee": "1", "cpu_limit": "2", "mem_guarantee": "2Gi", "mem_limit": "4Gi"}
    ]
    for resource in sorted(resources):
        products = sorted({p for p in resources[resource] if p})
        if resource == NVIDIA_GPU:
            for product in products:
                single = parse_single_mig_product(product)
                if single and single_mig_product(*single) != product:
                    continue  # time-sliced (-SHARED): no mig profile's selector names that label
                if single:
                    base, profile = single[0], str(single[1])
                    proposals.append({
                        "slug": _slugify(f"{base}-mig-{profile}"), "kind": "mig",
                        "display_name": f"{base} MIG {profile}", "mig_profile": profile,
                        "mig_strategy": "single", "gpu_product": base,
                    })
                else:
                    proposals.append({"slug": _slugify(f"{product}-gpu"), "kind": "gpu",
                                      "display_name": f"Whole {product}", "gpu_product": product,
                                      "cpu_guarantee": "4", "cpu_limit": "8",
                                      "mem_guarantee": "32Gi", "mem_limit": "64Gi"})
        elif resource == NVIDIA_GPU_SHARED:
            proposals.append({"slug": "shared-gpu", "kind": "shared",
                              "display_name": "Shared GPU (time-sliced)"})
        elif gpu_kind(resource) == "mig":
            mig = str(parse_mig(resource))  # 1g.18gb, 1g.10gb+me, 1c.2g.20gb
            proposals.append({"slug": _slugify(f"mig-{mig}"), "kind": "mig", "mig_profile": mig,
                              "display_name": f"MIG slice {mig}"
                              + (f" ({', '.join(products)})" if products else "")})
    return proposals


def offered_by_nodes(nodes: Iterable[Any]) -> dict[str, list[str]]:
    """resource name -> GPU product labels, from capacity-snapshot nodes (``NodeCapacity``).

    The input of :func:`propose_profiles` for a cluster; only schedulable nodes count.
    """
    offered: dict[str, set[str]] = {}
    for node in nodes:
        if not node.schedulable:
            continue
        for resource in node.gpu_resources:
            if node.allocatable.get(resource, 0) > 0:
                offered.setdefault(resource, set()).add(node.gpu_product or "")
    return {r: sorted(p for p in products if p) for r, products in offered.items()}


def _slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:63].strip("-") or "profile"
