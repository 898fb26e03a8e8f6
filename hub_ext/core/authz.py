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
  a course. A service (or any token) with the hub scope ``read:metrics`` may read the metrics;
  when the deployment turns metrics authentication off (``authenticate_metrics = False``, the
  ``open`` fact of READ_METRICS), anyone may, even without a token.
- Nobody without a token (`ANONYMOUS`) does anything else: a 401 saying how to log in.
- Shares belong to users (hub_ext.core.sharing.may_share): a server's owner and hub admins share
  it and see and revoke its shares; anyone else is told there is no such share (a 404, so share
  ids cannot be enumerated); a share is opened by its recipients (a user, the members of a
  group, anyone with a link's code) and the owner. Sharing with a group needs membership of it
  (admins excepted). Changing the hub's shares needs the hub scope ``shares!user=<owner>``.
- A server's own token (``server_token``: the server the hub made the token for) is the only
  caller that reports who used the server or asks for a copy of a file for its viewer.
- Culling (hub_ext.service.culling): every member reads their course's culling policy and
  no-cull windows, its teachers reserve and cancel windows; only hub admins set a course's policy
  and mark servers persistent. Each user reads the cull warnings of their own servers.
- classhub's pages are for users (a service uses the API); each page shows what the API would let
  the caller do, asking this module (`OPEN_PAGES`, then the action of each part).
- A server is stopped by its owner, hub admins, and the teachers of a course where the owner is
  a student or TA (the hub checks the caller's own token too).
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
    "ANONYMOUS",
    "DIRECT",
    "HUB_SCOPES",
    "INVITE",
    "WITHOUT_ACCESS",
    "Caller",
    "ShareRef",
    "Verdict",
    "decide",
    "enrolment",
    "hub_scopes_for",
    "may_change_member",
    "may_view_server",
    "visible_courses",
    "visible_jobs",
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
READ_CLUSTER = "read_cluster"
READ_COURSE_CLUSTER = "read_course_cluster"
# Who asks, and what belongs to the caller alone.
READ_ME = "read_me"
LIST_OWN_FILES = "list_own_files"
STOP_SERVER = "stop_server"
READ_OWN_INVITATIONS = "read_own_invitations"
ANSWER_INVITATION = "answer_invitation"
# Sharing a server (hub_ext.service.sharing).
READ_OWN_SHARES = "read_own_shares"
SHARE_SERVER = "share_server"
READ_SHARE = "read_share"
REVOKE_SHARE = "revoke_share"
OPEN_SHARE = "open_share"
READ_SHARE_PATHS = "read_share_paths"
REPORT_SHARE_ACCESS = "report_share_access"
COPY_SHARED_FILE = "copy_shared_file"
# Culling (hub_ext.service.culling).
READ_OWN_CULL_WARNINGS = "read_own_cull_warnings"
READ_PERSISTENT = "read_persistent"
MARK_PERSISTENT = "mark_persistent"
READ_CULL_POLICY = "read_cull_policy"
SET_CULL_POLICY = "set_cull_policy"
READ_CULL_WINDOWS = "read_cull_windows"
EDIT_CULL_WINDOWS = "edit_cull_windows"
#: The classhub pages (hub_ext.service.pages): for any user with classhub access.
OPEN_PAGES = "open_pages"
# Listing jobs: any user (the listing is filtered by `visible_jobs`); with ?course=, the course's
# staff, or anyone asking for their own jobs there. A job's priority: the course's teachers.
LIST_JOBS = "list_jobs"
SET_JOB_PRIORITY = "set_job_priority"
# Course templates: members see them and start their own server from one (with the hub scope to
# restart that server: no confused deputy); teachers publish and change the template settings.
# A caller outside the course is told it is none of theirs (404), as for a missing course.
READ_TEMPLATES = "read_templates"
USE_TEMPLATE = "use_template"
PUBLISH_TEMPLATE = "publish_template"
# Assignments (hub_ext.service.assignments): members see the course's released assignments and
# submit their own work (starting one restarts their server: the hub scope, as USE_TEMPLATE);
# teachers release and change them; staff (teachers, TAs) read every submission. A caller outside
# the course is told it is none of theirs (404), as for templates.
READ_ASSIGNMENTS = "read_assignments"
EDIT_ASSIGNMENTS = "edit_assignments"
START_ASSIGNMENT = "start_assignment"
SUBMIT_ASSIGNMENT = "submit_assignment"
READ_SUBMISSIONS = "read_submissions"
# Course data (hub_ext.service.coursedata): members read the course's data folder, teachers and
# TAs upload and delete; staff see the sizes of the members' homes.
READ_COURSE_DATA = "read_course_data"
WRITE_COURSE_DATA = "write_course_data"
SET_COURSE_DATA_LIMIT = "set_course_data_limit"
READ_HOME_SIZES = "read_home_sizes"
# Competitions (hub_ext.service.competitions): members see the course's open competitions and
# their leaderboards and submit their own predictions; teachers create them; staff (teachers,
# TAs) see every submission and both splits at any time. Outside the course: 404.
READ_COMPETITIONS = "read_competitions"
EDIT_COMPETITIONS = "edit_competitions"
SUBMIT_PREDICTIONS = "submit_predictions"
READ_COMPETITION_SUBMISSIONS = "read_competition_submissions"

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
    SHARE_SERVER: (("shares", "user"),),
    REVOKE_SHARE: (("shares", "user"),),
    USE_TEMPLATE: (("servers", "user"),),
    START_ASSIGNMENT: (("servers", "user"),),
})

#: Actions a token that does not grant access to classhub may still do (the hub's own scope
#: decides): reading the metrics, as for JupyterHub's /hub/metrics.
WITHOUT_ACCESS = frozenset({READ_METRICS})


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
    #: The caller's hub groups, as the hub answers now (filled where a rule needs them: sharing).
    groups: frozenset[str] = frozenset()
    #: The server (its name, "" for the default one) this token was made for by the hub at
    #: spawn, when the caller is a single-user server's own token; None otherwise.
    server_token: str | None = None

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


#: Whoever sends no token at all: allowed nothing but what a deployment opened (`decide`).
ANONYMOUS = Caller(name="", kind="anonymous", access=False)


@dataclass(frozen=True)
class ShareRef:
    """What the sharing rules look at in a share (or a request to make one)."""

    owner: str
    target_kind: str = "user"  # user, group or link
    target: str | None = None


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
        READ_CULL_POLICY: _MEMBERS,
        READ_CULL_WINDOWS: _MEMBERS,
        EDIT_CULL_WINDOWS: _TEACHERS,
        SET_JOB_PRIORITY: _TEACHERS,
        READ_COURSE_CLUSTER: _TEACHERS,
        READ_COURSE_DATA: _MEMBERS,
        WRITE_COURSE_DATA: _STAFF,
        SET_COURSE_DATA_LIMIT: frozenset(),  # hub admins only (issue 35)
        READ_HOME_SIZES: _STAFF,
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
    READ_CULL_POLICY: "see the culling policy of {c}",
    READ_CULL_WINDOWS: "see the no-cull windows of {c}",
    EDIT_CULL_WINDOWS: "reserve or cancel no-cull windows of {c}",
    SET_JOB_PRIORITY: "set a job's priority in {c}",
    READ_COURSE_CLUSTER: "see what {c} holds on the cluster",
    READ_COURSE_DATA: "see the data folder of {c}",
    WRITE_COURSE_DATA: "upload to or delete from the data folder of {c}",
    SET_COURSE_DATA_LIMIT: "set the data folder limit of {c}",
    READ_HOME_SIZES: "see the home sizes of the members of {c}",
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
    READ_CLUSTER,
    READ_OWN_USAGE,
    READ_METRICS,
    CONTROL_SERVER,
    READ_ME,
    LIST_OWN_FILES,
    STOP_SERVER,
    READ_OWN_INVITATIONS,
    ANSWER_INVITATION,
    READ_OWN_SHARES,
    SHARE_SERVER,
    READ_SHARE,
    REVOKE_SHARE,
    OPEN_SHARE,
    READ_SHARE_PATHS,
    REPORT_SHARE_ACCESS,
    COPY_SHARED_FILE,
    READ_OWN_CULL_WARNINGS,
    READ_PERSISTENT,
    MARK_PERSISTENT,
    SET_CULL_POLICY,
    OPEN_PAGES,
    LIST_JOBS,
    READ_TEMPLATES,
    USE_TEMPLATE,
    PUBLISH_TEMPLATE,
    READ_ASSIGNMENTS,
    EDIT_ASSIGNMENTS,
    START_ASSIGNMENT,
    SUBMIT_ASSIGNMENT,
    READ_SUBMISSIONS,
    READ_COMPETITIONS,
    EDIT_COMPETITIONS,
    SUBMIT_PREDICTIONS,
    READ_COMPETITION_SUBMISSIONS,
)

#: Actions for hub admins alone, about no course in particular, with the sentence for anyone else.
_ADMINS_ONLY = {
    CREATE_COURSE: "Only hub admins can create courses; ask an admin to create it.",
    READ_ALL_USAGE: (
        "Only hub admins can see the usage of every course; teachers and TAs can see their "
        "course's usage at /api/courses/<course>/usage, everyone their own at /api/usage/me."
    ),
    READ_CLUSTER: ("Only hub admins can see the whole cluster; a course's teachers see what "
                   "their course holds on the \"Cluster: <course>\" tab of classhub's pages."),
    READ_PERSISTENT: "Only hub admins can list the servers marked persistent.",
    MARK_PERSISTENT: "Only hub admins can mark servers persistent (never culled); ask an admin.",
    SET_CULL_POLICY: ("Only hub admins can set a course's culling policy; ask an admin (members "
                      "read it at /api/culling/courses/<course>/policy)."),
}

#: Actions about the caller's own things: users only, a service is told to use a user's token.
_USERS_ONLY = {
    READ_OWN_USAGE: "usage is kept per user",
    LIST_OWN_FILES: "files are in users' servers",
    READ_OWN_INVITATIONS: "invitations are for users",
    ANSWER_INVITATION: "invitations are for users",
    READ_OWN_SHARES: "shares belong to users",
    SHARE_SERVER: "shares belong to users",
    READ_SHARE: "shares belong to users",
    REVOKE_SHARE: "shares belong to users",
    OPEN_SHARE: "shares belong to users",
    READ_SHARE_PATHS: "shares belong to users",
    READ_OWN_CULL_WARNINGS: "cull warnings are about users' servers",
    OPEN_PAGES: "classhub's pages are for users, a service uses the API",
}

#: The one answer for a share that does not exist and for one that is not the caller's: the two
#: must not be told apart, or share ids (and their owners) could be enumerated.
NO_SHARE = "No such share among yours; GET /api/shares lists them."


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


def decide(caller: Caller, action: str, *, course: str | None = None, user: str | None = None,
           share: ShareRef | None = None, server: str | None = None,
           user_courses: Mapping[str, str] | None = None, open: bool = False,
           job: str | None = None, priority: object = None) -> Verdict:
    """May `caller` do `action` (on `course`, about `user`)?

    `course` is required for course actions, `user` for READ_USER_QUOTA/SET_USER_QUOTA,
    CONTROL_SERVER and STOP_SERVER (the server's owner; `user_courses`: the owner's course
    roles, for STOP_SERVER), `share` for the share actions, `server` (a server's name) for
    REPORT_SHARE_ACCESS and COPY_SHARED_FILE. `open`: the deployment opened READ_METRICS to
    everyone. A course the caller does not belong to is refused the same way whether or not it
    exists, so the answer does not reveal which courses exist; only admins get 404s.

    Jobs: `job` is the id of the job READ_JOB or CANCEL_JOB acts on, `course` and `user` its
    course and owner (course None: there is no such job); a caller who may not see it gets the
    404 of a missing job, so the answer does not reveal which jobs exist (docs/admins/security.md, "Security
    model"). SUBMIT_JOB with a `priority` other than 0 also needs SET_JOB_PRIORITY. LIST_JOBS:
    `course` and `user` are the listing's filters (``?course=``, ``?owner=``). Templates
    (READ_TEMPLATES, USE_TEMPLATE, PUBLISH_TEMPLATE) need the `course`.
    """
    if caller.kind == ANONYMOUS.kind:
        if action == READ_METRICS and open:
            return ALLOW
        if action == READ_METRICS:
            return Verdict(False, 401, "Send 'Authorization: token <token>' with a token that has "
                                       "the scope 'read:metrics'.")
        return Verdict(False, 401, "Log in first, or send 'Authorization: token <token>'.")
    if action in (LIST_COURSES, READ_ME):
        return ALLOW  # the list itself is filtered by visible_courses; anyone may ask who they are
    if action in _TEMPLATE_ACTIONS:
        if course is None:
            raise ValueError(f"{action} needs a course")
        return _templates(caller, action, course)
    if action in _ASSIGNMENT_ACTIONS:
        if course is None:
            raise ValueError(f"{action} needs a course")
        return _assignments(caller, action, course)
    if action in _COMPETITION_ACTIONS:
        if course is None:
            raise ValueError(f"{action} needs a course")
        return _competitions(caller, action, course)
    if action in _JOB_ACTIONS and not caller.is_user and (
            course is None or job is not None or action == LIST_JOBS):
        return _deny("Jobs belong to users; ask with a user's token.")
    if action == LIST_JOBS:
        if course is None or user == caller.name:
            return ALLOW  # the listing itself is filtered by visible_jobs
        return decide(caller, READ_COURSE_JOBS, course=course)
    if job is not None and action in (READ_JOB, CANCEL_JOB) and (
            course is None or not decide(caller, READ_JOB, course=course, user=user)):
        return Verdict(False, 404, f"No job {job} among the jobs you can see; GET /api/jobs lists them.")
    if action == SUBMIT_JOB and priority not in (None, 0):
        verdict = decide(caller, SUBMIT_JOB, course=course)
        if verdict and not decide(caller, SET_JOB_PRIORITY, course=course):
            return _deny(f"Only teachers of {course} and hub admins set a job's priority; leave "
                         "priority out.")
        return verdict
    if action in _USERS_ONLY and not (caller.is_user and caller.access):
        return _deny(f"{caller.name} is a hub service; {_USERS_ONLY[action]}. Ask with a user's token.")
    if action in (READ_OWN_USAGE, LIST_OWN_FILES, READ_OWN_INVITATIONS, ANSWER_INVITATION,
                  READ_OWN_SHARES, READ_SHARE_PATHS, READ_OWN_CULL_WARNINGS, OPEN_PAGES):
        return ALLOW  # each answers about the caller's own things only
    if action in (SHARE_SERVER, READ_SHARE, REVOKE_SHARE, OPEN_SHARE):
        return _decide_share(caller, action, share)
    if action in (REPORT_SHARE_ACCESS, COPY_SHARED_FILE):
        if caller.is_user and caller.server_token is not None and caller.server_token == server:
            return ALLOW
        what = "reports access to itself" if action == REPORT_SHARE_ACCESS else "asks for a copy of its files"
        return _deny(f"Only a server {what}, with its own token.")
    if action == STOP_SERVER:
        if user is None:
            raise ValueError("STOP_SERVER needs the server's owner")
        owner_roles = user_courses or {}
        if caller.is_admin or (caller.is_user and caller.access and caller.name == user) or any(
                caller.role_in(c) == TEACHER and r in (STUDENT, TA) for c, r in owner_roles.items()):
            return ALLOW
        return _deny(f"You can stop your own server, and as a teacher the servers of your course's "
                     f"students and TAs; not {user}'s.")
    if action == READ_METRICS:
        if open or METRICS_SCOPE in caller.scopes:  # a hub admin's full token holds it
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
    if action in _ADMINS_ONLY:
        return _deny(_ADMINS_ONLY[action])
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


def _decide_share(caller: Caller, action: str, share: ShareRef | None) -> Verdict:
    """The sharing rules (see the module doc); the caller is a user with classhub access."""
    if share is None:
        raise ValueError(f"{action} needs the share")
    owns = caller.is_admin or caller.name == share.owner
    if action == OPEN_SHARE:
        recipient = (share.target_kind == "link"
                     or (share.target_kind == "user" and share.target == caller.name)
                     or (share.target_kind == "group" and share.target in caller.groups))
        return ALLOW if recipient or caller.name == share.owner else Verdict(False, 404, NO_SHARE)
    if action in (READ_SHARE, REVOKE_SHARE) and not owns:
        return Verdict(False, 404, NO_SHARE)
    if action == SHARE_SERVER and not owns:
        return _deny(f"Only {share.owner} (or a hub admin) can share or revoke shares of "
                     f"{share.owner}'s server.")
    if action in HUB_SCOPES:  # no confused deputy (docs/admins/security.md, "Security model", rule 2)
        missing = _missing_scopes(caller, action, None, share.owner)
        if not missing:
            return missing
    if (action == SHARE_SERVER and share.target_kind == "group" and not caller.is_admin
            and share.target not in caller.groups):
        return _deny(f"You can share with groups you belong to; you are not in {share.target}.")
    return ALLOW


_TEMPLATE_ACTIONS = frozenset({READ_TEMPLATES, USE_TEMPLATE, PUBLISH_TEMPLATE})
_JOB_ACTIONS = frozenset({SUBMIT_JOB, READ_JOB, CANCEL_JOB, READ_COURSE_JOBS, LIST_JOBS, SET_JOB_PRIORITY})


def _templates(caller: Caller, action: str, course: str) -> Verdict:
    """Templates of `course`: members and admins see and use them, its teachers and admins
    publish; anyone else is told the course is none of theirs (404, as for a missing course)."""
    if not (caller.is_admin or caller.role_in(course) is not None):
        return Verdict(False, 404, f"No course {course} among yours; GET /api/courses lists the "
                                   "courses you are in.")
    if action == PUBLISH_TEMPLATE and not (caller.is_admin or caller.role_in(course) == TEACHER):
        return _deny(f"Only a teacher of {course} (or an admin) can publish its templates or change "
                     "its template settings; ask the course's teacher.")
    if action == USE_TEMPLATE:  # restarting the caller's own server: their token must allow it
        return _missing_scopes(caller, action, course, caller.name)
    return ALLOW


_ASSIGNMENT_ACTIONS = frozenset({READ_ASSIGNMENTS, EDIT_ASSIGNMENTS, START_ASSIGNMENT, SUBMIT_ASSIGNMENT,
                                 READ_SUBMISSIONS})


def _assignments(caller: Caller, action: str, course: str) -> Verdict:
    """Assignments of `course`: members and admins see them; members submit their own work (a
    hub service has no home to submit); teachers and admins release and change them; teachers,
    TAs and admins read every submission. Anyone else: the course is none of theirs (404)."""
    role = caller.role_in(course)
    if not (caller.is_admin or role is not None):
        return Verdict(False, 404, f"No course {course} among yours; GET /api/courses lists the "
                                   "courses you are in.")
    if action == EDIT_ASSIGNMENTS and not (caller.is_admin or role == TEACHER):
        return _deny(f"Only a teacher of {course} (or an admin) can release or change its "
                     "assignments; ask the course's teacher.")
    if action == READ_SUBMISSIONS and not (caller.is_admin or role in (TEACHER, TA)):
        return _deny(f"Only the teachers and TAs of {course} (and admins) see everyone's "
                     "submissions; yours are listed with the assignment.")
    if action in (START_ASSIGNMENT, SUBMIT_ASSIGNMENT) and not (caller.is_user and caller.access):
        return _deny(f"{caller.name} is a hub service; assignments are started and submitted from "
                     "a user's own server. Ask with a user's token.")
    if action == START_ASSIGNMENT:  # restarting the caller's own server: their token must allow it
        return _missing_scopes(caller, action, course, caller.name)
    return ALLOW


_COMPETITION_ACTIONS = frozenset({READ_COMPETITIONS, EDIT_COMPETITIONS, SUBMIT_PREDICTIONS,
                                  READ_COMPETITION_SUBMISSIONS})


def _competitions(caller: Caller, action: str, course: str) -> Verdict:
    """Competitions of `course`: members and admins see them and their leaderboards; members
    submit their own predictions (a hub service has no predictions of its own); teachers and
    admins create them; teachers, TAs and admins see every submission and both splits. Anyone
    else: the course is none of theirs (404)."""
    role = caller.role_in(course)
    if not (caller.is_admin or role is not None):
        return Verdict(False, 404, f"No course {course} among yours; GET /api/courses lists the "
                                   "courses you are in.")
    if action == EDIT_COMPETITIONS and not (caller.is_admin or role == TEACHER):
        return _deny(f"Only a teacher of {course} (or an admin) can create or change its "
                     "competitions; ask the course's teacher.")
    if action == READ_COMPETITION_SUBMISSIONS and not (caller.is_admin or role in (TEACHER, TA)):
        return _deny(f"Only the teachers and TAs of {course} (and admins) see everyone's "
                     "competition submissions; yours are listed with the competition.")
    if action == SUBMIT_PREDICTIONS and not (caller.is_user and caller.access):
        return _deny(f"{caller.name} is a hub service; predictions are submitted by a user. Ask "
                     "with a user's token.")
    return ALLOW


def visible_jobs(caller: Caller, *, course: str | None, owner: str | None) -> dict[str, object]:
    """Which jobs a listing shows `caller` (after LIST_JOBS allowed it), as the filters of the
    job store's ``list`` (``owner``, ``courses``, ``either``: the owner's jobs or the courses').

    Admins see every job (narrowed by ``?course=``/``?owner=``); the course's staff see its
    jobs; everyone sees their own. Without filters, a user sees their own jobs and those of the
    courses they teach or assist.
    """
    if caller.is_admin:
        return {"owner": owner, "courses": [course] if course else None}
    if course is not None:
        staff = bool(decide(caller, READ_COURSE_JOBS, course=course))
        return {"owner": owner if staff else caller.name, "courses": [course]}
    staff_of = [c for c in sorted(caller.courses) if decide(caller, READ_COURSE_JOBS, course=c)]
    if owner is not None and owner != caller.name:
        return {"owner": owner, "courses": staff_of}
    return {"owner": caller.name, "courses": staff_of if owner is None else None,
            "either": owner is None}


def may_view_server(viewer: Caller, owner: str, server: str) -> Verdict:
    """Whether `viewer` (whom a viewer token belongs to, as the hub says) is someone else than
    `owner` whose token may open `owner`'s `server`: ``access:servers`` unfiltered, or filtered
    to that server or to that user (a share grants ``access:servers!server=<owner>/<server>``).
    A server reports use of itself and copies a file only for such a viewer."""
    scopes = viewer.scopes
    base = "access:servers"
    may_open = bool({base, f"{base}!server={owner}/{server}", f"{base}!user={owner}"} & scopes)
    if viewer.is_user and viewer.name != owner and may_open:
        return ALLOW
    return _deny("viewer_token is not a token of someone else that may open this server")


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
