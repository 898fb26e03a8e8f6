"""What a start asks the store about templates before it decides to seed (issue 6, issue 13).

A start without a ``template`` option seeds only when one of the user's courses re-seeds
``on_start``; the spawner asks that with the user's course roles (one read, on the hub's loop
through the store's readers) and skips `resolve` (a worker thread) when the answer is no. The
answer must match what `resolve` would decide, so that skipping it never skips a re-seed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from hub_ext import store
from hub_ext.backends.templates_spawn import course_roles, resolve
from hub_ext.store.template_models import TemplateSettings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc)


def test_a_plain_start_looks_for_a_reseed_only_in_the_users_courses_that_reseed_on_start(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    sessions = store.connect(url)
    with sessions.begin() as session:
        for name, mode in (("cs101", "on_start"), ("cs102", "manual"), ("cs103", None)):
            course = store.ensure_course(session, name, NOW)
            session.flush()
            if mode is not None:
                session.add(TemplateSettings(course_id=course.id, reseed=mode))
            store.add_member(session, course, "ann", "student")
            if name != "cs101":
                store.add_member(session, course, "bob", "student")

    # ann: all three courses, bob: the two without on_start
    assert course_roles(url, "ann") == ({"cs101": "student", "cs102": "student", "cs103": "student"}, True)
    assert course_roles(url, "bob") == ({"cs102": "student", "cs103": "student"}, False)  # manual, default
    assert course_roles(url, "tom") == ({}, False)  # in no course
    with sessions.begin() as session:  # a teacher of an on_start course re-seeds too
        store.add_member(session, store.ensure_course(session, "cs101", NOW), "tina", "teacher")
    assert course_roles(url, "tina") == ({"cs101": "teacher"}, True)
    with sessions.begin() as session:  # a course that is gone takes its settings with it
        session.delete(store.ensure_course(session, "cs101", NOW))
    assert course_roles(url, "tina") == ({}, False)
    assert course_roles(url, "ann")[1] is False

    # where the answer is no, resolve (what the skip replaces) would not seed either
    bob, _ = course_roles(url, "bob")
    assert resolve(url, "bob", False, None, courses=bob) is None
