"""One way to get a Kubernetes API client, shared with KubeSpawner.

Why: the hub already runs KubeSpawner, which loads the cluster configuration once per process
(in-cluster service account, else ``$KUBECONFIG``/``~/.kube/config``) and keeps one client per
event loop. Building a second client with other rules would mean two connection pools and two
ways to misconfigure; reusing ``kubespawner.clients`` keeps one.
"""

from __future__ import annotations

from typing import Any

from kubespawner.clients import load_config, shared_client


def core_v1(host: str = "", ssl_ca_cert: str = "", verify_ssl: bool | None = None) -> Any:
    """The shared ``kubernetes_asyncio`` CoreV1Api of the running event loop.

    The arguments are KubeSpawner's ``k8s_api_host``, ``k8s_api_ssl_ca_cert`` and
    ``k8s_api_verify_ssl``; leave them empty to use what the environment provides.
    """
    load_config(host=host or None, ssl_ca_cert=ssl_ca_cert or None, verify_ssl=verify_ssl)
    return shared_client("CoreV1Api")
