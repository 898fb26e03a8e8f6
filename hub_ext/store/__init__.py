"""classhub's database: SQLAlchemy models, Alembic migrations and the reservation ledger.

`connect(url)` opens sqlite (default) or PostgreSQL (`postgresql+psycopg://...`): it creates the
schema in a new database and refuses (`SchemaError`) one whose schema is behind;
`upgrade_database(url)` (``classhub upgrade-db``) upgrades it. `Ledger` makes quota admission
race-free on top of it.
"""

from hub_ext.store import (  # noqa: F401  (register tables)
    assignment_models,
    competition_models,
    culler_models,
    job_models,
    share_models,
    template_models,
)
from hub_ext.store.courses import (
    add_member,
    all_members,
    courses_of,
    ensure_course,
    record,
    set_course_limits,
    set_user_limits,
)
from hub_ext.store.engine import (
    SchemaError,
    Upgraded,
    connect,
    ensure_schema,
    head_revision,
    in_thread,
    make_engine,
    readers,
    shared,
    shown_url,
    upgrade,
    upgrade_database,
)
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
    "SchemaError",
    "Upgraded",
    "UserQuota",
    "add_member",
    "all_members",
    "connect",
    "courses_of",
    "ensure_course",
    "ensure_schema",
    "head_revision",
    "in_thread",
    "make_engine",
    "readers",
    "record",
    "set_course_limits",
    "set_user_limits",
    "shared",
    "shown_url",
    "upgrade",
    "upgrade_database",
]
