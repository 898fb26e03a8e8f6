"""Competition submissions that run as jobs: notebooks that write their predictions, and
teachers' scoring scripts (issue 34, docs/teachers/competitions.md).

Why it looks like this (as autograding, hub_ext.service.assignments.grading):
- **A run is a job** of the course, recorded by the job service (`JobStore.submit`), in the
  same queue, admission and quota as any other, shown on the jobs page as
  ``compete-<competition>-<submission id>`` (a notebook) or ``score-<competition>-<id>`` (a
  scoring script). Its owner is the teacher who set the runner or the scorer (never the
  student: a job's owner reads its log). Its resources are that teacher's chosen profile,
  resolved when it was set.
- **The same sandbox as grading** (`JobBackend.prepare_sandbox`): the grader account locally,
  uid 65534 without a service-account token in a pod; one-time inputs, read and deleted before
  any student's or teacher's code runs (hub_ext.backends.competition_runner). A notebook's job
  has the notebook only, never the hidden labels; a scoring job has the labels of each split,
  the predictions and the script, never the service's token, environment or database.
- **Results from the log** (the runner's last line with the job's nonce). A notebook's
  predictions come back in it and are kept, then scored: by the built-in metric in a worker
  thread of the service (pure code, hub_ext.core.competitions), or by a second, scoring job.
- **Nothing lost**: the submitted notebook and any predictions are kept whatever happens; a
  failure is a sentence on the submission (its state ``failed``), which then neither ranks nor
  counts against the daily limit; staff can score a submission again (``POST .../rescore``).
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import logging
import secrets
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from hub_ext import store
from hub_ext.backends import competition_runner as runner
from hub_ext.backends.competitions import CompetitionStorage
from hub_ext.core import competitions as rules
from hub_ext.core import jobs as J
from hub_ext.service.assignments.handlers import student_key
from hub_ext.service.jobs.sandboxed import SandboxedJobs
from hub_ext.store.competition_models import CompetitionSubmission

__all__ = ["CompetitionRuns", "split_labels"]

log = logging.getLogger("classhub.competitions")

NOTEBOOK, SCORE = "notebook", "score"
SCORED_EVENT = "competition_scored"
RUN_FAILED = "competition_run_failed"
_PREFIXES = ("compete-", "score-")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def split_labels(data: bytes, metric: str, seed: str, fraction: float) -> dict[str, bytes]:
    """The hidden labels as one ``id,label`` CSV per split (an empty split has no file): what a
    scoring script reads, so it never sees which ids are public except through its own file."""
    labels = rules.parse_labels(data, metric, rules.Limits(max_bytes=2**62, max_rows=2**62,
                                                           max_field=2**62))
    public, private = rules.split(labels, seed, fraction)
    out = {}
    for name, ids in (("public", public), ("private", private)):
        if ids:
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(("id", "label"))
            writer.writerows((k, labels[k]) for k in ids)
            out[name] = text.getvalue().encode()
    return out


def _job_name(kind: str, competition: str, entry_id: int) -> str:
    base = "".join(c if c.isalnum() else "-" for c in competition.lower()).strip("-")[:28] or "c"
    return f"{'compete' if kind == NOTEBOOK else 'score'}-{base}-{int(entry_id)}"


class CompetitionRuns(SandboxedJobs):
    """Submits a competition's notebook and scoring jobs and collects their results (one per
    service)."""

    prefixes = _PREFIXES
    logger = log
    collect_failed = "collecting competition submission %s"

    def __init__(self, sessions: sessionmaker[Session], jobs: Any, storage: Any, limits: Any,
                 python: str = sys.executable, interval: float = 2.0) -> None:
        super().__init__(sessions, jobs, storage, python, interval)  # storage: () -> CompetitionStorage
        self.limits = limits  # () -> (rules.Limits, notebook max bytes)

    # ------------------------------------------------------------------ submitting
    async def start(self, entry_id: int, stage: str) -> None:
        """Run ``stage`` (notebook or score) of a submission as a job; on any failure to start,
        the submission fails with the sentence (its files are kept; staff can score it again)."""
        try:
            job_id, name = await self._submit(entry_id, stage)
        except Exception as e:
            log.warning("competition submission %s: %s job not started: %s", entry_id, stage, e)
            await asyncio.to_thread(self._fail, entry_id, f"The {stage} job could not start: {e}", "")
            return
        self._pending[entry_id] = job_id
        log.info("competition submission %s: %s job %s (%s)", entry_id, stage, job_id, name)

    async def _submit(self, entry_id: int, stage: str) -> tuple[str, str]:
        files, settings, course, name, owner = await asyncio.to_thread(self._inputs, entry_id, stage)
        nonce = secrets.token_hex(16)
        files["run.json"] = json.dumps({"kind": stage, "nonce": nonce, "private": self._private(),
                                        **settings["run"]}).encode()
        job_id, sandbox = await self._submit_job(files, settings, course, name, owner,
                                                 "hub_ext.backends.competition_runner")
        await asyncio.to_thread(self._store_started, entry_id, stage, job_id, name, nonce, sandbox)
        return job_id, name

    def _inputs(self, entry_id: int, stage: str) -> tuple[dict[str, bytes], dict[str, Any], str, str, str]:
        """The job's files and settings: (files, {"run", "fields", "profiles", "time_limit"},
        course, job name, owner)."""
        storage: CompetitionStorage = self.storage()
        limits, _ = self.limits()
        with self.sessions() as session:
            s = session.get(CompetitionSubmission, entry_id)
            if s is None:
                raise rules.CompetitionError("the submission is gone")
            c = s.competition
            settings = dict((c.runner if stage == NOTEBOOK else c.scorer) or {})
            if not settings:
                raise rules.CompetitionError(
                    f"{c.name} takes no notebooks any more" if stage == NOTEBOOK
                    else f"{c.name} has no scoring script any more")
            course, competition = c.course.name, c.name
            run = dict(s.run or {})
            labels_location, metric, seed, fraction = c.labels_location, c.metric, c.seed, c.public_fraction
            predictions_location = s.location
        files: dict[str, bytes] = {}
        if stage == NOTEBOOK:
            files["work/submission.ipynb"] = storage.read(run["notebook"])
            params = {"predictions_file": settings["predictions_file"], "max_bytes": limits.max_bytes}
        else:
            files["work/scorer.py"] = storage.read(settings["location"])
            files["work/predictions.csv"] = storage.read(predictions_location)
            for split, data in split_labels(storage.read(labels_location), metric, seed, fraction).items():
                files[f"work/labels_{split}.csv"] = data
            params = {}
        params.update(time_limit=settings["time_limit"], memory=settings.get("memory"))
        name = J.check_name("job name", _job_name(stage, competition, entry_id))
        return (files, {"run": params, "fields": settings["fields"], "profiles": settings.get("profiles"),
                        "time_limit": settings["time_limit"]}, course, name, settings["owner"])

    def _store_started(self, entry_id: int, stage: str, job_id: str, name: str, nonce: str,
                       sandbox: Mapping[str, str]) -> None:
        with self.sessions.begin() as session:
            s = session.get(CompetitionSubmission, entry_id)
            run = dict(s.run or {})
            run.update(stage=stage, job_id=job_id, job_name=name, nonce=nonce, sandbox=dict(sandbox))
            run.pop("detail", None)
            s.run, s.state = run, rules.PENDING
            s.message = ("Waiting for your notebook to run (a job in the course's queue)."
                         if stage == NOTEBOOK else "Waiting for the scoring script (a job in the "
                                                   "course's queue).")

    def _fail(self, entry_id: int, message: str, detail: str) -> None:
        with self.sessions.begin() as session:
            s = session.get(CompetitionSubmission, entry_id)
            if s is None:
                return
            run = dict(s.run or {})
            run.pop("sandbox", None)
            run.pop("nonce", None)
            if detail:
                run["detail"] = detail
            s.run, s.state, s.message = run, rules.FAILED, _truncate(message)
            s.public_score = s.private_score = None
            c = s.competition
            store.record(session, "classhub", RUN_FAILED, _now(), course=c.course.name,
                         competition=c.name, submission=s.id, student=s.student,
                         stage=run.get("stage", ""), message=s.message)

    # ------------------------------------------------------------------ collecting
    def _waiting(self) -> dict[int, str]:
        with self.sessions() as session:
            rows = session.scalars(select(CompetitionSubmission).where(
                CompetitionSubmission.state == rules.PENDING)).all()
            return {s.id: s.run["job_id"] for s in rows if (s.run or {}).get("job_id")}

    def _gone(self, entry_id: int) -> None:
        self._fail(entry_id, "The job is gone; ask your teacher to score the submission again.", "")

    def _log_keep(self) -> int:
        limits, _ = self.limits()
        return limits.max_bytes * 2 + 1024 * 1024

    async def _finished(self, entry_id: int, next_stage: str) -> None:
        if next_stage:
            await self.start(entry_id, next_stage)

    def _store_result(self, entry_id: int, job_id: str, state: str, reason: str, text: str) -> str:
        """Keep what the job gave; the next stage to run ("" when none)."""
        with self.sessions() as session:
            s = session.get(CompetitionSubmission, entry_id)
            if s is None or (s.run or {}).get("job_id") != job_id:
                return ""  # scored again meanwhile: that run counts
            run = dict(s.run)
            cid, student, has_scorer = s.competition_id, s.student, bool(s.competition.scorer)
        result = runner.parse_result(text, run.get("nonce", ""))
        stage = run.get("stage", NOTEBOOK)
        if result is None:
            why = ("it was stopped at the time limit" if "max_runtime" in (reason or "")
                   else "it ended without a result (out of memory, or its process was killed)")
            if state == J.CANCELLED:
                why = "it was cancelled"
            what = "Your notebook's job" if stage == NOTEBOOK else "The scoring job"
            self._fail(entry_id, f"{what} did not finish: {why}.", "")
            return ""
        if "error" in result:
            self._fail(entry_id, str(result["error"]), str(result.get("detail") or ""))
            return ""
        if stage == NOTEBOOK:
            try:
                data = base64.b64decode(str(result.get("predictions", "")), validate=True)
            except ValueError:
                self._fail(entry_id, "The notebook's job gave no readable predictions file.", "")
                return ""
            location = self.storage().keep_predictions(cid, student_key(student), data)
            with self.sessions.begin() as session:
                s = session.get(CompetitionSubmission, entry_id)
                s.location = location
            if has_scorer:
                return SCORE
            return self._score_builtin(entry_id, data)
        try:
            public = None if result.get("public") is None else rules.check_score(result["public"])
            private = None if result.get("private") is None else rules.check_score(result["private"])
        except rules.CompetitionError as e:
            self._fail(entry_id, "The scoring script gave no number; the teacher was told and can score "
                                 "the submission again.", str(e))
            return ""
        self._scored(entry_id, public, private)
        return ""

    def _score_builtin(self, entry_id: int, data: bytes) -> str:
        """Score a notebook's predictions with the built-in metric (pure code, in this thread)."""
        limits, _ = self.limits()
        with self.sessions() as session:
            c = session.get(CompetitionSubmission, entry_id).competition
            metric, seed, fraction, labels_location = c.metric, c.seed, c.public_fraction, c.labels_location
        try:
            labels = rules.parse_labels(self.storage().read(labels_location), metric, rules.Limits(
                max_bytes=2**62, max_rows=2**62, max_field=2**62))
            predicted = rules.parse_predictions(data, labels, metric, limits)
        except rules.CompetitionError as e:
            self._fail(entry_id, f"Your notebook's predictions were refused: {e}", "")
            return ""
        public, private = rules.split(labels, seed, fraction)
        self._scored(entry_id, rules.score(metric, labels, predicted, public),
                     rules.score(metric, labels, predicted, private))
        return ""

    def _scored(self, entry_id: int, public: float | None, private: float | None) -> None:
        with self.sessions.begin() as session:
            s = session.get(CompetitionSubmission, entry_id)
            run = dict(s.run or {})
            for key in ("sandbox", "nonce", "detail"):
                run.pop(key, None)
            s.run, s.state, s.message = run, rules.SCORED, ""
            s.public_score, s.private_score = public, private
            c = s.competition
            store.record(session, "classhub", SCORED_EVENT, _now(), course=c.course.name,
                         competition=c.name, submission=s.id, student=s.student, kind=s.kind,
                         public_score=public)


def _truncate(text: str, limit: int = 1000) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"
