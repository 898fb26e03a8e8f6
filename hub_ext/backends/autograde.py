"""Autograding notebooks in nbgrader's format: read, check a release, merge the hidden tests back,
run, score (issue 34).

Why here and not in hub_ext.core: notebooks are read and written with nbformat and run with
nbclient (the Jupyter project's own libraries, not hand parsing); the rules they apply (hidden
markers, scores, totals) are hub_ext.core.grading's.

What runs where:
- The service checks a teacher's source notebook (`graded_cells`, `check_release`: the
  released student version, the template version's file, must hold no hidden test and every
  graded cell of the source) when an assignment is marked autograded.
- The grading job runs `hub_ext.backends.notebook_run.grade` through ``python -m
  hub_ext.backends.grader`` (the job's command): the teacher's source of every test and locked
  cell replaces the student's copy (`merge_for_grading`; the student's own cells are kept),
  nbclient runs the notebook with a time limit and an output cap, and each graded cell is scored
  from what it did.

Running notebooks (jupyter_client, nbclient) is `hub_ext.backends.notebook_run`'s, and nbformat
is imported where a notebook is read: the service imports this module at start (for
`OUTPUT_CAP`, the grader's command and its notebook checks) and starts with every hub, and those
imports cost about 0.1 s of CPU per start that a service which never reads a notebook does not
need. The service reads notebooks in worker threads, so the first read's import is no event-loop
work (docs/architecture.md, rule 7).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hub_ext.core import grading as G

if TYPE_CHECKING:
    from nbformat import NotebookNode

__all__ = ["KERNEL_PREAMBLE", "OUTPUT_CAP", "Outcome", "check_release", "graded_cells", "merge_for_grading",
           "nbgrader_meta", "read_notebook", "student_version", "summary", "undumpable"]

#: Outputs kept per notebook, in bytes of JSON (a test printing forever is cut off here).
OUTPUT_CAP = 1024 * 1024


@dataclass
class Outcome:
    """What grading one notebook gave: each graded cell's score and one sentence about the run
    (empty when every cell ran)."""

    notebook: str
    cells: list[G.CellScore] = field(default_factory=list)
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "message": self.message,
                "cells": [asdict(c) for c in self.cells]}


def read_notebook(data: bytes | str, where: str) -> NotebookNode:
    """A notebook (version 4) from its file's bytes; GradingError with a sentence when it is not
    one (not JSON, not a notebook, invalid against nbformat's schema)."""
    import nbformat

    try:
        nb = nbformat.reads(data if isinstance(data, str) else data.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except UnicodeDecodeError:
        raise G.GradingError(f"{where} is not a text file (not UTF-8); save it from JupyterLab "
                             "and submit again") from None
    except (ValueError, nbformat.ValidationError, KeyError, TypeError, AttributeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise G.GradingError(f"{where} is not a valid notebook ({G.truncate(first, 200)}); open it "
                             "in JupyterLab, save it and submit again") from None
    return nb


def nbgrader_meta(cell: NotebookNode) -> dict[str, Any]:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _is_test(cell: NotebookNode) -> bool:
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def graded_cells(nb: NotebookNode, where: str) -> list[G.GradedCell]:
    """The teacher's graded cells, in order (GradingError: a graded cell without a grade_id or
    points, a grade_id used twice, a hidden marker outside a test cell, a broken marker)."""
    found: list[G.GradedCell] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell)
        source = cell.get("source", "")
        at = f"{where}, cell {index + 1}"
        if G.has_hidden(source):
            if not _is_test(cell):
                raise G.GradingError(f"{at}: hidden tests belong in a graded test cell (nbgrader "
                                     "metadata grade true, solution false)")
            G.strip_hidden(source, at)
        if not meta.get("grade") and not meta.get("locked"):
            continue
        grade_id = meta.get("grade_id")
        if not isinstance(grade_id, str) or not grade_id:
            raise G.GradingError(f"{at}: a graded or locked cell needs a grade_id in its nbgrader "
                                 "metadata")
        if grade_id in seen:
            raise G.GradingError(f"{at}: grade_id {grade_id!r} is used twice; give each cell its own")
        seen.add(grade_id)
        if meta.get("grade"):
            if "points" not in meta:
                raise G.GradingError(f"{at}: graded cell {grade_id} has no points")
            found.append(G.GradedCell(grade_id, G.check_points(f"{at}: points", meta["points"]),
                                      auto=_is_test(cell)))
    if not found:
        raise G.GradingError(f"{where} has no graded cell (nbgrader metadata grade true with "
                             "points); make one with nbgrader's Create Assignment toolbar")
    return found


def student_version(nb: NotebookNode) -> NotebookNode:
    """The teacher's source with every hidden test removed and outputs cleared: what students
    may be given."""
    import nbformat

    out = nbformat.from_dict(json.loads(json.dumps(nb)))
    for index, cell in enumerate(out.cells):
        cell.source = G.strip_hidden(cell.get("source", ""), f"cell {index + 1}")
        if cell.get("cell_type") == "code":
            cell.outputs, cell.execution_count = [], None
    return out


def check_release(source: NotebookNode, released: NotebookNode, where: str) -> list[G.GradedCell]:
    """The graded cells, when ``released`` (what students get) is a fit student version of
    ``source``: no hidden test and no hidden marker in it, every graded cell of the source in it.
    Else GradingError saying what to fix."""
    cells = graded_cells(source, f"the source of {where}")
    by_id = {nbgrader_meta(c).get("grade_id"): c for c in released.cells if nbgrader_meta(c).get("grade_id")}
    for index, cell in enumerate(released.cells):
        if G.has_hidden(cell.get("source", "")):
            raise G.GradingError(f"the released {where}, cell {index + 1}, still holds hidden tests: "
                                 "publish a template version made from the source with the hidden "
                                 "tests removed")
    for source_cell in source.cells:
        shown = by_id.get(nbgrader_meta(source_cell).get("grade_id"))
        if shown is not None and set(G.hidden_lines(source_cell.source)) & {
                line.strip() for line in shown.source.splitlines()}:
            raise G.GradingError(f"the released {where}: cell {nbgrader_meta(source_cell)['grade_id']} holds "
                                 "lines of its hidden tests; release the student version")
    missing = [c.grade_id for c in cells if c.grade_id not in by_id]
    if missing:
        raise G.GradingError(f"the released {where} lacks graded cells {', '.join(missing)} of the "
                             "source; release the student version of this source")
    return cells


def merge_for_grading(source: NotebookNode, student: NotebookNode) -> tuple[NotebookNode, set[str]]:
    """The notebook to run: the student's, with the teacher's source (hidden tests included) in
    place of every test and locked cell, matched by grade_id; (notebook, grade_ids the student's
    notebook lacks). A grade_id the student copied onto a second cell counts once (the first);
    the copies lose their nbgrader metadata, so they score nothing. A test or locked cell takes
    the teacher's metadata whole (tags included), never the student's."""
    import nbformat

    teacher = {nbgrader_meta(c)["grade_id"]: c for c in source.cells
               if nbgrader_meta(c).get("grade_id") and (_is_test(c) or nbgrader_meta(c).get("locked"))}
    graded = {nbgrader_meta(c)["grade_id"] for c in source.cells if nbgrader_meta(c).get("grade")}
    out = nbformat.from_dict(json.loads(json.dumps(student)))
    seen: set[str] = set()
    for cell in out.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if not grade_id:
            continue
        if grade_id in seen or grade_id not in (graded | set(teacher)):
            cell.metadata.pop("nbgrader", None)
            continue
        seen.add(grade_id)
        if grade_id in teacher:
            original = teacher[grade_id]
            cell.cell_type = original.cell_type
            cell.source = original.source
            # the teacher's metadata whole, not only its nbgrader part: the runner reads a cell's
            # metadata too (nbclient skips a cell tagged ``skip-execution``), so a student's tag
            # on a test cell must not decide whether the test runs
            cell.metadata = copy.deepcopy(original.metadata)
            if cell.cell_type == "code":
                cell.setdefault("outputs", [])
                cell.setdefault("execution_count", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return out, graded - seen


_PR_SET_DUMPABLE = 4
#: what a private kernel runs first: PR_SET_DUMPABLE 0, so no process of its account can read
#: its memory, files or environment through /proc (ptrace rules need a dumpable target)
KERNEL_PREAMBLE = f"import ctypes as _c; _c.CDLL(None).prctl({_PR_SET_DUMPABLE}, 0, 0, 0, 0); del _c"


def undumpable() -> None:
    """Make this process non-dumpable (the grader's and the competition runner's, as their
    kernels are by `KERNEL_PREAMBLE`); a system without prctl runs on all the same. Call it again
    after a change of uid, which makes a process dumpable again."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The result of a grading job as it is stored: every notebook's cells and message."""
    return {"notebooks": [o.as_json() for o in outcomes]}
