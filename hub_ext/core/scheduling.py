"""Why a server did not start, in words a student can act on.

Why this module exists: when a pod cannot be placed, Kubernetes explains it in the scheduler's
FitError ("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector,
2 Insufficient nvidia.com/gpu. preemption: ..."), and when an API call fails it answers with a
Status (403 quota exceeded, 422 invalid, 429, 5xx). Students should see one plain sentence that
names what is missing and what to do, not that text or a traceback. The translation is a pure
function of the message (docs/architecture.md, rule 1), so it is unit-tested against real message variants
and shared by the spawner's progress stream and its final error.

Only the standard library is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "TRANSIENT_STATUSES",
    "FitError",
    "api_error_message",
    "is_transient",
    "parse_fit_error",
    "retry_delay",
    "unschedulable_message",
]

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
"""API answers that mean "try again": the same request can succeed a moment later."""

_HEAD_RE = re.compile(r"^\s*0/(\d+) nodes are available:?\s*(.*)$", re.DOTALL)
# One histogram entry: "<count> <reason>", up to the next ", <count> " or the end. Reasons may
# themselves contain ", " ("node(s) had taint {...}, that the pod didn't tolerate").
_ENTRY_RE = re.compile(r"(\d+) (.+?)(?=, \d+ |$)", re.DOTALL)
_INSUFFICIENT = "Insufficient "
_TRY_AGAIN = "Try again later or pick another profile."


@dataclass(frozen=True)
class FitError:
    """The parsed scheduler FitError: how many nodes were considered and why each was refused.

    `reasons` keeps the scheduler's histogram in its own order: (node count, reason text).
    A node may be counted under several reasons, so the counts can add up to more than `nodes`.
    """

    nodes: int
    reasons: tuple[tuple[int, str], ...]

    @property
    def missing_resources(self) -> tuple[str, ...]:
        """Resource names from "Insufficient <name>" reasons, in the scheduler's order."""
        return tuple(
            reason[len(_INSUFFICIENT):].strip()
            for _, reason in self.reasons
            if reason.startswith(_INSUFFICIENT)
        )

    def summary(self) -> str:
        """The histogram as one short clause: "0/3 nodes available: 3 Insufficient cpu"."""
        parts = ", ".join(f"{count} {reason}" for count, reason in self.reasons)
        head = f"0/{self.nodes} nodes available"
        return f"{head}: {parts}" if parts else head

    def has(self, fragment: str) -> bool:
        """True when one of the reasons contains `fragment` (case-insensitive)."""
        fragment = fragment.lower()
        return any(fragment in reason.lower() for _, reason in self.reasons)


def parse_fit_error(message: str) -> FitError | None:
    """Parse "0/N nodes are available: <histogram>. preemption: ..." (None if it is not one).

    Handles the forms of Kubernetes 1.1x to 1.3x: with or without the "preemption:" tail, a
    trailing "." or "..", and reasons that contain commas.
    """
    match = _HEAD_RE.match(message or "")
    if not match:
        return None
    nodes = int(match.group(1))
    body = match.group(2)
    body = body.split(" preemption:", 1)[0].strip()
    body = body.rstrip(".").strip()
    reasons = tuple(
        (int(count), reason.strip().rstrip(".").strip())
        for count, reason in _ENTRY_RE.findall(body)
    )
    return FitError(nodes, reasons)


def _resource_phrase(name: str) -> str:
    """'a free nvidia.com/gpu', 'enough free memory', ... for the sentence a student reads."""
    if name == "cpu":
        return "enough free CPU"
    if name in ("memory", "ephemeral-storage"):
        return f"enough free {name}"
    return f"a free {name}"


def _join(phrases: list[str]) -> str:
    if len(phrases) <= 1:
        return "".join(phrases)
    return ", ".join(phrases[:-1]) + " or " + phrases[-1]


def unschedulable_message(message: str) -> str:
    """One sentence for a FailedScheduling message (event or PodScheduled condition).

    >>> unschedulable_message("0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.18gb.")
    'No node has a free nvidia.com/mig-1g.18gb right now (0/3 nodes available: 3 Insufficient \
nvidia.com/mig-1g.18gb). Try again later or pick another profile.'
    """
    message = (message or "").strip()
    fit = parse_fit_error(message)
    if fit is None:
        if message.startswith("no nodes available"):
            return "The cluster has no nodes to run servers right now. Try again later."
        detail = message.rstrip(".") or "no reason given"
        return f"Your server cannot be placed on a node yet ({detail}). {_TRY_AGAIN}"
    if fit.nodes == 0:
        return "The cluster has no nodes to run servers right now. Try again later."
    missing = list(dict.fromkeys(fit.missing_resources))
    summary = fit.summary()
    if missing:
        wanted = _join([_resource_phrase(name) for name in missing])
        return f"No node has {wanted} right now ({summary}). {_TRY_AGAIN}"
    if fit.has("Too many pods"):
        return f"Every node is running as many servers as it can right now ({summary}). {_TRY_AGAIN}"
    if fit.has("PersistentVolumeClaim") or fit.has("volume"):
        return (
            f"Your storage volume is not ready for any node yet ({summary}). Try again in a minute; "
            "if it keeps happening, tell the hub admin."
        )
    if fit.has("unschedulable") and not fit.has("affinity") and not fit.has("taint"):
        return f"Every node is closed for new servers right now ({summary}). Try again later."
    return (
        f"No node can run this profile ({summary}). Pick another profile, and tell your teacher "
        "if this one should work."
    )


def is_transient(status: int | None) -> bool:
    """True for answers worth retrying (429 and 5xx gateway/server errors), False otherwise."""
    return status in TRANSIENT_STATUSES


def retry_delay(attempt: int, retry_after: float | None = None, *, base: float = 0.2,
                cap: float = 5.0) -> float:
    """Seconds to wait before retry number `attempt` (0-based): the server's Retry-After when it
    sent one (capped), else exponential backoff `base * 2**attempt` up to `cap`."""
    if retry_after is not None and retry_after >= 0:
        return min(float(retry_after), cap)
    return min(base * (2 ** max(attempt, 0)), cap)


_ACTIONS = {
    "pod": "start your server",
    "pvc": "create your storage volume",
}


def api_error_message(status: int | None, message: str = "", what: str = "pod") -> str:
    """One sentence for a failed Kubernetes API call made while starting a server.

    `what` is "pod" or "pvc" (the object the call was about); `message` is the Status message.
    """
    action = _ACTIONS.get(what, f"handle your {what}")
    detail = (message or "").strip().rstrip(".")
    detail_part = f" ({detail})" if detail else ""
    if status == 403 and "exceeded quota" in detail.lower():
        return (
            f"Your server needs more than the resource quota has left{detail_part}. Stop another "
            "of your servers or pick a smaller profile; your teacher can raise the quota."
        )
    if status in (401, 403):
        return (
            f"The hub is not allowed to {action}{detail_part}. This is a setup problem: please tell "
            "the hub admin."
        )
    if status == 422 or status == 400:
        return (
            f"The cluster rejected the settings of this profile{detail_part}. Pick another profile "
            "and tell your teacher about this one."
        )
    if status == 404:
        return (
            f"The hub could not {action}: the cluster is missing something it needs{detail_part}. "
            "Please tell the hub admin."
        )
    if status == 409:
        return f"Your previous server is still shutting down{detail_part}. Try again in a minute."
    if status == 429:
        return "The cluster is busy right now (too many requests). Try again in a minute."
    if status is not None and status >= 500:
        return (
            f"The cluster could not {action} (API server error {status}{', ' + detail if detail else ''}). "
            "Try again in a minute; if it keeps happening, tell the hub admin."
        )
    return f"The hub could not {action}{detail_part}. Try again in a minute."
