"""GPU use per pod on Kubernetes, from Prometheus (NVIDIA's DCGM exporter): one setting for it.

Why a section of its own: two processes ask the same question, the idle culler (is this
server's GPU busy?) and the service's Cluster page (who uses which GPU, how much). They used to
have a ``prometheus_url`` each (``c.ClasshubCuller`` and ``c.ClasshubService``), one fact set
twice. Now both load ``c.ClasshubPrometheus`` (``configure(c)`` hands that section to both
services, docs/configuration.md) and ask through this class; the answer is parsed by
:func:`hub_ext.core.cluster.utilisation_by_pod`, the one parser of it.
"""
from __future__ import annotations

import json
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient
from traitlets import Float, Unicode
from traitlets.config import Configurable

from hub_ext.core.cluster import utilisation_by_pod

#: Traits that used to say the same as this section's, and the one to set instead (a process
#: that finds one set stops at start with that sentence: hub_ext.envtraits.moved_traits).
MOVED = {
    "ClasshubCuller.prometheus_url": "ClasshubPrometheus.url",
    "ClasshubCuller.gpu_utilization_query": "ClasshubPrometheus.gpu_utilization_query",
    "ClasshubCuller.gpu_pod_label": "ClasshubPrometheus.gpu_pod_label",
    "ClasshubService.prometheus_url": "ClasshubPrometheus.url",
    "ClasshubService.gpu_utilization_query": "ClasshubPrometheus.gpu_utilization_query",
    "ClasshubService.gpu_pod_label": "ClasshubPrometheus.gpu_pod_label",
}


class ClasshubPrometheus(Configurable):
    """Where GPU use per pod comes from on Kubernetes (the culler and the Cluster page)."""

    url = Unicode(
        "", config=True,
        help="Prometheus base URL (e.g. http://prometheus-server.monitoring) whose NVIDIA DCGM "
        "exporter metrics give each pod's GPU utilisation, in Kubernetes mode: the idle culler "
        "counts a server whose GPU is busy as not idle, and the Cluster page shows each pod's "
        "GPU use. Empty: not used (the culler decides on other signals; the page says where GPU "
        "use would come from).",
    )
    gpu_utilization_query = Unicode(
        "max by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL)", config=True,
        help="PromQL giving one GPU utilisation (percent) per pod; its label `gpu_pod_label` names "
        "the pod (the DCGM exporter adds pod/namespace with its Kubernetes mapping on).",
    )
    gpu_pod_label = Unicode("pod", config=True, help="Label of the query's result naming the pod.")
    timeout = Float(5.0, config=True, help="Seconds to wait for Prometheus's answer.")

    async def gpu_by_pod(self) -> dict[str, int] | None:
        """GPU use in percent per pod name; ``{}`` when no Prometheus is configured, ``None`` when
        it did not answer (callers then treat GPU use as unknown)."""
        if not self.url:
            return {}
        address = f"{self.url.rstrip('/')}/api/v1/query?{urlencode({'query': self.gpu_utilization_query})}"
        try:
            response = await AsyncHTTPClient().fetch(address, request_timeout=self.timeout)
            return utilisation_by_pod(json.loads(response.body), self.gpu_pod_label)
        except Exception:  # Prometheus down or not Prometheus: unknown this time
            return None
