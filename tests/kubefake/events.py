"""An event recorder writing core/v1 Events the way client-go's recorder does, including
aggregation: a repeat of the same (object, reason, message, source) bumps ``count`` and
``lastTimestamp`` instead of creating a new Event.
"""

from __future__ import annotations

import time
from typing import Any

from .objects import now_iso
from .store import Store


class EventRecorder:
    """Records events for objects into a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rtype = store.registry.lookup("", "v1", "events")
        self._seen: dict[tuple[str, str, str, str], str] = {}

    def record(
        self,
        involved: dict[str, Any],
        etype: str,
        reason: str,
        message: str,
        component: str,
        host: str | None = None,
        field_path: str | None = None,
    ) -> dict[str, Any] | None:
        """Create or aggregate an Event about ``involved``; returns the stored Event."""
        assert self.rtype is not None
        md = involved["metadata"]
        namespace = md.get("namespace") or "default"
        key = (md["uid"], reason, message, component)
        existing = self._seen.get(key)
        if existing and self.store.find(self.rtype, namespace, existing) is not None:

            def bump(ev: dict[str, Any]) -> None:
                ev["count"] = int(ev.get("count") or 1) + 1
                ev["lastTimestamp"] = now_iso()

            return self.store.mutate(self.rtype, namespace, existing, bump)
        ref: dict[str, Any] = {
            "kind": involved.get("kind"),
            "namespace": md.get("namespace"),
            "name": md["name"],
            "uid": md["uid"],
            "apiVersion": involved.get("apiVersion"),
            "resourceVersion": md.get("resourceVersion"),
        }
        if field_path:
            ref["fieldPath"] = field_path
        source: dict[str, Any] = {"component": component}
        if host:
            source["host"] = host
        now = now_iso()
        event = {
            "metadata": {"name": f"{md['name']}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": etype,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or component,
        }
        stored = self.store.create(self.rtype, namespace, event)
        self._seen[key] = stored["metadata"]["name"]
        return stored
