"""The Kueue hand-over's one check: may jobs of these courses go to their LocalQueues?

Why (docs/kueue.md): with Kueue, classhub's ledger is the one place a course's quota is counted
(the job is reserved at hand-over) and Kueue's one ClusterQueue only queues; a course whose
LocalQueue feeds another ClusterQueue would be counted twice, so its jobs wait in classhub's queue
with the sentence that says what an admin changes (reason code `kueue_queue`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["KUEUE_QUEUE", "queue_refusals"]

#: The waiting reason code of a job whose course's LocalQueue classhub may not use.
KUEUE_QUEUE = "kueue_queue"


async def queue_refusals(backend: Any, courses: Iterable[str]) -> dict[str, str]:
    """course -> why its jobs are not handed over now (absent: they may be). Backends without
    Kueue (no `queue_refusal`) refuse nothing."""
    ask = getattr(backend, "queue_refusal", None)
    if ask is None:
        return {}
    out: dict[str, str] = {}
    for course in sorted(set(courses)):
        try:
            why = await ask(course)
        except Exception as e:  # the API server is away: try again next cycle, say so meanwhile
            log.warning("classhub jobs: Kueue's LocalQueue of %s: %s", course, e)
            why = (f"classhub could not make or read Kueue's LocalQueue of course {course} "
                   f"({type(e).__name__}); the job is handed over once it can")
        if why:
            out[course] = why
    return out
