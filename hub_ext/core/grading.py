"""Autograding: hidden tests, scores per graded cell, totals, overrides and the grades CSV (issue 34).

Why pure: "the hidden tests never reach a student, each graded cell scores its points when its
tests pass, a staff override replaces the score, the gradebook gets one row per student" are
promises a teacher makes to a class; the grader (hub_ext.backends.autograde, which reads
notebooks with nbformat and runs them with nbclient), the REST API and the pages must keep them
the same way. Everything here is text and numbers, unit- and property-tested without a hub or a
kernel (tests/test_autograde_units.py).

Notebooks are in nbgrader's format (https://nbgrader.readthedocs.io, "Developer API: cell
metadata"): a cell's ``metadata.nbgrader`` has ``grade_id``, ``points``, ``grade`` (it is
graded), ``solution`` (the student writes it) and ``locked``. A graded code cell that is not a
solution is an autograded test: it scores its points when it runs without an error. Hidden
tests sit between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` in the teacher's
source; the released version has them removed (`strip_hidden`), and grading runs the teacher's
source of every test and locked cell in place of the student's copy.

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BEGIN_HIDDEN",
    "END_HIDDEN",
    "ERROR_CHARS",
    "FAILED",
    "MANUAL",
    "MISSING",
    "NOT_RUN",
    "PASSED",
    "CellScore",
    "GradeRow",
    "GradedCell",
    "GradingError",
    "cell_key",
    "feedback",
    "gradebook",
    "grades_csv",
    "has_hidden",
    "hidden_lines",
    "strip_hidden",
    "total",
    "truncate",
]

BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
#: The most characters of one failed test's error text a student reads in their feedback.
ERROR_CHARS = 2000

PASSED = "passed"
FAILED = "failed"
NOT_RUN = "not-run"
MANUAL = "manual"
MISSING = "missing"
STATUSES = (PASSED, FAILED, NOT_RUN, MANUAL, MISSING)

_GRADE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
_MAX_POINTS = 10_000


class GradingError(ValueError):
    """A notebook or a score the teacher must change; the message says what."""


@dataclass(frozen=True)
class GradedCell:
    """A graded cell of the teacher's source: its id, its points and whether a test scores it
    (``auto``) or a person does (a written answer: ``auto`` False)."""

    grade_id: str
    points: float
    auto: bool

    def __post_init__(self) -> None:
        if not isinstance(self.grade_id, str) or not _GRADE_ID.match(self.grade_id):
            raise GradingError(f"grade_id {self.grade_id!r} is not valid: use 1 to 64 letters, "
                               "digits, '_', '.' or '-'")
        check_points(f"cell {self.grade_id}: points", self.points)


@dataclass(frozen=True)
class CellScore:
    """What one graded cell scored: ``score`` None while a person has not graded it."""

    grade_id: str
    points: float
    status: str
    score: float | None = None
    message: str = ""


@dataclass(frozen=True)
class GradeRow:
    """One student's line of the gradebook export (``submitted`` False: no submission, so no
    score and not late)."""

    student: str
    score: float | None
    max_score: float
    late: bool = False
    submitted: bool = True


@dataclass
class Totals:
    """A submission's score (None when nothing is scored yet) of ``max_score`` points, and the
    cells still waiting for a person."""

    score: float | None
    max_score: float
    ungraded: list[str] = field(default_factory=list)


def check_points(what: str, value: object) -> float:
    """``value`` as points: a finite number from 0 to 10000."""
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not 0 <= value <= _MAX_POINTS):
        raise GradingError(f"{what} must be a number from 0 to {_MAX_POINTS}, not {value!r}")
    return float(value)


def has_hidden(source: str) -> bool:
    """Whether a cell's source holds a hidden-tests marker (either one)."""
    return BEGIN_HIDDEN in source or END_HIDDEN in source


def strip_hidden(source: str, where: str = "a cell") -> str:
    """``source`` without its hidden tests: every line from a ``### BEGIN HIDDEN TESTS`` line up
    to and including its ``### END HIDDEN TESTS`` line is removed; every other line is kept as
    it was. A marker without its partner, or nested, is a GradingError (a test half-hidden would
    reach the students)."""
    kept: list[str] = []
    hidden = False
    for line in source.splitlines(keepends=True):
        marker = line.strip()
        if marker == BEGIN_HIDDEN:
            if hidden:
                raise GradingError(f"{where}: a second {BEGIN_HIDDEN!r} before {END_HIDDEN!r}")
            hidden = True
            continue
        if marker == END_HIDDEN:
            if not hidden:
                raise GradingError(f"{where}: {END_HIDDEN!r} without {BEGIN_HIDDEN!r} before it")
            hidden = False
            continue
        if not hidden and has_hidden(line):
            raise GradingError(f"{where}: put {BEGIN_HIDDEN!r} and {END_HIDDEN!r} on lines of "
                               "their own")
        if not hidden:
            kept.append(line)
    if hidden:
        raise GradingError(f"{where}: {BEGIN_HIDDEN!r} is never closed by {END_HIDDEN!r}")
    return "".join(kept)


def hidden_lines(source: str) -> list[str]:
    """The non-blank lines (stripped) between hidden-test markers: what must never reach a
    student. A line that is also outside the markers (a blank-ish ``pass``) is left out."""
    shown = {line.strip() for line in strip_hidden(source).splitlines()}
    inside, hidden = False, []
    for line in source.splitlines():
        marker = line.strip()
        if marker in (BEGIN_HIDDEN, END_HIDDEN):
            inside = marker == BEGIN_HIDDEN
        elif inside and marker and marker not in shown:
            hidden.append(marker)
    return hidden


def marked_result(log: str, marker: str, nonce: str) -> dict[str, Any] | None:
    """A sandbox job's result in its log: the JSON object on the last line that starts with the
    marker *and* this job's nonce (a line the student's or teacher's code printed has no nonce),
    or None (no such line, or not a JSON object)."""
    prefix = f"{marker} {nonce} "
    for line in reversed(log.splitlines()):
        if line.startswith(prefix):
            try:
                found = json.loads(line[len(prefix):])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def truncate(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... ({len(text) - limit} more characters left out)"


def total(cells: Sequence[CellScore], overrides: Mapping[str, float] | None = None) -> Totals:
    """The submission's score: each cell's score, or a person's override of it (which also
    grades a written answer). Cells scored by nobody yet are listed in ``ungraded`` and count
    as nothing; with no cell scored at all the score is None."""
    overrides = overrides or {}
    score: float | None = None
    ungraded = []
    for cell in cells:
        value = overrides.get(cell.grade_id, cell.score)
        if value is None:
            ungraded.append(cell.grade_id)
            continue
        score = (score or 0.0) + float(value)
    return Totals(score, sum(c.points for c in cells), ungraded)


def check_override(cell: CellScore, value: object) -> float:
    """A staff score for ``cell``: a number from 0 to the cell's points."""
    points = check_points(f"the score of {cell.grade_id}", value)
    if points > cell.points:
        raise GradingError(f"{cell.grade_id} is worth {_num(cell.points)} points; give a score "
                           f"from 0 to {_num(cell.points)}")
    return points


def cell_key(notebook: str, grade_id: str) -> str:
    """How a graded cell is named across notebooks (overrides, the feedback): ``lab1.ipynb:q1``."""
    return f"{notebook}:{grade_id}"


def feedback(grading: Mapping[str, Any] | None,
             overrides: Mapping[str, float] | None) -> dict[str, Any] | None:
    """What the student (and the staff) read of a stored grading: its state, the sentence, each
    cell's status, score (a staff override where one was given) and message. Never the job's
    id, its nonce or where its inputs were."""
    if not grading:
        return None
    overrides = overrides or {}
    notebooks = []
    for nb in grading.get("notebooks", []):
        cells = []
        for c in nb.get("cells", []):
            key = cell_key(nb["notebook"], c["grade_id"])
            cells.append({"cell": key, "grade_id": c["grade_id"], "points": c["points"],
                          "status": c["status"], "score": overrides.get(key, c.get("score")),
                          "overridden": key in overrides, "message": c.get("message", "")})
        notebooks.append({"notebook": nb["notebook"], "message": nb.get("message", ""), "cells": cells})
    return {"state": grading.get("state"), "message": grading.get("message", ""),
            "graded_at": grading.get("graded_at"), "job": grading.get("job_name"),
            "notebooks": notebooks}


def gradebook(students: Iterable[str], last: Mapping[str, GradeRow], staff: Iterable[str] = (),
              max_score: float = 0.0) -> list[GradeRow]:
    """The gradebook's rows, one per student, sorted by name: every student of the course's
    roster, whether they submitted or not (no submission: no score, ``submitted`` False, the
    assignment's ``max_score``), and whoever else submitted (``last``: each submitter's row from
    their last submission) unless they are on the course's staff now (``staff``: a teacher or TA
    who tried Submit is not a student; an LMS import refuses a name it does not know). A
    student removed from the course after submitting keeps their row: their work was graded."""
    staff_now = set(staff)
    rows = {name: row for name, row in last.items() if name not in staff_now}
    for name in students:
        rows.setdefault(name, GradeRow(name, None, float(max_score), False, submitted=False))
    return [rows[name] for name in sorted(rows)]


def grades_csv(rows: Iterable[GradeRow]) -> str:
    """The gradebook export: a header ``username,score,max,late,submitted`` then one row per
    student (score empty when not graded or not submitted, late and submitted ``1`` or ``0``);
    the first two columns are the "username,score" form Canvas' and Moodle's grade imports map
    to a grade column, and an empty score is "no grade" to them (Moodle's CSV import reads an
    empty cell or ``-`` as no grade), never a zero the teacher did not give
    (docs/teachers/autograding.md, "Scores, overrides, regrading, export")."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["username", "score", "max", "late", "submitted"])
    for row in sorted(rows, key=lambda r: r.student):
        writer.writerow([_cell(row.student), "" if row.score is None else _num(row.score),
                         _num(row.max_score), "1" if row.late else "0", "1" if row.submitted else "0"])
    return out.getvalue()


def _cell(text: str) -> str:
    """A text cell a spreadsheet will not run as a formula (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"
