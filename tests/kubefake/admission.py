"""The admission plugins a default kube-apiserver runs on create, for what clients can notice.

* NamespaceLifecycle: a create in a Terminating namespace is 403 Forbidden ("unable to create new
  content in namespace x because it is being terminated", cause ``NamespaceTerminating``).
* ServiceAccount: a pod whose service account (``default`` when unset) does not exist is 403
  Forbidden ("error looking up service account ns/sa: serviceaccount "sa" not found"); a new
  namespace's ``default`` account appears only when the service-account controller made it.
* StorageObjectInUseProtection: every new PVC gets the ``kubernetes.io/pvc-protection``
  finalizer, so deleting a claim a pod still uses leaves it Terminating (see controllers.py).

These run for API requests (and ``FakeCluster.create``) before validation, as admission does;
the fake's own controllers write to the store directly, like privileged system components.
"""

from __future__ import annotations

from typing import Any

from . import status
from .registry import ResourceType
from .store import Store

PVC_PROTECTION = "kubernetes.io/pvc-protection"


def forbidden(rtype: ResourceType, name: str, why: str) -> status.ApiError:
    """403 Forbidden as ``admission.NewForbidden`` words it: ``pods "x" is forbidden: <why>``."""
    qualified = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
    details: dict[str, Any] = {"name": name, "kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return status.ApiError(403, "Forbidden", f'{qualified} "{name}" is forbidden: {why}', details)


def admit_create(store: Store, rtype: ResourceType, namespace: str | None, body: Any) -> Any:
    """Run the plugins on a create of ``body``; returns the (possibly mutated) body or raises."""
    if not isinstance(body, dict):
        return body
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName") or ""
    namespace = namespace or meta.get("namespace") or ("default" if rtype.namespaced else None)
    if rtype.namespaced and namespace:
        _namespace_lifecycle(store, rtype, namespace, name)
    if rtype.key == ("", "pods"):
        _service_account(store, rtype, namespace or "default", name, body)
    if rtype.key == ("", "persistentvolumeclaims"):
        body = dict(body, metadata=dict(meta))
        finalizers = list(body["metadata"].get("finalizers") or [])
        if PVC_PROTECTION not in finalizers:
            body["metadata"]["finalizers"] = [*finalizers, PVC_PROTECTION]
    return body


def _namespace_lifecycle(store: Store, rtype: ResourceType, namespace: str, name: str) -> None:
    ns_type = store.registry.lookup("", "v1", "namespaces")
    assert ns_type is not None
    ns = store.find(ns_type, None, namespace)
    if ns is None:
        raise status.not_found("", "namespaces", namespace)
    if ns["metadata"].get("deletionTimestamp") or (ns.get("status") or {}).get("phase") == "Terminating":
        err = forbidden(
            rtype,
            name,
            f"unable to create new content in namespace {namespace} because it is being terminated",
        )
        err.body["details"]["causes"] = [
            {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
        ]
        raise err


def _service_account(
    store: Store, rtype: ResourceType, namespace: str, name: str, pod: dict[str, Any]
) -> None:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    sa_type = store.registry.lookup("", "v1", "serviceaccounts")
    assert sa_type is not None
    if store.find(sa_type, namespace, account) is None:
        raise forbidden(
            rtype,
            name,
            f'error looking up service account {namespace}/{account}: serviceaccount "{account}" not found',
        )
