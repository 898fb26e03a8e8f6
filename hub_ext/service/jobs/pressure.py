"""The job loop asks the culler to reclaim idle notebooks for the job it reserves room for.

Why: notebooks are never preempted (hub_ext.core.admission.preemption); when the job next in
line misses GPUs, the cycle says how many (`CycleResult.pressure`), and the culler's pressure
reclaim frees idle notebooks that hold them, past their reclaim threshold, never a busy one
(hub_ext.core.culling). The store is the one channel to the culler, as for a refused spawn
(spawner/pressure.py; docs/architecture.md, the culler's paragraph): a shortfall row in the
owner's name, once per reserved job and shortfall, not once per cycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from fractions import Fraction

from sqlalchemy.orm import Session, sessionmaker

from hub_ext.store import culler_models as cm

__all__ = ["CullerAsk"]


class CullerAsk:
    """Records the reserved job's shortfall for the culler (`ask`, in a worker thread)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self._asked: tuple[str, tuple[tuple[str, Fraction], ...]] | None = None

    def ask(self, job: str, owner: str, pressure: Mapping[str, Fraction], now: datetime) -> bool:
        """True when a new shortfall was recorded (the same job missing the same GPUs is asked
        once; the culler closes what it handled)."""
        key = (job, tuple(sorted(pressure.items())))
        if not pressure or key == self._asked:
            return False
        with self.sessions.begin() as session:
            for resource, units in sorted(pressure.items()):
                cm.record_shortfall(session, resource, math.ceil(units), owner, now)
        self._asked = key
        return True
