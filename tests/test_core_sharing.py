"""Share enforcement decisions (hub_ext.core.sharing) from plain data: every level x action x resource.

The same rules are checked through a real hub and real single-user servers in
tests/test_sharing_hub.py; this file covers every combination and the path corner cases.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.core import sharing
from hub_ext.core.sharing import (
    EDIT,
    NONE,
    OWNER,
    READ_ONLY,
    Grant,
    Request,
    decide,
    grant_from_scopes,
    normalise_path,
    request_path,
    share_scopes,
    with_paths,
)

pytestmark = pytest.mark.unit

OWN, S = "student1", ""
RESOURCES = ["contents", "files", "kernels", "sessions", "terminals", "kernelspecs", "config", "api",
             "events", "nbconvert", "lab", "server"]
METHODS = {"read": ["GET", "HEAD"], "write": ["PUT", "POST", "PATCH", "DELETE"], "execute": ["GET"]}


def test_owner_and_strangers() -> None:
    assert grant_from_scopes([], OWN, S, caller=OWN) == Grant(OWNER)
    assert grant_from_scopes(["access:servers!server=student1/"], OWN, S, caller=OWN) == Grant(OWNER)
    # a service named like the owner is not the owner
    assert grant_from_scopes([], OWN, S, caller=OWN, caller_kind="service").level == NONE
    assert grant_from_scopes(["read:users"], OWN, S, caller="x").level == NONE
    assert grant_from_scopes(["access:servers!server=student2/"], OWN, S, caller="x").level == NONE
    assert grant_from_scopes(["access:servers!server=student1/other"], OWN, S, caller="x").level == NONE
    # !group= filters cannot be resolved in a server: no access from them
    assert grant_from_scopes(["access:servers!group=cs101"], OWN, S, caller="x").level == NONE
    # classhub scopes without access grant nothing
    assert grant_from_scopes([f"{sharing.EDIT_SCOPE}!server=student1/"], OWN, S, caller="x").level == NONE


@pytest.mark.parametrize("kind", [READ_ONLY, EDIT])
@pytest.mark.parametrize("one_path", [False, True])
def test_share_scopes_round_trip(kind: str, one_path: bool) -> None:
    scopes = share_scopes(kind, OWN, S, one_path)
    assert all(s.endswith("!server=student1/") for s in scopes)
    grant = grant_from_scopes(scopes, OWN, S, caller="ta1")
    assert grant.level == kind
    assert (grant.paths is not None) is one_path
    assert sharing.kind_of_scopes(scopes) == (kind, one_path)
    # the same share on another server grants nothing here
    assert grant_from_scopes(share_scopes(kind, "student2"), OWN, S, caller="ta1").level == NONE


def test_broad_access_is_editable_and_not_path_limited() -> None:
    for scope in ("access:servers", "access:servers!user=student1"):
        grant = grant_from_scopes([scope, *share_scopes(READ_ONLY, OWN, S, True)], OWN, S, caller="ta1")
        assert grant == Grant(EDIT)


def test_bare_hub_share_is_read_only() -> None:
    """A share made without classhub's scopes (say through the hub API) fails closed."""
    assert grant_from_scopes(["access:servers!server=student1/"], OWN, S, caller="x") == Grant(READ_ONLY)


def test_editable_wins_over_read_only_for_the_same_server() -> None:
    scopes = share_scopes(READ_ONLY, OWN, S) + share_scopes(EDIT, OWN, S)
    assert grant_from_scopes(scopes, OWN, S, caller="x").level == EDIT


def _expected(level: str, action: str, resource: str) -> bool:
    if level in (OWNER, EDIT):
        return True
    if level == NONE or resource == "terminals":
        return False
    if action == "read":
        return True
    return action == "execute" and resource == "events"


@pytest.mark.parametrize("level", [OWNER, EDIT, READ_ONLY, NONE])
@pytest.mark.parametrize("action", ["read", "write", "execute"])
@pytest.mark.parametrize("resource", RESOURCES)
def test_table(level: str, action: str, resource: str) -> None:
    for method in METHODS[action]:
        verdict = decide(Grant(level), Request(action, resource, method, "a.ipynb"))
        assert bool(verdict) is _expected(level, action, resource), (method, verdict.message)
        if not verdict:
            assert verdict.message.endswith(".")


def test_read_only_messages_say_what_to_do() -> None:
    v = decide(Grant(READ_ONLY), Request("write", "contents", "PUT", "a.ipynb"))
    assert "read-only" in v.message and "editable share" in v.message
    assert "run code" in decide(Grant(READ_ONLY), Request("execute", "kernels")).message
    assert "terminals" in decide(Grant(READ_ONLY), Request("read", "terminals")).message


def test_unknown_action_is_refused() -> None:
    assert not decide(Grant(OWNER), Request("fly", "contents"))


ONE = frozenset({"lecture/week1.ipynb"})


@pytest.mark.parametrize("level", [READ_ONLY, EDIT])
def test_one_path(level: str) -> None:
    grant = Grant(level, ONE)
    ok = Request("read", "contents", "GET", "lecture/week1.ipynb")
    assert decide(grant, ok)
    assert decide(grant, Request("read", "files", "GET", "lecture/week1.ipynb"))
    for other in ("lecture/week2.ipynb", "lecture", "", "week1.ipynb", None):
        assert not decide(grant, Request("read", "contents", "GET", other))
        assert not decide(grant, Request("read", "files", "GET", other))
    assert decide(grant, Request("read", "kernelspecs"))
    assert not decide(grant, Request("read", "terminals"))
    assert not decide(grant, Request("execute", "terminals"))
    save = decide(grant, Request("write", "contents", "PUT", "lecture/week1.ipynb"))
    assert bool(save) is (level == EDIT)
    for method in ("PATCH", "POST", "DELETE"):
        assert not decide(grant, Request("write", "contents", method, "lecture/week1.ipynb"))
        # its checkpoints (JupyterLab makes one on save) follow the file's own rights
        cp = decide(grant, Request("write", "contents", method, "lecture/week1.ipynb", checkpoint=True))
        assert bool(cp) is (level == EDIT)
    assert sharing.is_checkpoint_url("contents", "api/contents/lecture/week1.ipynb/checkpoints")
    assert sharing.is_checkpoint_url("contents", "api/contents/a.ipynb/checkpoints/checkpoint")
    assert not sharing.is_checkpoint_url("contents", "api/contents/checkpoints/a.ipynb")
    assert not sharing.is_checkpoint_url("files", "files/a/checkpoints")
    run = decide(grant, Request("execute", "kernels"))
    assert bool(run) is (level == EDIT)
    assert bool(decide(grant, Request("read", "sessions"))) is (level == EDIT)
    assert not decide(grant, Request("write", "config", "PATCH"))
    assert "lecture/week1.ipynb" in decide(grant, Request("read", "contents", "GET", "x")).message


def test_with_paths_only_limits_one_path_grants() -> None:
    assert with_paths(Grant(EDIT), ONE) == Grant(EDIT)
    assert with_paths(Grant(READ_ONLY, frozenset()), ONE) == Grant(READ_ONLY, ONE)
    assert not decide(Grant(READ_ONLY, frozenset()), Request("read", "contents", "GET", "a"))


@pytest.mark.parametrize("raw,expected", [
    ("a/b.ipynb", "a/b.ipynb"),
    ("/a//./b.ipynb/", "a/b.ipynb"),
    ("a%2Fb%20c.ipynb", "a/b c.ipynb"),
    ("", ""),
    ("caf%C3%A9.ipynb", "café.ipynb"),
    ("%252e%252e/x", "%2e%2e/x"),  # decoded once, like jupyter-server: a literal file name
])
def test_normalise(raw: str, expected: str) -> None:
    assert normalise_path(raw) == expected


@pytest.mark.parametrize("raw", ["../x", "a/../../x", "%2e%2e/x", "a/%2E%2E/b", "~/x", "a\\..\\b",
                                 "a\x00b", "..", "a/.."])
def test_normalise_refuses(raw: str) -> None:
    with pytest.raises(ValueError, match="path"):
        normalise_path(raw)


@pytest.mark.parametrize("resource,url,expected", [
    ("contents", "api/contents", ""),
    ("contents", "api/contents/a/b.ipynb", "a/b.ipynb"),
    ("contents", "api/contents/a/b.ipynb/checkpoints", "a/b.ipynb"),
    ("contents", "api/contents/a/b.ipynb/checkpoints/checkpoint", "a/b.ipynb"),
    ("contents", "api/contents/checkpoints/a.ipynb", "checkpoints/a.ipynb"),  # a folder named so
    ("files", "files/a%20b.txt", "a b.txt"),
    ("nbconvert", "nbconvert/html/a/b.ipynb", "a/b.ipynb"),
    ("view", "view/x.pdf", "x.pdf"),
    ("kernels", "api/kernels", None),
    ("contents", "lab/tree/x", None),
])
def test_request_path(resource: str, url: str, expected: str | None) -> None:
    assert request_path(resource, url) == expected


def test_request_path_refuses_escape() -> None:
    with pytest.raises(ValueError):
        request_path("contents", "api/contents/a/%2e%2e/%2e%2e/etc/passwd")


def test_share_scopes_refuse_unknown_kind() -> None:
    with pytest.raises(ValueError, match="read-only"):
        share_scopes("admin", OWN)


segment = st.text(alphabet=st.sampled_from(list("ab.%2eE/~\\")), max_size=12)


@given(raw=segment)
def test_normalised_paths_never_leave_the_root(raw: str) -> None:
    try:
        path = normalise_path(raw)
    except ValueError:
        return
    assert ".." not in path.split("/")
    assert not path.startswith("/") and "//" not in path


scope_names = st.sampled_from(["access:servers", sharing.EDIT_SCOPE, sharing.READ_ONLY_SCOPE,
                               sharing.ONE_PATH_SCOPE, "read:users"])
filters = st.sampled_from(["", "!server=student1/", "!server=student2/", "!user=student1",
                           "!user=student2", "!group=cs101", "!server=student1/other"])


@given(scopes=st.lists(st.tuples(scope_names, filters).map("".join), max_size=6),
       action=st.sampled_from(["read", "write", "execute"]),
       resource=st.sampled_from(RESOURCES),
       path=st.sampled_from(["lecture/week1.ipynb", "secret.txt", "", None]))
def test_property_no_scope_gives_more_than_it_says(scopes: list[str], action: str, resource: str,
                                                   path: str | None) -> None:
    grant = with_paths(grant_from_scopes(scopes, OWN, S, caller="viewer"), ONE)
    verdict = decide(grant, Request(action, resource, {"read": "GET", "execute": "GET"}.get(action, "PUT"),
                                    path))
    # Nothing at all without access to this server.
    if not any(s in ("access:servers", "access:servers!server=student1/", "access:servers!user=student1")
               for s in scopes):
        assert not verdict
    # A read-only grant never writes, runs code or opens terminals.
    if grant.level == READ_ONLY and (action == "write" or resource == "terminals"
                                     or (action == "execute" and resource != "events")):
        assert not verdict
    # A path-limited grant never reaches another file.
    if grant.paths is not None and resource in sharing.PATH_RESOURCES and path not in ONE:
        assert not verdict


# -- share requests ----------------------------------------------------------------------------------

def test_parse_share_request_defaults_and_fields() -> None:
    spec = sharing.parse_share_request({"user": "ta1"}, "student1")
    assert spec == sharing.ShareSpec("student1", "", READ_ONLY, "user", "ta1", None, None, False)
    spec = sharing.parse_share_request({"kind": "edit", "group": "cs101", "minutes": 90, "auto_start": True,
                                        "path": "/lecture//week1.ipynb", "server": "gpu"}, "teacher1")
    got = (spec.kind, spec.target_kind, spec.target, spec.seconds, spec.path, spec.server, spec.auto_start)
    assert got == (EDIT, "group", "cs101", 5400, "lecture/week1.ipynb", "gpu", True)
    link = sharing.parse_share_request({"link": True, "expires_in": 30}, "s")
    assert (link.target_kind, link.target, link.seconds) == ("link", "", 30)


@pytest.mark.parametrize("body,needle", [
    ([], "JSON object"),
    ({"user": "a", "colour": "red"}, "Unknown field"),
    ({"kind": "admin", "user": "a"}, "kind"),
    ({}, "exactly one"),
    ({"user": "a", "group": "g"}, "exactly one"),
    ({"user": "a", "link": True}, "exactly one"),
    ({"user": 5}, "name"),
    ({"user": "a", "path": "../x"}, "path"),
    ({"user": "a", "path": "/"}, "whole server"),
    ({"user": "a", "minutes": 0}, "minutes"),
    ({"user": "a", "minutes": True}, "minutes"),
    ({"user": "a", "minutes": 1.5}, "minutes"),
    ({"user": "a", "expires_in": 1}, "expires_in"),
    ({"user": "a", "minutes": 1, "expires_in": 60}, "either"),
    ({"link": True}, "must expire"),
    ({"user": "a", "auto_start": "yes"}, "auto_start"),
    ({"user": "a", "owner": 3}, "names"),
    ({"user": "a", "owner": ""}, "leave it out for your own server"),  # was a 500 (scope "shares!user=")
    ({"user": "a", "owner": "x" * 256}, "at most 255"),
    ({"user": "me"}, "owner"),
])
def test_parse_share_request_refusals_say_what_to_change(body: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        sharing.parse_share_request(body, "me")


def test_only_owner_or_admin_shares() -> None:
    assert sharing.may_share("student1", False, "student1")
    assert sharing.may_share("admin", True, "student1")
    verdict = sharing.may_share("student2", False, "student1")
    assert not verdict and "Only student1" in verdict.message


@pytest.mark.parametrize(("method", "url", "expected"), [
    ("GET", "api/kernels", (sharing.EMPTY_LIST, "read", "kernels")),
    ("GET", "api/sessions/", (sharing.EMPTY_LIST, "read", "sessions")),
    ("GET", "api/terminals", (sharing.EMPTY_LIST, "read", "terminals")),
    ("PUT", "lab/api/workspaces/default", (sharing.NOT_KEPT, "write", "lab")),
    ("GET", "api/contents", (sharing.SHARED_ONLY, "read", "contents")),
    ("GET", "api/contents/lab1", (sharing.SHARED_ONLY, "read", "contents")),
    # everything else keeps its answer (a refusal stays a refusal)
    ("POST", "api/sessions", None),
    ("GET", "api/kernels/abc", None),
    ("DELETE", "api/kernels/abc", None),
    ("PUT", "api/contents/week1.ipynb", None),
    ("GET", "api/contents/week1.ipynb/checkpoints", None),
    ("PUT", "lab/api/settings/@jupyterlab/apputils-extension:themes", None),
    ("GET", "files/secret.txt", None),
])
def test_jupyterlab_background_requests_are_known(method: str, url: str, expected: object) -> None:
    """The requests JupyterLab repeats on its own, answered as it expects when refused."""
    assert sharing.background_request(method, url, READ_ONLY) == expected
    assert sharing.background_request(method, url, EDIT) == expected


def test_a_revoked_viewer_keeps_the_refusals() -> None:
    """Someone whose share ended is refused, so their JupyterLab learns it."""
    for level in (NONE, OWNER):
        assert sharing.background_request("GET", "api/kernels", level) is None
        assert sharing.background_request("PUT", "lab/api/workspaces/default", level) is None


def test_a_folder_lists_only_shared_entries_and_the_folders_leading_to_them() -> None:
    paths = {"week1.ipynb", "lab1/part/a.ipynb", "lab1/b.ipynb"}
    assert sharing.shared_children(paths, "") == ("lab1", "week1.ipynb")
    assert sharing.shared_children(paths, "lab1") == ("lab1/b.ipynb", "lab1/part")
    assert sharing.shared_children(paths, "lab1/part") == ("lab1/part/a.ipynb",)
    # not above a shared file: nothing (the request keeps its refusal)
    assert sharing.shared_children(paths, "other") == ()
    assert sharing.shared_children(paths, "lab") == ()  # a prefix of a name is not a folder
    assert sharing.shared_children(paths, "week1.ipynb") == ()
    assert sharing.shared_children(set(), "") == ()
