"""Template rules (hub_ext.core.templates): who may, which names, what a start seeds.

What a user notices when these fail: a student publishes over the teacher's material, a student
seeds another course's template by naming it in the spawn options, a "manual" course re-seeds
homes on every restart, or an "on_start" course never brings the new version.
"""

from __future__ import annotations

import pytest

from hub_ext.core import authz
from hub_ext.core.authz import USE_TEMPLATE, Caller
from hub_ext.core.templates import (
    TemplateChoice,
    TemplateError,
    TemplateOptionError,
    may_publish,
    may_read,
    may_use,
    name_problem,
    require_name,
    version_on_start,
)

pytestmark = pytest.mark.unit

TEACHER = Caller("t", courses={"cs101": "teacher"})
TA = Caller("a", courses={"cs101": "ta"})
STUDENT = Caller("s", courses={"cs101": "student"})
OUTSIDER = Caller("o", courses={"cs202": "teacher"})
ADMIN = Caller("root", admin=True)
SERVICE = Caller("svc", kind="service")


@pytest.mark.parametrize(("caller", "read", "publish"), [
    (TEACHER, 200, 200), (TA, 200, 403), (STUDENT, 200, 403), (OUTSIDER, 404, 404), (ADMIN, 200, 200),
    (SERVICE, 404, 404),
])
def test_who_may_read_use_and_publish(caller, read, publish):
    for decide, expected in ((may_read, read), (may_use, read), (may_publish, publish)):
        verdict = decide(caller, "cs101")
        assert (200 if verdict else verdict.status) == expected, (caller.name, decide.__name__)
        if not verdict:
            assert verdict.message.endswith(".")


@pytest.mark.parametrize("name", ["lab1", "a", "week-3_solutions", "x" * 63])
def test_good_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["", "Lab1", "../etc", "a/b", "-x", "x" * 64, "café", None, 3, ".hidden"])
def test_bad_names_say_what_to_use(name):
    assert "lower-case letters" in name_problem(name)


def test_choice_forms():
    assert TemplateChoice.parse("cs101/lab1") == TemplateChoice("cs101", "lab1")
    assert TemplateChoice.parse({"course": "cs101", "name": "lab1", "version": "v2"}).version == 2
    assert TemplateChoice.parse({"course": "cs101", "name": "lab1", "restore_deleted": True}).restore_deleted
    for bad in ("lab1", {"course": "cs101"}, {"course": "cs101", "name": "lab1", "version": 0},
                {"course": "cs101", "name": "lab1", "version": True}, {"course": "a/b", "name": "lab1"},
                {"course": "cs101", "name": "lab1", "path": "/etc"}, ["cs101", "lab1"],
                {"course": "cs101", "name": "lab1", "restore_deleted": "yes"}):
        with pytest.raises(TemplateOptionError):
            TemplateChoice.parse(bad)


LATEST = {"cs101/lab1": 3, "cs101/lab2": 1}


@pytest.mark.parametrize(("choice", "marker", "reseed", "expected"), [
    (TemplateChoice("cs101", "lab1"), None, {}, ("cs101/lab1", 3)),  # newest by default
    (TemplateChoice("cs101", "lab1", 2), ("cs101/lab1", "3"), {}, ("cs101/lab1", 2)),  # asked for v2
    (TemplateChoice("cs101", "gone"), None, {}, None),  # no such template: nothing
    (None, None, {"cs101": "on_start"}, None),  # never seeded: nothing
    (None, ("cs101/lab1", "2"), {"cs101": "on_start"}, ("cs101/lab1", 3)),  # newer: re-seed
    (None, ("cs101/lab1", "3"), {"cs101": "on_start"}, None),  # up to date
    (None, ("cs101/lab1", "2"), {"cs101": "manual"}, None),  # manual: only when asked
    (None, ("cs101/lab1", "2"), {}, None),  # default is manual
    (None, ("cs101/gone", "1"), {"cs101": "on_start"}, None),  # template deleted
])
def test_what_a_start_seeds(choice, marker, reseed, expected):
    assert version_on_start(choice, marker, LATEST, reseed) == expected


def test_starting_from_a_template_needs_a_token_that_may_restart_ones_own_server():
    """No confused deputy: the service restarts the server only with the caller's own hub scope."""
    narrow = Caller("s", courses={"cs101": "student"}, scopes=frozenset({"access:services"}))
    full = Caller("s", courses={"cs101": "student"}, scopes=frozenset({"servers!user=s"}))
    assert authz.decide(full, USE_TEMPLATE, course="cs101")
    refused = authz.decide(narrow, USE_TEMPLATE, course="cs101")
    assert refused.status == 403 and "'servers!user=s'" in refused.message
    assert authz.decide(OUTSIDER, USE_TEMPLATE, course="cs101").status == 404


def test_a_template_name_in_a_request_is_checked_with_a_sentence():
    assert require_name("lab1") == "lab1"
    with pytest.raises(TemplateError, match=r"^'\.\./etc' is not a template name: .*\.$"):
        require_name("../etc")
