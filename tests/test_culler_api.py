"""The culling API of the classhub service on the shared demo hub: who may set what, and the
sentences bad input gets back.

What a user notices: a student who can change the timeouts of their course, a teacher who cannot
reserve their exam slot, an admin whose typo is silently accepted.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hub_ext.demo import DEMO_COURSE
from tests.hubproc import HubSession, api

pytestmark = pytest.mark.hub


def token(hub, user: str) -> str:
    return HubSession(hub, user).new_token()


def test_course_policy_admins_set_members_read(demo_hub):
    hub = demo_hub
    admin, teacher, student = (token(hub, u) for u in ("admin", "teacher1", "student1"))
    course = DEMO_COURSE
    path = f"culling/courses/{course}/policy"

    r = api(hub, "PUT", path, teacher, json={"kind": "gpu", "idle_timeout": 60})
    assert r.status_code == 403 and "Only hub admins" in r.json()["message"]
    for body, words in [
        ({"kind": "tpu", "idle_timeout": 60}, "kind must be one of"),
        ({"kind": "gpu", "idle_timeout": -5}, "idle_timeout must be a number of seconds"),
        ({"kind": "gpu", "idle_timeout": "1h"}, "idle_timeout must be a number of seconds"),
        ({"kind": "gpu", "never_cull": "yes"}, "never_cull must be true"),
        ({"kind": "gpu", "idel_timeout": 60}, "The body must be like"),
        (["gpu"], "The body must be like"),
    ]:
        r = api(hub, "PUT", path, admin, json=body)
        assert r.status_code == 400 and words in r.json()["message"], (body, r.text)
    assert api(hub, "PUT", "culling/courses/no-such/policy", admin,
               json={"kind": "gpu"}).status_code == 404

    r = api(hub, "PUT", path, admin, json={"kind": "gpu", "idle_timeout": 4 * 3600, "warn_before": 900})
    assert r.status_code == 200, r.text
    got = api(hub, "GET", path, student).json()["policies"]
    assert {"kind": "gpu", "idle_timeout": 4 * 3600.0, "max_age": None, "never_cull": None,
            "warn_before": 900.0, "pressure_min_idle": None} in got
    assert api(hub, "GET", f"culling/courses/{course}/policy", token(hub, "student2")).status_code == 200
    r = api(hub, "PUT", path, admin, json={"kind": "gpu", "remove": True})
    assert [p for p in r.json()["policies"] if p["kind"] == "gpu"] == []


def test_no_cull_windows_teachers_reserve_students_see(demo_hub):
    hub = demo_hub
    teacher, student = token(hub, "teacher1"), token(hub, "student1")
    path = f"culling/courses/{DEMO_COURSE}/windows"
    start = datetime.now(timezone.utc) + timedelta(days=1)
    exam = {"start": start.isoformat(), "end": (start + timedelta(hours=3)).isoformat(), "note": "final exam"}

    assert api(hub, "POST", path, student, json=exam).status_code == 403
    for body, words in [
        ({**exam, "start": "tomorrow"}, "start must be an ISO 8601 time with a zone"),
        ({**exam, "start": "2026-12-14T09:00:00"}, "with a zone"),
        ({**exam, "end": exam["start"]}, "end must be after start"),
        ({**exam, "end": (start + timedelta(days=30)).isoformat()}, "at most 14 days"),
        ({"start": "2020-01-01T09:00:00Z", "end": "2020-01-01T10:00:00Z"}, "already over"),
        ({**exam, "room": "B12"}, "The body must be"),
    ]:
        r = api(hub, "POST", path, teacher, json=body)
        assert r.status_code == 400 and words in r.json()["message"], (body, r.text)

    r = api(hub, "POST", path, teacher, json=exam)
    assert r.status_code == 201, r.text
    window = r.json()
    assert window["note"] == "final exam" and window["created_by"] == "teacher1"
    assert window in api(hub, "GET", path, student).json()["windows"]

    assert api(hub, "DELETE", path, student, json={"id": window["id"]}).status_code == 403
    assert api(hub, "DELETE", path, teacher, json={"id": "one"}).status_code == 400
    assert api(hub, "DELETE", path, teacher, json={"id": 10**9}).status_code == 404
    assert api(hub, "DELETE", path, teacher, json={"id": window["id"]}).status_code == 204
    assert window not in api(hub, "GET", path, student).json()["windows"]


def test_persistent_marks_and_my_warnings(demo_hub):
    hub = demo_hub
    admin, student = token(hub, "admin"), token(hub, "student1")
    assert api(hub, "GET", "culling/persistent", student).status_code == 403
    for body, words in [({"user": ""}, "user must be"), ({"user": "a", "persistent": "no"}, "true or false"),
                        ({"user": "a", "server_name": 3}, "server_name must be"), ({"who": "a"}, "The body")]:
        r = api(hub, "PUT", "culling/persistent", admin, json=body)
        assert r.status_code == 400 and words in r.json()["message"], (body, r.text)
    r = api(hub, "PUT", "culling/persistent", admin, json={"user": "student1", "server_name": "demo"})
    assert r.status_code == 200 and r.json()["persistent"] is True
    listed = api(hub, "GET", "culling/persistent", admin).json()["servers"]
    assert {"user": "student1", "server_name": "demo"}.items() <= listed[0].items()
    me = api(hub, "GET", "culling/me", student).json()
    assert me == {"user": "student1", "warnings": [], "persistent": ["demo"]}
    api(hub, "PUT", "culling/persistent", admin, json={"user": "student1", "server_name": "demo",
                                                      "persistent": False})
    assert api(hub, "GET", "culling/me", student).json()["persistent"] == []
    assert api(hub, "GET", "culling/me").status_code in (401, 403)
