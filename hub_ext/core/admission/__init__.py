"""Gang admission for distributed jobs: a pure decision core (docs/architecture.md, rule 1).

Read it like Kueue's scheduler:
- `queue.QueueManager`: waiting jobs, one sorted queue per course; `snapshot()` for a cycle;
- `snapshot.Snapshot`: the immutable facts (nodes' free capacity with notebooks counted, running
  jobs, course quotas and shares, reserved windows, the job holding the reservation);
- `assigner.FreeIndex`: placement of every replica at once (best fit, all or nothing);
- `cycle.admission_cycle`: one cycle, returning admissions (with placements), preemptions, the
  reservation and, on demand, a reason for every waiting job;
- `fairness`, `backfill`, `preemption`, `windows`: one rule each.

Side effects (pods, ledger rows, signals) belong to the service that runs the cycle (issue 17).
"""

from hub_ext.core.admission.assigner import FreeIndex, Placement, refuse_at_submit
from hub_ext.core.admission.backfill import Reservation, earliest_start
from hub_ext.core.admission.cycle import (
    BEHIND_RESERVATION,
    BORROWING_LIMIT,
    CAPACITY,
    COURSE_QUOTA,
    COURSE_WINDOW,
    PREEMPTING,
    RESERVATION_AGING,
    RESERVATION_DEPTH,
    RESERVED,
    STARVING_MIN_WAIT,
    STARVING_QUANTILE,
    STARVING_RESERVATIONS,
    USER_QUOTA,
    WAIT_WINDOW,
    WAITING_CODES,
    Admission,
    CycleResult,
    Preemption,
    Waiting,
    admission_cycle,
    format_clock,
    iso_clock,
    nearest_rank,
    policy_problem,
)
from hub_ext.core.admission.fairness import FairOrder, dominant_share
from hub_ext.core.admission.queue import QueueManager, QueueSnapshot, queue_key
from hub_ext.core.admission.snapshot import (
    CourseQuota,
    CourseWindow,
    NodeState,
    RunningJob,
    Snapshot,
    weekly_windows,
)

__all__ = [
    "BEHIND_RESERVATION",
    "BORROWING_LIMIT",
    "CAPACITY",
    "COURSE_QUOTA",
    "COURSE_WINDOW",
    "PREEMPTING",
    "RESERVATION_AGING",
    "RESERVATION_DEPTH",
    "RESERVED",
    "STARVING_MIN_WAIT",
    "STARVING_QUANTILE",
    "STARVING_RESERVATIONS",
    "USER_QUOTA",
    "WAITING_CODES",
    "WAIT_WINDOW",
    "Admission",
    "CourseQuota",
    "CourseWindow",
    "CycleResult",
    "FairOrder",
    "FreeIndex",
    "NodeState",
    "Placement",
    "Preemption",
    "QueueManager",
    "QueueSnapshot",
    "Reservation",
    "RunningJob",
    "Snapshot",
    "Waiting",
    "admission_cycle",
    "dominant_share",
    "earliest_start",
    "format_clock",
    "iso_clock",
    "nearest_rank",
    "policy_problem",
    "queue_key",
    "refuse_at_submit",
    "weekly_windows",
]
