"""The outside attack run's findings, replayed as the attacks against a real hub (issue 12).

Each test sends the request a malicious teacher, student or narrowed token sent, asserts the
refusal, and then asserts that nothing changed: no membership, no hub role, no audit row, no
server restarted. The rules are docs/admins/security.md, "Security model".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from hub_ext import store
from hub_ext.store.models import AuditLog
from tests.hubproc import HubSession, api, hub_with_config, start_server

pytestmark = pytest.mark.hub

C, OTHER = "cs101", "bio201"
USERS = ["t_cs", "a_cs", "s_cs", "t_bio", "s_bio", "s_new", "s_new2", "s_other"]
ROLES = {C: {"t_cs": "teacher", "a_cs": "ta", "s_cs": "student"},
         OTHER: {"t_bio": "teacher", "s_bio": "student", "s_other": "student"}}

EXTRA_CONFIG = f"""
c.DemoAuthenticator.accounts = ["admin", "teacher1", "ta1", "student1", "student2", *{USERS!r}]
"""


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = hub_with_config(hub_root, "attacks", EXTRA_CONFIG)
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str]:
    admin = HubSession(hub, "admin")
    tokens = {"admin": admin.new_token(),
              # the run's "narrowed token": a hub admin's token that may only reach classhub
              "narrow": admin.new_token(scopes=["access:services!service=classhub"])}
    for course, members in ROLES.items():
        assert api(hub, "POST", "courses", tokens["admin"], json={"name": course}).status_code == 201
        add = [{"username": u, "role": r} for u, r in members.items()]
        r = api(hub, "PUT", f"courses/{course}/members", tokens["admin"], json={"add": add})
        assert r.status_code == 200 and r.json()["added"] == sorted(members), r.text
    for user in USERS:
        tokens[user] = HubSession(hub, user).new_token()
    return tokens


def members(hub, tokens, course=C) -> dict[str, str]:
    r = api(hub, "GET", f"courses/{course}/members", tokens["admin"])
    return {m["username"]: m["role"] for m in r.json()}


def hub_scopes(hub, token) -> set[str]:
    """What the hub itself lets `token` do now."""
    r = requests.get(f"{hub.url}/hub/api/user", headers={"Authorization": f"token {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return set(r.json()["scopes"])


def audit(hub) -> list[tuple[str, str, dict]]:
    sessions = store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}")
    with sessions() as session:
        return [(e.actor, e.action, dict(e.details)) for e in session.query(AuditLog).order_by(AuditLog.id)]


def servers_of(name: str) -> set[str]:
    """The server scopes of a hub scope set that name `name`."""
    return {f"admin:servers!user={name}", f"servers!user={name}", f"access:servers!user={name}"}


# -- 1. enrolment escalation -----------------------------------------------------------------------

def test_a_teacher_cannot_enrol_the_hub_admin(hub, tokens):
    before, log = members(hub, tokens), len(audit(hub))
    r = api(hub, "PUT", f"courses/{C}/members", tokens["t_cs"],
            json={"add": [{"username": "admin", "role": "student"}]})
    assert r.status_code == 403 and "hub admin" in r.json()["message"], r.text
    # nor through a roster
    r = api(hub, "POST", f"courses/{C}/roster", tokens["t_cs"], data=b"username,role\nadmin,student\n")
    assert r.status_code == 200, r.text
    assert [(e["line"], e["code"]) for e in r.json()["errors"]] == [(2, "hub-admin")]
    assert r.json()["added"] == 0 and r.json()["invited"] == []
    assert members(hub, tokens) == before and len(audit(hub)) == log
    group = HubSession(hub, "admin").hub_api("GET", f"groups/{C}").json()
    assert "admin" not in group["users"]
    assert not hub_scopes(hub, tokens["t_cs"]) & servers_of("admin")


def test_no_course_role_reaches_a_hub_admins_server_even_when_an_admin_enrols_one(hub, tokens):
    r = api(hub, "PUT", f"courses/{C}/members", tokens["admin"],
            json={"add": [{"username": "admin", "role": "student"}]})
    assert r.status_code == 200 and r.json()["added"] == ["admin"], r.text
    try:
        assert not hub_scopes(hub, tokens["t_cs"]) & servers_of("admin")
        assert not hub_scopes(hub, tokens["a_cs"]) & servers_of("admin")
        assert "access:servers!user=s_cs" in hub_scopes(hub, tokens["a_cs"])  # the role is there
    finally:
        assert api(hub, "PUT", f"courses/{C}/members", tokens["admin"],
                   json={"remove": ["admin"]}).status_code == 200


def test_a_student_of_another_course_is_invited_and_joins_only_by_accepting(hub, tokens):
    t = tokens["t_cs"]
    r = api(hub, "PUT", f"courses/{C}/members", t, json={"add": ["s_bio", "s_new"]})
    assert r.status_code == 200, r.text
    assert r.json()["invited"] == ["s_bio"] and r.json()["added"] == ["s_new"]
    assert "s_bio" not in members(hub, tokens) and members(hub, tokens)["s_new"] == "student"
    # the teacher holds no power over the invited student's server; the new one is reachable at once
    assert "admin:servers!user=s_bio" not in hub_scopes(hub, t)
    assert "admin:servers!user=s_new" in hub_scopes(hub, t)
    # the course's staff see the invitation; the student sees it, on the API and on the home page
    pending = api(hub, "GET", f"courses/{C}/invitations", t).json()["invitations"]
    assert [(i["username"], i["role"], i["invited_by"]) for i in pending] == [("s_bio", "student", "t_cs")]
    mine = api(hub, "GET", "invitations", tokens["s_bio"]).json()["invitations"]
    assert [i["course"] for i in mine] == [C]
    page = HubSession(hub, "s_bio").get("/services/classhub/", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "invites you as" in page.text and "Accept" in page.text
    # nobody else answers it
    assert api(hub, "POST", f"invitations/{C}", t).status_code == 404
    assert api(hub, "POST", f"invitations/{C}", tokens["s_other"]).status_code == 404
    r = api(hub, "POST", f"invitations/{C}", tokens["s_bio"])
    assert r.status_code == 200 and r.json()["answer"] == "accepted", r.text
    assert members(hub, tokens)["s_bio"] == "student"
    assert "admin:servers!user=s_bio" in hub_scopes(hub, t)  # applied without a hub restart
    # the service's own log lines reach the hub's log (not only its warnings)
    assert "members.change in cs101 by t_cs" in hub.log_path.read_text(errors="replace")
    assert api(hub, "GET", "invitations", tokens["s_bio"]).json()["invitations"] == []
    assert ("s_bio", "invitation.accept") in [(a, b) for a, b, _ in audit(hub)]


def test_an_invitation_can_be_declined_or_withdrawn(hub, tokens):
    t = tokens["t_cs"]
    r = api(hub, "POST", f"courses/{C}/roster", t, data=b"username,role\ns_other,ta\ns_new2,student\n")
    assert r.status_code == 200 and r.json()["invited"] == ["s_other"] and r.json()["added"] == 1
    r = api(hub, "DELETE", f"invitations/{C}", tokens["s_other"])
    assert r.status_code == 200 and r.json()["answer"] == "declined"
    assert "s_other" not in members(hub, tokens)
    assert api(hub, "PUT", f"courses/{C}/members", t, json={"add": [{"username": "s_other"}]}
               ).json()["invited"] == ["s_other"]
    r = api(hub, "PUT", f"courses/{C}/members", t, json={"remove": ["s_other"]})
    assert r.status_code == 200 and r.json()["withdrawn"] == ["s_other"]
    assert api(hub, "GET", "invitations", tokens["s_other"]).json()["invitations"] == []
    assert api(hub, "POST", f"invitations/{C}", tokens["s_other"]).status_code == 404


def test_a_removed_ta_loses_access_to_the_students_server_at_once(hub, tokens):
    start_server(hub, "s_cs", tokens["s_cs"])
    contents = f"{hub.url}/user/s_cs/api/contents/"
    ta = {"Authorization": f"token {tokens['a_cs']}"}
    assert requests.get(contents, headers=ta, timeout=30).status_code == 200
    r = api(hub, "PUT", f"courses/{C}/members", tokens["t_cs"], json={"remove": ["a_cs"]})
    assert r.status_code == 200 and r.json()["removed"] == ["a_cs"]
    assert "access:servers!user=s_cs" not in hub_scopes(hub, tokens["a_cs"])
    assert requests.get(contents, headers=ta, timeout=30).status_code == 403  # no hub restart
    r = api(hub, "PUT", f"courses/{C}/members", tokens["t_cs"], json={"add": [{"username": "a_cs",
                                                                            "role": "ta"}]})
    assert r.status_code == 200 and r.json()["added"] == ["a_cs"]
    assert requests.get(contents, headers=ta, timeout=30).status_code == 200


# -- 2. confused deputy ----------------------------------------------------------------------------

def test_a_narrowed_admin_token_cannot_use_classhub_as_a_deputy(hub, tokens):
    narrow = tokens["narrow"]
    admin = HubSession(hub, "admin")
    server = admin.hub_api("GET", "users/s_cs").json()["servers"].get("") or start_server(
        hub, "s_cs", tokens["s_cs"])
    # the hub refuses this token ...
    r = requests.delete(f"{hub.url}/hub/api/users/s_cs/server", timeout=30,
                        headers={"Authorization": f"token {narrow}"})
    assert r.status_code == 403
    r = requests.post(f"{hub.url}/hub/api/groups/deputy", timeout=30,
                      headers={"Authorization": f"token {narrow}"})
    assert r.status_code == 403
    # ... and so does classhub, for the same actions
    r = api(hub, "PUT", "users/s_cs/server/profile", narrow, json={"profile": "cpu"})
    assert r.status_code == 403 and "servers!user=s_cs" in r.json()["message"], r.text
    r = api(hub, "POST", "courses", narrow, json={"name": "deputy"})
    assert r.status_code == 403 and "admin:groups" in r.json()["message"]
    r = api(hub, "PUT", f"courses/{C}/members", narrow, json={"add": ["deputy-user"]})
    assert r.status_code == 403
    r = api(hub, "DELETE", f"courses/{OTHER}", narrow)
    assert r.status_code == 403
    # nothing changed: the server was not restarted, no group, no course, no member
    after = admin.hub_api("GET", "users/s_cs").json()["servers"][""]
    assert after["started"] == server["started"] and after["ready"]
    assert admin.hub_api("GET", "groups/deputy").status_code == 404
    names = [c["name"] for c in api(hub, "GET", "courses", tokens["admin"]).json()]
    assert "deputy" not in names and OTHER in names
    assert "deputy-user" not in members(hub, tokens)
    # classhub's own data is not a hub action: the narrowed admin token still reads usage
    assert api(hub, "GET", "usage", narrow).status_code == 200


# -- 3. forged audit entries -----------------------------------------------------------------------

def test_a_user_cannot_forge_a_share_access_report(hub, tokens):
    log = [e for e in audit(hub) if e[1] == "share_accessed"]
    attacks = [
        {"viewer": "admin", "server": ""},  # the run's request: a name in the body
        {"viewer_token": tokens["admin"], "server": ""},  # a real token, but sent by a user
        {"viewer_token": "not-a-token", "server": ""},
    ]
    for body in attacks:
        r = api(hub, "POST", "shares/accessed", tokens["s_cs"], json=body)
        assert r.status_code in (400, 403), (body, r.text)
        assert r.json()["message"]
    assert [e for e in audit(hub) if e[1] == "share_accessed"] == log


@pytest.mark.parametrize("method,path", [
    ("PUT", "course-roles"), ("GET", "profiles/s_cs"), ("GET", "home/s_cs")])
def test_only_the_classhub_service_calls_its_hub_endpoints(hub, tokens, method, path):
    """The hub-side endpoints classhub adds (course roles, a user's profile catalog, a user's
    home volume) answer the classhub service only: a hub admin, a teacher and a student get 403
    with the sentence."""
    for who in ("admin", "t_cs", "s_cs"):
        r = requests.request(method, f"{hub.url}/hub/api/classhub/{path}", json={"courses": {}},
                             headers={"Authorization": f"token {tokens[who]}"}, timeout=30)
        assert r.status_code == 403, (who, r.status_code, r.text)
        assert "Only the classhub service" in r.json()["message"], r.text
