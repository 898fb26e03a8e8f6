"""Bad input never gets a 5xx (issue 12), through a real hub and its proxy.

What a user (or an attacker) notices when this fails: a request answered 500/502/503 instead of
a 4xx that says what to change, an answer the OpenAPI document does not announce, share ids that
tell "someone else's" from "missing", or a message showing the service's own folders.

- schemathesis generates requests (valid and invalid by the document) for every operation of
  the served document, as an admin and as a student, and checks each answer is no server error
  and one of the statuses the document declares for it;
- schemathesis' coverage phase (boundary values, and each method the document does not declare
  for a path) checks each answer is no server error, and an undeclared method a 405 with Allow;
- a body over an endpoint's limit, and uploads refused before their body was read, are answered
  through the proxy (not reset);
- the requests of the attack run that need the hub, each answered as a user expects.

The malformed-body corpus and the attack run's requests whose subject is the service's own checks
run against the service in the test's event loop: tests/test_service_bad_input.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import status_code_conformance
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from hub_ext import store
from hub_ext.service.handlers import APIHandler
from hub_ext.store.models import AuditLog
from hub_ext.store.share_models import Share
from tests.archives import zip_bytes
from tests.hubproc import HubSession, LocalHub, api, hub_with_config, wait_for
from tests.pg import postgres_server, postgres_url  # noqa: F401

pytestmark = pytest.mark.hub

COURSE = "demo101"  # the demo course: teacher1 teaches, student1 and student2 learn
SCRATCH = "fuzz-scratch"  # the course the corpus may delete
TEMPLATE_MAX_BYTES = 1024 * 1024
TEMPLATE_MAX_FILES = 100
#: what PublishHandler takes for an archive with these limits (content + headers + 1 MiB)
ARCHIVE_LIMIT = TEMPLATE_MAX_BYTES + 1024 * TEMPLATE_MAX_FILES + 1024 * 1024
JSON_LIMIT = 1024 * 1024
ROSTER_LIMIT = 8 * 1024 * 1024
#: Requests per operation, caller and generation mode. Derandomized: each run sends the same
#: ones, the first ones hypothesis draws. CLASSHUB_FUZZ_EXAMPLES=6 (or more) sends more of each
#: (docs/contributing/development.md).
EXAMPLES = int(os.environ.get("CLASSHUB_FUZZ_EXAMPLES", "3"))


@pytest.fixture(scope="module")
def hub(hub_root):
    config = (f"c.ClasshubTemplates.max_bytes = {TEMPLATE_MAX_BYTES}\n"
              f"c.ClasshubTemplates.max_files = {TEMPLATE_MAX_FILES}\n"
              # a course data upload's limit is the course's (docs/admins/course-data.md)
              f"c.ClasshubCourseData.max_bytes = {JSON_LIMIT}\n")
    hub = hub_with_config(hub_root, "fuzz", config)
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str]:
    tokens = {user: HubSession(hub, user).new_token() for user in ("admin", "teacher1", "student1",
                                                                   "student2")}
    r = api(hub, "POST", "courses", tokens["admin"], json={"name": SCRATCH})
    assert r.status_code == 201, r.text
    return tokens


@pytest.fixture(scope="module")
def document(hub) -> dict:
    r = requests.get(f"{hub.url}/services/classhub/api/openapi.json", timeout=30)
    assert r.status_code == 200
    return r.json()


def _error_json(r: requests.Response) -> dict:
    assert r.headers.get("Content-Type", "").startswith("application/json"), (r.status_code, r.text[:300])
    body = r.json()
    assert isinstance(body.get("message"), str) and body["message"], body
    return body


# -- schemathesis over the whole document ----------------------------------------------------------

#: Operations the fuzzer leaves alone: deleting a course it guessed could delete the demo course
#: the other tests use (the corpus below sends bad bodies to it on a scratch course).
SKIP = {("DELETE", "/api/courses/{course}")}


def _cases(operation, mode: GenerationMode) -> list:
    """The requests hypothesis generates for one operation in one mode (nothing is shrunk).

    Generated once and sent as each caller: derandomized, hypothesis draws the same cases whoever
    sends them, so generating per caller only repeated the work. A case sends the same request
    each time it is called."""
    cases = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def collect(case) -> None:
        cases.append(case)

    collect()
    return cases


#: Schema keys that say nothing a value could break (a string parameter with only these takes
#: any string).
_UNCONSTRAINED = {"type", "description", "title"}


def _bytes_only(body: dict) -> bool:
    """Whether a request body is any bytes (a course data file): no body is wrong by the document."""
    return all(c.get("schema") == {"type": "string", "format": "binary"}
               for c in body.get("content", {}).values())


def can_be_wrong(document: dict, path: str, method: str) -> bool:
    """Whether a request to the operation can be wrong by the document (schemathesis' negative
    mode has something to generate): a body, a required query or header parameter (left out),
    or a parameter that is not a string taking any text.

    Why: for an operation with none of these (e.g. ``GET /api/me``, ``GET /api/courses/{course}``:
    a path segment is always some string), hypothesis ends in Unsatisfiable only after about 460
    rejected draws, 1.5-2 s of CPU each, 58 of the 63 s this test spent generating. The answer
    agrees with hypothesis' for every operation of the document (checked once per run on one
    operation below, and for all of them when this was written)."""
    operation = document["paths"][path][method.lower()]
    if "requestBody" in operation and not _bytes_only(operation["requestBody"]):
        return True
    for parameter in operation.get("parameters", []):
        while "$ref" in parameter:
            parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        schema = parameter.get("schema", {})
        if parameter["in"] != "path" and parameter.get("required"):
            return True
        if schema.get("type") != "string" or set(schema) - _UNCONSTRAINED:
            return True
    return False


def _send(cases: list, who: str, token: str, base_url: str, problems: list[str],
          counts: dict[str, int]) -> None:
    """Each case as one caller; answers that fail a check are collected (not raised: every
    operation gets its turn)."""
    for case in cases:
        counts["requests"] += 1
        response = case.call(base_url=base_url, headers={"Authorization": f"token {token}"},
                             timeout=60, allow_redirects=False)
        try:
            case.validate_response(response, checks=[not_a_server_error, status_code_conformance])
        except (Exception, FailureGroup):  # FailureGroup: a BaseExceptionGroup of failed checks
            problems.append(f"{case.method.upper()} {case.operation.path} as {who}: "
                            f"{response.status_code} {response.text[:160]!r} "
                            f"({case.method} {case.formatted_path})")


# Every operation x 2 callers x 2 modes x EXAMPLES requests (about 500 at 3, growing with the API).
@pytest.mark.timeout(900)
def test_schemathesis_finds_no_server_error_and_no_undeclared_status(hub, tokens, document):
    schema = schemathesis.openapi.from_dict(document)
    base_url = f"{hub.url}/services/classhub"
    problems: list[str] = []
    counts = {"requests": 0, "operations": 0, "no negative input": 0}
    started = time.monotonic()
    checked = False
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) in SKIP:
            continue
        counts["operations"] += 1
        positive = _cases(operation, GenerationMode.POSITIVE)
        negative = []
        if can_be_wrong(document, operation.path, operation.method):
            negative = _cases(operation, GenerationMode.NEGATIVE)
        else:  # nothing of it can be wrong: no body, any text in its parameters
            counts["no negative input"] += 1
            if not checked:  # can_be_wrong agrees with hypothesis (on one operation a run)
                with pytest.raises(Unsatisfiable):
                    _cases(operation, GenerationMode.NEGATIVE)
                checked = True
        for who in ("admin", "student1"):
            _send(positive, who, tokens[who], base_url, problems, counts)
            _send(negative, who, tokens[who], base_url, problems, counts)
    print(f"schemathesis: {counts['requests']} requests to {counts['operations']} operations in "
          f"{time.monotonic() - started:.0f}s ({counts['no negative input']} without negative input)")
    # each operation got its requests: more than 10 per operation at 6 examples, as many fewer
    # at fewer
    assert counts["requests"] > 10 * counts["operations"] * EXAMPLES / 6
    assert not problems, "\n".join(sorted(set(problems))[:40])


# -- a corpus of malformed bodies against every route that takes one -------------------------------

def _fill(path: str, method: str) -> str:
    values = {"course": SCRATCH if (method, path) == ("DELETE", "/api/courses/{course}") else COURSE,
              "user": "student1", "template": "lab1", "version": "1", "share": "1", "upload": "x"}
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    return path


def _body_routes(document: dict) -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, ops in document["paths"].items() for method in ops
            if method in ("post", "put", "patch", "delete")]


def test_oversized_bodies_get_413_with_a_message(hub, tokens, document):
    wrong = []
    for method, path in _body_routes(document):
        url = f"{hub.url}/services/classhub{_fill(path, method)}"
        # the roster and the autograde sources (notebooks saved with their outputs) take 8 MiB
        limit = ROSTER_LIMIT if path.endswith(("/roster", "/autograde")) else JSON_LIMIT
        body = b'{"a": "' + b"x" * (limit + 1024) + b'"}'
        r = requests.request(method, url, data=body, timeout=60, allow_redirects=False,
                             headers={"Authorization": f"token {tokens['admin']}",
                                      "Content-Type": "application/json"})
        if r.status_code != 413 or "larger than" not in _error_json(r)["message"]:
            wrong.append(f"{method} {path}: {r.status_code} {r.text[:200]!r}")
    assert not wrong, "\n".join(wrong)


# -- the attack run's findings ----------------------------------------------------------------------



def test_refused_and_oversized_uploads_are_answered_not_reset(hub, tokens):
    path = f"courses/{COURSE}/templates/lab1/versions"
    archive = zip_bytes({"lab.ipynb": b"{}" * 100_000})
    zip_type = {"Content-Type": "application/zip"}
    r = api(hub, "POST", path, None, data=archive, headers=zip_type)
    assert r.status_code == 401 and "token" in _error_json(r)["message"]
    r = api(hub, "POST", path, tokens["student1"], data=archive, headers=zip_type)
    assert r.status_code == 403, r.text
    _error_json(r)
    r = api(hub, "POST", path, tokens["teacher1"], data=b"\0" * (ARCHIVE_LIMIT + 1), headers=zip_type)
    assert r.status_code == 413 and "larger than" in _error_json(r)["message"]
    # nothing of the refused uploads was published, or left in the templates folder
    assert api(hub, "GET", f"courses/{COURSE}/templates", tokens["teacher1"]).json() == []
    wait_for(lambda: not list(hub.data_dir.glob("templates/**/upload")), 10, "the staged upload to go")
    # the uploads endpoint of the publisher pods: no such upload, whatever the caller
    for token in (None, tokens["admin"]):
        r = api(hub, "GET", "template-uploads/x", token)
        assert r.status_code == 404
        _error_json(r)


def test_the_hubs_404_is_passed_on(hub, tokens):
    r = api(hub, "PUT", "users/no-such-user/server/profile", tokens["admin"], json={"profile": "cpu"})
    assert r.status_code == 404, r.text
    _error_json(r)
    r = api(hub, "POST", "courses/no-such-course/templates/lab1/start", tokens["admin"], json={})
    assert r.status_code == 404, r.text
    _error_json(r)


def _record_share(hub: LocalHub, owner: str, target: str) -> int:
    """A share record of ``owner``'s default server for ``target``, as POST /api/shares leaves
    one (written to the store directly: this test is about who may see it, not the hub's share)."""
    sessions = store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}")
    now = datetime.now(timezone.utc)
    with sessions() as session, session.begin():
        share = Share(owner=owner, server="", kind="read-only", target_kind="user", target=target,
                      path=None, auto_start=False, code_sha256=None, created_at=now, created_by=owner,
                      expires_at=None)
        session.add(share)
        session.flush()
        return share.id


def test_someone_elses_share_is_the_same_404_as_a_missing_one(hub, tokens):
    share = _record_share(hub, "student1", "student2")
    missing = api(hub, "GET", "shares/999999", tokens["student2"])
    assert missing.status_code == 404
    for method in ("GET", "DELETE"):
        r = api(hub, method, f"shares/{share}", tokens["student2"])
        assert (r.status_code, r.json()) == (404, missing.json())
        assert "student1" not in r.text
    # a stranger following its URL gets the same 404; its recipient is told the server is off
    def open_as(who: str) -> requests.Response:
        return requests.get(f"{hub.url}/services/classhub/shares/{share}/open", timeout=30,
                            allow_redirects=False, headers={"Authorization": f"token {tokens[who]}",
                                                            "Accept": "application/json"})

    r = open_as("teacher1")
    assert (r.status_code, r.json()) == (404, missing.json())
    assert open_as("student2").status_code == 409
    # the owner and admins still see it
    assert api(hub, "GET", f"shares/{share}", tokens["student1"]).json()["target"] == "student2"
    assert api(hub, "GET", f"shares/{share}", tokens["admin"]).json()["owner"] == "student1"


class _Broken(APIHandler):
    """A handler with a bug: it raises with internal details in the exception."""

    def get(self) -> None:
        raise RuntimeError("database at /srv/classhub/secret.sqlite is locked")


async def test_an_unexpected_error_is_a_json_500_without_details():
    """No request above may end in a 500; if a bug does, the caller still gets the service's JSON
    error shape, and nothing of the exception (paths, traceback)."""
    app = web.Application([("/boom", _Broken)], serve_traceback=True)
    sock, port = bind_unused_port()
    server = HTTPServer(app)
    server.add_sockets([sock])
    try:
        client = AsyncHTTPClient(force_instance=True)
        response = await client.fetch(f"http://127.0.0.1:{port}/boom", raise_error=False)
        client.close()
    finally:
        server.stop()
    assert response.code == 500
    assert response.headers["Content-Type"].startswith("application/json")
    body = json.loads(response.body)
    assert body["status"] == 500 and "service log" in body["message"]
    assert b"secret" not in response.body and b"Traceback" not in response.body


class _Writes(APIHandler):
    """Records the body's ``actor`` in the audit log, as handlers record names they are given."""

    def post(self) -> None:
        with self.settings["sessions"].begin() as session:
            session.add(AuditLog(at=datetime.now(timezone.utc), actor=self.json_body()["actor"],
                                 action="test", details={}))
        self.write_json({"ok": True})


async def test_a_value_too_long_for_its_postgresql_column_is_400(postgres_url):  # noqa: F811
    """sqlite stores a 300-character name in a 255-character column; PostgreSQL refuses it. The
    refusal is the caller's 400 with a sentence, whatever handler wrote the value."""
    sessions = store.connect(postgres_url)
    app = web.Application([("/write", _Writes)], sessions=sessions)
    sock, port = bind_unused_port()
    server = HTTPServer(app)
    server.add_sockets([sock])
    try:
        client = AsyncHTTPClient(force_instance=True)
        response = await client.fetch(f"http://127.0.0.1:{port}/write", method="POST",
                                      body=json.dumps({"actor": "x" * 300}), raise_error=False)
        ok = await client.fetch(f"http://127.0.0.1:{port}/write", method="POST",
                                body=json.dumps({"actor": "x" * 255}), raise_error=False)
        client.close()
    finally:
        server.stop()
    assert response.code == 400, response.body
    assert "too long" in json.loads(response.body)["message"]
    assert ok.code == 200
    with sessions() as session:
        assert [len(e.actor) for e in session.query(AuditLog)] == [255]  # nothing of the refused one


# -- schemathesis' coverage phase, undeclared methods included, through the proxy -----------------

def _interactions(report: Path) -> list[dict]:
    """Every request of a schemathesis NDJSON report, with its answer (None: none came)."""
    found = []
    for line in report.read_text().splitlines():
        event = json.loads(line)
        if "ScenarioFinished" in event:
            found.extend(event["ScenarioFinished"]["recorder"]["interactions"].values())
    return found


@pytest.mark.timeout(600)
def test_coverage_phase_and_undeclared_methods_get_no_server_error(hub, tokens, document, tmp_path):
    """schemathesis' own run (its CLI) of the coverage phase through the hub's proxy, as the admin:
    boundary and wrong values for every operation, and each method the document does not declare
    for a path (TRACE, QUERY, PATCH, OPTIONS, ...), with the checks ``not_a_server_error`` and
    ``unsupported_method`` (405 with Allow). A method tornado does not know is answered before
    the request is read; the service used to close the connection after that answer without
    saying so, and the proxy answered the next requests sent down it 503."""
    report = tmp_path / "schemathesis.ndjson"
    excluded = [arg for method, path in sorted(SKIP) for arg in ("--exclude-name", f"{method} {path}")]
    cmd = [sys.executable, "-m", "schemathesis.cli", "run",
           f"{hub.url}/services/classhub/api/openapi.json", "--url", f"{hub.url}/services/classhub",
           "-H", f"Authorization: token {tokens['admin']}", "--phases", "coverage",
           "--checks", "not_a_server_error,unsupported_method", *excluded,
           "--generation-deterministic", "--continue-on-failure", "--no-color",
           "--report", "ndjson", "--report-ndjson-path", str(report)]
    started = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=tmp_path)
    interactions = _interactions(report)
    print(f"schemathesis coverage phase: {len(interactions)} requests in "
          f"{time.monotonic() - started:.0f}s")
    failures = run.stdout[run.stdout.find("FAILURES"):run.stdout.find("WARNINGS")]
    server_errors = [f"{i['request']['method']} {i['request']['uri']}: "
                     + (str(i["response"]["status_code"]) if i.get("response") else "no answer")
                     for i in interactions
                     if not i.get("response") or i["response"]["status_code"] >= 500]
    assert not server_errors, "\n".join(server_errors[:40]) + "\n" + failures[:6000]
    assert run.returncode == 0, failures[:6000] or run.stdout[-6000:] + run.stderr[-2000:]
    undeclared = [i for i in interactions if i["request"]["method"] in ("TRACE", "QUERY")]
    assert len(undeclared) >= len(document["paths"]), len(undeclared)
    assert len(interactions) > 10 * len(document["paths"])
