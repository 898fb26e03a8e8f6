"""Assignments: when a submission is accepted, and whether it is late (issue 34).

Why pure: "a submission after the due date is refused, or accepted and marked late until the
cut-off" is a promise a teacher makes to a class, and the REST API, the pages and the tests must
keep it the same way. It is a function of the assignment's times, its policy and the server's
clock (never a time the student sends), unit- and property-tested without a hub
(tests/test_assignments_units.py).

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "ACCEPT_LATE",
    "LATE_POLICIES",
    "REFUSE",
    "AssignmentError",
    "Timing",
    "Verdict",
    "check_timing",
    "judge",
]

#: After the due date: refuse every submission.
REFUSE = "refuse"
#: After the due date: accept, marked late, until the cut-off (none: no end).
ACCEPT_LATE = "accept-late"
LATE_POLICIES = (REFUSE, ACCEPT_LATE)


class AssignmentError(ValueError):
    """An assignment or a submission the caller must change; the message says what."""


@dataclass(frozen=True)
class Timing:
    """An assignment's times (aware datetimes) and late policy."""

    opens_at: datetime
    due_at: datetime
    late_policy: str = REFUSE
    cutoff_at: datetime | None = None


@dataclass(frozen=True)
class Verdict:
    """A submission's fate: accepted (and late or not), or refused with the sentence why."""

    accepted: bool
    late: bool = False
    reason: str = ""


def check_timing(timing: Timing) -> Timing:
    """``timing`` if it makes sense, else an AssignmentError saying what to change."""
    for name in ("opens_at", "due_at", "cutoff_at"):
        value = getattr(timing, name)
        if value is not None and value.tzinfo is None:
            raise AssignmentError(f"{name} has no time zone; give it as ISO 8601 with an offset "
                                  "(e.g. 2026-12-10T17:00:00+00:00)")
    if timing.late_policy not in LATE_POLICIES:
        raise AssignmentError(f"late_policy {timing.late_policy!r} is none of {', '.join(LATE_POLICIES)}")
    if timing.due_at <= timing.opens_at:
        raise AssignmentError("due_at must be after opens_at")
    if timing.cutoff_at is not None:
        if timing.late_policy != ACCEPT_LATE:
            raise AssignmentError("cutoff_at only applies with late_policy 'accept-late'; leave it "
                                  "out or accept late submissions")
        if timing.cutoff_at < timing.due_at:
            raise AssignmentError("cutoff_at must not be before due_at")
    return timing


def judge(timing: Timing, now: datetime) -> Verdict:
    """Whether a submission made at ``now`` (the server's clock) is accepted, and late.

    Before ``opens_at``: refused (the assignment is not open yet). Up to and including
    ``due_at``: accepted on time (resubmissions too; the last one counts). After it: refused
    under ``refuse``; under ``accept-late`` accepted and marked late up to and including
    ``cutoff_at`` (no cut-off: always), refused after.
    """
    if now < timing.opens_at:
        return Verdict(False, reason=f"The assignment opens at {timing.opens_at.isoformat()}; "
                                     "submit after that.")
    if now <= timing.due_at:
        return Verdict(True)
    if timing.late_policy == REFUSE:
        return Verdict(False, reason=f"The assignment was due at {timing.due_at.isoformat()} and "
                                     "takes no late submissions; ask your teacher.")
    if timing.cutoff_at is not None and now > timing.cutoff_at:
        return Verdict(False, reason=f"Late submissions were accepted until "
                                     f"{timing.cutoff_at.isoformat()}; ask your teacher.")
    return Verdict(True, late=True)
