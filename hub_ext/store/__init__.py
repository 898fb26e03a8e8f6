"""classhub's database: SQLAlchemy models, Alembic migrations and the reservation ledger.

`connect(url)` opens sqlite (default) or PostgreSQL (`postgresql+psycopg://...`) and upgrades the
schema; `Ledger` makes quota admission race-free on top of it.
"""

from hub_ext.store import culler_models, job_models, share_models, template_models  # noqa: F401  (register tables)
from hub_ext.store.courses import (
    add_member,
    all_members,
    courses_of,
    ensure_course,
    record,
    set_course_limits,
    set_user_limits,
)
from hub_ext.store.engine import connect, in_thread, make_engine, readers, shared, upgrade
from hub_ext.store.ledger import Ledger, QuotaDenied, ReconcileReport
from hub_ext.store.models import (
    AuditLog,
    Base,
    Course,
    CourseQuota,
    Invitation,
    Membership,
    Reservation,
    UserQuota,
)

__all__ = [
    "AuditLog",
    "Base",
    "Course",
    "CourseQuota",
    "Invitation",
    "Ledger",
    "Membership",
    "QuotaDenied",
    "ReconcileReport",
    "Reservation",
    "UserQuota",
    "add_member",
    "all_members",
    "connect",
    "courses_of",
    "ensure_course",
    "in_thread",
    "make_engine",
    "readers",
    "record",
    "set_course_limits",
    "set_user_limits",
    "shared",
    "upgrade",
]
