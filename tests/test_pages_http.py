"""The classhub pages, fetched like a browser does (hub login, then the service's OAuth), on the
demo hub: each page has the hub's nav bar and styling and links to the others, no link on any
classhub page or the hub's nav answers 404 or 500 (a crawler), and errors are pages with a way
back, not bare JSON or a bare "404: Not Found".
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from tests.hubproc import HubSession

pytestmark = pytest.mark.hub

PAGES = ["/services/classhub/", "/services/classhub/courses/demo101", "/services/classhub/templates",
         "/services/classhub/shares"]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.assets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            self.links.append(found["href"])
        if tag in ("link", "script") and (found.get("href") or found.get("src")):
            self.assets.append(found.get("href") or found.get("src") or "")


def parse(html: str) -> _Links:
    parser = _Links()
    parser.feed(html)
    return parser


def test_every_page_wears_the_hubs_nav_bar_and_links_the_others(login):
    teacher = login("teacher1")
    for path in PAGES:
        r = teacher.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:500])
        assert "text/html" in r.headers["Content-Type"]
        # the hub's page.html: its nav bar, login widget, logout and its bootstrap CSS
        assert 'class="navbar' in r.text and "teacher1" in r.text and "/hub/logout" in r.text
        assert "/hub/static/css/style.min.css" in r.text
        links = parse(r.text).links
        for other in PAGES:
            assert other in links or other.rstrip("/") in links or (
                other.endswith("/") and other in links), (path, other)
        assert "/hub/home" in links
    # the hub's own home page links classhub (JupyterHub.template_paths, set by configure())
    home = teacher.get("/hub/home")
    assert "/services/classhub/" in parse(home.text).links
    assert "/services/classhub/templates" in parse(home.text).links


def test_no_link_on_any_classhub_page_or_the_hub_nav_answers_404_or_500(login):
    """A crawler: every same-site link reachable from the classhub pages and the hub's home,
    for a teacher, a student and an admin; logout and server URLs (/user/) are not followed."""
    for name in ("teacher1", "student1", "admin"):
        session = login(name)
        seen: set[str] = set()
        queue = ["/hub/home", *PAGES]
        broken = []
        while queue:
            path = queue.pop()
            if path in seen:
                continue
            seen.add(path)
            r = session.get(path)
            if r.status_code in (404,) or r.status_code >= 500:
                broken.append((path, r.status_code))
                continue
            if "text/html" not in r.headers.get("Content-Type", ""):
                continue
            page = parse(r.text)
            for asset in page.assets:
                url = urlparse(urljoin(session.hub.url + path, asset))
                if url.netloc == urlparse(session.hub.url).netloc and url.path not in seen:
                    seen.add(url.path)
                    got = session.get(url.path)
                    if got.status_code >= 400:
                        broken.append((url.path, got.status_code))
            for href in page.links:
                url = urlparse(urldefrag(urljoin(session.hub.url + path, href))[0])
                if url.scheme not in ("http", "https") or url.netloc != urlparse(session.hub.url).netloc:
                    continue
                target = url.path + (f"?{url.query}" if url.query else "")
                if ("logout" in url.path or url.path.startswith("/user/") or url.path == "/hub/spawn"
                        or "/api/" in url.path):
                    continue
                if url.path.startswith(("/hub/", "/services/classhub/")):
                    queue.append(target)
        assert not broken, f"{name}: {broken}"
        assert len(seen) >= 8, seen


def test_a_course_page_a_student_may_not_see_is_a_page_with_the_apis_sentence(login, demo_hub):
    outsider = HubSession(demo_hub, "student2")
    r = outsider.get("/services/classhub/courses/nosuchcourse", headers={"Accept": "text/html"})
    assert r.status_code == 403
    assert 'class="navbar' in r.text and "only" in r.text and "/hub/home" in r.text
    # the same path asked for JSON answers JSON, as the API does
    r = outsider.get("/services/classhub/courses/nosuchcourse", headers={"Accept": "application/json"})
    assert r.status_code == 403 and r.json()["message"]


def test_a_student_sees_a_summary_of_their_course_and_no_staff_sections(login):
    student = login("student1")
    r = student.get("/services/classhub/courses/demo101")
    assert r.status_code == 200
    assert 'id="my-use"' in r.text
    for staff_only in ('id="members"', 'id="usage"', 'id="servers"', 'id="audit"', 'id="roster-file"'):
        assert staff_only not in r.text, staff_only


@pytest.mark.parametrize("path", ["/services/classhub/static/classhub.js",
                                  "/services/classhub/static/classhub.css"])
def test_the_pages_own_assets_are_served(demo_hub, path):
    import requests

    r = requests.get(demo_hub.url + path, timeout=30)
    assert r.status_code == 200 and len(r.content) > 200


def test_the_hub_does_not_ask_to_authorize_classhub(demo_hub):
    """JupyterHub's "Authorize access" page is skipped for classhub's own pages."""
    session = HubSession(demo_hub, "ta1")
    r = session.get("/services/classhub/")
    assert r.status_code == 200
    assert "Authorize access" not in r.text
    assert re.search(r"<h1[^>]*>classhub</h1>", r.text)


# -- the endpoints the pages use beyond the rest of the API ------------------------------------------

def _token(hub, user: str) -> str:
    return HubSession(hub, user).new_token()


def test_the_roster_preview_shows_changes_and_bad_lines_and_changes_nothing(demo_hub):
    from tests.hubproc import api

    token = _token(demo_hub, "teacher1")
    before = api(demo_hub, "GET", "courses/demo101/members", token).json()
    csv = b"username,role\npreviewed1,student\nstudent1,ta\nbad name!,student\n"
    r = api(demo_hub, "POST", "courses/demo101/roster/preview", token, data=csv,
            headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert [a["username"] for a in got["add"]] == ["previewed1"]
    assert got["change"] == [{"line": 3, "username": "student1", "from": "student", "to": "ta"}]
    assert got["errors"][0]["line"] == 4 and "bad name!" in got["errors"][0]["value"]
    assert api(demo_hub, "GET", "courses/demo101/members", token).json() == before
    # students may not; JSON is not a roster
    r = api(demo_hub, "POST", "courses/demo101/roster/preview", _token(demo_hub, "student1"), data=csv)
    assert r.status_code == 403 and "teacher" in r.json()["message"]
    r = api(demo_hub, "POST", "courses/demo101/roster/preview", token, json=["x"])
    assert r.status_code == 400 and "CSV" in r.json()["message"]


def test_the_audit_log_of_a_course_is_paginated_for_its_staff_only(demo_hub):
    from tests.hubproc import api

    ta = _token(demo_hub, "ta1")
    # a change the course page offers (TA access, set to what it is): the newest entry
    r = api(demo_hub, "PUT", "courses/demo101/sharing", _token(demo_hub, "teacher1"),
            json={"ta_server_access": True})
    assert r.status_code == 200, r.text
    r = api(demo_hub, "GET", "courses/demo101/audit?limit=1", ta)
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["limit"] == 1 and len(page["entries"]) == 1 and page["total"] >= 1
    assert page["entries"][0]["action"] == "course_sharing_set"
    assert page["entries"][0]["actor"] == "teacher1"
    assert page["entries"][0]["details"] == {"ta_server_access": True}
    older = api(demo_hub, "GET", f"courses/demo101/audit?offset={page['total']}", ta).json()
    assert older["entries"] == []
    r = api(demo_hub, "GET", "courses/demo101/audit?limit=0", ta)
    assert r.status_code == 400 and "limit must be a whole number" in r.json()["message"]
    r = api(demo_hub, "GET", "courses/demo101/audit", _token(demo_hub, "student1"))
    assert r.status_code == 403


def test_only_owners_admins_and_their_teachers_stop_a_server(demo_hub):
    from tests.hubproc import api

    for who, whose in (("student1", "student2"), ("ta1", "student1"), ("teacher1", "admin")):
        r = api(demo_hub, "DELETE", f"users/{whose}/server", _token(demo_hub, who))
        assert r.status_code == 403, (who, whose, r.text)
        assert "your own server" in r.json()["message"]


def test_the_file_picker_lists_folders_of_my_running_server(demo_hub):
    from tests.hubproc import api, start_server

    token = _token(demo_hub, "student1")
    start_server(demo_hub, "student1", token)
    picked = demo_hub.data_dir / "homes" / "student1" / "picker-check"
    picked.mkdir(exist_ok=True)
    (picked / "x.ipynb").write_text("{}")
    root = api(demo_hub, "GET", "files", token).json()
    assert "picker-check" in root["folders"]
    inside = api(demo_hub, "GET", "files?path=picker-check", token).json()
    assert [f["name"] for f in inside["files"]] == ["x.ipynb"] and inside["folders"] == []
    r = api(demo_hub, "GET", "files?path=../student2", token)
    assert r.status_code == 400 and "'..'" in r.json()["message"]
    r = api(demo_hub, "GET", "files?path=picker-check/x.ipynb", token)
    assert r.status_code == 400 and "is a file" in r.json()["message"]


def test_the_running_servers_table_names_the_profile_a_server_runs(demo_hub, login):
    """A server started without a ``profile`` option runs the catalog's default (the ledger
    records which); the course page names that profile, not "default"."""
    import requests

    from tests.hubproc import start_server

    token = _token(demo_hub, "student1")
    start_server(demo_hub, "student1", token)
    model = requests.get(f"{demo_hub.url}/hub/api/users/student1",
                         headers={"Authorization": f"token {token}"}, timeout=10).json()
    options = (model["servers"][""] or {}).get("user_options") or {}
    page = login("teacher1").get("/services/classhub/courses/demo101").text
    cell = re.search(r'<tr data-user="student1">.*?<td class="classhub-server-profile">([^<]*)</td>',
                     page, re.S)
    assert cell is not None, page
    assert cell.group(1) == options.get("profile", "cpu")  # the demo catalog's default is "cpu"


def test_nobody_outside_the_demo_accounts_and_the_courses_logs_in(demo_hub):
    with pytest.raises(AssertionError, match="login of stranger failed"):
        HubSession(demo_hub, "stranger")


def test_an_admin_sees_every_course_and_a_new_course_form_a_student_does_not(login):
    admin = login("admin").get("/services/classhub/")
    assert admin.status_code == 200
    assert 'id="all-courses"' in admin.text and 'id="new-course"' in admin.text
    assert "/services/classhub/courses/demo101" in parse(admin.text).links
    student = login("student1").get("/services/classhub/")
    assert 'id="new-course"' not in student.text and 'id="all-courses"' not in student.text
    assert "demo101" in student.text and "student" in student.text


def test_a_path_that_is_no_page_is_a_404_page_with_a_way_back(login):
    r = login("student1").get("/services/classhub/no-such-page")
    assert r.status_code == 404 and "text/html" in r.headers["Content-Type"]
    assert "There is no classhub page at /services/classhub/no-such-page" in r.text
    links = parse(r.text).links
    assert "/services/classhub/" in links and "/hub/home" in links
    # under api/ it stays the API's JSON 404
    r = login("student1").get("/services/classhub/api/no-such-endpoint")
    assert r.status_code == 404 and r.json()["message"].startswith("No such classhub API endpoint")
