"""Competitions end to end through a real ``classhub local`` hub's proxy (one hub for the module).

What a teacher and students notice: the teacher creates a competition with hidden labels; two
students upload predictions and are scored at once; a file with a missing id is refused with a
sentence and costs nothing; the daily limit refuses one more with a sentence; the leaderboard
shows each student's best, a tie going to the earlier submission, on the public split during the
competition and on the private split after its end (staff: both, always). And what must never
happen: a student reading the labels or another's predictions file, a member of another course
seeing anything of the competition.
"""

from __future__ import annotations

import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from tests.hubproc import HubSession, LocalHub, api, tokens_with_an_outsider

pytestmark = pytest.mark.hub

COURSE = "demo101"
C = f"courses/{COURSE}/competitions"
IDS = [f"img{i:03d}" for i in range(40)]
TRUTH = {k: ("cat" if i % 3 else "dog") for i, k in enumerate(IDS)}
LABELS = "id,label\n" + "".join(f"{k},{v}\n" for k, v in TRUTH.items())
SECRET_LINE = "img001,cat"  # a line of the labels: never in an answer to a student


def _predictions(right: bool, drop: int = 0) -> bytes:
    rows = [(k, v if right else ("dog" if v == "cat" else "cat")) for k, v in TRUTH.items()][drop:]
    return ("id,prediction\n" + "".join(f"{k},{v}\n" for k, v in rows)).encode()


def _labels(hub: LocalHub, token: str, text: str) -> requests.Response:
    return api(hub, "PUT", f"{C}/digits/labels", token, data=text.encode(),
               headers={"Content-Type": "text/csv"})


def _submit(hub: LocalHub, token: str, data: bytes) -> requests.Response:
    return api(hub, "POST", f"{C}/digits/submissions", token, data=data,
               headers={"Content-Type": "text/csv"})


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = LocalHub(data_dir=hub_root / "competitions").start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return tokens_with_an_outsider(hub, ("teacher1", "ta1", "student1", "student2"), "s9", "student")


def test_create_submit_limit_and_leaderboard_before_and_after_the_end(hub: LocalHub, tokens: dict[str, str]):
    teacher, s1, s2 = tokens["teacher1"], tokens["student1"], tokens["student2"]
    now = datetime.now(timezone.utc)
    body = {"name": "digits", "title": "Cats or dogs", "metric": "accuracy",
            "public_fraction": 0.5, "daily_limit": 2, "ends_at": (now + timedelta(hours=1)).isoformat()}
    r = api(hub, "POST", C, s1, json=body)
    assert r.status_code == 403 and "Only a teacher" in r.json()["message"]
    r = api(hub, "POST", C, teacher, json=body)
    assert r.status_code == 201, r.text
    assert api(hub, "POST", C, teacher, json=body).status_code == 409
    # without labels students do not see it, and nothing can be scored
    assert api(hub, "GET", C, s1).json() == []
    assert _submit(hub, s1, _predictions(True)).status_code == 404
    r = _labels(hub, teacher, "id,label\nimg1,cat\nimg1,dog\n")
    assert r.status_code == 400 and "repeats the id 'img1'" in r.json()["message"], r.text
    assert _labels(hub, s1, LABELS).status_code == 403
    r = _labels(hub, teacher, "id,label\nimg1,cat\n")  # a first file, replaced before any submission
    assert r.status_code == 200 and r.json()["rows"] == 1, r.text
    r = _labels(hub, teacher, LABELS)
    assert r.status_code == 200, r.text
    assert (r.json()["rows"], r.json()["metric"], r.json()["has_labels"]) == (40, "accuracy", True)
    assert SECRET_LINE not in r.text

    # the labels are a 0600 file in a 0700 folder of the service's own
    root = hub.data_dir / "submissions" / "competitions"
    (labels_file,) = root.glob("c*/labels-*.csv")  # the replaced file is gone
    assert labels_file.read_text() == LABELS
    assert stat.S_IMODE(os.stat(labels_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700

    # a file with missing ids: a sentence saying what to change, and nothing kept or counted
    r = _submit(hub, s1, _predictions(True, drop=3))
    assert r.status_code == 400, r.text
    assert "3 id(s) of the test set have no prediction ('img000', 'img001', 'img002')" in r.json()["message"]
    r = _submit(hub, s1, b"id,prediction\n" + _predictions(True)[14:] + b"zzz,cat\n")
    assert r.status_code == 400
    assert "'zzz', which is not in this competition's test set" in r.json()["message"]
    assert api(hub, "GET", f"{C}/digits/submissions", s1).json() == []

    # three accepted submissions: student1 right (first), student2 wrong, student1 wrong
    r = _submit(hub, s1, _predictions(True))
    assert r.status_code == 201, r.text
    best = r.json()
    assert (best["public_score"], best["private_score"]) == (1.0, None)  # private: after the end
    assert _submit(hub, s2, _predictions(False)).json()["public_score"] == 0.0
    assert _submit(hub, s1, _predictions(False)).status_code == 201
    # the daily limit (2): a third one today is refused with the sentence, and not kept
    r = _submit(hub, s1, _predictions(True))
    assert r.status_code == 409 and "used all 2 submissions of today (UTC)" in r.json()["message"]
    # student2's all-right file ties student1's best: the earlier one (student1's) ranks first
    assert _submit(hub, s2, _predictions(True)).status_code == 201
    r = _labels(hub, teacher, LABELS)  # once scored, the labels no longer change
    assert r.status_code == 409 and "can no longer change" in r.json()["message"]

    one = api(hub, "GET", f"{C}/digits", s1).json()
    assert (one["left_today"], len(one["my_submissions"]), one["accepting"]) == (0, 2, True)
    board = api(hub, "GET", f"{C}/digits/leaderboard", s1).json()
    assert board["shown"] == "public" and board["private"] is None
    assert [(r["rank"], r["student"], r["score"], r["submissions"]) for r in board["public"]] == [
        (1, "student1", 1.0, 2), (2, "student2", 1.0, 2)]
    staff = api(hub, "GET", f"{C}/digits/leaderboard", tokens["ta1"]).json()
    assert staff["public"] and [r["score"] for r in staff["private"]] == [1.0, 1.0]
    everyone = api(hub, "GET", f"{C}/digits/submissions", tokens["ta1"]).json()
    assert len(everyone) == 4 and all(s["private_score"] is not None for s in everyone)

    # never: the labels or another student's file for a student; anything for another course
    theirs = api(hub, "GET", f"{C}/digits/submissions", s2).json()
    assert {s["student"] for s in theirs} == {"student2"}
    r = api(hub, "GET", f"{C}/digits/submissions/{best['id']}/file", s2)
    assert r.status_code == 404 and "img0" not in r.text
    mine = api(hub, "GET", f"{C}/digits/submissions/{best['id']}/file", s1)
    assert mine.status_code == 200 and mine.text == _predictions(True).decode()
    assert mine.headers["Content-Type"].startswith("text/plain")
    for answer in (api(hub, "GET", C, s2), api(hub, "GET", f"{C}/digits", s2),
                   HubSession(hub, "student2").get(f"/services/classhub/courses/{COURSE}")):
        assert SECRET_LINE not in answer.text and "seed" not in answer.text
    for path in (C, f"{C}/digits", f"{C}/digits/leaderboard", f"{C}/digits/submissions",
                 f"{C}/digits/submissions/{best['id']}/file"):
        r = api(hub, "GET", path, tokens["s9"])
        assert r.status_code == 404 and "img0" not in r.text and "student1" not in r.text, (path, r.text)
    assert _submit(hub, tokens["s9"], _predictions(True)).status_code == 404

    # the course page: the student's upload, their submissions and the public board; the teacher's form
    page = HubSession(hub, "student1").get(f"/services/classhub/courses/{COURSE}").text
    assert 'data-competition="digits"' in page and "classhub-competition-submit" in page
    assert 'data-split="public"' in page and 'data-split="private"' not in page
    assert "shows students by their user names" in page and 'id="create-competition"' not in page
    teacher_page = HubSession(hub, "teacher1").get(f"/services/classhub/courses/{COURSE}").text
    assert 'id="create-competition"' in teacher_page and 'data-split="private"' in teacher_page

    # anonymous names for students (staff still see names)
    assert api(hub, "PUT", f"{C}/digits", teacher, json={"anonymous": True}).status_code == 200
    names = [r["student"] for r in api(hub, "GET", f"{C}/digits/leaderboard", s1).json()["public"]]
    assert names[0] == "student1" and names[1].startswith("participant ")

    # after the end: the private split for everyone, private scores shown, no more submissions
    r = api(hub, "PUT", f"{C}/digits", teacher, json={"opens_at": (now - timedelta(days=1)).isoformat(),
                                                      "ends_at": (now - timedelta(minutes=1)).isoformat()})
    assert r.status_code == 200, r.text
    board = api(hub, "GET", f"{C}/digits/leaderboard", s2).json()
    assert board["shown"] == "private" and board["public"] is None
    assert [(r["rank"], r["score"], r["me"]) for r in board["private"]] == [(1, 1.0, False), (2, 1.0, True)]
    assert api(hub, "GET", f"{C}/digits/submissions", s1).json()[0]["private_score"] == 1.0
    r = _submit(hub, s2, _predictions(True))
    assert r.status_code == 409 and "ended" in r.json()["message"]

    # the count a dashboard shows; the audit log's sentences
    r = requests.get(f"{hub.url}/services/classhub/metrics",
                     headers={"Authorization": f"token {tokens['admin']}"}, timeout=30)
    assert 'classhub_competition_submissions_total{course="demo101"} 4.0' in r.text
    log = api(hub, "GET", f"courses/{COURSE}/audit?limit=50", teacher).json()["entries"]
    said = [e["sentence"] for e in log]
    assert "teacher1 created the competition digits (accuracy)" in said
    assert "teacher1 uploaded 40 hidden labels of the competition digits" in said
    assert "student1 submitted predictions to digits (public score 1)" in said
    assert any(s.startswith("teacher1 changed ends_at, opens_at of the competition digits") for s in said)
