"""What the course page says in words: the audit log's sentences and how added people log in
(hub_ext.service.pages.sentences). The pages show these; tests/test_browser_class_day.py checks
them in a browser."""

from __future__ import annotations

import pytest

from hub_ext.service.pages.sentences import audit_sentence, login_sentence

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("actor", "action", "details", "says"), [
    ("teacher1", "quota.user.set", {"username": "student2", "limits": {
        "resources": {}, "servers": None, "gpu_hours_per_week": "2"}},
     "teacher1 set student2's limits to GPU-hours per week 2"),
    ("admin", "quota.course.set", {"limits": {"resources": {"cpu": "8"}, "servers": 30,
                                              "gpu_hours_per_week": None}},
     "admin set the course's limits to servers 30, cpu 8"),
    ("teacher1", "roster.import", {"set": {"a": "student", "b": "student", "t": "ta"}, "removed": ["c"]},
     "teacher1 imported a roster: made a and b students; made t ta; removed c"),
    ("teacher1", "members.change", {"set": {}, "removed": []},
     "teacher1 changed the members, which changed nothing"),
    ("teacher1", "template_published", {"template": "lab1", "version": 2, "files": 4},
     "teacher1 published lab1 v2 (4 files)"),
    ("student1", "template_seeded", {"template": "demo101/lab1", "version": "1",
                                     "summary": {"added": 3, "student_modified": 1}},
     "student1's home got the files of demo101/lab1 v1 (3 added, 1 student modified)"),
    ("student1", "share_created", {"owner": "student1", "path": "week1.ipynb", "kind": "read-only",
                                   "target_kind": "user", "target": "ta1"},
     "student1 shared student1's week1.ipynb read-only with ta1"),
    ("classhub", "share_expired", {"owner": "student1", "target_kind": "link"},
     "the share of student1's server with anyone with the link expired"),
    ("teacher1", "template_settings", {"reseed": "on_start"},
     "teacher1 set homes to be re-seeded at every server start"),
    ("student1", "notebook_submitted", {"competition": "house", "submission": 7},
     "student1 submitted a notebook to house (submission 7, runs as a job)"),
    ("classhub", "competition_run_failed", {"competition": "house", "submission": 7, "student": "student1",
                                            "message": "Your notebook crashed in cell 2: ValueError: x"},
     "student1's submission 7 to house failed: Your notebook crashed in cell 2: ValueError: x"),
    ("classhub", "competition_scored", {"competition": "house", "submission": 7, "student": "student1",
                                        "public_score": 0.5},
     "student1's submission 7 to house was scored (public score 0.5)"),
    ("teacher1", "competition_runner_set", {"competition": "house", "profile": "cpu",
                                            "predictions_file": "predictions.csv"},
     "teacher1 let the competition house take notebooks (profile cpu, writing predictions.csv)"),
    ("teacher1", "competition_runner_set", {"competition": "house"},
     "teacher1 stopped the competition house taking notebooks"),
    ("teacher1", "competition_scorer_set", {"competition": "house", "scored_by": "script"},
     "teacher1 set the competition house to be scored by a scoring script"),
    ("teacher1", "something.new", {"x": 1}, "teacher1: something.new"),
    ("teacher1", "quota.user.set", {"limits": "not a mapping"},
     "teacher1 set a member's limits to no limits"),
])
def test_each_audit_entry_reads_as_a_sentence(actor, action, details, says):
    assert audit_sentence(actor, action, details) == says


@pytest.mark.parametrize(("authenticator", "says"), [
    ("hub_ext.demo.DemoAuthenticator", "the demo password"),
    ("jupyterhub.auth.DummyAuthenticator", "checks no real password"),
    ("nativeauthenticator.nativeauthenticator.NativeAuthenticator", "sign up on this hub's sign-up page"),
    ("oauthenticator.github.GitHubOAuthenticator", "with their GitHub account"),
    ("jupyterhub.auth.PAMAuthenticator", "their account on this machine"),
    ("ldapauthenticator.LDAPAuthenticator", "login page (LDAPAuthenticator)"),
    (None, "this hub's login page with the username you give"),
])
def test_how_added_people_log_in_follows_the_authenticator(authenticator, says):
    assert says in login_sentence(authenticator)
