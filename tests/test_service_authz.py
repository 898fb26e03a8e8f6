"""Who may call which classhub endpoint, through a real hub: every endpoint x every kind of caller.

Callers: anonymous, a student, a student of another course, a TA, a teacher of this course, a
teacher of another course, a hub admin, a hub service's token (with access to classhub and
read:metrics), an admin's token limited to a scope that does not include classhub access, and an
admin's token narrowed to classhub access only ("narrow": it reads classhub's data like an admin,
but classhub does nothing on the hub for it that the hub would refuse it).
The expected table is written out here, independently of hub_ext.core.authz.
"""

from __future__ import annotations

import secrets

import pytest
import requests

from tests.hubproc import HubSession, api, hub_with_config

pytestmark = pytest.mark.hub

SERVICE_TOKEN = secrets.token_hex(16)
C, OTHER = "cs101", "bio201"
USERS = ["t_cs", "a_cs", "s_cs", "t_bio", "s_bio"]
ROLES = {C: {"t_cs": "teacher", "a_cs": "ta", "s_cs": "student"},
         OTHER: {"t_bio": "teacher", "s_bio": "student"}}
CALLERS = ["anon", "s_cs", "s_bio", "a_cs", "t_cs", "t_bio", "admin", "svc", "limited", "narrow"]

EXTRA_CONFIG = f"""
c.DemoAuthenticator.accounts = ["admin", "teacher1", "ta1", "student1", "student2", *{USERS!r}]
c.JupyterHub.services.append({{"name": "grader", "api_token": {SERVICE_TOKEN!r}}})
c.JupyterHub.load_roles.append({{
    "name": "grader",
    "scopes": ["access:services!service=classhub", "read:metrics"],
    "services": ["grader"],
}})
"""


@pytest.fixture(scope="module")
def hub(hub_root):
    hub = hub_with_config(hub_root, "authz", EXTRA_CONFIG)  # the test accounts and a hub service
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str | None]:
    """A token per caller; the two courses are created and filled through the API by the admin."""
    admin = HubSession(hub, "admin")
    tokens: dict[str, str | None] = {"anon": None, "admin": admin.new_token(), "svc": SERVICE_TOKEN,
                                     "limited": admin.new_token(scopes=["read:hub"]),
                                     "narrow": admin.new_token(scopes=["access:services!service=classhub"])}
    for course, members in ROLES.items():
        r = api(hub, "POST", "courses", tokens["admin"], json={"name": course})
        assert r.status_code == 201, r.text
        add = [{"username": u, "role": role} for u, role in members.items()]
        r = api(hub, "PUT", f"courses/{course}/members", tokens["admin"], json={"add": add})
        assert r.status_code == 200, r.text
    for user in USERS:
        tokens[user] = HubSession(hub, user).new_token()
    return tokens


ALL = set(CALLERS)
AUTHENTICATED = ALL - {"anon", "limited"}
USERS_ONLY = AUTHENTICATED - {"svc"}
MEMBERS = {"admin", "narrow", "t_cs", "a_cs", "s_cs"}
STAFF = {"admin", "narrow", "t_cs", "a_cs"}
TEACHERS = {"admin", "t_cs"}
ADMIN = {"admin"}
#: admins' powers that are classhub's own data: the narrowed admin token keeps them
ADMIN_DATA = {"admin", "narrow"}

# (method, path, request kwargs, callers that succeed, status on success)
# Everyone else gets 401 when anonymous and 403 otherwise. Paths may use {who}.
MATRIX = [
    ("GET", "health", {}, ALL, 200),
    ("GET", "openapi.json", {}, ALL, 200),
    ("GET", "me", {}, AUTHENTICATED, 200),
    ("GET", "courses", {}, AUTHENTICATED, 200),
    ("POST", "courses", {"json": {"name": "tmp-{who}"}}, ADMIN, 201),
    ("GET", f"courses/{C}", {}, MEMBERS, 200),
    ("GET", f"courses/{C}/members", {}, STAFF, 200),
    ("PUT", f"courses/{C}/members", {"json": {"add": [{"username": "newbie", "role": "student"}]}},
     TEACHERS, 200),
    ("POST", f"courses/{C}/roster", {"data": b"username,role\nnewbie2,student\n"}, TEACHERS, 200),
    ("GET", f"courses/{C}/quota", {}, MEMBERS, 200),
    ("PUT", f"courses/{C}/quota", {"json": {"resources": {"nvidia.com/gpu": 4}, "servers": 10}},
     ADMIN_DATA, 200),
    ("GET", f"courses/{C}/quota/users/s_cs", {}, TEACHERS | {"s_cs", "narrow"}, 200),
    ("PUT", f"courses/{C}/quota/users/s_cs", {"json": {"resources": {"nvidia.com/gpu": 1}}},
     TEACHERS | {"narrow"}, 200),
    ("GET", f"courses/{C}/usage", {}, STAFF, 200),
    ("GET", "usage/me", {}, USERS_ONLY, 200),
    ("GET", "usage", {}, ADMIN_DATA, 200),
    # authorized callers get past the check and then trip over the (deliberately) invalid body
    ("PUT", "users/s_cs/server/profile", {"data": b"not json"}, {"admin", "s_cs"}, 400),
    ("DELETE", "courses/{who}-target", {}, ADMIN, 204),
]


def _path(path: str, who: str) -> str:
    if path == "courses/{who}-target":  # admins delete their own scratch course; others try C
        return f"courses/tmp-{who}" if who == "admin" else f"courses/{C}"
    return path.format(who=who)


def test_authorization_matrix(hub, tokens):
    wrong = []
    for method, path, kwargs, allowed, ok in MATRIX:
        for who in CALLERS:
            kw = {k: (v if k != "json" else _fill(v, who)) for k, v in kwargs.items()}
            r = api(hub, method, _path(path, who), tokens[who], **kw)
            expected = ok if who in allowed else (401 if who == "anon" else 403)
            if r.status_code != expected:
                wrong.append(f"{method} {_path(path, who)} as {who}: {r.status_code} "
                             f"(expected {expected}) {r.text[:200]}")
            elif r.status_code >= 400:
                assert r.json()["message"], (method, path, who)
    assert not wrong, "\n".join(wrong)
    # the refused deletion really deleted nothing
    assert api(hub, "GET", f"courses/{C}", tokens["admin"]).status_code == 200


def _fill(value, who: str):
    if isinstance(value, dict):
        return {k: _fill(v, who) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, who) for v in value]
    return value.format(who=who) if isinstance(value, str) else value


METRICS_ALLOWED = {"admin", "svc"}


def test_metrics_need_an_admin_or_read_metrics(hub, tokens):
    wrong = []
    for who in CALLERS:
        headers = {"Authorization": f"token {tokens[who]}"} if tokens[who] else {}
        r = requests.get(f"{hub.url}/services/classhub/metrics", headers=headers, timeout=30)
        expected = 200 if who in METRICS_ALLOWED else (401 if who == "anon" else 403)
        if r.status_code != expected:
            wrong.append(f"{who}: {r.status_code} (expected {expected}) {r.text[:200]}")
        elif expected == 200:
            assert "# TYPE classhub_quota gauge" in r.text
    assert not wrong, "\n".join(wrong)


def test_listing_shows_each_caller_their_own_courses(hub, tokens):
    def names(who):
        return [c["name"] for c in api(hub, "GET", "courses", tokens[who]).json()]

    assert {C, OTHER} <= set(names("admin"))
    assert names("s_cs") == [C]
    assert names("t_bio") == [OTHER]
    assert names("svc") == []


def test_me_takes_course_roles_from_the_store(hub, tokens):
    me = api(hub, "GET", "me", tokens["a_cs"]).json()
    assert me == {"name": "a_cs", "kind": "user", "admin": False, "groups": [C], "role": "ta",
                  "courses": {C: "ta"}}
    svc = api(hub, "GET", "me", tokens["svc"]).json()
    assert svc["kind"] == "service" and svc["courses"] == {} and svc["admin"] is False


def test_teacher_cannot_exceed_the_ceiling_or_touch_another_course(hub, tokens):
    t = tokens["t_cs"]
    r = api(hub, "PUT", f"courses/{C}/quota", tokens["admin"],
            json={"resources": {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.18gb": 14}})
    assert r.status_code == 200
    # raising the course's own ceiling is an admin's call
    r = api(hub, "PUT", f"courses/{C}/quota", t, json={"resources": {"nvidia.com/gpu": 8}})
    assert r.status_code == 403 and "hub admins" in r.json()["message"]
    # a student's limit above the ceiling names the resource that exceeds
    r = api(hub, "PUT", f"courses/{C}/quota/users/s_cs", t,
            json={"resources": {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.18gb": 15}})
    assert r.status_code == 400
    assert "nvidia.com/mig-1g.18gb" in r.json()["message"]
    assert "nvidia.com/gpu per student" not in r.json()["message"]  # 2 of 4 GPUs is fine
    r = api(hub, "GET", f"courses/{C}/quota/users/s_cs", t)
    assert r.json()["resources"] == {"nvidia.com/gpu": "1"}  # unchanged by the refusal
    # another course is off limits, whatever the call
    for method, path, body in [
        ("PUT", f"courses/{OTHER}/members", {"add": [{"username": "s_cs"}]}),
        ("PUT", f"courses/{OTHER}/quota/users/s_bio", {"resources": {"cpu": "1"}}),
        ("PUT", f"courses/{OTHER}/quota", {"servers": 1}),
        ("GET", f"courses/{OTHER}/members", None),
        ("DELETE", f"courses/{OTHER}", None),
    ]:
        r = api(hub, method, path, t, json=body)
        assert r.status_code == 403, (method, path, r.text)
        assert f"not a member of {OTHER}" in r.json()["message"]


def test_teacher_manages_students_and_tas_but_not_teachers(hub, tokens):
    t = tokens["t_cs"]

    def put(body, token=t):
        return api(hub, "PUT", f"courses/{C}/members", token, json=body)

    r = put({"add": [{"username": "t_cs2", "role": "teacher"}]})
    assert r.status_code == 403 and "Only hub admins can make someone a teacher" in r.json()["message"]
    assert put({"add": [{"username": "t_cs", "role": "student"}]}).status_code == 403  # no self-demotion
    r = put({"add": [{"username": "helper", "role": "ta"}, {"username": "a_cs", "role": "student"}]})
    assert r.status_code == 200, r.text
    assert r.json()["added"] == ["helper"] and r.json()["changed"] == ["a_cs"]
    assert put({"add": [{"username": "a_cs", "role": "ta"}], "remove": ["helper"]}).status_code == 200
    # only an admin makes or removes a teacher; all-or-nothing: the student in the same call stays out
    r = put({"add": [{"username": "late", "role": "student"}], "remove": ["t_cs"]})
    assert r.status_code == 403
    members = {m["username"]: m["role"] for m in api(hub, "GET", f"courses/{C}/members", t).json()}
    assert "late" not in members and members["t_cs"] == "teacher" and members["a_cs"] == "ta"
    r = put({"add": [{"username": "t_cs2", "role": "teacher"}]}, tokens["admin"])
    assert r.status_code == 200
    admin = HubSession(hub, "admin")
    group = admin.hub_api("GET", f"groups/{C}").json()
    assert "t_cs2" in group["users"] and "helper" not in group["users"]


def test_admin_browser_login_is_admin_in_classhub(hub, tokens):
    # The OAuth cookie of the service carries no admin scopes; the hub's admin flag decides.
    admin = HubSession(hub, "admin")
    r = admin.get("/services/classhub/api/usage", headers={"Accept": "text/html"})
    assert r.status_code == 200, r.text
    assert C in r.json()["courses"]
    student = HubSession(hub, "s_cs")
    r = student.get("/services/classhub/api/usage", headers={"Accept": "text/html"})
    assert r.status_code == 403
