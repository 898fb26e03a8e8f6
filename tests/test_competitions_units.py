"""Competitions without a hub: the split, the scores, strict parsing, the ranking, who may do what.

What a teacher and a student notice: every id of the test set counts on exactly one leaderboard
(public during the competition, private at the end) and always the same one; a score is the
metric computed directly on the labels; a predictions file with an unknown, repeated or missing
id, or too large, is refused with a sentence saying what to change; a tie goes to the earlier
submission; a member of another course is told the course is none of theirs.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.backends import competition_runner as runner
from hub_ext.backends.competitions import CompetitionStorage
from hub_ext.core import authz
from hub_ext.core import competitions as c
from hub_ext.service.competitions.runs import split_labels
from hub_ext.service.jobs.sandboxed import grader_command

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=timezone.utc)
ids = st.lists(st.text(st.characters(codec="utf-8", exclude_characters=",\"\r\n\x00"), min_size=1,
                       max_size=12).map(str.strip).filter(bool), min_size=1, max_size=60, unique=True)


def _csv(header: str, rows: dict[str, object]) -> bytes:
    return (header + "\n" + "".join(f"{k},{v}\n" for k, v in rows.items())).encode()


# ---- the split ----------------------------------------------------------------------------------


@given(ids, st.text(max_size=20), st.floats(min_value=0.01, max_value=0.99))
def test_the_split_is_a_partition_and_stable(keys, seed, fraction):
    public, private = c.split(keys, seed, fraction)
    assert sorted(public + private) == sorted(keys)
    assert not set(public) & set(private)
    assert c.split(list(reversed(keys)), seed, fraction) == (public[::-1], private[::-1])
    for key in keys:  # the same id lands on the same side alone as among others
        assert c.is_public(key, seed, fraction) == (key in public)


def test_the_split_follows_the_fraction_roughly():
    public, _ = c.split([str(i) for i in range(10_000)], "seed", 0.3)
    assert 2700 < len(public) < 3300


# ---- the scores ---------------------------------------------------------------------------------


labels_and_guesses = ids.flatmap(lambda keys: st.tuples(
    st.just(keys), st.lists(st.sampled_from("abc"), min_size=len(keys), max_size=len(keys)),
    st.lists(st.sampled_from("abc"), min_size=len(keys), max_size=len(keys))))


@given(labels_and_guesses)
def test_accuracy_and_macro_f1_are_the_direct_computation(case):
    keys, truth, guess = case
    labels = c.parse_labels(_csv("id,label", dict(zip(keys, truth, strict=True))), c.ACCURACY)
    predicted = c.parse_predictions(_csv("id,prediction", dict(zip(keys, guess, strict=True))), labels,
                                    c.ACCURACY)
    right = sum(t == g for t, g in zip(truth, guess, strict=True))
    assert c.score(c.ACCURACY, labels, predicted, keys) == right / len(keys)
    f1 = []
    for cls in sorted(set(truth)):
        tp = sum(t == g == cls for t, g in zip(truth, guess, strict=True))
        fp = sum(g == cls != t for t, g in zip(truth, guess, strict=True))
        fn = sum(t == cls != g for t, g in zip(truth, guess, strict=True))
        f1.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    assert c.score(c.MACRO_F1, labels, predicted, keys) == pytest.approx(sum(f1) / len(f1))


numbers = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(ids.flatmap(lambda keys: st.tuples(st.just(keys), st.lists(numbers, min_size=len(keys),
                                                                  max_size=len(keys)),
                                          st.lists(numbers, min_size=len(keys), max_size=len(keys)))))
def test_rmse_is_the_direct_computation(case):
    keys, truth, guess = case
    hidden = {k: repr(v) for k, v in zip(keys, truth, strict=True)}
    labels = c.parse_labels(_csv("id,label", hidden), c.RMSE)
    sent = {k: repr(v) for k, v in zip(keys, guess, strict=True)}
    predicted = c.parse_predictions(_csv("id,prediction", sent), labels, c.RMSE)
    direct = math.sqrt(sum((g - t) ** 2 for t, g in zip(truth, guess, strict=True)) / len(keys))
    assert c.score(c.RMSE, labels, predicted, keys) == pytest.approx(direct, rel=1e-9, abs=1e-9)


def test_an_empty_split_has_no_score():
    assert c.score(c.ACCURACY, {"1": "a"}, {"1": "a"}, []) is None


# ---- strict parsing -----------------------------------------------------------------------------

LABELS = c.parse_labels(b"id,label\n1,cat\n2,dog\n3,cat\n", c.ACCURACY)


@pytest.mark.parametrize("data, sentence", [
    (b"id,prediction\n1,cat\n2,dog\n", r"1 id\(s\) of the test set have no prediction \('3'\)"),
    (b"id,prediction\n1,cat\n2,dog\n3,cat\n9,cat\n", r"id '9', which is not in this competition's test set"),
    (b"id,prediction\n1,cat\n1,dog\n2,dog\n3,cat\n", r"Line 3 repeats the id '1'"),
    (b"id,label\n1,cat\n2,dog\n3,cat\n", r"must start with the header line id,prediction"),
    (b"id,prediction\n1,cat,x\n", r"Line 2 of the predictions file has 3 fields"),
    (b"id,prediction\n1,\n2,dog\n3,cat\n", r"Line 2 of the predictions file has an empty value"),
    (b"\xff\xfe", r"not UTF-8"),
    (b"", r"must start with the header line"),
])
def test_a_bad_predictions_file_gets_a_sentence(data, sentence):
    with pytest.raises(c.CompetitionError, match=sentence):
        c.parse_predictions(data, LABELS, c.ACCURACY)


def test_size_and_row_limits():
    with pytest.raises(c.CompetitionError, match="more than the 10 this competition takes"):
        c.parse_predictions(b"id,prediction\n1,cat\n2,dog\n3,cat\n", LABELS, c.ACCURACY,
                            c.Limits(max_bytes=10))
    with pytest.raises(c.CompetitionError, match="more than 2 rows"):
        c.parse_predictions(b"id,prediction\n1,cat\n2,dog\n3,cat\n", LABELS, c.ACCURACY, c.Limits(max_rows=2))
    with pytest.raises(c.CompetitionError, match="not a finite number"):
        c.parse_labels(b"id,label\n1,nan\n", c.RMSE)
    with pytest.raises(c.CompetitionError, match="repeats the id '1'"):
        c.parse_labels(b"id,label\n1,a\n1,b\n", c.ACCURACY)
    # a byte-order mark and CRLF line ends (a spreadsheet's CSV) are fine
    assert c.parse_predictions(b"\xef\xbb\xbfid,prediction\r\n1,cat\r\n2,dog\r\n3,cat\r\n", LABELS,
                               c.ACCURACY) == {"1": "cat", "2": "dog", "3": "cat"}


# ---- the ranking and the window -----------------------------------------------------------------


def test_best_submission_per_student_ties_to_the_earlier():
    entries = [
        c.Entry(1, "ann", T0, 0.5, 0.9),
        c.Entry(2, "bob", T0 + timedelta(minutes=1), 0.8, 0.1),
        c.Entry(3, "ann", T0 + timedelta(minutes=2), 0.8, 0.2),  # ann's best public, tied with bob's
        c.Entry(4, "cat", T0 + timedelta(minutes=3), None, 0.5),
    ]
    assert [(r, e.id) for r, e in c.leaderboard(entries, c.ACCURACY, "public")] == [(1, 2), (2, 3), (3, 4)]
    assert [(r, e.id) for r, e in c.leaderboard(entries, c.ACCURACY, "private")] == [(1, 1), (2, 4), (3, 2)]
    # lower is better for RMSE
    assert [e.id for _, e in c.leaderboard(entries, c.RMSE, "private")] == [2, 3, 4]


def test_the_window_and_the_utc_day():
    early = c.window_verdict(T0, T0 + timedelta(days=1), T0 - timedelta(seconds=1))
    assert early.startswith("The competition opens")
    assert c.window_verdict(T0, T0 + timedelta(days=1), T0) == ""
    assert "ended" in c.window_verdict(T0, T0 + timedelta(days=1), T0 + timedelta(days=2))
    with pytest.raises(c.CompetitionError, match="ends_at must be after opens_at"):
        c.check_window(T0, T0)
    paris = timezone(timedelta(hours=1))
    # 00:30 in Paris is 23:30 UTC the day before: the limit counts from that UTC day's start
    late_evening = datetime(2026, 12, 7, 0, 30, tzinfo=paris)
    assert c.day_start(late_evening) == datetime(2026, 12, 6, tzinfo=timezone.utc)
    assert c.day_start(T0) == datetime(2026, 12, 7, tzinfo=timezone.utc)


# ---- the files are the service's alone ----------------------------------------------------------


def test_labels_and_predictions_are_kept_0600_in_0700_folders(tmp_path: Path):
    storage = CompetitionStorage(tmp_path / "submissions")
    labels = storage.keep_labels(7, b"id,label\n1,a\n")
    mine = storage.keep_predictions(7, "uabc", b"id,prediction\n1,a\n")
    assert storage.read(labels) == b"id,label\n1,a\n" and storage.read(mine) == b"id,prediction\n1,a\n"
    for folder in (tmp_path / "submissions", storage.root, storage.root / "c7", storage.root / "c7" / "uabc"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
    for location in (labels, mine):
        assert stat.S_IMODE(os.stat(storage.root / location).st_mode) == 0o600
    assert not list(storage.root.rglob("*.partial"))


# ---- who may do what ----------------------------------------------------------------------------


def _caller(name: str, courses: dict[str, str]) -> authz.Caller:
    return authz.Caller(name=name, courses=courses, scopes=frozenset({"servers!user"}))


@pytest.mark.parametrize("who, action, status", [
    (_caller("s9", {"other101": "student"}), authz.READ_COMPETITIONS, 404),
    (_caller("ta9", {"other101": "ta"}), authz.READ_COMPETITION_SUBMISSIONS, 404),
    (_caller("t9", {"other101": "teacher"}), authz.EDIT_COMPETITIONS, 404),
    (_caller("s1", {"demo101": "student"}), authz.READ_COMPETITION_SUBMISSIONS, 403),
    (_caller("s1", {"demo101": "student"}), authz.EDIT_COMPETITIONS, 403),
    (_caller("ta1", {"demo101": "ta"}), authz.EDIT_COMPETITIONS, 403),
    (_caller("s1", {"demo101": "student"}), authz.SUBMIT_PREDICTIONS, 200),
    (_caller("ta1", {"demo101": "ta"}), authz.READ_COMPETITION_SUBMISSIONS, 200),
    (_caller("t1", {"demo101": "teacher"}), authz.EDIT_COMPETITIONS, 200),
])
def test_competition_actions(who, action, status):
    verdict = authz.decide(who, action, course="demo101")
    assert (200 if verdict else verdict.status) == status, verdict


# ---------------------------------------------------------------- scoring scripts and notebook runs
@pytest.mark.parametrize(("value", "says"), [
    ("0.5", "returned '0.5' (str), not a number"), (True, "(bool), not a number"),
    (None, "(NoneType), not a number"), (math.nan, "not a finite number"),
    (math.inf, "not a finite number"), ([1.0], "(list), not a number"),
])
def test_a_scoring_scripts_answer_is_a_finite_number_or_a_sentence(value, says):
    with pytest.raises(c.CompetitionError, match=re.escape(says)):
        c.check_score(value)
    assert c.check_score(3) == 3.0 and c.check_score(0.25) == 0.25


@pytest.mark.parametrize("name", ["../p.csv", "a/b.csv", ".hidden", "", "x" * 65, "p..csv", "é.csv"])
def test_the_predictions_file_is_a_plain_name_in_the_notebooks_folder(name):
    with pytest.raises(c.CompetitionError, match="not a plain file name"):
        c.check_file_name(name)
    assert c.check_file_name("predictions.csv") == "predictions.csv"


def test_a_scoring_scripts_direction_ranks_the_board():
    a = c.Entry(1, "ann", T0, 0.2, None)
    b = c.Entry(2, "bob", T0 + timedelta(minutes=1), 0.7, None)
    assert [e.student for _, e in c.leaderboard([a, b], "accuracy", "public")] == ["bob", "ann"]
    assert [e.student for _, e in c.leaderboard([a, b], "accuracy", "public", higher=False)] == ["ann", "bob"]


def test_a_script_gets_the_labels_of_each_split_and_no_others():
    labels = "id,label\n" + "".join(f"r{i},{i % 2}\n" for i in range(50))
    files = split_labels(labels.encode(), "accuracy", "seed", 0.3)
    public, private = c.split([f"r{i}" for i in range(50)], "seed", 0.3)
    for name, ids in (("public", public), ("private", private)):
        rows = files[name].decode().splitlines()
        assert rows[0] == "id,label" and [r.split(",")[0] for r in rows[1:]] == ids
    assert set(split_labels(b"id,label\nx,1\n", "accuracy", "s", 0.999)) == {"public"}  # no empty file


def _scorer(tmp_path: Path, source: str, splits=("public", "private")) -> dict:
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "scorer.py").write_text(source)
    (work / "predictions.csv").write_text("id,prediction\na,1\nb,0\n")
    for split in splits:
        row = "a,1" if split == "public" else "b,1"
        (work / f"labels_{split}.csv").write_text(f"id,label\n{row}\n")
    return runner._score(work)


ACCURACY = """import csv
def score(labels_path, predictions_path):
    truth = {r["id"]: r["label"] for r in csv.DictReader(open(labels_path))}
    said = {r["id"]: r["prediction"] for r in csv.DictReader(open(predictions_path))}
    return sum(said.get(k) == v for k, v in truth.items()) / len(truth)
"""


@pytest.mark.parametrize(("source", "expected"), [
    (ACCURACY, {"public": 1.0, "private": 0.0}),
    ("def score(l, p):\n    return 'abc'\n", "not a finite number"),
    ("def score(l, p):\n    return float('nan')\n", "not a finite number"),
    ("def score(l, p):\n    raise KeyError('b')\n", "script failed on the public split (KeyError)"),
    ("import sys\ndef score(l, p):\n    sys.exit(3)\n", "failed on the public split (SystemExit)"),
    ("raise ImportError('no sklearn')\n", "could not be loaded (ImportError)"),
    ("x = 1\n", "defines no function score"),
    ("def score(l, p):\n    raise ValueError('line 3 has no id')\n",
     "refused by the competition's scoring script: line 3 has no id"),
])
def test_a_scoring_script_gives_two_numbers_or_a_sentence(tmp_path: Path, source, expected):
    result = _scorer(tmp_path, source)
    if isinstance(expected, dict):
        assert result == expected
    else:
        assert expected in result["error"], result
        assert "PROBE" not in result["error"]


def test_a_crashing_script_tells_the_teacher_where(tmp_path: Path):
    result = _scorer(tmp_path, "def score(l, p):\n    return {}['x']\n")
    assert "KeyError" in result["detail"] and "scorer.py" in result["detail"]
    assert _scorer(tmp_path / "one", ACCURACY, splits=("public",)) == {"public": 1.0, "private": None}


def test_the_runner_deletes_its_settings_and_marks_its_result_with_the_nonce(tmp_path: Path):
    """The job's command, as the sandbox runs it: run.json is gone before the script runs (the
    script finds no nonce), and only the line with the nonce is the result."""
    folder = tmp_path / "in"
    (folder / "work").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "score", "nonce": "n0nce", "time_limit": 10}))
    (folder / "work" / "scorer.py").write_text(
        "import os\n"
        "print('CLASSHUB-COMPETITION-RESULT guess {\"public\": 9}')\n"
        "def score(l, p):\n"
        "    return float(os.path.exists('../run.json'))\n")
    (folder / "work" / "predictions.csv").write_text("id,prediction\n")
    (folder / "work" / "labels_public.csv").write_text("id,label\n")
    command = grader_command(sys.executable, {"folder": str(folder)},
                             module="hub_ext.backends.competition_runner")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert runner.parse_result(done.stdout, "n0nce") == {"public": 0.0, "private": None}
    assert runner.parse_result(done.stdout, "other") is None and "guess" in done.stdout
    assert not (folder / "run.json").exists()


def test_a_competition_job_on_kubernetes_runs_the_runner_from_its_secret():
    """A grading pod's command names the competition runner, whose code travels in the Secret
    with the grader's (the image need not have classhub), and drops to the grader uid."""
    from hub_ext.backends.kubernetes import jobs as kube

    command = grader_command("python", {"secret": "classhub-grading-0123abcd", "items": "[]"},
                             module="hub_ext.backends.competition_runner")
    assert command[:2] == ("python", "-I")
    assert "from hub_ext.backends.competition_runner import main" in command[3]
    assert repr(f"{kube.GRADING_INPUTS}/lib") in command[3]
    assert command[-4:] == ("--drop-to", str(kube.GRADER_UID), "--work", kube.GRADING_WORK)
    assert "lib/hub_ext/backends/competition_runner.py" in kube.grader_bundle()


@pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                    reason="dropping to another account needs root (CI runs as root: there it runs)")
def test_a_scoring_script_started_as_root_runs_as_the_grader_uid_without_its_inputs():
    """Kubernetes' path (the inputs are a root-only Secret): the teacher's script runs as the
    grader uid, in a copy of its folder, and cannot read the settings with the nonce."""
    with tempfile.TemporaryDirectory() as top:  # pytest's tmp_path is not traversable by others
        top_path = Path(top)
        inputs, work = top_path / "in", top_path / "work"
        (inputs / "work").mkdir(parents=True)
        work.mkdir()
        os.chmod(top_path, 0o755)
        (inputs / "run.json").write_text(json.dumps({"kind": "score", "nonce": "n", "time_limit": 30}))
        (inputs / "work" / "scorer.py").write_text(
            "import os\n"
            "def score(labels_path, predictions_path):\n"
            f"    try:\n        open({str(inputs / 'run.json')!r}).read()\n        return -1.0\n"
            "    except OSError:\n        return float(os.getuid())\n")
        (inputs / "work" / "predictions.csv").write_text("id,prediction\n")
        (inputs / "work" / "labels_public.csv").write_text("id,label\n")
        os.chmod(inputs, 0o700)
        command = grader_command(sys.executable, {"folder": str(inputs)},
                                 module="hub_ext.backends.competition_runner")
        done = subprocess.run([*command, "--drop-to", "65534", "--work", str(work)], capture_output=True,
                              text=True, timeout=60, env={"PATH": os.environ["PATH"], "HOME": str(work)})
        assert runner.parse_result(done.stdout, "n") == {"public": 65534.0, "private": None}, done.stderr
