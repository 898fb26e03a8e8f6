"""Assignments without a hub: the late policy, the snapshot's limits and safety, who may do what.

What a teacher and a student notice: a submission after the due date is refused or marked late
exactly as the assignment says; a folder too large is refused with a sentence and nothing is
kept; a link in the folder is never followed (its target is not in the submission); a TA of
another course is told the course is none of theirs.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.backends.submissions import SnapshotLimits, SnapshotRefused, SubmissionStorage, snapshot_folder
from hub_ext.core import authz
from hub_ext.core.assignments import (
    ACCEPT_LATE,
    REFUSE,
    AssignmentError,
    Timing,
    check_timing,
    judge,
)
from hub_ext.service import body_models
from hub_ext.service.assignments.bodies import AssignmentBody
from tests.system_accounts import require_root

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=timezone.utc)
DUE = T0 + timedelta(days=7)
CUTOFF = DUE + timedelta(days=2)

# ---- the late policy ----------------------------------------------------------------------------

offsets = st.integers(min_value=-10 * 86400, max_value=20 * 86400).map(lambda s: T0 + timedelta(seconds=s))


@given(now=offsets, policy=st.sampled_from([REFUSE, ACCEPT_LATE]), with_cutoff=st.booleans())
def test_a_submission_is_on_time_until_due_then_as_the_policy_says(now, policy, with_cutoff):
    cutoff = CUTOFF if (with_cutoff and policy == ACCEPT_LATE) else None
    verdict = judge(Timing(T0, DUE, policy, cutoff), now)
    if now < T0:
        assert not verdict.accepted and "opens" in verdict.reason
    elif now <= DUE:
        assert verdict.accepted and not verdict.late
    elif policy == REFUSE:
        assert not verdict.accepted and "no late submissions" in verdict.reason
    elif cutoff is not None and now > cutoff:
        assert not verdict.accepted and "until" in verdict.reason
    else:
        assert verdict.accepted and verdict.late
    assert verdict.accepted != bool(verdict.reason)  # a refusal always says why


def test_the_edges_belong_to_the_earlier_side():
    assert judge(Timing(T0, DUE), DUE).accepted and not judge(Timing(T0, DUE), DUE).late
    late = Timing(T0, DUE, ACCEPT_LATE, CUTOFF)
    assert judge(late, CUTOFF).late and judge(late, CUTOFF).accepted
    assert not judge(late, CUTOFF + timedelta(microseconds=1)).accepted


@pytest.mark.parametrize("timing, words", [
    (Timing(T0, T0), "due_at must be after opens_at"),
    (Timing(T0, DUE, REFUSE, CUTOFF), "cutoff_at only applies"),
    (Timing(T0, DUE, ACCEPT_LATE, DUE - timedelta(seconds=1)), "cutoff_at must not be before due_at"),
    (Timing(T0, DUE, "sometimes"), "late_policy 'sometimes'"),
])
def test_times_that_make_no_sense_are_refused_with_what_to_change(timing, words):
    with pytest.raises(AssignmentError, match=words):
        check_timing(timing)


def test_the_release_body_says_what_to_change():
    with pytest.raises(body_models.BodyError, match="due_at must be an ISO 8601 time with a zone"):
        body_models.parse(AssignmentBody, {"name": "lab1", "template": "lab1", "due_at": "tomorrow"})
    with pytest.raises(body_models.BodyError, match=re.escape('without ".."')):
        body_models.parse(AssignmentBody, {"name": "lab1", "template": "lab1", "folder": "../x",
                                           "due_at": DUE.isoformat()})
    with pytest.raises(body_models.BodyError, match="not an assignment name"):
        body_models.parse(AssignmentBody, {"name": "Lab 1!", "template": "lab1", "due_at": DUE.isoformat()})
    ok = body_models.parse(AssignmentBody, {"name": "lab1", "template": "lab1",
                                            "due_at": "2026-12-14T17:00:00Z"})
    assert ok.due_at == datetime(2026, 12, 14, 17, tzinfo=timezone.utc) and ok.late_policy == REFUSE


# ---- the snapshot -------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "lab1" / "data").mkdir(parents=True)
    (home / "lab1" / "lab1.ipynb").write_text('{"cells": []}')
    (home / "lab1" / "data" / "values.csv").write_text("x,y\n1,2\n")
    return home


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_snapshot_copies_the_folder_exactly(home: Path, tmp_path: Path):
    taken = snapshot_folder(home, "lab1", tmp_path / "snap", SnapshotLimits())
    assert _tree(tmp_path / "snap") == {"data/values.csv": b"x,y\n1,2\n", "lab1.ipynb": b'{"cells": []}'}
    assert (taken.files, taken.folders, taken.bytes, taken.skipped) == (2, 1, 21, [])
    assert (tmp_path / "snap").stat().st_mode & 0o077 == 0  # only the service reads it


def test_links_are_not_followed_and_are_named(home: Path, tmp_path: Path):
    secret = tmp_path / "someone-else" / "answers.txt"
    secret.parent.mkdir()
    secret.write_text("the answers")
    (home / "lab1" / "answers.txt").symlink_to(secret)
    (home / "lab1" / "elsewhere").symlink_to(secret.parent, target_is_directory=True)
    os.mkfifo(home / "lab1" / "pipe")
    taken = snapshot_folder(home, "lab1", tmp_path / "snap", SnapshotLimits())
    assert set(_tree(tmp_path / "snap")) == {"data/values.csv", "lab1.ipynb"}
    assert b"the answers" not in b"".join(_tree(tmp_path / "snap").values())
    assert taken.skipped == ["answers.txt (a symbolic link)", "elsewhere (a symbolic link)",
                             "pipe (not a file or folder)"]


def test_a_folder_that_is_a_link_or_climbs_out_is_refused(home: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("not yours")
    (home / "lab2").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SnapshotRefused, match="no folder 'lab2' in your home"):
        snapshot_folder(home, "lab2", tmp_path / "snap", SnapshotLimits())
    with pytest.raises(SnapshotRefused, match=re.escape("'..'")):
        snapshot_folder(home, "../outside", tmp_path / "snap2", SnapshotLimits())
    with pytest.raises(SnapshotRefused, match="absolute"):
        snapshot_folder(home, str(outside), tmp_path / "snap3", SnapshotLimits())
    (home / "lab1" / "data").rename(home / "lab1" / "data.real")
    (home / "lab1" / "data").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SnapshotRefused, match="no folder 'lab1/data'"):
        snapshot_folder(home, "lab1/data", tmp_path / "snap4", SnapshotLimits())


@given(files=st.integers(min_value=0, max_value=12), size=st.integers(min_value=0, max_value=40),
       max_files=st.integers(min_value=1, max_value=10), max_bytes=st.integers(min_value=1, max_value=200))
def test_limits_hold_and_a_refused_snapshot_leaves_nothing(tmp_path_factory, files, size, max_files,
                                                            max_bytes):
    root = tmp_path_factory.mktemp("limits")
    (root / "home" / "lab").mkdir(parents=True)
    for i in range(files):
        (root / "home" / "lab" / f"f{i:02}.txt").write_bytes(b"x" * size)
    storage = SubmissionStorage(root / "store")
    limits = SnapshotLimits(max_files=max_files, max_bytes=max_bytes)
    try:
        taken = storage.take(root / "home", "lab", "a1/u1/s1", limits)
    except SnapshotRefused as e:
        assert files > max_files or files * size > max_bytes
        assert "files and folders" in str(e) or "bytes" in str(e)
        assert not any(p.is_file() for p in (root / "store").rglob("*"))  # nothing kept
        return
    assert files <= max_files and files * size <= max_bytes
    assert (taken.files, taken.bytes) == (files, files * size)
    assert len(storage.listing("a1/u1/s1")) == files


def test_deep_folders_stop_at_the_depth_limit(tmp_path: Path):
    deep = tmp_path / "home" / "lab"
    for i in range(6):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    with pytest.raises(SnapshotRefused, match="deeper than 3 folders"):
        snapshot_folder(tmp_path / "home", "lab", tmp_path / "snap", SnapshotLimits(max_depth=3))


# ---- who may do what ----------------------------------------------------------------------------


def _caller(name: str, courses: dict[str, str]) -> authz.Caller:
    return authz.Caller(name=name, courses=courses, scopes=frozenset({"servers!user"}))


@pytest.mark.parametrize("who, action, status", [
    (_caller("ta9", {"other101": "ta"}), authz.READ_ASSIGNMENTS, 404),
    (_caller("ta9", {"other101": "ta"}), authz.READ_SUBMISSIONS, 404),
    (_caller("t9", {"other101": "teacher"}), authz.EDIT_ASSIGNMENTS, 404),
    (_caller("s1", {"demo101": "student"}), authz.READ_SUBMISSIONS, 403),
    (_caller("s1", {"demo101": "student"}), authz.EDIT_ASSIGNMENTS, 403),
    (_caller("ta1", {"demo101": "ta"}), authz.EDIT_ASSIGNMENTS, 403),
    (_caller("s1", {"demo101": "student"}), authz.SUBMIT_ASSIGNMENT, 200),
    (_caller("ta1", {"demo101": "ta"}), authz.READ_SUBMISSIONS, 200),
    (_caller("t1", {"demo101": "teacher"}), authz.EDIT_ASSIGNMENTS, 200),
])
def test_assignment_actions(who, action, status):
    verdict = authz.decide(who, action, course="demo101")
    assert (200 if verdict else verdict.status) == status, verdict


def test_as_root_a_file_the_student_does_not_own_is_left_out(tmp_path: Path):
    """--system-users: the service runs as root over a home its student owns. A hard link (or a
    file dropped by another account) to something the student may not read must not be copied
    with root's power; it is named instead."""
    require_root()
    student = 54321  # an unused uid: the home's owner
    home = tmp_path / "home"
    (home / "lab").mkdir(parents=True)
    secret = tmp_path / "shadow"
    secret.write_text("root's secret")
    os.chmod(secret, 0o600)
    os.link(secret, home / "lab" / "linked.txt")
    (home / "lab" / "mine.txt").write_text("my work")
    (home / "lab" / "sub").mkdir()
    for path in (home, home / "lab", home / "lab" / "mine.txt", home / "lab" / "sub"):
        os.chown(path, student, student)
    taken = snapshot_folder(home, "lab", tmp_path / "snap", SnapshotLimits())
    assert _tree(tmp_path / "snap") == {"mine.txt": b"my work"}
    assert taken.skipped == ["linked.txt (not owned by you)"]
