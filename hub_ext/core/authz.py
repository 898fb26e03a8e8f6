"""Who may do what through the classhub API: one pure decision per request.

Why a module of its own: "a teacher cannot touch another course" and "only admins raise a
ceiling" are promises to admins, and every handler must keep them the same way. Handlers build a
`Caller` (who asks: hub admin flag, token scopes, course roles from the classhub store) and ask
`decide(caller, action, course=..., user=...)`; the answer carries the HTTP status and one sentence
saying what the caller could do instead. The table of rules is tested exhaustively without a hub
(tests/test_core_authz.py) and through a real hub (tests/test_service_authz.py).

Rules:
- Hub admins are classhub admins and may do everything.
- Course roles come from the store (`Membership`): teachers manage members, rosters and
  per-student quotas of their course; TAs read members and usage; every member reads the course
  and its ceiling. Nobody but an admin creates or deletes courses or sets a course ceiling.
- A teacher may add, re-role and remove students and TAs only; making, changing or removing a
  teacher is an admin's decision (`may_change_member`).
- Hub services are neither admins nor course members: they list no courses and read nothing of
  a course. A service (or any token) with the hub scope ``read:metrics`` may read the metrics.
- Access to classhub at all (the scope ``access:services!service=classhub``) is checked before
  this module by HubOAuth; this module decides within classhub.
- No confused deputy: where classhub acts on the hub for the caller (creating a hub group,
  adding hub users, restarting a server), the caller's own token must hold the hub scope that
  the hub itself would ask for (`HUB_SCOPES`), unless a course role grants the action; a hub
  admin's token narrowed to classhub access stays narrow.
- Enrolment needs consent (`enrolment`): a teacher never enrols a hub admin, and enrols
  directly only people who belong to no other course; anyone else is invited and joins when
  they accept. Admins (with the hub scopes) enrol directly.

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hub_ext.core.roles import ADMIN, STUDENT, TA, TEACHER

__all__ = [
    "ACTIONS",
    "ALLOW",
    "DIRECT",
    "HUB_SCOPES",
    "INVITE",
    "Caller",
    "Verdict",
    "decide",
    "enrolment",
    "hub_scopes_for",
    "may_change_member",
    "visible_courses",
]

# Actions: stable names (also used in tests and logs).
LIST_COURSES = "list_courses"
CREATE_COURSE = "create_course"
READ_COURSE = "read_course"
DELETE_COURSE = "delete_course"
READ_MEMBERS = "read_members"
EDIT_MEMBERS = "edit_members"
IMPORT_ROSTER = "import_roster"
READ_COURSE_QUOTA = "read_course_quota"
SET_COURSE_QUOTA = "set_course_quota"
READ_USER_QUOTA = "read_user_quota"
SET_USER_QUOTA = "set_user_quota"
READ_COURSE_USAGE = "read_course_usage"
READ_ALL_USAGE = "read_all_usage"
READ_OWN_USAGE = "read_own_usage"
READ_METRICS = "read_metrics"
CONTROL_SERVER = "control_server"
# Distributed jobs: members submit in their course; the owner, the course's staff (read) or
# teachers (cancel) and admins see and stop a job; staff see the course's queue.
SUBMIT_JOB = "submit_job"
READ_JOB = "read_job"
CANCEL_JOB = "cancel_job"
READ_COURSE_JOBS = "read_course_jobs"

#: Scope that lets a token read the metrics (as for JupyterHub's own /hub/metrics).
METRICS_SCOPE = "read:metrics"

#: The hub scopes an action uses when classhub does it on the hub for the caller, as the hub's
#: own API would ask for them ("course" and "user" filters are filled in by `hub_scopes_for`):
#: creating or deleting a course creates or deletes a hub group; changing members adds hub
#: users to the course group (and creates hub users); controlling a server stops and starts it.
HUB_SCOPES: Mapping[str, tuple[tuple[str, str | None], ...]] = MappingProxyType({
    CREATE_COURSE: (("admin:groups", None),),
    DELETE_COURSE: (("admin:groups", None),),
    EDIT_MEMBERS: (("groups", "group"), ("admin:users", None)),
    IMPORT_ROSTER: (("groups", "group"), ("admin:users", None)),
    CONTROL_SERVER: (("servers", "user"),),
})


@dataclass(frozen=True)
class Verdict:
    """`allowed`, else the HTTP `status` (403) and a `message` that says what to do instead."""

    allowed: bool
    status: int = 200
    message: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOW = Verdict(True)


@dataclass(frozen=True)
class Caller:
    """Who asks: a hub user (with their course roles) or a hub service.

    `courses` maps course name -> role (student, ta, teacher) as the classhub store records it.
    `scopes` are the scopes of the token or cookie the request came with, as the hub reports them.
    `access` says whether that token grants access to classhub at all: a hub admin's token
    limited to other scopes (say ``read:hub``) must not carry the admin's classhub powers to
    the one endpoint that does not require access, /metrics.
    """

    name: str
    kind: str = "user"
    admin: bool = False
    courses: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    scopes: frozenset[str] = frozenset()
    access: bool = True

    @property
    def is_user(self) -> bool:
        return self.kind == "user"

    @property
    def is_admin(self) -> bool:
        """Hub admins are classhub admins (through tokens that grant classhub access); services
        never are (they have no admin flag)."""
        return self.is_user and self.admin and self.access

    def role_in(self, course: str) -> str | None:
        """The caller's role in `course`, or None when not a member (services never are)."""
        return self.courses.get(course) if self.is_user and self.access else None

    def holds(self, scope: str) -> bool:
        """Whether the caller's token holds `scope` (``base`` or ``base!kind=value``).

        The hub reports a token's scopes expanded (``admin:servers`` brings ``servers``), so a
        filtered scope is held when the token has it unfiltered or with the same filter. Group
        filters are not resolved to their users (as JupyterHub's own ``check_scopes``).
        """
        base = scope.split("!", 1)[0]
        return base in self.scopes or scope in self.scopes


_MEMBERS = frozenset({STUDENT, TA, TEACHER})
_STAFF = frozenset({TA, TEACHER})
_TEACHERS = frozenset({TEACHER})

# Course actions -> the course roles allowed (admins always are).
_COURSE_RULES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        READ_COURSE: _MEMBERS,
        DELETE_COURSE: frozenset(),
        READ_MEMBERS: _STAFF,
        EDIT_MEMBERS: _TEACHERS,
        IMPORT_ROSTER: _TEACHERS,
        READ_COURSE_QUOTA: _MEMBERS,
        SET_COURSE_QUOTA: frozenset(),
        READ_USER_QUOTA: _TEACHERS,  # and the user themselves, see decide()
        SET_USER_QUOTA: _TEACHERS,
        READ_COURSE_USAGE: _STAFF,
        SUBMIT_JOB: _MEMBERS,
        READ_JOB: _STAFF,  # and the job's owner, see decide()
        CANCEL_JOB: _TEACHERS,  # and the job's owner, see decide()
        READ_COURSE_JOBS: _STAFF,
    }
)

_WHAT = {
    READ_COURSE: "see course {c}",
    DELETE_COURSE: "delete course {c}",
    READ_MEMBERS: "see the members of {c}",
    EDIT_MEMBERS: "change the members of {c}",
    IMPORT_ROSTER: "import a roster into {c}",
    READ_COURSE_QUOTA: "see the quota of {c}",
    SET_COURSE_QUOTA: "set the course ceiling of {c}",
    READ_USER_QUOTA: "see per-student quotas in {c}",
    SET_USER_QUOTA: "set per-student quotas in {c}",
    READ_COURSE_USAGE: "see the usage of {c}",
    SUBMIT_JOB: "submit jobs in {c}",
    READ_JOB: "see this job of {c}",
    CANCEL_JOB: "cancel this job of {c}",
    READ_COURSE_JOBS: "see the job queue of {c}",
}

_WHO = {
    _MEMBERS: "members of {c} and hub admins",
    _STAFF: "teachers and TAs of {c} and hub admins",
    _TEACHERS: "teachers of {c} and hub admins",
    frozenset(): "hub admins",
}

ACTIONS = (
    LIST_COURSES,
    CREATE_COURSE,
    *_COURSE_RULES,
    READ_ALL_USAGE,
    READ_OWN_USAGE,
    READ_METRICS,
    CONTROL_SERVER,
)


def _deny(message: str) -> Verdict:
    return Verdict(False, 403, message)


def hub_scopes_for(action: str, *, course: str | None = None, user: str | None = None) -> list[str]:
    """The hub scopes `action` needs of the caller's token (empty: classhub's own data only)."""
    values = {"group": course, "user": user}
    return [base if kind is None else f"{base}!{kind}={values[kind]}"
            for base, kind in HUB_SCOPES.get(action, ())]


def _missing_scopes(caller: Caller, action: str, course: str | None, user: str | None) -> Verdict:
    """ALLOW when the caller's token holds every hub scope of `action`; else 403 naming them."""
    missing = [s for s in hub_scopes_for(action, course=course, user=user) if not caller.holds(s)]
    if not missing:
        return ALLOW
    return _deny(
        f"Your token does not hold the hub scope {', '.join(repr(m) for m in missing)}, which the "
        "hub itself would require; classhub only does for you what your own token may do. Use a "
        "token with that scope (or log in to classhub in the browser)."
    )


def decide(caller: Caller, action: str, *, course: str | None = None, user: str | None = None) -> Verdict:
    """May `caller` do `action` (on `course`, about `user`)?

    `course` is required for course actions, `user` for READ_USER_QUOTA/SET_USER_QUOTA and
    CONTROL_SERVER. A course the caller does not belong to is refused the same way whether or not
    it exists, so the answer does not reveal which courses exist; only admins get 404s.
    """
    if action == LIST_COURSES:
        return ALLOW  # the list itself is filtered by visible_courses
    if action == READ_OWN_USAGE:
        if caller.is_user:
            return ALLOW
        return _deny(f"{caller.name} is a hub service; usage is kept per user. Ask with a user's token.")
    if action == READ_METRICS:
        if METRICS_SCOPE in caller.scopes:  # a hub admin's full token holds it
            return ALLOW
        return _deny(
            "Reading the metrics needs a hub admin or a token with the scope 'read:metrics' "
            "(give your Prometheus service a role with it)."
        )
    if action == CONTROL_SERVER:
        if user is None:
            raise ValueError("CONTROL_SERVER needs the server's owner")
        if caller.is_admin or (caller.is_user and caller.access and caller.name == user):
            return _missing_scopes(caller, action, course, user)
        return _deny("You can only change the profile of your own server.")
    if caller.is_admin:
        role = caller.role_in(course) if course is not None else None
        if action in _COURSE_RULES and role in _COURSE_RULES[action]:
            return ALLOW  # the course role grants it, whatever the token's hub scopes
        return _missing_scopes(caller, action, course, user)
    if action == CREATE_COURSE:
        return _deny("Only hub admins can create courses; ask an admin to create it.")
    if action == READ_ALL_USAGE:
        return _deny(
            "Only hub admins can see the usage of every course; teachers and TAs can see their "
            "course's usage at /api/courses/<course>/usage, everyone their own at /api/usage/me."
        )
    if action not in _COURSE_RULES:
        raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
    if course is None:
        raise ValueError(f"{action} needs a course")
    allowed_roles = _COURSE_RULES[action]
    role = caller.role_in(course)
    if role in allowed_roles:
        return ALLOW
    if action == READ_USER_QUOTA and user is not None and role is not None and caller.name == user:
        return ALLOW  # members see their own limits
    if action in (READ_JOB, CANCEL_JOB) and caller.is_user and caller.access and caller.name == user:
        return ALLOW  # a job's owner sees and cancels it, even after leaving the course
    what = _WHAT[action].format(c=course)
    who = _WHO[allowed_roles].format(c=course)
    if role is None:
        whom = "a hub service" if not caller.is_user else f"not a member of {course}"
        return _deny(f"You are {whom}; only {who} can {what}.")
    return _deny(f"You are a {_role_word(role)} of {course}; only {who} can {what}.")


def may_change_member(caller: Caller, course: str, current: str | None, new: str | None) -> Verdict:
    """May `caller` change a member of `course` from role `current` to `new`?

    None means "not a member" (`current` None: an addition; `new` None: a removal). Teachers of
    the course may add, re-role and remove students and TAs; anything that makes, changes or
    removes a teacher is for hub admins only, so a teacher cannot promote themselves or a
    colleague, nor remove another teacher.
    """
    base = decide(caller, EDIT_MEMBERS, course=course)
    if not base:
        return base
    if new is not None and new not in _MEMBERS:
        raise ValueError(f"role must be one of student, ta, teacher, not {new!r}")
    if TEACHER not in (current, new) or _acting_admin(caller, EDIT_MEMBERS, course):
        return ALLOW
    if new == TEACHER and current != TEACHER:
        return _deny(f"Only hub admins can make someone a teacher of {course}; add them as 'ta' or "
                     "'student', or ask an admin.")
    return _deny(f"Only hub admins can change or remove a teacher of {course}; ask an admin.")


def _acting_admin(caller: Caller, action: str, course: str | None) -> bool:
    """A hub admin whose token holds the hub scopes of `action` (admin power, not a course role)."""
    return caller.is_admin and bool(_missing_scopes(caller, action, course, None))


#: `enrolment` answers: add the person now, or record an invitation they must accept.
DIRECT = "direct"
INVITE = "invite"


def enrolment(caller: Caller, course: str, username: str, *, hub_admin: bool,
              other_courses: Iterable[str]) -> Verdict | str:
    """How `caller` may enrol `username` (not yet a member of `course`): DIRECT, INVITE, or a
    refusal (a Verdict).

    Membership gives the course's staff power over the member's server, so it needs consent:
    - a hub admin is enrolled only by an admin (and even then no course role reaches their
      server, see hub_ext.core.roles.hub_roles);
    - someone who belongs to another course is invited by a teacher: their server serves that
      course too, and only they (or an admin) may open it to this course's staff;
    - everyone else, and anyone an admin enrols, joins at once.
    Call it after `may_change_member` allowed the change.
    """
    admin = _acting_admin(caller, EDIT_MEMBERS, course)
    if hub_admin and not admin:
        return _deny(f"{username} is a hub admin; only a hub admin can enrol a hub admin in a "
                     "course. Ask an admin.")
    if admin or not [c for c in other_courses if c != course]:
        return DIRECT
    return INVITE


def visible_courses(caller: Caller, courses: Iterable[str]) -> list[str]:
    """The courses `caller` may see in a listing: all for admins, their own for everyone else."""
    if caller.is_admin:
        return sorted(courses)
    return sorted(c for c in courses if caller.role_in(c) is not None)


def _role_word(role: str) -> str:
    return {STUDENT: "student", TA: "TA", TEACHER: "teacher", ADMIN: "admin"}.get(role, role)
