"""Home sizes on Kubernetes, from the kubelets' Summary API (issue 35, docs/admins/course-data.md).

Why this way: on Kubernetes a home is a volume of its own (a PVC per user, or an NFS folder) that
the hub pod does not mount, so the service cannot walk it as it walks local homes. The kubelet of
each node measures every volume of the pods it runs and answers ``GET /stats/summary``; the API
server proxies that (``/api/v1/nodes/<node>/proxy/stats/summary``, the ``nodes/proxy`` permission
of helm-values/home-sizes-rbac.yaml). So a home's size is known while its owner's server runs
(a stopped server's volume is measured by no kubelet): the user servers' pods
(``component=singleuser-server``, KubeSpawner's label, in every namespace) say whose they are
(``hub.jupyter.org/username``) and which volume is the home (``classhub.io/home-volume``, set by
ClasshubKubeSpawner), and each node that runs one is asked once.

All of it is API calls, awaited without blocking the event loop; the service caches the result
(hub_ext.service.coursedata).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hub_ext.backends.kubernetes.labels import HOME_VOLUME_ANNOTATION

__all__ = ["HomeSizesUnavailable", "home_sizes", "homes_in_summary", "server_homes"]

USERNAME_ANNOTATION = "hub.jupyter.org/username"
SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
SERVER_SELECTOR = "component=singleuser-server"


class HomeSizesUnavailable(Exception):
    """The cluster would not say (a sentence for the hub's log: what to grant or check)."""


def server_homes(pods: list[Mapping[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    """node -> [("<namespace>/<pod>", user, volume)] for each running default server whose pod
    names its home volume. ``pods`` are plain pod objects (camelCase, as the API sends them)."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        notes = meta.get("annotations") or {}
        user, volume = notes.get(USERNAME_ANNOTATION), notes.get(HOME_VOLUME_ANNOTATION)
        node = (pod.get("spec") or {}).get("nodeName")
        running = (pod.get("status") or {}).get("phase") == "Running"
        if not (user and volume and node and running) or notes.get(SERVERNAME_ANNOTATION):
            continue  # a named server's volumes are not its owner's home
        out.setdefault(node, []).append((f"{meta.get('namespace')}/{meta.get('name')}", user, volume))
    return out


def homes_in_summary(summary: Mapping[str, Any], wanted: list[tuple[str, str, str]]) -> dict[str, int]:
    """user -> ``usedBytes`` of their home volume in one node's stats summary."""
    by_pod = {pod_key: (user, volume) for pod_key, user, volume in wanted}
    sizes: dict[str, int] = {}
    for pod in summary.get("pods") or []:
        ref = pod.get("podRef") or {}
        found = by_pod.get(f"{ref.get('namespace')}/{ref.get('name')}")
        if found is None:
            continue
        user, volume = found
        for stats in pod.get("volume") or []:
            if stats.get("name") == volume and isinstance(stats.get("usedBytes"), int):
                sizes[user] = stats["usedBytes"]
    return sizes


async def _get(call: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """(status, parsed JSON body) of a kubernetes_asyncio call made with ``_preload_content=False``
    (which hands back the raw response, unchecked: the proxy's body is JSON the client would
    otherwise turn into a Python repr)."""
    response = await call(*args, _preload_content=False, **kwargs)
    body = await response.read()
    if not 200 <= response.status < 300:
        return response.status, None
    return response.status, json.loads(body)


async def home_sizes(api: Any) -> dict[str, int]:
    """user -> bytes of their home, for every user whose server runs (``api``: the
    kubernetes_asyncio CoreV1Api). HomeSizesUnavailable when the API refuses."""
    code, listed = await _get(api.list_pod_for_all_namespaces, label_selector=SERVER_SELECTOR)
    if listed is None:
        raise HomeSizesUnavailable(f"listing the user servers' pods was refused (HTTP {code}); apply "
                                   "helm-values/capacity-rbac.yaml")
    sizes: dict[str, int] = {}
    for node, wanted in sorted(server_homes(listed.get("items") or []).items()):
        code, summary = await _get(api.connect_get_node_proxy_with_path, node, "stats/summary")
        if code == 404:  # the node went away meanwhile
            continue
        if summary is None:
            raise HomeSizesUnavailable(
                f"the kubelet's stats of node {node} were refused (HTTP {code}); apply "
                "helm-values/home-sizes-rbac.yaml (nodes/proxy), or set "
                "c.ClasshubCourseData.kubelet_home_sizes = False")
        sizes.update(homes_in_summary(summary, wanted))
    return sizes
