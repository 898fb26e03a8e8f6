"""Control loops that kube-controller-manager would run: garbage collector (ownerReferences,
foreground deletion), namespace controller (empties a Terminating namespace), a dynamic
volume provisioner (binds Pending PVCs), the service-account controller (a ``default``
ServiceAccount in every namespace) and the PVC protection controller (drops the
``kubernetes.io/pvc-protection`` finalizer of a deleted claim once no scheduled pod uses it).
Steps with a configured latency (see latency.py) happen that long after they became due.

Each loop is a full pass over the store, scheduled (coalesced) after any change.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from . import status
from .latency import Latencies
from .objects import now_iso
from .store import Event, Store

PVC_PROTECTION = "kubernetes.io/pvc-protection"


class Controllers:
    """Runs :meth:`sync` soon after every store change."""

    def __init__(
        self, store: Store, loop: asyncio.AbstractEventLoop, latencies: Latencies | None = None
    ) -> None:
        self.store = store
        self.loop = loop
        self.latencies = latencies or Latencies()
        self._scheduled = False
        self._due: dict[tuple[str, str], float] = {}  # (step, object uid) -> loop time it is due
        store.listeners.append(self._on_event)

    def _on_event(self, event: Event | None) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self.sync)

    def sync(self) -> None:
        """One pass of every controller."""
        self._scheduled = False
        self._garbage_collect()
        self._foreground()
        self._namespaces()
        self._volumes()
        self._service_accounts()
        self._pvc_protection()

    def _ready(self, step: str, uid: str, delay: float) -> bool:
        """True once ``delay`` seconds passed since the step was first seen due (then forgotten)."""
        if delay <= 0:
            return True
        key = (step, uid)
        now = self.loop.time()
        if key not in self._due:
            self._due[key] = now + delay
            self.loop.call_later(delay, self._on_event, None)  # come back when it is due
            return False
        if now >= self._due[key]:
            del self._due[key]
            return True
        return False

    def _all(self) -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for rtype in list(self.store.registry.types.values()):
            for obj in list(self.store.objects.get(rtype.key, {}).values()):
                out.append((rtype, obj))
        return out

    def _delete(self, rtype: Any, obj: dict[str, Any], propagation: str = "Background") -> None:
        md = obj["metadata"]
        if md.get("deletionTimestamp"):
            return
        with contextlib.suppress(status.ApiError):
            self.store.delete(rtype, md.get("namespace"), md["name"], propagation=propagation)

    def _garbage_collect(self) -> None:
        seen: set[tuple[str, str]] = set()
        for rtype, obj in self._all():
            refs = obj["metadata"].get("ownerReferences") or []
            if not refs:
                continue
            live = []
            for ref in refs:
                if self.store.registry.by_kind(ref.get("apiVersion", ""), ref.get("kind", "")) is None:
                    live.append(ref)  # an owner kind this fake does not serve: leave it alone
                    continue
                owner = self.store.by_uid(ref.get("uid", ""))
                if owner is not None:
                    live.append(ref)
            if not live and (*rtype.key, obj["metadata"]["uid"]) not in seen:
                seen.add((*rtype.key, obj["metadata"]["uid"]))
                self._delete(rtype, obj)

    def _foreground(self) -> None:
        for rtype, obj in self._all():
            md = obj["metadata"]
            if not md.get("deletionTimestamp") or "foregroundDeletion" not in (md.get("finalizers") or []):
                continue
            deps = self.store.dependents(md["uid"])
            for dep_type, dep in deps:
                self._delete(dep_type, dep, "Foreground")
            if not deps:

                def drop(o: dict[str, Any]) -> None:
                    o["metadata"]["finalizers"] = [
                        f for f in o["metadata"]["finalizers"] if f != "foregroundDeletion"
                    ]
                    if not o["metadata"]["finalizers"]:
                        o["metadata"].pop("finalizers")

                self.store.mutate(rtype, md.get("namespace"), md["name"], drop)

    def _namespaces(self) -> None:
        ns_type = self.store.registry.lookup("", "v1", "namespaces")
        assert ns_type is not None
        for ns in list(self.store.objects.get(ns_type.key, {}).values()):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            remaining = 0
            for rtype in list(self.store.registry.types.values()):
                if not rtype.namespaced:
                    continue
                for obj in self.store.list(rtype, name):
                    remaining += 1
                    self._delete(rtype, obj)
            if (
                remaining == 0
                and self.store.find(ns_type, None, name) is not None
                and self._ready("finalize", ns["metadata"]["uid"], self.latencies.namespace_finalize)
            ):
                self.store.remove(ns_type, None, name)

    def _volumes(self) -> None:
        pvc_type = self.store.registry.lookup("", "v1", "persistentvolumeclaims")
        assert pvc_type is not None
        for pvc in list(self.store.objects.get(pvc_type.key, {}).values()):
            if (pvc.get("status") or {}).get("phase") != "Pending" or pvc["metadata"].get(
                "deletionTimestamp"
            ):
                continue
            if not self._ready("bind", pvc["metadata"]["uid"], self.latencies.volume_bind):
                continue

            def bind(o: dict[str, Any]) -> None:
                spec = o.setdefault("spec", {})
                spec["volumeName"] = "pvc-" + o["metadata"]["uid"]
                storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
                o["status"] = {
                    "phase": "Bound",
                    "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                    "capacity": {"storage": storage},
                }
                annotations = o["metadata"].setdefault("annotations", {})
                annotations["pv.kubernetes.io/bind-completed"] = "yes"
                annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
                annotations["volume.kubernetes.io/storage-provisioner"] = "kubefake.classhub/hostpath"
                annotations.setdefault("kubefake.classhub/provisioned-at", now_iso())

            self.store.mutate(pvc_type, pvc["metadata"]["namespace"], pvc["metadata"]["name"], bind)

    def _service_accounts(self) -> None:
        ns_type = self.store.registry.lookup("", "v1", "namespaces")
        sa_type = self.store.registry.lookup("", "v1", "serviceaccounts")
        assert ns_type is not None and sa_type is not None
        for ns in list(self.store.objects.get(ns_type.key, {}).values()):
            name = ns["metadata"]["name"]
            if ns["metadata"].get("deletionTimestamp") or self.store.find(sa_type, name, "default"):
                continue
            if self._ready("serviceaccount", ns["metadata"]["uid"], self.latencies.service_account):
                self.store.create(sa_type, name, {"metadata": {"name": "default", "namespace": name}})

    def _pvc_protection(self) -> None:
        pvc_type = self.store.registry.lookup("", "v1", "persistentvolumeclaims")
        pod_type = self.store.registry.lookup("", "v1", "pods")
        assert pvc_type is not None and pod_type is not None
        for pvc in list(self.store.objects.get(pvc_type.key, {}).values()):
            md = pvc["metadata"]
            if not md.get("deletionTimestamp") or PVC_PROTECTION not in (md.get("finalizers") or []):
                continue
            if any(claim_in_use(pod, md["name"]) for pod in self.store.list(pod_type, md["namespace"])):
                continue

            def release(o: dict[str, Any]) -> None:
                rest = [f for f in o["metadata"].get("finalizers") or [] if f != PVC_PROTECTION]
                if rest:
                    o["metadata"]["finalizers"] = rest
                else:
                    o["metadata"].pop("finalizers", None)

            self.store.mutate(pvc_type, md["namespace"], md["name"], release)


def claimed_names(pod: dict[str, Any]) -> list[str]:
    """The PVC names a pod's volumes refer to."""
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v.get("persistentVolumeClaim"), dict) and v["persistentVolumeClaim"].get("claimName")
    ]


def claim_in_use(pod: dict[str, Any], claim: str) -> bool:
    """The PVC protection controller's test: a scheduled pod that mounts the claim uses it, until
    the pod object is gone (a completed pod still holds it)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and claim in claimed_names(pod)
