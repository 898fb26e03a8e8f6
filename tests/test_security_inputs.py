"""No input reaches an exception: whole numbers in a query, and the fields of a job body, through a
real hub and its proxy.

What a user (or an attacker) notices when this fails: a request of the attack run answered 500
instead of a 400 that says what to send. ``GET /api/jobs/<id>/logs?offset=10**23`` (a seek the
file system refuses), ``GET /api/jobs?offset=2**63`` (an offset the database cannot hold) and
``POST /api/jobs`` with ``"roles": -1`` each crashed the service. Every integer query argument
goes through hub_ext.service.arguments.int_argument now: each of them, with the attack's values
and the edges of its range, is answered 400 with a JSON sentence naming the argument and its
range (404 where the object does not exist), and the largest value in range is answered 200.
"""

from __future__ import annotations

import pytest
import requests

from hub_ext.service.arguments import MAX_LOG_OFFSET, MAX_OFFSET, whole_number
from tests.hubproc import HubSession, api, traits, wait_for
from tests.test_jobs_hub import CONFIG, JOBS

COURSE = "demo101"
#: The attack run's values and the edges every integer argument is refused at.
OUT_OF_RANGE = ["-1", str(2**63 - 1), str(2**63), str(10**23), "99999999999999999999999", "1.5", "",
                "abc", "1e3", "0x10", "%2B1", "1_000", "\u0663", "\u00b2", "%00"]

#: (path after /api/ with {job} for a job's id, argument, who asks, minimum, maximum)
ARGUMENTS = [
    ("jobs", "offset", "student1", 0, MAX_OFFSET),
    ("jobs", "limit", "student1", 1, 200),
    ("jobs/{job}/logs", "offset", "student1", 0, MAX_LOG_OFFSET),
    ("jobs/{job}/logs", "index", "student1", 0, 1023),
    (f"courses/{COURSE}/audit", "offset", "teacher1", 0, MAX_OFFSET),
    (f"courses/{COURSE}/audit", "limit", "teacher1", 1, 200),
]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "number"), [
    ("0", 0), ("007", 7), ("-0", 0), (str(2**62), 2**62), ("-1", None), (str(2**62 + 1), None),
    ("9" * 21, None), ("", None), (None, None), ("1.5", None), ("1e3", None), ("+1", None),
    ("1_000", None), ("\u0663", None), ("\uff11", None), ("\u00b2", None), (" 1", None), ("1\n", None),
])
def test_a_whole_number_is_ascii_digits_within_the_range(text, number):
    """The parsing int_argument does: ``int()`` and ``str.isdigit`` take more than a query should."""
    assert whole_number(text, 0, 2**62) == number


@pytest.fixture(scope="module")
def hub(shared_hubs):
    """The session's hub with the job service of test_jobs_hub's configuration."""
    return shared_hubs.get(CONFIG + traits(JOBS))


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str]:
    return {u: HubSession(hub, u).new_token() for u in ("teacher1", "student1")}


@pytest.fixture(scope="module")
def job(hub, tokens) -> str:
    """A job of student1 that ran and ended (its log exists), as in the attack run."""
    body = {"id": "security-inputs", "name": "security-inputs", "command": ["true"]}
    r = api(hub, "POST", "jobs", tokens["student1"], json=body)
    assert r.status_code in (200, 201), r.text
    job_id = r.json()["id"]
    wait_for(lambda: api(hub, "GET", f"jobs/{job_id}", tokens["student1"]).json()["state"]
             in ("succeeded", "failed", "cancelled"), 90, f"job {job_id} to end")
    return job_id


def _get(hub, token: str, path: str, query: str) -> requests.Response:
    # the query is sent as written: "%00" and "" must reach the service as they are
    return api(hub, "GET", f"{path}?{query}", token)


def _message(r: requests.Response) -> str:
    assert r.status_code < 500, (r.status_code, r.text[:300])
    assert r.headers.get("Content-Type", "").startswith("application/json"), (r.status_code, r.text[:300])
    body = r.json()
    assert body["status"] == r.status_code and isinstance(body["message"], str) and body["message"]
    return body["message"]


@pytest.mark.hub
@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize(("path", "name", "who", "low", "high"), ARGUMENTS,
                         ids=[f"{p.split('/')[-1]}-{n}" for p, n, *_ in ARGUMENTS])
def test_an_integer_argument_out_of_range_is_a_400_saying_the_range(hub, tokens, job, path, name, who,
                                                                   low, high, value):
    r = _get(hub, tokens[who], path.format(job=job), f"{name}={value}")
    message = _message(r)
    if value == "%00":  # a NUL in a query is refused before any argument is read
        assert r.status_code == 400 and "NUL" in message, message
        return
    assert r.status_code == 400, (r.status_code, message)
    assert f"{name} must be a whole number from {low} to {high}" in message, message


@pytest.mark.hub
@pytest.mark.parametrize(("path", "name", "who", "low", "high"), ARGUMENTS,
                         ids=[f"{p.split('/')[-1]}-{n}" for p, n, *_ in ARGUMENTS])
def test_the_edges_of_each_range_are_taken_and_one_past_them_is_not(hub, tokens, job, path, name, who,
                                                                    low, high):
    path = path.format(job=job)
    for value in (low, high):
        r = _get(hub, tokens[who], path, f"{name}={value}")
        if name == "index" and value == high:  # in range, but the job has one replica
            assert r.status_code == 400 and "No replica worker-1023" in _message(r), r.text[:300]
        else:
            assert r.status_code == 200, (value, r.status_code, r.text[:300])
    for value in (low - 1, high + 1):
        r = _get(hub, tokens[who], path, f"{name}={value}")
        assert r.status_code == 400 and f"from {low} to {high}" in _message(r), (value, r.text[:300])


@pytest.mark.hub
def test_the_attack_runs_requests_are_answered_400(hub, tokens, job):
    student = tokens["student1"]
    for query in ("offset=99999999999999999999999", "offset=9223372036854775807"):
        r = _get(hub, student, f"jobs/{job}/logs", query)
        assert r.status_code == 400, r.text[:300]
        assert "offset must be a whole number from 0 to 4611686018427387904" in _message(r)
    r = _get(hub, student, "jobs", "offset=9223372036854775808")
    assert r.status_code == 400 and "offset must be a whole number from 0" in _message(r)
    r = _get(hub, student, f"jobs/{job}/logs", f"offset={MAX_LOG_OFFSET}")  # in range: past the end
    assert r.status_code == 200 and r.content == b"", r.text[:300]
    r = _get(hub, student, "jobs", f"offset={MAX_OFFSET}")
    assert r.status_code == 200 and r.json()["jobs"] == [] and r.json()["next_offset"] is None


@pytest.mark.hub
def test_a_missing_job_is_a_404_whatever_its_arguments(hub, tokens):
    for value in ("10000000000000000000000", "-1", "abc"):
        r = _get(hub, tokens["student1"], "jobs/no-such-job/logs", f"offset={value}")
        assert r.status_code == 404 and "No job no-such-job" in _message(r)


@pytest.mark.hub
@pytest.mark.parametrize(("who", "field", "value", "says"), [
    ("student1", "roles", -1, "roles must be a list of"),
    ("student1", "roles", 1.5, "roles must be a list of"),
    ("student1", "roles", True, "roles must be a list of"),
    ("student1", "roles", [{"name": "w", "profile": "cpu"}, 5], "roles[1] must be an object"),
    ("student1", "replicas", True, "replicas must be a whole number from 1 to 1024"),
    ("student1", "replicas", 2**63 - 1, "replicas must be a whole number from 1 to 1024"),
    ("student1", "max_runtime", 1e308, "max_runtime must be a positive number of seconds"),
    ("student1", "env", [], "env must be an object"),
    ("student1", "max_restarts", True, "max_restarts must be a whole number from 0 to 100"),
    ("teacher1", "priority", 2**40, "priority must be a whole number from -2147483648 to 2147483647"),
    ("teacher1", "priority", True, "priority must be a whole number"),
    ("student1", "priority", 2**40, "Only teachers of demo101"),
])
def test_a_job_body_of_the_wrong_type_or_range_is_a_400_saying_what_to_send(hub, tokens, who, field,
                                                                           value, says):
    before = api(hub, "GET", "jobs?limit=200", tokens[who]).json()["total"]
    r = api(hub, "POST", "jobs", tokens[who], json={"course": COURSE, "command": ["true"], field: value})
    message = _message(r)
    assert r.status_code == (403 if "Only teachers" in says else 400), (r.status_code, message)
    assert says in message, message
    assert api(hub, "GET", "jobs?limit=200", tokens[who]).json()["total"] == before  # nothing queued
