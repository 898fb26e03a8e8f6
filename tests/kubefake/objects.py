"""Small helpers over plain-dict Kubernetes objects (timestamps, names, conditions)."""

from __future__ import annotations

import copy
import random
import time
from datetime import UTC, datetime
from typing import Any

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand


def now_iso(offset: float = 0.0) -> str:
    """RFC 3339 UTC timestamp with second precision, like metav1.Time."""
    return datetime.fromtimestamp(time.time() + offset, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """RFC 3339 timestamp with microseconds, like metav1.MicroTime (events' eventTime)."""
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch for an RFC 3339 timestamp (``None`` passes through)."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def random_suffix(length: int = 5) -> str:
    """The random tail that generateName appends."""
    return "".join(random.choice(_NAME_CHARS) for _ in range(length))


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj["metadata"]``, created if missing."""
    return obj.setdefault("metadata", {})


def deep(obj: Any) -> Any:
    """Deep copy (objects handed out must never alias stored ones)."""
    return copy.deepcopy(obj)


def set_condition(
    status: dict[str, Any], ctype: str, value: str, reason: str = "", message: str = ""
) -> None:
    """Insert or update a condition, touching lastTransitionTime only when the status flips."""
    conditions = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now_iso()
            cond["status"] = value
            _reason(cond, reason, message)
            return
    cond = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now_iso()}
    _reason(cond, reason, message)
    conditions.append(cond)


def _reason(cond: dict[str, Any], reason: str, message: str) -> None:
    for key, value in (("reason", reason), ("message", message)):
        if value:
            cond[key] = value
        else:
            cond.pop(key, None)


def get_condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    """The condition of type ``ctype`` in ``obj["status"]`` or ``None``."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None
