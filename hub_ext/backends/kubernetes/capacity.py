"""Capacity of the cluster from two list calls, computed by core.

Why: the profile list ("N free now"), quota and gang admission need the scheduler's view of free
capacity. Listing nodes and the pods that still hold resources (not Succeeded/Failed) is all the
data needed; the arithmetic is the pure ``CapacitySnapshot.from_k8s`` in core.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from traitlets import Float, Unicode
from traitlets.config import LoggingConfigurable

from hub_ext.core.capacity import CapacitySnapshot

from . import client

#: Pods in these phases hold nothing; the API server filters them out for us.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class KubernetesBackend(LoggingConfigurable):
    """The cluster as classhub's services see it (read side)."""

    k8s_api_host = Unicode(
        "",
        config=True,
        help="""API server URL; empty means in-cluster config, else the kubeconfig (like KubeSpawner).""",
    )
    k8s_api_ssl_ca_cert = Unicode(
        "", config=True, help="""CA bundle for the API server; empty uses the loaded config's."""
    )
    request_timeout = Float(
        30.0,
        config=True,
        help="""Seconds one list call may take before the snapshot fails (large clusters list slowly).""",
    )

    def __init__(self, api: Any = None, **kwargs: Any) -> None:
        """``api``: a ready ``CoreV1Api`` (tests, or a caller with its own client); else shared."""
        super().__init__(**kwargs)
        self._api = api

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = client.core_v1(self.k8s_api_host, self.k8s_api_ssl_ca_cert)
        return self._api

    async def _read(self, method: str, **kwargs: Any) -> bytes:
        # Plain JSON (no model objects): cheaper for thousands of pods, and what core expects.
        response = await getattr(self.api, method)(
            _preload_content=False, _request_timeout=self.request_timeout, **kwargs
        )
        try:
            return await response.read()
        finally:
            response.release()

    async def _list(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """A list call's JSON, decoded on a worker thread (docs/architecture.md, rule 7)."""
        return await asyncio.to_thread(json.loads, await self._read(method, **kwargs))

    async def capacity_snapshot(self) -> CapacitySnapshot:
        """Free, used and allocatable capacity of every node, from one node and one pod list.

        Decoding and summing the cluster's every pod takes the loop's thread tens of
        milliseconds per thousand pods (the job loop takes a snapshot every cycle): both run on
        a worker thread, not on the event loop (docs/architecture.md, rule 7)."""
        nodes, pods = await asyncio.gather(
            self._read("list_node"),
            self._read("list_pod_for_all_namespaces", field_selector=ACTIVE_PODS),
        )
        return await asyncio.to_thread(_snapshot, nodes, pods)


def _snapshot(nodes: bytes, pods: bytes) -> CapacitySnapshot:
    return CapacitySnapshot.from_k8s(json.loads(nodes), json.loads(pods))
