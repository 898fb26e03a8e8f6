"""Autograding end to end through a real ``classhub local --system-users`` hub's proxy (one hub).

What a teacher and students notice: the teacher releases an assignment and turns autograding on
with the source notebook (hidden tests included) and a profile; two students submit (one late);
each submission is graded as a job in the course's queue (named grade-<assignment>-<id>, owned by
the teacher, run as neither student nor the service); each student reads their own scores and
feedback, no one else's; a TA overrides a cell (audit entry); a regrade keeps the override; the
teacher exports the grades as CSV. And what must never happen: a student reading the hidden
tests through any endpoint (the file endpoint too), a grading notebook reading the service's
token, its environment, its database or another assignment's hidden tests; nor a daemon that a
first grading leaves behind reaching a second grading of the same grading account (one at a time,
nothing outlives its job: hub_ext.backends.local.sandbox).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import psutil
import pytest
import requests
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from hub_ext.backends import autograde
from hub_ext.backends.local import accounts
from hub_ext.core import grading as G
from tests.archives import zip_bytes
from tests.hubproc import BUSY_MACHINE, HubSession, LocalHub, api, traits, wait_for
from tests.system_accounts import system_users_hub

pytestmark = pytest.mark.hub

COURSE = "demo101"
A = f"courses/{COURSE}/assignments"
PREFIX = "jupyter-"
HIDDEN = "assert double(21) == 42, 'hidden-check-7f3a'"
OTHER_HIDDEN = "assert triple(5) == 15, 'other-hidden-9b2c'"
CONFIG = """
c.ClasshubLocalSpawner.profiles = [
    {"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True},
]
"""
#: a grading account of this module's own (dedicated, as docs/teachers/autograding.md asks): a job's
#: sweep kills what the account started meanwhile, so hubs on other workers must not share it
GRADER = "chgrade" + secrets.token_hex(4)
JOBS = {"ClasshubJobs": {"gpu_discovery_command": ["true"], "use_nvml": False, "interval": 0.5,
                         "grace": 2, "grader_user": GRADER}}


def nbg(grade_id: str, **meta) -> dict:
    return {"nbgrader": {"grade_id": grade_id, "schema_version": 3, "grade": False, "solution": False,
                         "locked": False, **meta}}


def source(hidden: str = HIDDEN, fn: str = "double") -> nbformat.NotebookNode:
    return new_notebook(cells=[
        new_markdown_cell("# Lab", metadata=nbg("intro", locked=True)),
        new_code_cell(f"def {fn}(x):\n    raise NotImplementedError()\n",
                      metadata=nbg("answer", solution=True)),
        new_code_cell(f"assert {fn}(0) == 0\n{G.BEGIN_HIDDEN}\n{hidden}\n{G.END_HIDDEN}\n",
                      metadata=nbg("q1", grade=True, points=2)),
        new_code_cell(f"assert {fn}(1) != 'x'\n", metadata=nbg("q2", grade=True, points=3)),
        new_markdown_cell("Explain.", metadata=nbg("essay", grade=True, solution=True, points=1)),
    ])


def answered(answer: str) -> bytes:
    nb = autograde.student_version(source())
    nb.cells[1].source = answer
    return nbformat.writes(nb).encode()


#: Student 2's answer: looks for the service's secrets and another assignment's hidden tests, and
#: makes the hidden test fail with what it found, so the feedback shows whatever leaked.
PROBE = '''
import glob, os
found = {"uid": os.getuid()}
for pid in os.listdir("/proc"):
    try:
        env = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    if b"JUPYTERHUB_API_TOKEN" in env or b"CLASSHUB_DB_URL" in env:
        found["env"] = env[:3000].decode(errors="replace")
for path in glob.glob(DATA + "/*.sqlite") + glob.glob(DATA + "/**/autograde/**/*.ipynb", recursive=True):
    try:
        found[path] = open(path, "rb").read()[:3000].decode(errors="replace")
    except OSError as e:
        found[path] = type(e).__name__
try:
    found["sandboxes"] = os.listdir(os.path.dirname(os.path.dirname(os.getcwd())))
except OSError as e:
    found["sandboxes"] = type(e).__name__
found["inputs"] = sorted(os.listdir(os.path.dirname(os.getcwd())))

class Spy(int):
    def __eq__(self, other):
        raise AssertionError("PROBE " + repr(found))
    __hash__ = int.__hash__

def double(x):
    return Spy(2 * x)
'''




@pytest.fixture(scope="module")
def hub(hub_root: Path):
    data = hub_root / "autograde"
    data.mkdir()
    (data / "jupyterhub_config.py").write_text(BUSY_MACHINE + CONFIG + traits(JOBS))
    hub = LocalHub(data_dir=data, extra_args=["--system-users", "--create-system-users"])
    names = [PREFIX + accounts.safe_name(u) for u in ("student1", "student2")]
    created = os.geteuid() == 0  # else system_users_hub skips (or fails in CI)
    if created:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        GRADER], check=True)
    try:
        with system_users_hub(hub, names) as started:
            yield started
    finally:
        if created:
            subprocess.run(["userdel", GRADER], check=False)


def _hand_in(hub: LocalHub, user: str, token: str, data: bytes) -> dict:
    """Put the notebook in the student's lab1 folder (their account's, as their server would
    write it) and press Submit."""
    homes = hub.data_dir / "homes"
    home = homes / accounts.safe_name(user)
    account = accounts.ensure_system_account(PREFIX + accounts.safe_name(user), home, create=True)
    accounts.prepare_home(homes, accounts.safe_name(user), account, private=True)
    work = home / "lab1"
    work.mkdir(exist_ok=True)
    (work / "lab1.ipynb").write_bytes(data)
    for path in (work, work / "lab1.ipynb"):
        os.chown(path, account.uid, account.gid)
    r = api(hub, "POST", f"{A}/lab1/submissions", token)
    assert r.status_code == 201, r.text
    return r.json()


def _graded(hub: LocalHub, token: str, submission: int, after: str | None = None) -> dict:
    def done():
        r = api(hub, "GET", f"{A}/lab1/submissions/{submission}", token)
        fb = r.json().get("feedback") or {}
        return (fb.get("state") in ("done", "failed") and fb.get("graded_at") != after) and r.json()
    return wait_for(done, 240, f"submission {submission} to be graded")


@pytest.fixture(scope="module")
def labs(hub: LocalHub) -> None:
    """lab1 and lab2 published by teacher1 (templates of their released notebooks, assignments
    due in an hour) and autograded from their sources: what every test here hands in to."""
    teacher = HubSession(hub, "teacher1").new_token()
    for name, nb in (("lab1", source()), ("lab2", source(OTHER_HIDDEN, "triple"))):
        released = nbformat.writes(autograde.student_version(nb)).encode()
        r = api(hub, "POST", f"courses/{COURSE}/templates/{name}/versions?home_folder={name}", teacher,
                data=zip_bytes({f"{name}.ipynb": released}), headers={"Content-Type": "application/zip"})
        assert r.status_code == 201, r.text
        now = datetime.now(timezone.utc)
        r = api(hub, "POST", A, teacher, json={"name": name, "template": name, "late_policy": "accept-late",
                                               "due_at": (now + timedelta(hours=1)).isoformat()})
        assert r.status_code == 201, r.text
        r = api(hub, "PUT", f"{A}/{name}/autograde", teacher, json={
            "notebooks": {f"{name}.ipynb": json.loads(nbformat.writes(nb))}, "profile": "cpu",
            "time_limit": 60})
        assert r.status_code == 200, r.text


def test_autograded_assignment_graded_as_jobs_with_feedback_overrides_and_csv(hub: LocalHub, labs):
    t = {u: HubSession(hub, u).new_token() for u in ("admin", "teacher1", "ta1", "student1", "student2")}
    teacher, ta, s1, s2 = t["teacher1"], t["ta1"], t["student1"], t["student2"]
    # what students are handed (the labs' templates) holds no hidden test
    assert HIDDEN.encode() not in nbformat.writes(autograde.student_version(source())).encode()

    # turning autograding on: the release must not hold hidden tests; the source keeps them
    bad = api(hub, "PUT", f"{A}/lab1/autograde", teacher, json={
        "notebooks": {"lab1.ipynb": json.loads(nbformat.writes(source()).replace("double(0)", "double(9)")
                                               .replace('"q2"', '"q9"'))}, "profile": "cpu"})
    assert bad.status_code == 400 and "lacks graded cells q9" in bad.json()["message"], bad.text
    r = api(hub, "PUT", f"{A}/lab1/autograde", s1, json={
        "notebooks": {"lab1.ipynb": json.loads(nbformat.writes(source()))}, "profile": "cpu"})
    assert r.status_code == 403
    for name, nb in (("lab1", source()), ("lab2", source(OTHER_HIDDEN, "triple"))):
        r = api(hub, "PUT", f"{A}/{name}/autograde", teacher, json={
            "notebooks": {f"{name}.ipynb": json.loads(nbformat.writes(nb))}, "profile": "cpu",
            "time_limit": 60})
        assert r.status_code == 200, r.text
        assert (r.json()["max_score"], r.json()["owner"]) == (6, "teacher1")

    # two submissions, graded as jobs: a right answer, and (late) an answer that probes for secrets
    first = _hand_in(hub, "student1", s1, answered("def double(x):\n    return x + x\n"))
    # the gradebook lists the whole roster: student2 has not submitted yet (no score, submitted 0:
    # "no grade" to an LMS import, not a zero); student1's row waits for its grading or has it
    r = api(hub, "GET", f"{A}/lab1/grades.csv", teacher)
    assert r.status_code == 200, r.text
    header, row1, row2 = r.text.splitlines()
    assert header == "username,score,max,late,submitted" and row2 == "student2,,6,0,0", r.text
    assert row1 in ("student1,,6,0,1", "student1,5,6,0,1"), r.text
    api(hub, "PUT", f"{A}/lab1", teacher, json={
        "opens_at": (datetime.now(timezone.utc) - timedelta(days=2)).isoformat(),
        "due_at": (datetime.now(timezone.utc) - timedelta(days=1)).isoformat()})
    second = _hand_in(hub, "student2", s2, answered(f"DATA = {str(hub.data_dir)!r}\n" + PROBE))
    assert second["late"] is True
    one, two = _graded(hub, s1, first["id"]), _graded(hub, s2, second["id"])
    assert (one["score"], one["max_score"]) == (5, 6), one["feedback"]
    cells = {c["grade_id"]: (c["status"], c["score"]) for c in one["feedback"]["notebooks"][0]["cells"]}
    assert cells == {"q1": ("passed", 2), "q2": ("passed", 3), "essay": ("manual", None)}
    assert two["score"] == 3, two["feedback"]
    (probe,) = [c["message"] for c in two["feedback"]["notebooks"][0]["cells"] if c["grade_id"] == "q1"]
    grader_uid = pwd.getpwnam(GRADER).pw_uid  # the grader ran as the grading account
    assert "PROBE" in probe and f"'uid': {grader_uid}," in probe, probe
    assert "'env'" not in probe and "token" not in probe.lower() and "sqlite format" not in probe.lower()
    assert "other-hidden" not in probe and "hidden-check" not in probe, probe
    # other gradings' folders cannot be listed; this one's inputs were gone before the code ran
    assert "'sandboxes': 'PermissionError'" in probe and "'submission'" in probe, probe
    assert "grading.json" not in probe and "'source'" not in probe, probe
    for account in ("student1", "student2"):
        assert f"'uid': {os.stat(hub.data_dir / 'homes' / account).st_uid}," not in probe

    # the grading was a job of the course, by the teacher, with a clear name; students see none
    jobs = api(hub, "GET", f"jobs?course={COURSE}", teacher).json()["jobs"]
    names = {j["name"]: j for j in jobs}
    assert {f"grade-lab1-{first['id']}", f"grade-lab1-{second['id']}"} <= set(names)
    assert names[f"grade-lab1-{first['id']}"]["owner"] == "teacher1"
    assert api(hub, "GET", "jobs", s1).json()["jobs"] == []

    # hidden tests reach no student through any endpoint; another's feedback is not theirs
    secret_bits = ("hidden-check-7f3a", "other-hidden-9b2c", G.BEGIN_HIDDEN)
    paths = [A, f"{A}/lab1", f"{A}/lab1/submissions", f"{A}/lab1/submissions/{first['id']}",
             f"{A}/lab1/autograde", f"{A}/lab1/grades.csv", f"{A}/lab1/download",
             f"{A}/lab1/submissions/{first['id']}/files/lab1.ipynb",
             f"{A}/lab1/submissions/{first['id']}/files/..%2F..%2F..%2Fautograde%2Fa1%2Flab1.ipynb",
             f"{A}/lab1/submissions/{first['id']}/files/../../../autograde/a1/lab1.ipynb",
             f"{A}/lab1/submissions/{second['id']}", f"courses/{COURSE}/templates"]
    for path in paths:
        r = api(hub, "GET", path, s1)
        assert not any(bit in r.text for bit in secret_bits), (path, r.text[:300])
        assert "PROBE" not in r.text and "student2" not in r.text, path  # another's feedback
    page = HubSession(hub, "student1").get(f"/services/classhub/courses/{COURSE}").text
    assert not any(bit in page for bit in secret_bits)
    assert "Score 5 / 6" in page and "classhub-feedback" in page  # their own feedback, on the course page
    assert api(hub, "GET", f"{A}/lab1/submissions/{second['id']}", s1).status_code == 404

    # a TA overrides the written answer (audit entry); a regrade keeps it; the staff table scores
    r = api(hub, "PUT", f"{A}/lab1/submissions/{first['id']}/scores", ta,
            json={"cell": "lab1.ipynb:essay", "score": 1, "reason": "clear"})
    assert r.status_code == 200 and r.json()["score"] == 6, r.text
    r = api(hub, "PUT", f"{A}/lab1/submissions/{first['id']}/scores", ta,
            json={"cell": "lab1.ipynb:essay", "score": 4})
    assert r.status_code == 400 and "worth 1 points" in r.json()["message"]
    assert api(hub, "PUT", f"{A}/lab1/submissions/{first['id']}/scores", s1,
               json={"cell": "lab1.ipynb:essay", "score": 1}).status_code == 403
    r = api(hub, "POST", f"{A}/lab1/submissions/{first['id']}/grade", teacher)
    assert r.status_code == 202, r.text
    again = _graded(hub, s1, first["id"], after=one["feedback"]["graded_at"])
    assert again["score"] == 6
    log = api(hub, "GET", f"courses/{COURSE}/audit?limit=50", teacher).json()["entries"]
    said = [e["sentence"] for e in log]
    assert "ta1 set lab1.ipynb:essay of student1's lab1 to 1 (was no score): clear" in said, said

    # the gradebook: one row per student of the roster, username,score,max,late,submitted
    r = api(hub, "GET", f"{A}/lab1/grades.csv", teacher)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    assert r.text.splitlines() == ["username,score,max,late,submitted", "student1,6,6,0,1",
                                   "student2,3,6,1,1"]
    r = api(hub, "GET", f"{A}/lab2/grades.csv", ta)  # nobody submitted lab2: every student, no score
    assert r.text.splitlines() == ["username,score,max,late,submitted", "student1,,6,0,0",
                                   "student2,,6,0,0"], r.text
    assert api(hub, "GET", f"{A}/lab1/grades.csv", s1).status_code == 403
    metrics = requests.get(f"{hub.url}/services/classhub/metrics",
                           headers={"Authorization": f"token {t['admin']}"}, timeout=30).text
    assert 'classhub_grading_jobs_total{course="demo101",outcome="graded"} 3.0' in metrics


# ------------------------------------------------------------------ competitions: notebooks and scripts
C = f"courses/{COURSE}/competitions"
IDS = [f"h{i}" for i in range(12)]
TRUTH = {k: ("cat" if i % 3 else "dog") for i, k in enumerate(IDS)}
LABELS = "id,label\n" + "".join(f"{k},{v}\n" for k, v in TRUTH.items())
LABEL_LINE = "h1,cat"  # a line of the hidden labels: in no answer to a student, in no probe's finding


def _notebook(*sources: str) -> bytes:
    return nbformat.writes(new_notebook(cells=[new_markdown_cell("# My model"),
                                               *[new_code_cell(s) for s in sources]])).encode()


#: A student's notebook that writes the right predictions (as a trained model would)
RIGHT = ("rows = " + repr(sorted(TRUTH.items())) + "\n"
         "with open('predictions.csv', 'w') as f:\n"
         "    f.write('id,prediction\\n' + ''.join(f'{k},{v}\\n' for k, v in rows))\n")

#: Looks for what a competition job must never reach, then fails with what it found, so the
#: student's own view of the failure shows whatever leaked. TARGETS: files the test names.
COMPETITION_PROBE = '''
import os
found = {"uid": os.getuid(), "environ": sorted(k for k in os.environ if "TOKEN" in k or "DB_URL" in k
                                                  or "SECRET" in k)}
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        env = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    if b"JUPYTERHUB_API_TOKEN" in env or b"CLASSHUB_DB_URL" in env:
        found["env"] = env[:200].decode(errors="replace")
for i, path in enumerate(TARGETS):
    try:
        found[i] = open(path, "rb").read()[:80].decode(errors="replace")
    except OSError as e:
        found[i] = type(e).__name__
try:
    found["sandboxes"] = os.listdir(os.path.dirname(os.path.dirname(os.getcwd())))
except OSError as e:
    found["sandboxes"] = type(e).__name__
'''


def _entry(hub: LocalHub, token: str, competition: str, entry: int) -> dict:
    """A submission once its jobs are over (scored or failed), as its student sees it."""
    def done():
        mine = api(hub, "GET", f"{C}/{competition}/submissions", token).json()
        found = next((s for s in mine if s["id"] == entry), None)
        return found if found and found["state"] != "pending" else None
    return wait_for(done, 240, f"submission {entry} of {competition} to be scored or to fail")


def _send_notebook(hub: LocalHub, token: str, data: bytes) -> requests.Response:
    return api(hub, "POST", f"{C}/house/notebooks", token, data=data,
               headers={"Content-Type": "application/x-ipynb+json"})


def test_competition_notebooks_and_scoring_scripts_run_as_jobs_in_the_grading_sandbox(hub: LocalHub):
    t = {u: HubSession(hub, u).new_token() for u in ("teacher1", "ta1", "student1", "student2")}
    teacher, s1, s2 = t["teacher1"], t["student1"], t["student2"]
    ends = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    for name in ("house", "scripted"):
        r = api(hub, "POST", C, teacher, json={"name": name, "metric": "accuracy", "daily_limit": 4,
                                               "ends_at": ends})
        assert r.status_code == 201, r.text
        r = api(hub, "PUT", f"{C}/{name}/labels", teacher, data=LABELS.encode(),
                headers={"Content-Type": "text/csv"})
        assert r.status_code == 200, r.text

    # notebooks only where the teacher lets them in, with a profile and the predictions file's name
    assert _send_notebook(hub, s1, _notebook(RIGHT)).status_code == 409
    runner = {"profile": "cpu", "time_limit": 120, "predictions_file": "predictions.csv"}
    assert api(hub, "PUT", f"{C}/house/runner", s1, json=runner).status_code == 403
    r = api(hub, "PUT", f"{C}/house/runner", teacher, json={**runner, "predictions_file": "../p.csv"})
    assert r.status_code == 400 and "not a plain file name" in r.json()["message"], r.text
    r = api(hub, "PUT", f"{C}/house/runner", teacher, json=runner)
    assert r.status_code == 200 and r.json()["takes_notebooks"] is True, r.text
    r = _send_notebook(hub, s1, b'{"cells": "no"}')
    assert r.status_code == 400 and "not a valid notebook" in r.json()["message"], r.text

    # a right notebook, then three that end badly; these wait for the test's go, so all four are
    # pending at once: each holds one of the day's places
    r = _send_notebook(hub, s1, _notebook(RIGHT))
    assert r.status_code == 202 and r.json()["state"] == "pending", r.text
    good = r.json()
    assert good["job"] == f"compete-house-{good['id']}"
    gate = Path(tempfile.mkdtemp(prefix="classhub-gate-"))
    os.chmod(gate, 0o755)
    wait = f"import os, time\nwhile not os.path.exists({str(gate / 'go')!r}):\n    time.sleep(0.2)\n"
    try:
        bad = [_send_notebook(hub, s1, _notebook(wait, src)).json() for src in (
            "raise ValueError('boom-17')",
            "x = 1  # writes nothing",
            "open('predictions.csv', 'w').write('id,prediction\\nzzz,cat\\n')")]
        assert all(b["state"] == "pending" for b in bad), bad
        r = _send_notebook(hub, s1, _notebook(RIGHT))
        assert r.status_code == 409 and "used all 4 submissions of today" in r.json()["message"]
        (gate / "go").touch()
        scored = _entry(hub, s1, "house", good["id"])
        crash, nothing, malformed = (_entry(hub, s1, "house", b["id"]) for b in bad)
    finally:
        shutil.rmtree(gate, ignore_errors=True)
    assert (scored["state"], scored["public_score"], scored["has_file"]) == ("scored", 1.0, True), scored
    assert crash["state"] == "failed" and "crashed in cell 3: ValueError: boom-17" in crash["message"], crash
    assert "wrote no predictions.csv in its folder" in nothing["message"], nothing
    assert "predictions were refused" in malformed["message"] and "'zzz'" in malformed["message"], malformed
    one = api(hub, "GET", f"{C}/house", s1).json()
    assert one["left_today"] == 3  # the failed ones gave their places back
    board = api(hub, "GET", f"{C}/house/leaderboard", s1).json()["public"]
    assert [(r["student"], r["score"], r["submissions"]) for r in board] == [("student1", 1.0, 1)]
    # only a teacher runs a failed submission again
    assert api(hub, "POST", f"{C}/house/submissions/{crash['id']}/rescore", s1).status_code == 403

    # the runs were jobs of the course, by the teacher; a student's jobs list shows none of them
    jobs = {j["name"]: j for j in api(hub, "GET", f"jobs?course={COURSE}", teacher).json()["jobs"]}
    assert jobs[f"compete-house-{good['id']}"]["owner"] == "teacher1"
    assert not [j for j in api(hub, "GET", "jobs", s2).json()["jobs"] if j["name"].startswith("compete-")]

    # attack: student2's notebook looks for the service's token and database, the hidden labels and
    # student1's notebook and predictions; whatever it finds is in its failure sentence
    storage = hub.data_dir / "submissions" / "competitions"
    labels_file = next(storage.glob("c*/labels-*.csv"))
    theirs = sorted(p for p in storage.glob("c*/*/*") if p.suffix in (".ipynb", ".csv"))
    targets = [*(str(p) for p in hub.data_dir.glob("*.sqlite")), str(labels_file), *map(str, theirs)]
    assert len(targets) >= 4, targets
    probe = _notebook(f"TARGETS = {targets!r}\n" + COMPETITION_PROBE,
                      "raise AssertionError('PROBE ' + repr(found))")
    r = _send_notebook(hub, s2, probe)
    assert r.status_code == 202, r.text
    seen = _entry(hub, s2, "house", r.json()["id"])["message"]
    grader = f"'uid': {pwd.getpwnam(GRADER).pw_uid},"
    assert "PROBE" in seen and grader in seen, seen  # the grading account, not student2
    assert "'env'" not in seen and "'environ': []" in seen, seen
    for i in range(len(targets)):
        assert f"{i}: 'PermissionError'" in seen, (i, targets[i], seen)
    assert "'sandboxes': 'PermissionError'" in seen
    assert LABEL_LINE not in seen and "id,prediction" not in seen and "SQLite" not in seen
    for account in ("student1", "student2"):
        assert f"'uid': {os.stat(hub.data_dir / 'homes' / account).st_uid}," not in seen

    # a teacher's scoring script: checked as Python, run in the sandbox (never in the service)
    script = {"profile": "cpu", "time_limit": 60, "higher_is_better": True}
    r = api(hub, "PUT", f"{C}/scripted/scorer", teacher, json={**script, "source": "def score(:\n"})
    assert r.status_code == 400 and "not valid Python (line 1" in r.json()["message"], r.text
    r = api(hub, "PUT", f"{C}/scripted/scorer", teacher, json={**script, "source": "x = 1\n"})
    assert r.status_code == 400 and "defines no function score" in r.json()["message"]
    assert api(hub, "PUT", f"{C}/scripted/scorer", s1, json={**script, "source": "x = 1"}).status_code == 403
    probe_script = (f"TARGETS = {targets!r}\n" + COMPETITION_PROBE.replace("\n", "\n    ")
                    .replace("\n    import os", "import os\ndef score(labels_path, predictions_path):", 1)
                    + "\n    raise RuntimeError('PROBE ' + repr(found))\n")
    r = api(hub, "PUT", f"{C}/scripted/scorer", teacher, json={**script, "source": probe_script})
    assert r.status_code == 200 and r.json()["scored_by"] == "script", r.text
    right = ("id,prediction\n" + "".join(f"{k},{v}\n" for k, v in TRUTH.items())).encode()
    r = api(hub, "POST", f"{C}/scripted/submissions", s1, data=right, headers={"Content-Type": "text/csv"})
    assert r.status_code == 202 and r.json()["state"] == "pending", r.text
    entry = r.json()["id"]
    failed = _entry(hub, s1, "scripted", entry)
    assert failed["state"] == "failed" and "scoring script failed" in failed["message"], failed
    assert "PROBE" not in json.dumps(failed) and "detail" not in failed  # the student: the sentence only
    (staff,) = [s for s in api(hub, "GET", f"{C}/scripted/submissions", teacher).json() if s["id"] == entry]
    detail = staff["detail"]
    assert "PROBE" in detail and grader in detail and "'env'" not in detail, detail
    assert "'environ': []" in detail and "'sandboxes': 'PermissionError'" in detail, detail
    for i in range(len(targets)):
        assert f"{i}: 'PermissionError'" in detail, (i, targets[i], detail)

    # a script that answers no number: a sentence, nothing lost; fixed, the kept file is scored
    r = api(hub, "PUT", f"{C}/scripted/scorer", teacher, json={
        **script, "source": "def score(labels_path, predictions_path):\n    return 'abc'\n"})
    assert r.status_code == 200, r.text
    assert api(hub, "POST", f"{C}/scripted/submissions/{entry}/rescore", teacher).status_code == 202
    again = _entry(hub, s1, "scripted", entry)
    assert again["state"] == "failed" and "not a finite number" in again["message"], again
    # the teacher finds it on the course page, with its sentence and a Re-run; students never
    page = HubSession(hub, "teacher1").get(f"/services/classhub/courses/{COURSE}").text
    card = page.split('data-competition="scripted"', 1)[1]
    failed = card.split('class="table table-sm classhub-failed-entries"', 1)[1].split("</table>", 1)[0]
    assert f'data-entry="{entry}"' in failed and "not a finite number" in failed and "Re-run" in failed
    assert "classhub-failed-entries" not in HubSession(hub, "student2").get(
        f"/services/classhub/courses/{COURSE}").text
    accuracy = ("import csv\n"
                "def score(labels_path, predictions_path):\n"
                "    truth = {r['id']: r['label'] for r in csv.DictReader(open(labels_path))}\n"
                "    said = {r['id']: r['prediction'] for r in csv.DictReader(open(predictions_path))}\n"
                "    return sum(said.get(k) == v for k, v in truth.items()) / len(truth)\n")
    r = api(hub, "PUT", f"{C}/scripted/scorer", teacher, json={**script, "source": accuracy})
    assert r.status_code == 200, r.text
    assert api(hub, "POST", f"{C}/scripted/submissions/{entry}/rescore", t["ta1"]).status_code == 403
    assert api(hub, "POST", f"{C}/scripted/submissions/{entry}/rescore", teacher).status_code == 202
    done = _entry(hub, s1, "scripted", entry)
    assert (done["state"], done["public_score"]) == ("scored", 1.0), done
    r = api(hub, "PUT", f"{C}/scripted/scorer", teacher, json={**script, "source": accuracy})
    assert r.status_code == 409 and "can no longer change" in r.json()["message"]
    assert api(hub, "GET", f"{C}/scripted/scorer", s1).status_code == 403  # the script is staff's

    # the course page: Submit notebook beside the upload, each submission's state and sentence
    page = HubSession(hub, "student1").get(f"/services/classhub/courses/{COURSE}").text
    assert "classhub-competition-notebook" in page and "Submit notebook" in page
    assert 'data-state="failed"' in page and "boom-17" in page and LABEL_LINE not in page
    log = api(hub, "GET", f"courses/{COURSE}/audit?limit=100", teacher).json()["entries"]
    said = [e["sentence"] for e in log]
    assert f"student1 submitted a notebook to house (submission {good['id']}, runs as a job)" in said
    assert any(s.startswith(f"student1's submission {good['id']} to house was scored") for s in said), said


# ------------------------------------------------------------------ one grading account, two jobs
#: A first grading's answer: leaves a daemon behind (double fork, setsid) that hunts, through
#: /proc, for another grading of the same account (its sandbox folder and kernel connection file in
#: command lines, its working folder) and writes what it reaches into OUT; the grading itself
#: waits until the test says the second grading was submitted (OUT/go).
LURKER = '''
import os, re, time
KERNEL, GRADER_PID = os.getpid(), os.getppid()
def _hunt():
    mine = os.path.dirname(os.getcwd())
    root = os.path.dirname(mine) + "/"
    with open(OUT + "/daemon.pid", "w") as f:
        f.write(str(os.getpid()))
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if int(pid) in (KERNEL, GRADER_PID, os.getpid()):
                continue
            try:
                args = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\\0")
            except OSError:
                continue
            try:
                same = os.stat(f"/proc/{pid}").st_uid == os.getuid()
            except OSError:
                continue
            places = [a for a in args if re.match(re.escape(root) + "[0-9a-f]{32}", a)
                      or (same and ("kernel-" in a or a.endswith(".json")))]
            try:
                places.append(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                pass
            for place in places:
                if mine in place or not place.startswith("/"):
                    continue
                if place.startswith(root):
                    open(OUT + "/seen-" + pid, "w").write(" ".join(args))
                for path in (place, place + "/submission/lab1.ipynb", place + "/lab1.ipynb"):
                    try:
                        data = open(path, "rb").read() if os.path.isfile(path) else os.listdir(path)
                    except OSError:
                        continue
                    open(OUT + "/found-" + pid, "a").write(str(data)[:4000])
        time.sleep(0.05)

child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            _hunt()
        finally:
            os._exit(0)
    os._exit(0)
os.waitpid(child, 0)
for _ in range(1000):
    if os.path.exists(OUT + "/go"):
        break
    time.sleep(0.05)

def double(x):
    return x + x
'''


def test_a_daemon_left_by_one_grading_never_reaches_the_next(hub: LocalHub, labs):
    """Two gradings of the one grading account: the second waits (admitted, with a sentence)
    until the first is over, the first's daemon is killed when it ends, and it reaches nothing of
    the second (its submission, its kernel)."""
    t = {u: HubSession(hub, u).new_token() for u in ("teacher1", "student1", "student2")}
    out = Path(tempfile.mkdtemp(prefix="classhub-lurker-"))
    out.chmod(0o1777)
    try:
        first = _hand_in(hub, "student1", t["student1"],
                         answered(f"OUT = {str(out)!r}\n" + LURKER))
        wait_for(lambda: (out / "daemon.pid").exists(), 240, "the first grading's daemon to start")
        secret = "victim-" + secrets.token_hex(8)
        second = _hand_in(hub, "student2", t["student2"],
                          answered(f"# {secret}\ndef double(x):\n    return 2 * x\n"))

        def job(submission: dict) -> dict:
            jobs = api(hub, "GET", f"jobs?course={COURSE}", t["teacher1"]).json()["jobs"]
            (found,) = [j for j in jobs if j["name"] == f"grade-lab1-{submission['id']}"]
            return api(hub, "GET", f"jobs/{found['id']}", t["teacher1"]).json()

        def held_back():
            said = [e["message"] for e in job(second)["events"]]
            return any("run one at a time" in m for m in said) and said
        said = wait_for(held_back, 240, "the second grading to wait for the first")
        assert any(f"grading account {GRADER}" in m for m in said), said
        (out / "go").write_text("")
        one, two = _graded(hub, t["student1"], first["id"]), _graded(hub, t["student2"], second["id"])
        assert one["score"] == 5 and two["score"] == 5, (one["feedback"], two["feedback"])

        # the two never ran at once: the second started after the first had ended
        a, b = job(first), job(second)
        assert a["finished_at"] and b["started_at"] and b["started_at"] >= a["finished_at"], (a, b)
        # the daemon is gone, and it reached nothing of the second grading
        pid = int((out / "daemon.pid").read_text())
        try:  # a killed daemon may stay a zombie until its reaper (init) collects it: it is dead
            daemon = psutil.Process(pid)
            alive = (daemon.status() != psutil.STATUS_ZOMBIE
                     and daemon.uids().real == pwd.getpwnam(GRADER).pw_uid)
        except psutil.NoSuchProcess:
            alive = False
        assert not alive, "the first grading's daemon outlived its job"
        left = {p.name: p.read_text(errors="replace") for p in out.iterdir()}
        assert not [n for n in left if n.startswith(("found-", "seen-"))], left
        assert not any(secret in text for text in left.values()), left
    finally:
        shutil.rmtree(out, ignore_errors=True)
