"""Parse a Kubernetes REST path into (type, namespace, name, subresource, watch)."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry, ResourceType


@dataclass
class Target:
    """What a resource request addresses."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    legacy_watch: bool


def parse_path(registry: Registry, path: str) -> Target | None:
    """``None`` when the path is not a resource path this server knows."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    legacy_watch = bool(rest) and rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        candidate = registry.lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    rtype = registry.lookup(group, version, rest[0])
    if rtype is None or len(rest) > 3:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in rtype.subresources:
        return None
    if rtype.namespaced and name is not None and namespace is None:
        return None
    return Target(rtype, namespace, name, sub, legacy_watch)
