"""Bad input gets a 4xx with a sentence, never a 5xx (issue 12): the service's own checks.

What a user (or an attacker) notices when this fails: a request answered 500 instead of a 400
that names the field and what to change, a wrong body taken, or a message showing the service's
own folders. The subject is the service's handlers (body guard, pydantic models, store columns),
so the service runs in the test's event loop (tests/inproc.py: the real app, store and
authorization; only the hub's user lookup is a stand-in). What needs the hub and its proxy (the
schemathesis runs, 413s and refusals answered before the body through the proxy, the hub's own
404s) stays in tests/test_service_fuzz.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from tests.archives import zip_bytes
from tests.inproc import InProcessService

pytestmark = pytest.mark.unit

COURSE = "demo101"  # the demo course: teacher1 teaches, student1 and student2 learn
SCRATCH = "fuzz-scratch"  # the course the corpus may delete


def _error_json(r: HTTPResponse) -> dict[str, Any]:
    assert r.headers.get("Content-Type", "").startswith("application/json"), (r.code, r.body[:300])
    body = json.loads(r.body)
    assert isinstance(body.get("message"), str) and body["message"], body
    return body


@pytest.fixture
async def document(service: InProcessService) -> dict:
    r = await service.request("GET", "/api/openapi.json")
    assert r.code == 200
    return json.loads(r.body)


# -- a corpus of malformed bodies against every route that takes one -------------------------------

DEEP = b"[" * 20_000 + b"]" * 20_000
CORPUS: dict[str, bytes] = {
    "20,000-deep arrays": DEEP,
    "20,000-deep objects": b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
    "10**30": b'{"servers": ' + str(10**30).encode() + b', "id": ' + str(10**30).encode() + b"}",
    "10**400": b'{"idle_timeout": ' + str(10**400).encode() + b', "version": ' + str(10**400).encode() + b"}",
    "1e400": b'{"idle_timeout": 1e400, "gpu_hours_per_week": 1e400}',
    "NaN": b'{"idle_timeout": NaN}',
    "a list": b"[1, 2]",
    "a string": b'"cs101"',
    "a number": b"1",
    "null": b"null",
    "true": b"true",
    "invalid UTF-8": b'{"name": "\xff\xfe\xc3"}',
    "an unpaired surrogate": b'{"name": "\\ud800", "user": "\\ud800"}',
    "a NUL": b'{"name": "a\\u0000b", "user": "a\\u0000b"}',
    "not JSON": b"{'name': ",
}


def _fill(path: str, method: str) -> str:
    values = {"course": SCRATCH if (method, path) == ("DELETE", "/api/courses/{course}") else COURSE,
              "user": "student1", "template": "lab1", "version": "1", "share": "1", "upload": "x"}
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    return path


def _body_routes(document: dict) -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, ops in document["paths"].items() for method in ops
            if method in ("post", "put", "patch", "delete")]


#: Bodies no endpoint may take, whatever it expects: always a 4xx.
UNREADABLE = {"20,000-deep arrays", "20,000-deep objects", "10**30", "10**400", "1e400", "NaN",
              "invalid UTF-8", "an unpaired surrogate", "not JSON"}


async def test_malformed_bodies_get_a_4xx_with_a_message(service, document):
    routes = _body_routes(document)
    assert len(routes) >= 15
    wrong = []
    sent = 0
    for method, path in routes:
        takes_body = "requestBody" in document["paths"][path][method.lower()]
        for name, body in CORPUS.items():
            for who in ("admin", "teacher1"):
                r = await service.request(method, _fill(path, method), who, body=body,
                                          headers={"Content-Type": "application/json"})
                sent += 1
                problem = r.code >= 500
                if r.code >= 400:
                    problem |= not (r.headers.get("Content-Type", "").startswith("application/json")
                                    and json.loads(r.body).get("message"))
                elif takes_body or name in UNREADABLE:  # a wrong body is never taken
                    problem = True
                if problem:
                    wrong.append(f"{method} {path} as {who} with {name}: {r.code} {r.body[:200]!r}")
    print(f"malformed bodies: {sent} requests")
    assert not wrong, "\n".join(wrong[:40])


# -- the attack run's findings ----------------------------------------------------------------------

async def test_ids_beyond_64_bits_are_missing_ids(service):
    for who in ("admin", "student1"):
        for method in ("GET", "DELETE"):
            for share in ("99999999999999999999999", str(2**40), "0", "-1", "1e3", "x"):
                r = await service.request(method, f"shares/{share}", who)
                assert r.code == 404, (method, share, r.body)
                assert "No such share" in _error_json(r)["message"]
    path = f"courses/{COURSE}/templates/lab1/versions"
    for version in ("99999999999999999999999", "0", "abc"):
        r = await service.request("GET", f"{path}/{version}", "teacher1")
        assert r.code == 404 and "No version" in _error_json(r)["message"], r.body
    windows = f"culling/courses/{COURSE}/windows"
    r = await service.request("DELETE", windows, "teacher1", json_body={"id": 2**40})
    assert r.code == 404 and "No window" in _error_json(r)["message"]
    r = await service.request("DELETE", windows, "teacher1", body=b'{"id": ' + str(10**30).encode() + b"}",
                              headers={"Content-Type": "application/json"})
    assert r.code == 400 and "id" in _error_json(r)["message"]


async def test_numbers_beyond_the_columns_name_the_field_and_range(service):
    big = str(10**30).encode()
    json_type = {"Content-Type": "application/json"}
    for path, who in ((f"courses/{COURSE}/quota", "admin"),
                      (f"courses/{COURSE}/quota/users/student1", "teacher1")):
        r = await service.request("PUT", path, who, body=b'{"servers": ' + big + b"}", headers=json_type)
        message = _error_json(r)["message"]
        assert r.code == 400 and "servers" in message and str(2**63 - 1) in message, r.body
        r = await service.request("PUT", path, who, json_body={"servers": 2**40})
        message = _error_json(r)["message"]
        assert r.code == 400 and "servers" in message and str(2**31 - 1) in message, r.body
        r = await service.request("PUT", path, who, json_body={"gpu_hours_per_week": "1e999999999"})
        assert r.code == 400 and "gpu_hours_per_week" in _error_json(r)["message"]
    policy = f"culling/courses/{COURSE}/policy"
    huge = b'{"kind": "gpu", "idle_timeout": ' + str(10**400).encode() + b"}"
    r = await service.request("PUT", policy, "admin", body=huge, headers=json_type)
    assert r.code == 400 and "idle_timeout" in _error_json(r)["message"]
    r = await service.request("PUT", policy, "admin", json_body={"kind": "gpu", "idle_timeout": 1e300})
    assert r.code == 400 and "idle_timeout" in _error_json(r)["message"]
    r = await service.request("PUT", policy, "admin", body=b'{"kind": "gpu", "max_age": 1e400}',
                              headers=json_type)
    assert r.code == 400 and "max_age" in _error_json(r)["message"]


async def test_deep_nesting_and_bad_text_are_400(service):
    json_type = {"Content-Type": "application/json"}
    for path in ("courses", f"courses/{COURSE}/members", f"courses/{COURSE}/quota", "shares"):
        method = "POST" if path in ("courses", "shares") else "PUT"
        r = await service.request(method, path, "admin", body=DEEP, headers=json_type)
        assert r.code == 400 and "levels deep" in _error_json(r)["message"], (path, r.body)
        r = await service.request(method, path, "admin", body=b'{"name": "\xff"}', headers=json_type)
        assert r.code == 400 and "UTF-8" in _error_json(r)["message"], (path, r.body)


async def test_a_window_at_the_end_of_time_is_400(service):
    windows = f"culling/courses/{COURSE}/windows"
    for start, end in (("9999-12-31T20:00:00-05:00", "9999-12-31T22:00:00-05:00"),
                       ("9999-12-31T23:00:00+00:00", "9999-12-31T23:30:00+00:00"),
                       ("0001-01-01T00:00:00+01:00", "0001-01-01T01:00:00+01:00")):
        r = await service.request("POST", windows, "teacher1", json_body={"start": start, "end": end})
        assert r.code == 400 and "between the years" in _error_json(r)["message"], r.body




async def test_a_refused_archive_does_not_show_the_services_folders(service):
    path = f"courses/{COURSE}/templates/lab1/versions"
    for body in (b"not an archive", zip_bytes({"../escape.txt": b"x"})):
        r = await service.request("POST", path, "teacher1", body=body,
                                  headers={"Content-Type": "application/zip"})
        message = _error_json(r)["message"]
        assert r.code == 400 and message.startswith("Not published"), r.body
        assert str(service.data_dir) not in message and "/tmp" not in message, message
        assert "staging" not in message, message
        assert b"Traceback" not in r.body
    # nothing of the refused archives was published
    r = await service.request("GET", f"courses/{COURSE}/templates", "teacher1")
    assert (r.code, json.loads(r.body)) == (200, [])
