"""Parse a Kubernetes REST path into (type, namespace, name, subresource, watch), and say who
in kube-apiserver would answer a path the fake does not serve (which decides the 404's body)."""

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


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def is_go_restful(registry: Registry, path: str) -> bool:
    """True when kube-apiserver's go-restful container claims ``path``: ``/api...``, ``/version...``,
    exactly ``/apis``, or ``/apis/<group>...`` of a built-in group (the director matches the
    webservices' root paths on a path boundary, ``k8s.io/apiserver/pkg/server/handler.go``).
    Everything else (CRD groups, unknown groups) goes on down the delegation chain."""
    parts = _parts(path)
    if not parts:
        return False
    if parts[0] in ("api", "version"):
        return True
    if parts[0] != "apis":
        return False
    builtin = {t.group for t in registry.types.values() if t.group and not t.custom}
    return len(parts) == 1 or parts[1] in builtin


def unserved_subresource(registry: Registry, path: str) -> tuple[ResourceType, str] | None:
    """(type, object name) when ``path`` names a subresource that a custom resource does not
    serve, e.g. ``/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/scale``: the CRD handler
    answers those with NotFound on the object (``customresource_handler.go``)."""
    parts = _parts(path)
    if len(parts) < 6 or parts[0] != "apis":
        return None
    group, version, rest = parts[1], parts[2], parts[3:]
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 5:
        namespace, rest = rest[1], rest[2:]
    if len(rest) < 3:
        return None
    rtype = registry.lookup(group, version, rest[0])
    if rtype is None or not rtype.custom or rtype.namespaced != (namespace is not None):
        return None
    return None if rest[2] in rtype.subresources else (rtype, rest[1])
