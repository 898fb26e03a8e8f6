"""Who may do what (hub_ext.core.authz), decided from plain data: every action x every kind of caller.

The same table is checked through a real hub in test_service_authz.py; this one covers the
corners that are slow to reach there (teachers of several courses, role changes of teachers).
"""

from __future__ import annotations

import pytest

from hub_ext.core import authz
from hub_ext.core.authz import Caller, decide, may_change_member, visible_courses

pytestmark = pytest.mark.unit

C = "cs101"
#: What the hub reports for a hub admin's full token (expanded: admin:groups brings groups, ...).
ADMIN_SCOPES = frozenset({"admin:groups", "groups", "admin:users", "users", "admin:servers", "servers",
                          "shares", "read:metrics"})
ANYONE_USER = Caller("nobody")
STUDENT = Caller("sam", courses={C: "student"}, scopes=frozenset({"servers!user=sam"}))
TA = Caller("tara", courses={C: "ta"})
TEACHER = Caller("tom", courses={C: "teacher"})
OTHER_STUDENT = Caller("olga", courses={"bio201": "student"})
OTHER_TEACHER = Caller("otto", courses={"bio201": "teacher"})
ADMIN = Caller("ada", admin=True, scopes=ADMIN_SCOPES)
#: The same admin with a token narrowed to classhub access (the outside attack run's "narrowed token").
NARROW_ADMIN = Caller("ada", admin=True)
SERVICE = Caller("grader", kind="service", courses={C: "teacher"}, admin=True)
METRICS_SERVICE = Caller("prometheus", kind="service", scopes=frozenset({"read:metrics"}))

CALLERS = {
    "nobody": ANYONE_USER, "student": STUDENT, "ta": TA, "teacher": TEACHER,
    "other-student": OTHER_STUDENT, "other-teacher": OTHER_TEACHER, "admin": ADMIN,
    "service": SERVICE,
}
MEMBERS = {"student", "ta", "teacher", "admin"}
STAFF = {"ta", "teacher", "admin"}
TEACHERS = {"teacher", "admin"}
ADMINS = {"admin"}

COURSE_TABLE = {
    authz.READ_COURSE: MEMBERS,
    authz.DELETE_COURSE: ADMINS,
    authz.READ_MEMBERS: STAFF,
    authz.EDIT_MEMBERS: TEACHERS,
    authz.IMPORT_ROSTER: TEACHERS,
    authz.READ_COURSE_QUOTA: MEMBERS,
    authz.SET_COURSE_QUOTA: ADMINS,
    authz.READ_USER_QUOTA: TEACHERS,
    authz.SET_USER_QUOTA: TEACHERS,
    authz.READ_COURSE_USAGE: STAFF,
    authz.READ_CULL_POLICY: MEMBERS,
    authz.READ_CULL_WINDOWS: MEMBERS,
    authz.EDIT_CULL_WINDOWS: TEACHERS,
    authz.READ_COURSE_DATA: MEMBERS,
    authz.WRITE_COURSE_DATA: STAFF,
    authz.READ_HOME_SIZES: STAFF,
}


@pytest.mark.parametrize("action", sorted(COURSE_TABLE))
@pytest.mark.parametrize("who", sorted(CALLERS))
def test_course_actions(action: str, who: str) -> None:
    verdict = decide(CALLERS[who], action, course=C, user="someone-else")
    assert bool(verdict) is (who in COURSE_TABLE[action])
    if not verdict:
        assert verdict.status == 403
        assert C in verdict.message and "hub admins" in verdict.message


def test_refusals_say_who_may_and_what_the_caller_is() -> None:
    assert decide(TA, authz.EDIT_MEMBERS, course=C).message == (
        "You are a TA of cs101; only teachers of cs101 and hub admins can change the members of cs101."
    )
    assert "not a member of cs101" in decide(OTHER_TEACHER, authz.READ_COURSE, course=C).message
    assert "a hub service" in decide(SERVICE, authz.READ_COURSE, course=C).message


def test_a_course_that_does_not_exist_is_refused_like_one_the_caller_is_not_in() -> None:
    a = decide(STUDENT, authz.READ_COURSE, course="secret-course")
    b = decide(STUDENT, authz.READ_COURSE, course="bio201")
    assert not a and not b
    assert a.message.replace("secret-course", "X") == b.message.replace("bio201", "X")
    assert decide(ADMIN, authz.READ_COURSE, course="secret-course")  # admins then get the 404


def test_members_read_their_own_quota_but_not_others() -> None:
    assert decide(STUDENT, authz.READ_USER_QUOTA, course=C, user="sam")
    assert not decide(STUDENT, authz.READ_USER_QUOTA, course=C, user="tara")
    assert not decide(STUDENT, authz.SET_USER_QUOTA, course=C, user="sam")
    # not a member: no own quota to read there
    assert not decide(OTHER_STUDENT, authz.READ_USER_QUOTA, course=C, user="olga")


def test_teacher_of_one_course_is_a_student_elsewhere() -> None:
    both = Caller("mia", courses={C: "teacher", "bio201": "student"})
    assert decide(both, authz.SET_USER_QUOTA, course=C)
    assert not decide(both, authz.SET_USER_QUOTA, course="bio201")
    assert not decide(both, authz.SET_COURSE_QUOTA, course=C)
    assert decide(both, authz.READ_COURSE_QUOTA, course="bio201")


@pytest.mark.parametrize("who", sorted(CALLERS))
def test_global_actions(who: str) -> None:
    caller = CALLERS[who]
    assert decide(caller, authz.LIST_COURSES)
    assert bool(decide(caller, authz.CREATE_COURSE)) is (who == "admin")
    assert bool(decide(caller, authz.READ_ALL_USAGE)) is (who == "admin")
    assert bool(decide(caller, authz.READ_OWN_USAGE)) is (who != "service")
    assert bool(decide(caller, authz.READ_METRICS)) is (who == "admin")
    for admins_only in (authz.READ_PERSISTENT, authz.MARK_PERSISTENT, authz.SET_CULL_POLICY):
        verdict = decide(caller, admins_only)
        assert bool(verdict) is (who == "admin")
        assert verdict or verdict.message.startswith("Only hub admins can ")
    for users_only in (authz.READ_OWN_CULL_WARNINGS, authz.OPEN_PAGES):
        verdict = decide(caller, users_only)
        assert bool(verdict) is (who != "service")
        assert verdict or "grader is a hub service" in verdict.message


def test_culling_settings_are_not_a_course_role_for_a_narrowed_admin_token() -> None:
    """Marking servers persistent and setting a course's policy are classhub's own data: no hub
    scope is asked of the admin's token (the API of hub_ext.service.culling)."""
    for action in (authz.READ_PERSISTENT, authz.MARK_PERSISTENT, authz.SET_CULL_POLICY):
        assert decide(NARROW_ADMIN, action)
    assert decide(NARROW_ADMIN, authz.EDIT_CULL_WINDOWS, course=C)


def test_services_are_never_admins_or_members_whatever_their_model_says() -> None:
    assert not SERVICE.is_admin
    assert SERVICE.role_in(C) is None
    assert visible_courses(SERVICE, [C, "bio201"]) == []


def test_metrics_need_an_admin_or_the_read_metrics_scope() -> None:
    assert decide(METRICS_SERVICE, authz.READ_METRICS)
    # an admin's token without classhub access does not carry the admin's classhub powers
    limited = Caller("ada", admin=True, access=False, courses={C: "teacher"})
    assert not limited.is_admin and limited.role_in(C) is None
    assert not decide(limited, authz.READ_METRICS)
    assert decide(Caller("u", scopes=frozenset({"read:metrics"})), authz.READ_METRICS)
    verdict = decide(STUDENT, authz.READ_METRICS)
    assert not verdict and "read:metrics" in verdict.message


def test_servers_are_controlled_by_their_owner_and_admins() -> None:
    assert decide(STUDENT, authz.CONTROL_SERVER, user="sam")
    assert not decide(TEACHER, authz.CONTROL_SERVER, user="sam")
    assert decide(ADMIN, authz.CONTROL_SERVER, user="sam")
    assert not decide(Caller("sam", kind="service"), authz.CONTROL_SERVER, user="sam")


def test_listing_shows_admins_everything_and_others_their_courses() -> None:
    every = ["zoo", C, "bio201"]
    assert visible_courses(ADMIN, every) == ["bio201", C, "zoo"]
    assert visible_courses(TEACHER, every) == [C]
    assert visible_courses(ANYONE_USER, every) == []


@pytest.mark.parametrize(
    ("current", "new", "teacher_may"),
    [
        (None, "student", True),
        (None, "ta", True),
        (None, "teacher", False),
        ("student", "ta", True),
        ("ta", "student", True),
        ("student", None, True),
        ("ta", None, True),
        ("student", "teacher", False),
        ("teacher", "student", False),
        ("teacher", None, False),
        ("teacher", "teacher", False),
    ],
)
def test_teachers_manage_students_and_tas_only(current, new, teacher_may) -> None:
    assert bool(may_change_member(TEACHER, C, current, new)) is teacher_may
    assert may_change_member(ADMIN, C, current, new)
    for who in (STUDENT, TA, OTHER_TEACHER, SERVICE):
        assert not may_change_member(who, C, current, new)


def test_refusing_a_teacher_change_says_to_ask_an_admin() -> None:
    verdict = may_change_member(TEACHER, C, None, "teacher")
    assert verdict.status == 403 and "Only hub admins can make someone a teacher" in verdict.message


def test_programming_errors_are_loud() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        decide(TEACHER, "fly", course=C)
    with pytest.raises(ValueError, match="needs a course"):
        decide(TEACHER, authz.READ_COURSE)
    with pytest.raises(ValueError, match="role must be"):
        may_change_member(ADMIN, C, None, "owner")


def test_a_narrowed_admin_token_is_not_a_deputy_for_hub_actions() -> None:
    """classhub acts on the hub for an admin only with the hub scopes the hub itself would ask for."""
    for action, needs in ((authz.CREATE_COURSE, "admin:groups"), (authz.DELETE_COURSE, "admin:groups"),
                          (authz.EDIT_MEMBERS, "groups!group=cs101"),
                          (authz.IMPORT_ROSTER, "admin:users")):
        verdict = decide(NARROW_ADMIN, action, course=C)
        assert not verdict and verdict.status == 403 and needs in verdict.message
        assert decide(ADMIN, action, course=C)
    verdict = decide(NARROW_ADMIN, authz.CONTROL_SERVER, user="sam")
    assert not verdict and "servers!user=sam" in verdict.message
    # classhub's own data (a course ceiling) is not a hub action: the admin flag is enough
    assert decide(NARROW_ADMIN, authz.SET_COURSE_QUOTA, course=C)
    # an owner's own token narrowed to classhub access cannot restart their server either
    assert not decide(Caller("sam", courses={C: "student"}), authz.CONTROL_SERVER, user="sam")
    # a course role grants what it grants, whatever the token's hub scopes
    assert decide(Caller("ada", admin=True, courses={C: "teacher"}), authz.EDIT_MEMBERS, course=C)
    # and a narrowed admin who teaches the course is a teacher there, not an admin
    assert not may_change_member(Caller("ada", admin=True, courses={C: "teacher"}), C, None, "teacher")


def test_scopes_are_held_unfiltered_or_with_the_same_filter() -> None:
    assert Caller("x", scopes=frozenset({"servers"})).holds("servers!user=y")
    assert Caller("x", scopes=frozenset({"servers!user=y"})).holds("servers!user=y")
    assert not Caller("x", scopes=frozenset({"servers!user=z"})).holds("servers!user=y")
    assert not Caller("x", scopes=frozenset({"servers!group=g"})).holds("servers!user=y")


@pytest.mark.parametrize(
    ("caller", "hub_admin", "elsewhere", "expected"),
    [
        (TEACHER, False, [], authz.DIRECT),
        (TEACHER, False, [C], authz.DIRECT),  # their own course is not "elsewhere"
        (TEACHER, False, ["bio201"], authz.INVITE),
        (TEACHER, True, [], None),
        (ADMIN, True, ["bio201"], authz.DIRECT),
        (ADMIN, False, ["bio201"], authz.DIRECT),
        (NARROW_ADMIN, False, ["bio201"], None),  # EDIT_MEMBERS itself needs the hub scopes
    ],
)
def test_enrolment_needs_consent(caller, hub_admin, elsewhere, expected) -> None:
    if not decide(caller, authz.EDIT_MEMBERS, course=C):
        assert expected is None
        return
    answer = authz.enrolment(caller, C, "kim", hub_admin=hub_admin, other_courses=elsewhere)
    if expected is None:
        assert not answer and answer.status == 403 and "hub admin" in answer.message
    else:
        assert answer == expected
