"""Who is the caller in classhub terms: student, TA, teacher or admin.

A course is a JupyterHub group. Its staff is kept in the group's ``properties`` under the
``classhub`` key (``{"teachers": [...], "tas": [...]}``) so the hub stays the single source of
truth for membership. This module only decides; it never fetches anything.
"""

from __future__ import annotations

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
