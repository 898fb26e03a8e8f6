"""What a student learns of other people through classhub: attacks through a real hub's proxy.

A waiting job's reason names "the owner's own jobs as they named them; other people's jobs only
by their course" (docs/teachers/jobs.md, on why a job waits). A job's id is its owner's name for it
plus a random suffix (``bio-secret-thesis-6d57f9ed``), so a reason that quotes another person's
job id names their job. Found by the visibility review: a job waiting behind another course's
reservation read "... when bio-secret-thesis-6d57f9ed starts on the nodes it needs".
"""

from __future__ import annotations

import pytest

from tests.hubproc import HubSession, api, hub_with_config, traits, wait_for
from tests.test_jobs_hub import CONFIG, JOBS, command

pytestmark = pytest.mark.hub

C, OTHER = "cs101", "bio201"
ROLES = {C: {"t_cs": "teacher", "s_cs": "student"}, OTHER: {"t_bio": "teacher", "s_bio": "student"}}
USERS = [u for members in ROLES.values() for u in members]
#: One reservation only: the job of another course that waits for all three GPUs holds it, and a
#: long job that fits now waits behind it (code behind_reservation).
POLICY = {"ClasshubJobs": {**JOBS["ClasshubJobs"], "reservation_depth": 1}}
EXTRA = f'\nc.DemoAuthenticator.accounts = ["admin", *{USERS!r}]\n'


@pytest.fixture(scope="module")
def hub(hub_root):
    hub = hub_with_config(hub_root, "visibility", CONFIG + traits(POLICY) + EXTRA)
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str]:
    tokens = {"admin": HubSession(hub, "admin").new_token()}
    for course, members in ROLES.items():
        assert api(hub, "POST", "courses", tokens["admin"], json={"name": course}).status_code == 201
        add = [{"username": u, "role": r} for u, r in members.items()]
        r = api(hub, "PUT", f"courses/{course}/members", tokens["admin"], json={"add": add})
        assert r.status_code == 200, r.text
    tokens.update({u: HubSession(hub, u).new_token() for u in USERS})
    return tokens


def submit(hub, token: str, course: str, name: str, gpus: int, runtime: int) -> str:
    body = {"name": name, "course": course, "command": command("600"), "max_runtime": runtime,
            "resources": {"nvidia.com/gpu": gpus}}
    r = api(hub, "POST", "jobs", token, json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_waiting_jobs_reason_never_names_another_persons_job(hub, tokens):
    holder = submit(hub, tokens["s_bio"], OTHER, "bio-holder", 1, 600)
    wait_for(lambda: api(hub, "GET", f"jobs/{holder}", tokens["s_bio"]).json()["state"] == "running",
             60, "the other course's first job to run")
    secret = submit(hub, tokens["s_bio"], OTHER, "bio-secret-thesis", 3, 600)
    mine = submit(hub, tokens["s_cs"], C, "cs-long", 1, 3600)
    try:
        def waiting():
            job = api(hub, "GET", f"jobs/{mine}", tokens["s_cs"]).json()
            return job if job["reason_code"] == "behind_reservation" else None

        job = wait_for(waiting, 30, "the student's job to wait behind the reservation")
        # the other student's job is not named, neither by its id nor by the name they gave it
        assert secret not in job["reason"] and "bio-secret-thesis" not in job["reason"], job["reason"]
        assert "s_bio" not in job["reason"]
        assert f"a job of course {OTHER}" in job["reason"], job["reason"]
        # nor in the job's history, nor in the listing the Jobs page and the panel read
        shown = api(hub, "GET", f"jobs/{mine}", tokens["s_cs"]).text
        listed = api(hub, "GET", "jobs", tokens["s_cs"]).text
        for text in (shown, listed):
            assert "bio-secret-thesis" not in text and "s_bio" not in text
        # and the job itself stays out of reach: the 404 of a missing job
        for path in (f"jobs/{secret}", f"jobs/{secret}/logs?index=0&offset=0"):
            r = api(hub, "GET", path, tokens["s_cs"])
            assert r.status_code == 404 and r.json()["message"].startswith(f"No job {secret} among"), r.text
        assert api(hub, "POST", f"jobs/{secret}/cancel", tokens["s_cs"]).status_code == 404
    finally:
        for token, job_id in ((tokens["s_cs"], mine), (tokens["s_bio"], secret), (tokens["s_bio"], holder)):
            api(hub, "POST", f"jobs/{job_id}/cancel", token)
