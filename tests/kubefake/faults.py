"""Fault injection: error responses (5xx, 429 + Retry-After), added latency, dropped watches.

Rules are matched against the request's Kubernetes verb (get, list, watch, create, update,
patch, delete, deletecollection) and a regular expression searched in the path. A rule fires
for its first ``count`` matching requests and/or until ``duration`` seconds have passed.
Thread-safe enough for tests that drive it from another thread (list swaps under the GIL).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .status import status_body

REASONS = {  # the Status reasons kube-apiserver uses for these codes
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    502: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class FaultRule:
    """One injected fault; ``status`` 0 means latency only."""

    verbs: frozenset[str] = frozenset()
    path: str = ""
    status: int = 0
    count: int | None = None
    duration: float | None = None
    latency: float = 0.0
    retry_after: int | None = None
    message: str = ""
    hits: int = 0
    created: float = field(default_factory=time.monotonic)

    def active(self) -> bool:
        """True while the rule still has requests/time left."""
        if self.count is not None and self.hits >= self.count:
            return False
        return self.duration is None or time.monotonic() - self.created <= self.duration

    def matches(self, verb: str, path: str) -> bool:
        """Verb and path regex both match."""
        return (not self.verbs or verb in self.verbs) and (
            not self.path or re.search(self.path, path) is not None
        )

    def body(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The Status body and headers of the injected error."""
        reason = REASONS.get(self.status, "InternalError")
        message = self.message or {
            429: "Too many requests, please try again later.",
            503: "the server is currently unable to handle the request",
        }.get(self.status, "Internal error occurred: injected by kubefake")
        details: dict[str, Any] = {"causes": [{"message": "injected by kubefake"}]}
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
            details["retryAfterSeconds"] = self.retry_after
        return status_body(self.status, reason, message, details), headers


class Faults:
    """The set of active fault rules."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()

    def add(
        self,
        status: int = 500,
        verbs: str | list[str] | tuple[str, ...] | None = None,
        path: str = "",
        count: int | None = None,
        duration: float | None = None,
        retry_after: int | None = None,
        message: str = "",
    ) -> FaultRule:
        """Answer matching requests with ``status`` (e.g. 500, 503, 429) instead of serving them.

        Without ``count``/``duration`` the rule stays until :meth:`clear`. A 429 gets
        ``Retry-After: 1`` unless ``retry_after`` says otherwise.
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        rule = FaultRule(_verbs(verbs), path, status, count, duration, 0.0, retry_after, message)
        with self._lock:
            self._rules = [*self._rules, rule]
        return rule

    def add_latency(
        self,
        seconds: float,
        verbs: str | list[str] | tuple[str, ...] | None = None,
        path: str = "",
        count: int | None = None,
        duration: float | None = None,
    ) -> FaultRule:
        """Delay matching requests by ``seconds`` before serving them."""
        rule = FaultRule(_verbs(verbs), path, 0, count, duration, seconds)
        with self._lock:
            self._rules = [*self._rules, rule]
        return rule

    def clear(self) -> None:
        """Remove every rule."""
        with self._lock:
            self._rules = []

    def match(self, verb: str, path: str) -> tuple[float, FaultRule | None]:
        """(latency to add, error rule to answer with or None) for one request; counts hits."""
        latency, error = 0.0, None
        with self._lock:
            for rule in self._rules:
                if not rule.active() or not rule.matches(verb, path):
                    continue
                if rule.status:
                    if error is None:
                        rule.hits += 1
                        error = rule
                else:
                    rule.hits += 1
                    latency += rule.latency
            self._rules = [r for r in self._rules if r.active()]
        return latency, error

    def to_json(self) -> list[dict[str, Any]]:
        """The active rules (for the admin endpoint)."""
        return [
            {
                "verbs": sorted(r.verbs),
                "path": r.path,
                "status": r.status,
                "count": r.count,
                "duration": r.duration,
                "latency": r.latency,
                "hits": r.hits,
            }
            for r in self._rules
        ]


def _verbs(verbs: str | list[str] | tuple[str, ...] | None) -> frozenset[str]:
    if verbs is None:
        return frozenset()
    if isinstance(verbs, str):
        return frozenset(v.strip() for v in verbs.split(",") if v.strip())
    return frozenset(verbs)
