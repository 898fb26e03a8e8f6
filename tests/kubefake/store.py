"""The object store: one cluster-wide resourceVersion counter, a bounded event history,
watchers, and create/update/delete with kube-apiserver semantics.

Stored objects are never mutated in place: every write stores a fresh dict, so history
entries and watch events can share them safely. All methods run on the server's event loop.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import defaults, rbac, status
from .objects import deep, now_iso, random_suffix
from .registry import Registry, ResourceType
from .selection import FieldRequirement, Requirement, match_fields, match_labels
from .validation import validate, validate_pod_update

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped


@dataclass(frozen=True)
class Event:
    """One change: ``type`` is ADDED, MODIFIED or DELETED; ``obj`` the object after it."""

    rv: int
    type: str
    rtype: ResourceType
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


@dataclass(eq=False)
class Watcher:
    """A watch subscription; events land in :attr:`queue` (``None`` means: close)."""

    rtype: ResourceType
    namespace: str | None
    labels: list[Requirement]
    fields: list[FieldRequirement]
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        md = obj.get("metadata") or {}
        if self.namespace and md.get("namespace") != self.namespace:
            return False
        return match_labels(self.labels, md.get("labels")) and match_fields(self.fields, obj)

    def offer(self, event: Event) -> None:
        """Queue ``event`` as this watcher sees it (selector transitions become ADDED/DELETED)."""
        if event.rtype.key != self.rtype.key:
            return
        now, before = self._matches(event.obj), self._matches(event.old)
        kind = event.type
        if kind == "MODIFIED":
            if now and not before:
                kind = "ADDED"
            elif before and not now:
                kind = "DELETED"
            elif not now:
                return
        elif not now:
            return
        self.queue.put_nowait((kind, event.obj))

    def close(self) -> None:
        """Ask the streaming handler to end the response."""
        self.queue.put_nowait(None)


class Store:
    """All objects of all types, keyed by (group, plural) then (namespace, name)."""

    def __init__(self, registry: Registry, history_size: int = 1000) -> None:
        self.registry = registry
        self.rv = 1
        self.objects: dict[tuple[str, str], dict[Key, dict[str, Any]]] = {}
        self.history: deque[Event] = deque(maxlen=history_size)
        self.compacted_rv = 0  # events with rv <= this are gone
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[Event], None]] = []
        self.uids: dict[str, tuple[ResourceType, Key]] = {}

    # ----- plumbing -------------------------------------------------------------------------
    def _table(self, rtype: ResourceType) -> dict[Key, dict[str, Any]]:
        return self.objects.setdefault(rtype.key, {})

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, kind: str, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        event = Event(int(obj["metadata"]["resourceVersion"]), kind, rtype, obj, old)
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(event)
        for watcher in list(self.watchers):
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(event)

    def compact(self) -> None:
        """Forget all history (watches from any older resourceVersion now get 410 Gone)."""
        self.history.clear()
        self.compacted_rv = self.rv

    @staticmethod
    def _key(rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rtype.namespaced else "", name)

    # ----- reads ----------------------------------------------------------------------------
    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object or ``None`` (do not mutate it)."""
        return self._table(rtype).get(self._key(rtype, namespace, name))

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object or a 404 ApiError."""
        obj = self.find(rtype, namespace, name)
        if obj is None:
            raise status.not_found(rtype.group, rtype.plural, name)
        return obj

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        """The live object with this uid, if any."""
        hit = self.uids.get(uid)
        return self._table(hit[0]).get(hit[1]) if hit else None

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        labels: list[Requirement] | None = None,
        fields: list[FieldRequirement] | None = None,
    ) -> list[dict[str, Any]]:
        """Matching objects sorted by (namespace, name), like etcd key order."""
        out = []
        for key in sorted(self._table(rtype)):
            obj = self._table(rtype)[key]
            if namespace and rtype.namespaced and key[0] != namespace:
                continue
            if labels and not match_labels(labels, obj["metadata"].get("labels")):
                continue
            if fields and not match_fields(fields, obj):
                continue
            out.append(obj)
        return out

    # ----- writes ---------------------------------------------------------------------------
    def _require_namespace(self, rtype: ResourceType, namespace: str | None) -> None:
        if not rtype.namespaced:
            return
        ns_type = self.registry.lookup("", "v1", "namespaces")
        assert ns_type is not None
        ns = self.find(ns_type, None, namespace or "")
        if ns is None:
            raise status.not_found("", "namespaces", namespace or "")

    def create(self, rtype: ResourceType, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Validate, default and store a new object; 409 if the name is taken."""
        obj = deep(body)
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise status.bad_request("metadata must be an object")
        if rtype.namespaced:
            if md.get("namespace") and namespace and md["namespace"] != namespace:
                raise status.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = namespace or md.get("namespace") or "default"
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + random_suffix()
        causes = validate(obj, rtype, creating=True)
        if causes:
            raise status.invalid(rtype.group, rtype.kind, md.get("name") or "", causes)
        self._require_namespace(rtype, md.get("namespace"))
        table = self._table(rtype)
        key = self._key(rtype, md.get("namespace"), md["name"])
        if key in table:
            raise status.already_exists(rtype.group, rtype.plural, md["name"])
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        for stale in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            md.pop(stale, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_iso()
        if rtype.custom:
            md["generation"] = 1
        if rtype.has_status and rtype.key != ("", "nodes"):
            obj.pop("status", None)  # PrepareForCreate: status is not settable on create
        defaults.apply(rtype, obj)
        md["resourceVersion"] = str(self._next_rv())
        table[key] = obj
        self.uids[md["uid"]] = (rtype, key)
        self._emit("ADDED", rtype, obj, None)
        return obj

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        subresource: str | None = None,
        check_rv: bool = True,
    ) -> dict[str, Any]:
        """Replace an object (PUT semantics); a stale metadata.resourceVersion is a 409 Conflict."""
        old = self.get(rtype, namespace, name)
        new = deep(body)
        md = new.setdefault("metadata", {})
        if md.get("name") and md["name"] != name:
            raise status.bad_request(
                f"the name of the object ({md['name']}) does not match the name on the URL ({name})"
            )
        if rtype.namespaced and md.get("namespace") and md["namespace"] != old["metadata"]["namespace"]:
            raise status.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        sent_rv = md.get("resourceVersion")
        if check_rv and sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise status.conflict(rtype.group, rtype.plural, name)
        if subresource == "status":
            merged = deep(old)
            merged["status"] = new.get("status")
            if merged["status"] is None:
                merged.pop("status")
            new = merged
        else:
            for immutable in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generateName",
            ):
                if immutable in old["metadata"]:
                    md[immutable] = old["metadata"][immutable]
                else:
                    md.pop(immutable, None)
            if rtype.has_status:
                if "status" in old:
                    new["status"] = deep(old["status"])
                else:
                    new.pop("status", None)
            causes = validate(new, rtype, creating=False)
            if rtype.key == ("", "pods") and not causes:
                causes = validate_pod_update(old, new)
            if rtype.group == rbac.GROUP and rtype.plural.endswith("rolebindings"):
                causes += rbac.check_role_ref_unchanged(old, new)
            if causes:
                raise status.invalid(rtype.group, rtype.kind, name, causes)
        return self._store_update(rtype, old, new)

    def _store_update(self, rtype: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        md = new["metadata"]
        md["resourceVersion"] = old["metadata"]["resourceVersion"]
        if "generation" in old["metadata"]:
            md["generation"] = old["metadata"]["generation"]
            if {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")
            }:
                md["generation"] += 1
        if new == old:
            return old  # no-op updates do not bump resourceVersion
        md["resourceVersion"] = str(self._next_rv())
        key = self._key(rtype, md.get("namespace"), md["name"])
        self._table(rtype)[key] = new
        self._emit("MODIFIED", rtype, new, old)
        if (
            md.get("deletionTimestamp")
            and not md.get("finalizers")
            and not self._graceful_pending(rtype, new)
        ):
            self.remove(rtype, md.get("namespace"), md["name"])
        return new

    def mutate(
        self, rtype: ResourceType, namespace: str | None, name: str, fn: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        """Controller-side write: apply ``fn`` to a copy and store it (no conflict check)."""
        old = self.find(rtype, namespace, name)
        if old is None:
            return None
        new = deep(old)
        fn(new)
        return self._store_update(rtype, old, new)

    @staticmethod
    def _graceful_pending(rtype: ResourceType, obj: dict[str, Any]) -> bool:
        """A bound, running pod waits for the kubelet to finish its graceful termination;
        a namespace waits for the namespace controller to empty it."""
        if rtype.key == ("", "namespaces"):
            return bool((obj.get("spec") or {}).get("finalizers"))
        if rtype.key != ("", "pods"):
            return False
        phase = (obj.get("status") or {}).get("phase")
        return (
            bool(obj["spec"].get("nodeName"))
            and phase not in ("Succeeded", "Failed")
            and bool(obj["metadata"].get("deletionGracePeriodSeconds"))
        )

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        grace: int | None = None,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Delete (or start deleting) an object; returns (object, removed_now)."""
        obj = self.get(rtype, namespace, name)
        md = obj["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != md["uid"]:
            raise status.conflict(
                rtype.group,
                rtype.plural,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {md['uid']}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != md["resourceVersion"]:
            raise status.conflict(
                rtype.group,
                rtype.plural,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {md['resourceVersion']}",
            )
        if propagation == "Orphan":
            self.orphan_dependents(md["uid"])
        is_pod = rtype.key == ("", "pods")
        if is_pod and grace is None:
            grace = int(obj["spec"].get("terminationGracePeriodSeconds", 30))
        grace = max(int(grace or 0), 0)
        finalizers = list(md.get("finalizers") or [])
        if (
            propagation == "Foreground"
            and self.dependents(md["uid"])
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        phase = (obj.get("status") or {}).get("phase")
        graceful = (
            is_pod
            and grace > 0
            and bool(obj["spec"].get("nodeName"))
            and phase not in ("Succeeded", "Failed")
        )
        if rtype.key == ("", "namespaces"):
            graceful = bool((obj.get("spec") or {}).get("finalizers"))
        if md.get("deletionTimestamp"):
            if is_pod and grace == 0 and not md.get("finalizers"):
                return self.remove(rtype, namespace, name), True
            if is_pod and graceful and grace < int(md.get("deletionGracePeriodSeconds") or 0):
                return self.mutate(rtype, namespace, name, lambda o: _shorten(o, grace)) or obj, False
            return obj, False
        if finalizers or graceful:

            def mark(o: dict[str, Any]) -> None:
                o["metadata"]["deletionTimestamp"] = now_iso(grace if is_pod else 0)
                o["metadata"]["deletionGracePeriodSeconds"] = grace if is_pod else 0
                if finalizers:
                    o["metadata"]["finalizers"] = finalizers
                if rtype.key == ("", "namespaces"):
                    o.setdefault("status", {})["phase"] = "Terminating"

            marked = self.mutate(rtype, namespace, name, mark)
            if marked is not None and self.find(rtype, namespace, name) is not None:
                return marked, False
        return self.remove(rtype, namespace, name), True

    def remove(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """Drop the object from storage and emit DELETED (with a fresh resourceVersion)."""
        key = self._key(rtype, namespace, name)
        old = self._table(rtype).pop(key)
        gone = deep(old)
        gone["metadata"]["resourceVersion"] = str(self._next_rv())
        self.uids.pop(old["metadata"]["uid"], None)
        self._emit("DELETED", rtype, gone, old)
        return gone

    # ----- ownership --------------------------------------------------------------------------
    def dependents(self, uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        """Objects that list ``uid`` in their ownerReferences."""
        out = []
        for rtype, key in list(self.uids.values()):
            obj = self._table(rtype).get(key)
            if obj and any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []):
                out.append((rtype, obj))
        return out

    def orphan_dependents(self, uid: str) -> None:
        """Remove the ownerReference to ``uid`` from every dependent."""
        for rtype, obj in self.dependents(uid):

            def strip(o: dict[str, Any]) -> None:
                refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                if refs:
                    o["metadata"]["ownerReferences"] = refs
                else:
                    o["metadata"].pop("ownerReferences", None)

            self.mutate(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"], strip)

    # ----- watch ------------------------------------------------------------------------------
    def watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: list[Requirement],
        fields: list[FieldRequirement],
        since: int | None,
    ) -> Watcher:
        """Subscribe; with ``since`` replay history after it, else send the current state as ADDED.

        Raises a 410 ApiError when ``since`` is older than the retained history.
        """
        watcher = Watcher(rtype, namespace, labels, fields)
        if since is None:
            for obj in self.list(rtype, namespace, labels, fields):
                watcher.queue.put_nowait(("ADDED", obj))
        else:
            if since < self.compacted_rv:
                raise status.gone(f"too old resource version: {since} ({self.compacted_rv + 1})")
            for event in self.history:
                if event.rv > since:
                    watcher.offer(event)
        self.watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        """Unsubscribe."""
        self.watchers.discard(watcher)


def _shorten(obj: dict[str, Any], grace: int) -> None:
    obj["metadata"]["deletionTimestamp"] = now_iso(grace)
    obj["metadata"]["deletionGracePeriodSeconds"] = grace


_GO_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})


def encode(obj: Any) -> bytes:
    """JSON bytes as kube-apiserver writes them: its serializer calls Go's ``json.Encoder.Encode``
    (``staging/src/k8s.io/apimachinery/pkg/runtime/serializer/json/json.go``), which writes compact
    JSON, UTF-8 left as is, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped (``SetEscapeHTML`` is on
    by default), and ends every document with a newline -- also each watch event's line.
    (Those characters only occur inside strings, so replacing them in the text is safe.)"""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).translate(_GO_ESCAPES)
    return (text + "\n").encode()
