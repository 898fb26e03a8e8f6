"""Discovery documents: /version, /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>."""

from __future__ import annotations

from typing import Any

from .registry import VERBS, Registry, ResourceType

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kubefake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

SUBRESOURCE_VERBS = {
    "status": (["get", "patch", "update"], None),
    "log": (["get"], None),
    "binding": (["create"], "Binding"),
    "eviction": (["create"], "Eviction"),
    "finalize": (["update"], None),
    "exec": (["create", "get"], "PodExecOptions"),
    "proxy": (["create", "delete", "get", "patch", "update"], "NodeProxyOptions"),
}


def api_versions(address: str) -> dict[str, Any]:
    """``GET /api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    """``GET /apis``."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, vs) for g, vs in sorted(registry.groups().items())],
    }


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    """``GET /apis/<group>``."""
    versions = registry.groups().get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def _resource(rtype: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rtype.plural,
        "singularName": rtype.singular or rtype.kind.lower(),
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": VERBS,
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    out = [main]
    for sub in rtype.subresources:
        verbs, kind = SUBRESOURCE_VERBS.get(sub, (["get"], None))
        out.append(
            {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": kind or rtype.kind,
                "verbs": verbs,
            }
        )
    return out


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """``GET /api/v1`` or ``GET /apis/<group>/<version>``."""
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources = [r for t in sorted(types, key=lambda t: t.plural) for r in _resource(t)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
