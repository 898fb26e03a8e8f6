"""Each course's guaranteed share of the cluster, from `c.ClasshubJobs.course_shares`.

Why: jobs may run beyond their course's share on idle GPUs of other courses (borrowing, as
Kueue's cohorts do), which keeps GPUs busy at night; a course within its share gets them back by
preempting those borrowing jobs after the grace period (hub_ext.core.admission.preemption).
Without a share every GPU job borrows and none may preempt. The share is not a ceiling: a
course's hard limits stay the ledger's quota (docs/kueue.md, "Borrowing and preemption (classhub admits)").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from hub_ext.core.admission import CourseQuota
from hub_ext.core.resources import ResourceVector

__all__ = ["parse_shares", "with_shares"]

Limits = Callable[[set[str], datetime], dict[str, CourseQuota]]


def parse_shares(raw: Mapping[str, Any]) -> dict[str, ResourceVector]:
    """``{"bio101": {"nvidia.com/gpu": 4}}`` -> course -> share; ValueError with a sentence
    naming the setting and what to change."""
    out: dict[str, ResourceVector] = {}
    for course, resources in raw.items():
        if not isinstance(resources, Mapping):
            raise ValueError(
                f"c.ClasshubJobs.course_shares[{course!r}] must be a resource list such as "
                f'{{"nvidia.com/gpu": 4}}, not {resources!r}')
        try:
            share = ResourceVector.from_k8s(resources)
        except (TypeError, ValueError) as e:
            raise ValueError(f"c.ClasshubJobs.course_shares[{course!r}]: {e}") from None
        if not share.is_nonnegative():
            raise ValueError(f"c.ClasshubJobs.course_shares[{course!r}] must not be negative; "
                             "give 0 for no guaranteed share")
        out[str(course)] = share
    return out


def with_shares(limits: Limits, shares: Mapping[str, ResourceVector]) -> Limits:
    """The loop's view of each course (`limits`) with its configured share as `nominal`."""
    if not shares:
        return limits

    def shared(courses: set[str], now: datetime) -> dict[str, CourseQuota]:
        out = limits(courses, now)
        for course, quota in out.items():
            if course in shares:
                out[course] = dataclasses.replace(quota, nominal=shares[course])
        return out

    return shared
