"""Defaulting applied on create, as kube-apiserver's defaulters and admission plugins do.

Pods: restartPolicy, terminationGracePeriodSeconds, schedulerName, dnsPolicy, imagePullPolicy,
requests defaulted from limits, default not-ready/unreachable tolerations, ``status.phase:
Pending``. Namespaces: ``Active`` + metadata.name label. Services: clusterIP, targetPort.
Secrets: ``stringData`` folded into base64 ``data``.
"""

from __future__ import annotations

import base64
import itertools
from fractions import Fraction
from typing import Any

from .quantity import format_quantity
from .registry import ResourceType

_cluster_ips = itertools.count(10)


def _pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    if ":" not in tail or tail.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _container(container: dict[str, Any]) -> None:
    container.setdefault("imagePullPolicy", _pull_policy(container.get("image", "")))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    for key in ("requests", "limits"):
        # The API server stores quantities as strings; JSON numbers (KubeSpawner sends cpu as
        # 2.0 and memory as bytes) come back in canonical decimal form ("2", "2147483648").
        for res, qty in list((resources.get(key) or {}).items()):
            if isinstance(qty, (int, float)) and not isinstance(qty, bool):
                resources[key][res] = format_quantity(Fraction(qty))
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for res, qty in limits.items():
            requests.setdefault(res, qty)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def pod(obj: dict[str, Any]) -> None:
    """Default a Pod in place."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(container, dict):
            _container(container)
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos(spec))


def _qos(spec: dict[str, Any]) -> str:
    containers = spec.get("containers") or []
    any_set, guaranteed = False, True
    for container in containers:
        res = container.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        any_set = any_set or bool(req or lim)
        for name in ("cpu", "memory"):
            if name not in lim or req.get(name) != lim.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def namespace(obj: dict[str, Any]) -> None:
    """Default a Namespace in place."""
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {})["phase"] = "Active"
    labels = obj["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def service(obj: dict[str, Any]) -> None:
    """Default a Service in place (ClusterIP allocation, targetPort)."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        n = next(_cluster_ips)
        spec.setdefault("clusterIP", f"10.96.{n // 250}.{n % 250 + 1}")
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    obj.setdefault("status", {}).setdefault("loadBalancer", {})


def secret(obj: dict[str, Any]) -> None:
    """Fold stringData into data and default the type."""
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None) or {}
    data = obj.setdefault("data", {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()


def pvc(obj: dict[str, Any]) -> None:
    """Default a PersistentVolumeClaim (storage class, volume mode, Pending)."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("storageClassName", "standard")
    spec.setdefault("volumeMode", "Filesystem")
    obj.setdefault("status", {}).setdefault("phase", "Pending")


DEFAULTERS = {
    ("", "pods"): pod,
    ("", "namespaces"): namespace,
    ("", "services"): service,
    ("", "secrets"): secret,
    ("", "persistentvolumeclaims"): pvc,
}


def apply(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """Run the defaulter for ``rtype`` (if any) on ``obj`` in place."""
    defaulter = DEFAULTERS.get(rtype.key)
    if defaulter:
        defaulter(obj)
