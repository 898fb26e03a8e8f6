"""Every classhub response refuses to be framed, and a refused request never breaks the next one
(the security issue "no 5xx through the proxy, pages that cannot be framed"), through a real hub
and its proxy (configurable-http-proxy), as browsers and scripts reach the service.

What a user notices when this fails: a page of another site frames the classhub home and a click
in it made someone a TA (clickjacking); or their request answered 503 by the hub's proxy because
someone else's refused request (a NUL in a path, an unknown method, a body too large) left the
proxy a connection to the service that the service had closed without saying so.
"""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit

import pytest
import requests

from hub_ext.service.handlers import DRAIN_BYTES
from tests.hubproc import HubSession

pytestmark = pytest.mark.hub

P = "/services/classhub"
#: What every classhub response says (like the hub's own pages: no frame of any origin).
FRAMING = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY",
           "X-Content-Type-Options": "nosniff"}


@pytest.fixture(scope="module")
def hub(shared_hubs):
    """The demo hub: these tests only read (and refuse)."""
    return shared_hubs.get()


@pytest.fixture(scope="module")
def admin(hub) -> HubSession:
    return HubSession(hub, "admin")


@pytest.fixture(scope="module")
def token(admin) -> str:
    return admin.new_token()


def _framing(r: requests.Response) -> dict[str, str | None]:
    return {name: r.headers.get(name) for name in FRAMING}


def test_every_kind_of_classhub_response_refuses_framing(hub, admin, token):
    auth = {"Authorization": f"token {token}"}
    seen: dict[str, requests.Response] = {}
    # a browser's first visit: the service's OAuth redirect, its callback, then the home page
    home = admin.get(f"{P}/")
    assert home.status_code == 200 and home.headers["Content-Type"].startswith("text/html")
    for r in [*home.history, home]:
        path = urlsplit(r.url).path
        if path.startswith(f"{P}/"):
            seen[f"{r.status_code} {path}"] = r
    assert any("oauth_callback" in label for label in seen), list(seen)
    assert any(label.startswith("302 ") for label in seen), list(seen)
    get = requests.get
    seen.update({
        "a page for the logged-in browser": admin.get(f"{P}/templates"),
        "the 404 page": admin.get(f"{P}/no-such-page"),
        "the login redirect of an anonymous browser": get(f"{hub.url}{P}/", allow_redirects=False,
                                                          headers={"Accept": "text/html"}, timeout=30),
        "an API answer": get(f"{hub.url}{P}/api/me", headers=auth, timeout=30),
        "the API document": get(f"{hub.url}{P}/api/openapi.json", timeout=30),
        "an API 404": get(f"{hub.url}{P}/api/no-such-endpoint", headers=auth, timeout=30),
        "an API 401": get(f"{hub.url}{P}/api/me", timeout=30),
        "a 405 before the body": requests.request("PROPFIND", f"{hub.url}{P}/api/me", headers=auth,
                                                  timeout=30),
        "a 404 for a NUL in the path": get(f"{hub.url}{P}/api/jobs/x%00y", headers=auth, timeout=30),
        "a path outside the service's routes": get(f"{hub.url}{P}", headers=auth, timeout=30,
                                                   allow_redirects=False),
        "a static stylesheet": get(f"{hub.url}{P}/static/classhub.css", timeout=30),
        "a static script": get(f"{hub.url}{P}/static/classhub.js", timeout=30),
        "a static 404": get(f"{hub.url}{P}/static/no-such-file.js", timeout=30),
    })
    expected_status = {"the 404 page": 404, "an API 404": 404, "an API 401": 401, "a static 404": 404,
                       "a 405 before the body": 405, "a 404 for a NUL in the path": 404,
                       "a path outside the service's routes": 404,
                       "the login redirect of an anonymous browser": 302}
    wrong = []
    for label, r in seen.items():
        status = expected_status.get(label, r.status_code if label[:3].isdigit() else 200)
        if r.status_code != status or _framing(r) != FRAMING:
            wrong.append(f"{label}: {r.status_code} {_framing(r)}")
    assert not wrong, "\n".join(wrong)
    # what classhub answers a person (pages, API answers, their errors) no cache may keep
    kept = [f"{label}: {r.headers.get('Cache-Control')}" for label, r in seen.items()
            if "static" not in label and r.status_code != 302
            and r.headers.get("Cache-Control") != "no-store"]
    assert not kept, "\n".join(kept)
    assert seen["the 404 page"].headers["Content-Type"].startswith("text/html")
    assert seen["a static script"].headers["Content-Type"].startswith(("text/javascript",
                                                                       "application/javascript"))
    # a 405 says what the endpoint answers, and that the connection closes (see the next test)
    refused = seen["a 405 before the body"]
    assert refused.headers.get("Allow") == "GET", refused.headers


# -- one keep-alive connection: refused requests and someone's ordinary ones, alternating ---------

PAIRS = 1000
DEADLINE_S = 90
#: (what, method, path, body, headers, the answer expected): requests tornado answers before it
#: read the request, so that it closes the connection after the answer (the last one declares
#: more than the service drains: only its first 64 KiB are sent).
POISONED = [
    ("a NUL in the path", "GET", f"{P}/api/jobs/x%00y", None, {}, 404),
    ("a method tornado does not know", "PROPFIND", f"{P}/api/me", None, {}, 405),
    ("a body on a GET-only path", "PUT", f"{P}/api/usage/me", b'{"a": 1}',
     {"Content-Type": "application/json"}, 405),
    ("an unknown method with a body", "QUERY", f"{P}/api/courses", b'{"name": "x"}',
     {"Content-Type": "application/json"}, 405),
    ("a body too large to drain", "POST", f"{P}/api/courses", b"x" * 65536,
     {"Content-Type": "application/json", "Content-Length": str(DRAIN_BYTES + 1)}, 413),
]
#: Someone's ordinary requests, each answered 200.
ORDINARY = [f"{P}/api/me", f"{P}/api/courses", f"{P}/api/usage/me", f"{P}/"]


def test_a_refused_request_never_breaks_the_next_one_on_its_connection(hub, token):
    """1,000 pairs on one client connection to the proxy: a request the service refuses before
    reading it, then an ordinary authenticated GET of another endpoint. No answer is a 5xx and
    no request fails; when an answer says ``Connection: close`` the client opens a new
    connection, as any client does (http.client does it on its own)."""
    url = urlsplit(hub.url)
    auth = {"Authorization": f"token {token}"}
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    counts = {"pairs": 0, "requests": 0, "connections": 0, "closed by the answer": 0}
    server_errors: list[str] = []
    failures: list[str] = []
    wrong: list[str] = []

    def send(what: str, method: str, path: str, body: bytes | None, headers: dict[str, str],
             expected: int) -> None:
        nonlocal conn
        counts["requests"] += 1
        if conn.sock is None:
            counts["connections"] += 1
        partial = body is not None and headers.get("Content-Length", str(len(body))) != str(len(body))
        try:
            if partial:  # declare more than is sent, then wait for the answer
                conn.putrequest(method, path, skip_accept_encoding=True)
                for name, value in {**auth, **headers}.items():
                    conn.putheader(name, value)
                conn.endheaders(body)
            else:
                conn.request(method, path, body=body, headers={**auth, **headers})
            r = conn.getresponse()
            r.read()
        except (OSError, http.client.HTTPException) as e:
            failures.append(f"pair {counts['pairs']}, {what}: {e!r}")
            conn.close()
            return
        if r.will_close:
            counts["closed by the answer"] += 1
        if partial:  # the declared body never ended: no client can send another request on it
            conn.close()
        if r.status >= 500:
            server_errors.append(f"pair {counts['pairs']}, {what}: {r.status} {r.reason}")
        elif r.status != expected:
            wrong.append(f"pair {counts['pairs']}, {what}: {r.status}, not {expected}")

    started = time.monotonic()
    while counts["pairs"] < PAIRS and time.monotonic() - started < DEADLINE_S:
        i = counts["pairs"]
        send(*POISONED[i % len(POISONED)])
        path = ORDINARY[i % len(ORDINARY)]
        send(f"GET {path} after {POISONED[i % len(POISONED)][0]}", "GET", path, None, {}, 200)
        counts["pairs"] += 1
    conn.close()
    elapsed = time.monotonic() - started
    print(f"{counts} in {elapsed:.1f}s; {len(server_errors)} answers 5xx, {len(failures)} failures")
    assert not server_errors and not failures, "\n".join([*server_errors, *failures][:40])
    assert not wrong, "\n".join(wrong[:40])
    assert counts["pairs"] >= PAIRS // 4, f"only {counts['pairs']} pairs in {DEADLINE_S}s"
