"""The local hub end to end: login form, a server through the proxy, the classhub API."""

from __future__ import annotations

import re

import psutil
import pytest
import requests

from hub_ext import ports
from tests.hubproc import HubSession, api, wait_for

pytestmark = pytest.mark.hub


def test_health_needs_no_login(demo_hub):
    r = api(demo_hub, "GET", "health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"
    assert re.match(r"^\d+\.\d+", r.json()["version"])


def test_wrong_password_is_refused(demo_hub):
    try:
        HubSession(demo_hub, "student1", password="not-the-password")
    except AssertionError as e:
        assert "login of student1 failed" in str(e)
    else:
        raise AssertionError("a wrong password logged in")


def test_unknown_user_is_refused_even_with_the_demo_password(demo_hub):
    try:
        HubSession(demo_hub, "mallory")
    except AssertionError as e:
        assert "failed" in str(e)
    else:
        raise AssertionError("an account outside the demo list logged in")


def open_lab(student: HubSession) -> requests.Response:
    """What a browser does: /hub/spawn starts the server (its page answers), then JupyterLab's
    page, once the student's own server serves it."""
    name = student.username
    assert student.get(f"/hub/spawn/{name}").status_code == 200

    def lab_page() -> requests.Response | None:
        page = student.get(f"/user/{name}/lab")
        return page if page.status_code == 200 and f"/user/{name}/" in page.url else None

    return wait_for(lab_page, 60, f"JupyterLab of {name}", interval=0.5)


def test_student_logs_in_and_gets_jupyterlab_through_the_proxy(login, demo_hub):
    student = login("student1")
    # What a browser does after login: /hub/spawn starts the server, the spawn-pending page
    # waits, then /user/student1/lab is served by the student's own jupyter-server.
    page = open_lab(student)
    assert "JupyterLab" in page.text
    assert '"baseUrl": "/user/student1/"' in page.text
    # The server's contents API works through the proxy with the browser's cookies.
    listing = student.get("/user/student1/api/contents/")
    assert listing.status_code == 200
    assert listing.json()["type"] == "directory"


def listening(hub) -> dict[int, str]:
    """{port: command} of what the hub and its children listen on, kernels left out."""
    tree = [psutil.Process(hub.proc.pid)]
    tree += tree[0].children(recursive=True)
    found = {}
    for proc in tree:
        try:
            if "ipykernel" in " ".join(proc.cmdline()):
                continue  # a kernel's own ports are the kernel's choice
            for conn in proc.net_connections("tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found[conn.laddr.port] = " ".join(proc.cmdline()[:3])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_no_port_the_local_hub_listens_on_can_be_handed_to_a_kernel(login, demo_hub):
    """The hub's internal port, the proxy's API, the services and a student's server listen on
    ports below the kernel's ephemeral range: a kernel's port-0 bind (five per kernel) cannot
    take one between classhub's choice and the bind (seen in CI: the hub exited "address in use"
    and the proxy's error pages reached a kernel's ZeroMQ socket). docs/architecture.md."""
    open_lab(login("student1"))
    ports_in_use = listening(demo_hub)
    ports_in_use.pop(demo_hub.port)  # the public port: the test's choice (tests/ports.py)
    assert len(ports_in_use) >= 4, ports_in_use  # hub, proxy API, classhub service, the server
    low = ports.ephemeral_low()
    assert {port: who for port, who in ports_in_use.items() if port >= low} == {}


def test_me_reports_name_groups_and_role(login, demo_hub):
    expected = {
        "admin": "admin",
        "teacher1": "teacher",
        "ta1": "ta",
        "student2": "student",
    }
    for name, role in expected.items():
        token = login(name).new_token()
        r = api(demo_hub, "GET", "me", token=token)
        assert r.status_code == 200, r.text
        me = r.json()
        assert me["name"] == name
        assert me["role"] == role
        if name != "admin":
            assert me["groups"] == ["demo101"]
            assert me["courses"] == {"demo101": role}


def test_me_with_the_browser_cookie(login):
    student = login("student2")
    # The first visit goes through the hub's OAuth flow and comes back with a service cookie.
    r = student.get("/services/classhub/api/me", headers={"Accept": "text/html"})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "student2"
    assert r.json()["role"] == "student"
    # Later API calls from the same browser use the cookie directly.
    r = student.get("/services/classhub/api/me", allow_redirects=False)
    assert r.status_code == 200


def test_me_anonymous_gets_401_and_a_browser_gets_the_login_redirect(demo_hub):
    r = api(demo_hub, "GET", "me")
    assert r.status_code == 401
    assert "Log in" in r.json()["message"]
    r = api(demo_hub, "GET", "me", headers={"Accept": "text/html"})
    assert r.status_code == 302
    assert "/hub/api/oauth2/authorize" in r.headers["Location"]


def test_me_with_a_token_whose_scopes_do_not_allow_it_is_403(login, demo_hub):
    token = login("student1").new_token(scopes=["read:users:name!user"])
    r = api(demo_hub, "GET", "me", token=token)
    assert r.status_code == 403
    assert "access:services!service=classhub" in r.json()["message"]


def test_me_with_a_bad_token_is_401(demo_hub):
    r = api(demo_hub, "GET", "me", token="not-a-token")
    assert r.status_code == 401


def test_unknown_api_path_is_a_json_404(demo_hub):
    r = api(demo_hub, "GET", "nope")
    assert r.status_code == 404
    assert "No such classhub API endpoint" in r.json()["message"]


def test_hub_home_page_lists_the_classhub_service(login):
    r = login("student1").get("/hub/home")
    assert r.status_code == 200
    assert "/services/classhub/" in r.text


def test_proxy_answers_on_the_public_port_only_for_the_hub(demo_hub):
    r = requests.get(f"{demo_hub.url}/hub/api/", timeout=10)
    assert r.status_code == 200
    assert "version" in r.json()
