"""Who is the caller in classhub terms: student, TA, teacher or admin.

A course is a JupyterHub group. Its staff is kept in the group's ``properties`` under the
``classhub`` key (``{"teachers": [...], "tas": [...]}``) so the hub stays the single source of
truth for membership. This module only decides; it never fetches anything.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

STUDENT = "student"
TA = "ta"
TEACHER = "teacher"
ADMIN = "admin"

#: Roles from least to most privileged; a user's overall role is the highest one they hold.
ROLE_ORDER = (STUDENT, TA, TEACHER, ADMIN)

#: Key in a JupyterHub group's properties that marks the group as a classhub course.
COURSE_PROPERTY = "classhub"


@dataclass(frozen=True)
class CourseStaff:
    """Teachers and TAs of one course, as kept in the course group's properties."""

    teachers: frozenset[str] = frozenset()
    tas: frozenset[str] = frozenset()

    @classmethod
    def from_group_properties(cls, properties: Mapping[str, object] | None) -> CourseStaff | None:
        """Read the staff from a group's properties; None when the group is not a course."""
        if not properties or COURSE_PROPERTY not in properties:
            return None
        raw = properties[COURSE_PROPERTY]
        if not isinstance(raw, Mapping):
            return cls()
        return cls(
            teachers=frozenset(_names(raw.get("teachers"))),
            tas=frozenset(_names(raw.get("tas"))),
        )

    def role_of(self, username: str) -> str:
        """The role ``username`` holds in this course (members who are not staff are students)."""
        if username in self.teachers:
            return TEACHER
        if username in self.tas:
            return TA
        return STUDENT


def _names(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [v for v in value if isinstance(v, str)]
    return []


def course_roles(
    username: str, user_groups: Iterable[str], courses: Mapping[str, CourseStaff]
) -> dict[str, str]:
    """The user's role in each course group they belong to, by course name."""
    return {g: courses[g].role_of(username) for g in sorted(set(user_groups)) if g in courses}


def overall_role(is_admin: bool, roles_in_courses: Mapping[str, str]) -> str:
    """The highest role the user holds anywhere; hub admins are always ``admin``."""
    if is_admin:
        return ADMIN
    best = STUDENT
    for role in roles_in_courses.values():
        if ROLE_ORDER.index(role) > ROLE_ORDER.index(best):
            best = role
    return best


def may_control_server(caller: str, caller_is_admin: bool, owner: str) -> bool:
    """Who may stop, start or change a user's server through classhub: its owner or an admin."""
    return caller_is_admin or caller == owner


def _role_slug(course: str) -> str:
    """A JupyterHub role name part for a course (role names allow [a-z0-9-_~.] only)."""
    slug = re.sub(r"[^a-z0-9]+", "-", course.lower()).strip("-")[:40] or "course"
    if slug != course:
        slug = f"{slug}-{hashlib.sha256(course.encode()).hexdigest()[:6]}"
    return slug


#: Name prefixes of the hub roles classhub generates; the hub-side sync owns every role named so.
ROLE_PREFIXES = ("classhub-teacher-", "classhub-ta-")


def hub_roles(
    members: Mapping[str, Mapping[str, str]],
    ta_server_access: bool | Mapping[str, bool] = True,
    hub_admins: Iterable[str] = (),
) -> list[dict]:
    """JupyterHub roles that give teachers and TAs their powers over their course's servers.

    ``members`` maps course (JupyterHub group) -> username -> role. Teachers may start, stop and
    open the servers of the course's students and TAs (``admin:servers!user=<member>``,
    ``access:servers!user=<member>``); TAs may open the students' servers (when
    ``ta_server_access``, a bool or a per-course mapping); both may read the course's users.
    The hub enforces these itself.

    Server powers are granted per member, never with ``!group=``: a group filter would also
    reach members who must stay out of reach (hub admins, other teachers), and a single-user
    server cannot resolve a group filter without the hub's database (JupyterHub's documented
    limit of ``check_scopes``). ``hub_admins`` are left out of every server scope: no course role
    reaches a hub admin's server (docs/admins/security.md, "Security model", rule 1).
    """
    admins = frozenset(hub_admins)
    result = []
    for course in sorted(members):
        people = members[course]
        teachers = sorted(u for u, r in people.items() if r == TEACHER)
        tas = sorted(u for u, r in people.items() if r == TA)
        learners = sorted(u for u, r in people.items() if r != TEACHER and u not in admins)
        students = [u for u in learners if people[u] == STUDENT]
        group = f"group={course}"
        slug = _role_slug(course)
        read = [f"read:users!{group}", f"read:groups!{group}"]
        ta_access = (ta_server_access.get(course, True) if isinstance(ta_server_access, Mapping)
                     else ta_server_access)
        if teachers:
            result.append({
                "name": f"classhub-teacher-{slug}",
                "description": f"Teachers of {course}: manage and open the course's servers",
                "scopes": [*read, *(f"admin:servers!user={u}" for u in learners),
                           *(f"access:servers!user={u}" for u in learners)],
                "users": teachers,
            })
        if tas:
            result.append({
                "name": f"classhub-ta-{slug}",
                "description": f"TAs of {course}: open the course's servers to help",
                "scopes": [*read, *((f"access:servers!user={u}" for u in students)
                                    if ta_access else ())],
                "users": tas,
            })
    return result
