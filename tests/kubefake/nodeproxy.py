"""``/api/v1/nodes/<node>/proxy/<path>``: kube-apiserver's proxy to a node's kubelet, answered by
the fake kubelet of that node.

What is served is what classhub reads: ``GET .../proxy/stats/summary``, the kubelet's Summary API
(``k8s.io/kubelet/pkg/apis/stats/v1alpha1``): ``node`` (name, start time) and, for each running
pod of the node, ``podRef``, ``startTime``, ``containers`` (name, start time) and ``volume``: one
entry per volume whose files the fake kubelet knows, with ``usedBytes`` (the blocks the folder
that backs it uses, as kubelet's ``du`` metrics count them), ``inodesUsed``, the file system's
``capacityBytes``/``availableBytes``/``inodes``/``inodesFree``, and ``pvcRef`` for a
``persistentVolumeClaim``. The folders are measured on a worker thread. ``.../proxy/healthz``
answers ``ok``; any other kubelet path is the kubelet's ``404 page not found``. A node that does
not exist is the API server's 404 NotFound; a method other than GET on a served path is 405.
Left out, as classhub reads none of them: CPU, memory, network, ephemeral-storage and
process stats, the node's file systems and system containers.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from aiohttp import web

from . import status
from .kubelet import Kubelet, folder_usage
from .objects import now_iso
from .store import Store

PATH = re.compile(r"^/api/v1/nodes/([^/]+)/proxy(/.*)?$")


async def serve(request: web.Request, store: Store, kubelet: Kubelet, node: str, path: str) -> web.Response:
    """Answer one proxied request to ``node``'s kubelet."""
    nodes = store.registry.lookup("", "v1", "nodes")
    assert nodes is not None
    found = store.find(nodes, None, node)
    if found is None:
        raise status.not_found("", "nodes", node)
    path = path.rstrip("/") or "/"
    if path not in ("/stats/summary", "/healthz"):
        return web.Response(text="404 page not found\n", status=404, content_type="text/plain")
    if request.method != "GET":
        raise status.method_not_allowed()
    if path == "/healthz":
        return web.Response(text="ok", content_type="text/plain")
    pods, todo = kubelet.volume_stats(node)
    paths = {(i, v["name"]): v.pop("path") for i, pod in enumerate(pods) for v in pod["volume"]}
    sizes = await asyncio.to_thread(lambda: {key: folder_usage(paths[key]) for key in todo})
    when = now_iso()
    for i, pod in enumerate(pods):
        measured = []
        for volume in pod["volume"]:
            usage = sizes.get((i, volume["name"]))
            if usage:  # a folder that is gone (the pod ending) is left out, not reported empty
                measured.append({"time": when, **usage, **volume})
        pod["volume"] = measured
    created = (found.get("metadata") or {}).get("creationTimestamp")
    summary: dict[str, Any] = {"node": {"nodeName": node, "startTime": created}, "pods": pods}
    return web.Response(text=json.dumps(summary, indent=2), content_type="application/json")
