"""The autograding API (issue 34): turn autograding on, regrade, override a cell, export grades.

Thin handlers (docs/architecture.md, rule 3): who may do what is declared with ``@needs``
(teachers turn autograding on; staff, teachers and TAs, regrade, override and export); the work
is hub_ext.service.assignments.grading's; store calls run in worker threads (rule 7). A student
reads their feedback with their submission (GET .../submissions[/<id>]); nothing here answers a
student, and no answer anywhere holds the teacher's source or its hidden tests.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from tornado import web

from hub_ext import store
from hub_ext.core import authz
from hub_ext.core import grading as G
from hub_ext.core.jobs import JobError
from hub_ext.service.assignments.bodies import AutogradeBody, ScoreOverride
from hub_ext.service.assignments.grading import (
    AUTOGRADE_SET,
    OVERRIDDEN,
    QUEUED,
    REGRADE,
    Grading,
    cells_of,
    rescore,
)
from hub_ext.service.assignments.handlers import AssignmentsBase
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.jobs.profiles import resolve_profiles
from hub_ext.store.assignment_models import Submission, autograde_json, submission_json

__all__ = ["AutogradeHandler", "GradesHandler", "RegradeHandler", "ScoresHandler"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _GradingBase(AssignmentsBase):
    @property
    def grading(self) -> Grading:
        found = self.settings.get("grading")
        if found is None:
            raise web.HTTPError(503, "Autograding needs the job service, which this service does not run.")
        return found

    def _submission(self, course: str, name: str, submission: str) -> tuple[int, str, bool, str | None]:
        """Staff only (the caller passed READ_SUBMISSIONS): the submission's id, student, whether
        its assignment is autograded and its grading's state; or a 404."""
        with self.settings["sessions"]() as session:
            a = self._assignment(session, course, name, staff=True)
            found = next((s for s in a.submissions if str(s.id) == submission), None)
            if found is None:
                raise web.HTTPError(404, f"No submission {submission} of {name}; GET "
                                         f"/api/courses/{course}/assignments/{name}/submissions lists them.")
            return found.id, found.student, bool(a.autograde), (found.grading or {}).get("state")


class AutogradeHandler(_GradingBase):
    """``GET|PUT /api/courses/<course>/assignments/<name>/autograde``."""

    #: up to 8 source notebooks, their outputs and pictures included (the course page's form
    #: sends the files as the teacher saved them)
    max_body_bytes = 8 * 1024 * 1024

    @needs(authz.READ_SUBMISSIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._settings, course, name))

    def _settings(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return autograde_json(self._assignment(session, course, name, staff=True).autograde)

    @refuses(G.GradingError, JobError)
    @needs(authz.EDIT_ASSIGNMENTS, course="course")
    @takes(AutogradeBody)
    async def put(self, course: str, name: str) -> None:
        body: AutogradeBody = self.body
        fields, kept = await resolve_profiles(self.hub, self.caller, course, {
            "roles": [{"name": "grader", "replicas": 1, "profile": body.profile}]})
        sources = {path: json.dumps(nb).encode() for path, nb in body.notebooks.items()}
        grading = self.grading
        memory = body.memory_mib * 2**20 if body.memory_mib else None
        self.write_json(await self.db(self._set, course, name, grading, sources, body, fields, kept, memory))

    def _set(self, course: str, name: str, grading: Grading, sources: dict[str, bytes],
             body: AutogradeBody, fields: dict[str, Any], kept: dict[str, Any], memory: int | None,
             ) -> dict[str, Any]:
        with self.settings["sessions"].begin() as session:
            a = self._assignment(session, course, name, staff=True)
            settings = grading.prepare(a, sources, body.profile, fields, kept, body.time_limit, memory,
                                       self.caller.name)
            a.autograde = settings
            store.record(session, self.caller.name, AUTOGRADE_SET, _now(), course=course, assignment=name,
                         notebooks=settings["notebooks"], profile=body.profile,
                         max_score=settings["max_score"])
            return autograde_json(settings)


class RegradeHandler(_GradingBase):
    """``POST .../submissions/<id>/grade``: grade (again) as a job; the last grading counts."""

    @needs(authz.READ_SUBMISSIONS, course="course")
    async def post(self, course: str, name: str, submission: str) -> None:
        submission_id, student, autograded, state = await self.db(self._submission, course, name, submission)
        if not autograded:
            raise web.HTTPError(409, f"{name} is not autograded; turn it on with PUT "
                                     f"/api/courses/{course}/assignments/{name}/autograde.")
        if state == QUEUED:
            raise web.HTTPError(409, f"Submission {submission} is being graded; wait for its result.")
        await self.db(self._audit, course, name, submission_id, student)
        await self.grading.submit(submission_id, self.caller.name)
        self.write_json(await self.db(self._shown, submission_id), 202)

    def _audit(self, course: str, name: str, submission_id: int, student: str) -> None:
        with self.settings["sessions"].begin() as session:
            store.record(session, self.caller.name, REGRADE, _now(), course=course, assignment=name,
                         submission=submission_id, student=student)

    def _shown(self, submission_id: int) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return submission_json(session.get(Submission, submission_id), latest=True)


class ScoresHandler(_GradingBase):
    """``PUT .../submissions/<id>/scores``: a staff score for one graded cell (kept over regrades;
    in the audit log)."""

    @refuses(G.GradingError)
    @needs(authz.READ_SUBMISSIONS, course="course")
    @takes(ScoreOverride)
    async def put(self, course: str, name: str, submission: str) -> None:
        self.write_json(await self.db(self._override, course, name, submission, self.body))

    def _override(self, course: str, name: str, submission: str, body: ScoreOverride) -> dict[str, Any]:
        with self.settings["sessions"].begin() as session:
            a = self._assignment(session, course, name, staff=True)
            s = next((s for s in a.submissions if str(s.id) == submission), None)
            if s is None:
                raise web.HTTPError(404, f"No submission {submission} of {name}.")
            cells = {c.grade_id: c for c in cells_of(s)}
            if body.cell not in cells:
                known = ", ".join(sorted(cells)) or "none yet: grade it first"
                raise G.GradingError(f"No graded cell {body.cell} in this submission's grading; its "
                                     f"cells are {known}")
            score = G.check_override(cells[body.cell], body.score)
            before = (s.overrides or {}).get(body.cell, cells[body.cell].score)
            s.overrides = {**(s.overrides or {}), body.cell: score}
            rescore(s)
            store.record(session, self.caller.name, OVERRIDDEN, _now(), course=course, assignment=name,
                         submission=s.id, student=s.student, cell=body.cell, before=before, score=score,
                         reason=body.reason)
            return submission_json(s, latest=True)


class GradesHandler(_GradingBase):
    """``GET .../grades.csv``: one row per student of the course's roster, whether they submitted
    or not (the last submission counts): ``username,score,max,late,submitted``
    (hub_ext.core.grading.gradebook and grades_csv; docs/teachers/autograding.md)."""

    @needs(authz.READ_SUBMISSIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        members = await self.courses.members(course)  # the roster: the course's one owner of it
        students = [m["username"] for m in members if m["role"] == "student"]
        staff = [m["username"] for m in members if m["role"] != "student"]
        text = await self.db(self._csv, course, name, students, staff)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="{course}-{name}-grades.csv"')
        self.finish(text)

    def _csv(self, course: str, name: str, students: list[str], staff: list[str]) -> str:
        with self.settings["sessions"]() as session:
            a = self._assignment(session, course, name, staff=True)
            last: dict[str, Submission] = {}
            for s in a.submissions:
                last[s.student] = s
            most = float((a.autograde or {}).get("max_score") or 0)
            rows = {student: G.GradeRow(student, s.score, s.max_score or most, s.late)
                    for student, s in last.items()}
            return G.grades_csv(G.gradebook(students, rows, staff, most))
