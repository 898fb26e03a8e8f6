"""Role decisions: who is a student, TA, teacher or admin."""

from __future__ import annotations

import pytest

from hub_ext.core import roles

pytestmark = pytest.mark.unit

STAFF = roles.CourseStaff.from_group_properties(
    {"classhub": {"teachers": ["tina"], "tas": ["tom", "tina2"]}}
)


def test_group_without_classhub_properties_is_not_a_course():
    assert roles.CourseStaff.from_group_properties({}) is None
    assert roles.CourseStaff.from_group_properties(None) is None
    assert roles.CourseStaff.from_group_properties({"other": 1}) is None


def test_malformed_staff_lists_are_tolerated():
    staff = roles.CourseStaff.from_group_properties({"classhub": {"teachers": "solo", "tas": 3}})
    assert staff.teachers == {"solo"} and staff.tas == frozenset()
    assert roles.CourseStaff.from_group_properties({"classhub": "yes"}) == roles.CourseStaff()


def test_roles_per_course_and_overall():
    courses = {"cs101": STAFF, "cs102": roles.CourseStaff(teachers=frozenset({"tom"}))}
    assert roles.course_roles("tom", ["cs101", "cs102", "chess-club"], courses) == {
        "cs101": "ta",
        "cs102": "teacher",
    }
    assert roles.overall_role(False, {"cs101": "ta", "cs102": "teacher"}) == "teacher"
    assert roles.overall_role(False, {"cs101": "student"}) == "student"
    assert roles.overall_role(False, {}) == "student"
    assert roles.overall_role(True, {"cs101": "student"}) == "admin"


def test_membership_of_a_course_group_is_required_for_a_course_role():
    # Listed as teacher in the properties but not a member of the group: no role there.
    assert roles.course_roles("tina", [], {"cs101": STAFF}) == {}
