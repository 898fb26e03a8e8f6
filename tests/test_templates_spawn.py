"""What a start asks the store about templates before it decides to seed (issue 6, issue 13).

A start without a ``template`` option seeds only when one of the user's courses re-seeds
``on_start``; the spawner asks that first, on the hub's loop through the store's readers, and
skips `resolve` (a worker thread) when the answer is no. The answer must match what `resolve`
would decide, so that skipping it never skips a re-seed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from hub_ext import store
from hub_ext.backends.local.templates_spawn import reseeds_on_start, resolve
from hub_ext.store.template_models import TemplateSettings

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

    assert reseeds_on_start(url, {"cs101": "student", "cs102": "student", "cs103": "student"})
    assert reseeds_on_start(url, {"cs101": "teacher"})
    assert not reseeds_on_start(url, {"cs102": "student", "cs103": "student"})  # manual, default
    assert not reseeds_on_start(url, {})  # in no course
    assert not reseeds_on_start(url, {"cs999": "student"})  # a course that is gone

    # where the answer is no, resolve (what the skip replaces) would not seed either
    with store.readers(sessions)() as session:
        bob = store.courses_of(session, "bob")
    assert bob == {"cs102": "student", "cs103": "student"}
    assert resolve(url, "bob", False, None, courses=bob) is None
