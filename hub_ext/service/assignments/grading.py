"""Autograding as jobs: mark an assignment autograded, grade each submission through the job
service, keep scores and feedback, overrides, regrades and the grades CSV (issue 34).

Why it looks like this (docs/teachers/autograding.md):
- **A grading is a job** like any other: it is recorded by the job service's store
  (`JobStore.submit`), waits in the same queue, goes through admission and the course's quota,
  and shows on the jobs page as ``grade-<assignment>-<submission id>``. Its owner is the teacher
  who turned autograding on (never the student: a job's owner reads its log, which the
  student's code could write the hidden tests into). Its resources are the profile the teacher
  chose, resolved once, when autograding is turned on, with the teacher's rights.
- **One-time, private inputs**: the backend puts the teacher's source notebooks (with hidden
  tests), the student's snapshot and a nonce where only that job's grader reads them
  (`JobBackend.prepare_sandbox`; `Launch.sandbox`), and the grader (hub_ext.backends.grader)
  deletes what it can before any student code runs. The job's environment is the job service's
  clean one: no hub token, no database URL.
- **Results from the log**: the grader's last line, marked with the nonce; what a job that ended
  without it (time limit, memory, a crash) gets is a sentence and zero for its cells, the
  submission untouched, regradable. Every message is scrubbed of the hidden tests' lines before it
  is stored (a student's code may put them in an error text).
- The collector: submissions whose grading waits are kept in memory (read from the store at start),
  checked every `interval` seconds and when the job store says one of their jobs changed (as a
  competition's runs: hub_ext.service.jobs.sandboxed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import shutil
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import select

from hub_ext import store
from hub_ext.backends import autograde, grader
from hub_ext.backends.submissions import SubmissionStorage
from hub_ext.core import grading as G
from hub_ext.core import jobs as J
from hub_ext.core.grading import cell_key
from hub_ext.service.jobs.sandboxed import SandboxedJobs
from hub_ext.store.assignment_models import Assignment, Submission

__all__ = ["Grading", "cells_of", "rescore", "source_dir"]

log = logging.getLogger("classhub.grading")

QUEUED = "queued"
DONE = "done"
FAILED = "failed"
#: A grading's outcome, as the metric counts it: every test ran; some cells did not run (time,
#: kernel, unreadable notebook); the grader gave no result; the job could not be submitted.
OUTCOMES = ("graded", "incomplete", "no-result", "not-started")
_LOG_TAIL = 4 * 1024 * 1024
GRADED = "submission_graded"
OVERRIDDEN = "score_overridden"
REGRADE = "regrade_asked"
AUTOGRADE_SET = "autograde_set"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def source_dir(storage: SubmissionStorage, assignment_id: int) -> Path:
    """The teacher's source notebooks of an assignment: inside the submissions storage (0700,
    the service's account only), beside no snapshot (snapshot locations are ``a<id>/u<key>/...``)."""
    return storage.root / "autograde" / f"a{int(assignment_id)}"


def cells_of(s: Submission) -> list[G.CellScore]:
    """The graded cells of a submission's last grading, named ``notebook:grade_id``."""
    out = []
    for nb in (s.grading or {}).get("notebooks", []):
        for c in nb.get("cells", []):
            out.append(G.CellScore(cell_key(nb["notebook"], c["grade_id"]), float(c["points"]),
                                   c["status"], c.get("score"), c.get("message", "")))
    return out


def rescore(s: Submission) -> None:
    """The submission's score and max from its cells and the staff's overrides."""
    cells = cells_of(s)
    if not cells:
        s.score, s.max_score = None, (s.assignment.autograde or {}).get("max_score")
        return
    totals = G.total(cells, s.overrides or {})
    s.score, s.max_score = totals.score, totals.max_score


class Grading(SandboxedJobs):
    """Submits grading jobs and collects their results (one per service)."""

    prefixes = ("grade-",)
    logger = log
    collect_failed = "collecting the grading of submission %s"

    # ------------------------------------------------------------------ turning it on
    def prepare(self, assignment: Assignment, sources: Mapping[str, bytes], profile: str,
                fields: Mapping[str, Any], kept: Mapping[str, Any], time_limit: int,
                memory: int | None, owner: str) -> dict[str, Any]:
        """Check the teacher's source notebooks (and the released ones where the service reads
        the template's files), keep them, and the settings to store (GradingError: what to fix)."""
        storage: SubmissionStorage = self.storage()
        released_root = None
        templates = getattr(self, "templates", None)
        if templates is not None and not templates.writes_through_pods and templates.storage_dir:
            released_root = templates.storage().files(assignment.version.location)
        cells: dict[str, list[list[Any]]] = {}
        for path, data in sources.items():
            source = autograde.read_notebook(data, f"the source of {path}")
            if released_root is not None:
                # the version's files are seeded into the home; the assignment's folder is where
                # the work lives (a template published with home_folder keeps it in its files)
                released_file = next((f for f in (released_root / assignment.folder / path,
                                                  released_root / path) if f.is_file()),
                                     released_root / path)
                if not released_file.is_file():
                    raise G.GradingError(f"The released template version has no {path}; name a "
                                         "notebook of the assignment's files")
                released = autograde.read_notebook(released_file.read_bytes(), f"the released {path}")
                found = autograde.check_release(source, released, path)
            else:
                found = autograde.graded_cells(source, f"the source of {path}")
            cells[path] = [[c.grade_id, c.points, c.auto] for c in found]
        folder = source_dir(storage, assignment.id)
        storage._ensure_root()
        if folder.exists():
            shutil.rmtree(folder)
        for path, data in sources.items():
            target = folder / path
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            target.write_bytes(data)
        return {"notebooks": sorted(sources), "cells": cells, "profile": profile,
                "time_limit": time_limit, "memory": memory, "owner": owner,
                "max_score": sum(p for found in cells.values() for _, p, _ in found),
                "fields": dict(fields), "profiles": {k: dict(v) for k, v in kept.items()}}

    # ------------------------------------------------------------------ submitting
    async def submit(self, submission_id: int, by: str) -> None:
        """Grade a submission as a job; on any failure to start, the submission says why (it
        is kept, and can be regraded)."""
        try:
            job_id, name = await self._submit(submission_id, by)
        except Exception as e:  # the submission stays; the sentence says what happened
            log.warning("grading submission %s not started: %s", submission_id, e)
            await asyncio.to_thread(self._store_failure, submission_id, f"Grading could not start: {e}")
            return
        self._pending[submission_id] = job_id
        log.info("grading submission %s as job %s (%s)", submission_id, job_id, name)

    async def _submit(self, submission_id: int, by: str) -> tuple[str, str]:
        setup = await asyncio.to_thread(self._inputs, submission_id)
        files, settings, course, name = setup
        nonce = secrets.token_hex(16)
        files["grading.json"] = json.dumps({
            "nonce": nonce, "time_limit": settings["time_limit"], "notebooks": settings["notebooks"],
            "memory": settings.get("memory"), "output_cap": autograde.OUTPUT_CAP,
            # non-dumpable grader and kernels where jobs run as a grading account: the service's
            # own account must still find its jobs by their environment (hub_ext.backends.grader)
            "private": self._private()}).encode()
        job_id, sandbox = await self._submit_job(files, settings, course, name, settings["owner"],
                                                 "hub_ext.backends.grader")
        await asyncio.to_thread(self._store_queued, submission_id, job_id, name, nonce, sandbox, by)
        return job_id, name

    def _inputs(self, submission_id: int) -> tuple[dict[str, bytes], dict[str, Any], str, str]:
        storage: SubmissionStorage = self.storage()
        with self.sessions() as session:
            s = session.get(Submission, submission_id)
            if s is None or not s.assignment.autograde:
                raise G.GradingError("the assignment is not autograded")
            settings = dict(s.assignment.autograde)
            course, assignment = s.assignment.course.name, s.assignment.name
            location, assignment_id = s.location, s.assignment_id
        files: dict[str, bytes] = {}
        for path in settings["notebooks"]:
            files[f"source/{path}"] = (source_dir(storage, assignment_id) / path).read_bytes()
        whole = getattr(self.jobs.backend, "sandbox_root", None) is not None
        for entry in storage.listing(location):
            path = entry["path"]
            if whole or path in settings["notebooks"]:
                files[f"submission/{path}"] = (storage.files(location) / PurePosixPath(path)).read_bytes()
        name = J.check_name("job name", _job_name(assignment, submission_id))
        return files, settings, course, name

    def _store_queued(self, submission_id: int, job_id: str, name: str, nonce: str,
                      sandbox: Mapping[str, str], by: str) -> None:
        with self.sessions.begin() as session:
            s = session.get(Submission, submission_id)
            history = list((s.grading or {}).get("history", []))
            s.grading = {"state": QUEUED, "job_id": job_id, "job_name": name, "nonce": nonce,
                         "sandbox": dict(sandbox), "asked_by": by, "asked_at": _now().isoformat(),
                         "history": history, "message": "Waiting for the grader (a job in the "
                                                        "course's queue).", "notebooks": []}

    def _store_failure(self, submission_id: int, message: str) -> None:
        with self.sessions.begin() as session:
            s = session.get(Submission, submission_id)
            if s is None:
                return
            history = [*(s.grading or {}).get("history", []), "not-started"]
            s.grading = {"state": FAILED, "message": G.truncate(message, 500), "notebooks": [],
                         "history": history, "graded_at": _now().isoformat()}
            rescore(s)

    # ------------------------------------------------------------------ collecting
    def _waiting(self) -> dict[int, str]:
        with self.sessions() as session:
            rows = session.scalars(select(Submission).where(Submission.grading.is_not(None))).all()
            return {s.id: s.grading["job_id"] for s in rows
                    if s.grading.get("state") == QUEUED and s.grading.get("job_id")}

    def _gone(self, submission_id: int) -> None:
        self._store_failure(submission_id, "The grading job is gone; ask your teacher to regrade.")

    def _log_keep(self) -> int:
        return _LOG_TAIL

    def _store_result(self, submission_id: int, job_id: str, state: str, reason: str, text: str) -> None:
        with self.sessions.begin() as session:
            s = session.get(Submission, submission_id)
            if s is None or (s.grading or {}).get("job_id") != job_id:
                return  # regraded meanwhile: that grading's result counts
            g = dict(s.grading)
            settings = s.assignment.autograde or {}
            result = grader.parse_result(text, g.get("nonce", ""))
            hidden = self._hidden(s.assignment_id, settings)
            if result is None:
                outcome = "no-result"
                why = ("the grader was stopped at the time limit" if "max_runtime" in (reason or "")
                       else "the grader ended without a result (out of memory, or its process was "
                            "killed)")
                if state == J.CANCELLED:
                    why = "the grading job was cancelled"
                g["message"] = f"Grading did not finish: {why}. Your submission is kept; it can be regraded."
                g["notebooks"] = [{"notebook": path, "message": "", "cells": [
                    {"grade_id": gid, "points": points, "status": G.NOT_RUN if auto else G.MANUAL,
                     "score": 0.0 if auto else None, "message": "not run"}
                    for gid, points, auto in settings.get("cells", {}).get(path, [])]}
                    for path in settings.get("notebooks", [])]
            else:
                notebooks = []
                for nb in result.get("notebooks", []):
                    lines = hidden.get(nb.get("notebook"), [])
                    cells = [{**c, "message": _scrub(str(c.get("message", "")), lines)}
                             for c in nb.get("cells", []) if isinstance(c, dict)]
                    expected = settings.get("cells", {}).get(nb.get("notebook"), [])
                    notebooks.append({"notebook": str(nb.get("notebook")),
                                      "message": _scrub(str(nb.get("message", "")), lines),
                                      "cells": _trusted(cells, expected)})
                g["notebooks"] = notebooks
                incomplete = any(nb["message"] for nb in notebooks)
                outcome = "incomplete" if incomplete else "graded"
                g["message"] = ("Graded; some cells did not run (see below)." if incomplete
                                else "Graded: every test ran.")
            g.update(state=DONE if outcome != "no-result" else FAILED, graded_at=_now().isoformat(),
                     history=[*g.get("history", []), outcome])
            g.pop("sandbox", None)
            s.grading = g
            rescore(s)
            store.record(session, "classhub", GRADED, _now(), course=s.assignment.course.name,
                         assignment=s.assignment.name, submission=s.id, student=s.student,
                         outcome=outcome, score=s.score, max_score=s.max_score)

    def _hidden(self, assignment_id: int, settings: Mapping[str, Any]) -> dict[str, list[str]]:
        """Each notebook's hidden-test lines (from the teacher's source kept by the service)."""
        out: dict[str, list[str]] = {}
        with contextlib.suppress(Exception):
            folder = source_dir(self.storage(), assignment_id)
            for path in settings.get("notebooks", []):
                nb = autograde.read_notebook((folder / path).read_bytes(), path)
                out[path] = [line for cell in nb.cells for line in G.hidden_lines(cell.get("source", ""))]
        return out


def _job_name(assignment: str, submission_id: int) -> str:
    base = "".join(c if c.isalnum() else "-" for c in assignment.lower()).strip("-")[:30] or "a"
    return f"grade-{base}-{int(submission_id)}"


def _scrub(text: str, hidden: list[str]) -> str:
    """``text`` with every hidden-test line replaced (a failing hidden assert shows in its
    traceback; a student's code may print the test it was given)."""
    for line in sorted({*hidden, G.BEGIN_HIDDEN, G.END_HIDDEN}, key=len, reverse=True):
        if len(line) >= 4:
            text = text.replace(line, "[hidden test]")
    return G.truncate(text)


def _trusted(cells: list[dict[str, Any]], expected: list[list[Any]]) -> list[dict[str, Any]]:
    """The grader's cells checked against the teacher's: only known cells, points as the teacher
    set them, a score from 0 to those points (the result line passes through a log the
    student's code also writes to; the nonce keeps it the grader's, this keeps it sane)."""
    given = {c.get("grade_id"): c for c in cells}
    out = []
    for gid, points, auto in expected:
        c = given.get(gid) or {"status": G.NOT_RUN, "score": 0.0, "message": "not reported"}
        status = c.get("status") if c.get("status") in G.STATUSES else G.NOT_RUN
        score = c.get("score")
        if not auto:
            status, score = G.MANUAL, None
        elif not isinstance(score, int | float) or isinstance(score, bool):
            score = 0.0
        out.append({"grade_id": gid, "points": points, "status": status,
                    "score": None if score is None else min(max(float(score), 0.0), float(points)),
                    "message": str(c.get("message", ""))})
    return out

