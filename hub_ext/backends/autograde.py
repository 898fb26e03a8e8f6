"""Autograding notebooks in nbgrader's format: read, check a release, merge the hidden tests back,
run, score (issue 34).

Why here and not in hub_ext.core: notebooks are read and written with nbformat and run with
nbclient (the Jupyter project's own libraries, not hand parsing); the rules they apply (hidden
markers, scores, totals) are hub_ext.core.grading's.

What runs where:
- The service checks a teacher's source notebook (`graded_cells`, `check_release`: the
  released student version, the template version's file, must hold no hidden test and every
  graded cell of the source) when an assignment is marked autograded.
- The grading job runs `grade` through ``python -m hub_ext.backends.grader`` (the job's command):
  the teacher's source of every test and locked cell replaces the student's copy
  (`merge_for_grading`; the student's own cells are kept), nbclient runs the notebook with a
  time limit and an output cap, and each graded cell is scored from what it did.

nbformat, jupyter_client and nbclient are imported where they are used, not with this module:
the service imports it at start (for `OUTPUT_CAP`, the grader's command and its notebook checks)
and starts with every hub, and those imports cost about 0.1 s of CPU per start that a service
which never reads a notebook does not need. The service reads notebooks in worker threads, so
the first read's import is no event-loop work (docs/architecture.md, rule 7).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hub_ext.core import grading as G

if TYPE_CHECKING:
    from nbformat import NotebookNode

__all__ = ["Outcome", "capped_client", "check_release", "grade", "graded_cells", "merge_for_grading",
           "read_notebook", "student_version"]

#: Outputs kept per notebook, in bytes of JSON (a test printing forever is cut off here).
OUTPUT_CAP = 1024 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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


def _meta(cell: NotebookNode) -> dict[str, Any]:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _is_test(cell: NotebookNode) -> bool:
    meta = _meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def graded_cells(nb: NotebookNode, where: str) -> list[G.GradedCell]:
    """The teacher's graded cells, in order (GradingError: a graded cell without a grade_id or
    points, a grade_id used twice, a hidden marker outside a test cell, a broken marker)."""
    found: list[G.GradedCell] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
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
    by_id = {_meta(c).get("grade_id"): c for c in released.cells if _meta(c).get("grade_id")}
    for index, cell in enumerate(released.cells):
        if G.has_hidden(cell.get("source", "")):
            raise G.GradingError(f"the released {where}, cell {index + 1}, still holds hidden tests: "
                                 "publish a template version made from the source with the hidden "
                                 "tests removed")
    for source_cell in source.cells:
        shown = by_id.get(_meta(source_cell).get("grade_id"))
        if shown is not None and set(G.hidden_lines(source_cell.source)) & {
                line.strip() for line in shown.source.splitlines()}:
            raise G.GradingError(f"the released {where}: cell {_meta(source_cell)['grade_id']} holds "
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
    the copies lose their nbgrader metadata, so they score nothing."""
    import nbformat

    teacher = {_meta(c)["grade_id"]: c for c in source.cells
               if _meta(c).get("grade_id") and (_is_test(c) or _meta(c).get("locked"))}
    graded = {_meta(c)["grade_id"] for c in source.cells if _meta(c).get("grade")}
    out = nbformat.from_dict(json.loads(json.dumps(student)))
    seen: set[str] = set()
    for cell in out.cells:
        grade_id = _meta(cell).get("grade_id")
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
            cell.metadata["nbgrader"] = dict(_meta(original))
            if cell.cell_type == "code":
                cell.setdefault("outputs", [])
                cell.setdefault("execution_count", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return out, graded - seen


def capped_client(nb: NotebookNode, cap: int, **kw: Any) -> Any:
    """nbclient's client (``NotebookClient(nb, **kw)``) keeping at most ``cap`` bytes of outputs
    (a notebook printing forever must not fill the grader's memory or the feedback); its
    ``capped`` says whether outputs were left out."""
    return _capped_client_class()(nb, cap, **kw)


@functools.cache
def _capped_client_class() -> type:
    """The class of `capped_client`, made on first use: nbclient is imported only where a
    notebook runs (the grader and the competition runner; see the module's docstring)."""
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):  # type: ignore[misc]
        """`capped_client`'s class."""

        def __init__(self, nb: NotebookNode, cap: int, **kw: Any) -> None:
            super().__init__(nb, **kw)
            self.cap, self.kept, self.capped = cap, 0, False

        def output(self, outs: list[NotebookNode], msg: dict[str, Any], display_id: str | None,
                   cell_index: int) -> NotebookNode | None:
            out = super().output(outs, msg, display_id, cell_index)
            if out is not None:
                self.kept += len(json.dumps(out))
                if self.kept > self.cap:
                    self.capped = True
                    if outs and outs[-1] is out:
                        outs.pop()
                    if out.get("output_type") == "error":  # an error is kept: it is the verdict
                        out.traceback = []
                        outs.append(out)
            return out

    return CappedClient


def _error_of(cell: NotebookNode) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            lines = [_ANSI.sub("", line) for line in out.get("traceback", [])]
            head = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".strip()
            tail = "\n".join(lines[-6:])
            return G.truncate(f"{head}\n{tail}" if tail else head)
    return None


def grade(source: NotebookNode, student_data: bytes, where: str, *, time_limit: float,
          output_cap: int = OUTPUT_CAP, kernel_name: str = "python3",
          cwd: str | None = None, private: bool = False) -> Outcome:
    """Run ``student_data`` (the student's notebook file) with the teacher's tests and score each
    graded cell of ``source``. Never raises for what the student's notebook does: a notebook that
    cannot be read, a test that fails, a time limit reached, a kernel that died or outputs over
    the cap end as scores and a sentence in the `Outcome`. `private`: the kernel makes itself
    non-dumpable before any cell runs (as the grader does: hub_ext.backends.grader)."""
    cells = graded_cells(source, f"the source of {where}")
    outcome = Outcome(where)
    try:
        student = read_notebook(student_data, f"Your {where}")
    except G.GradingError as e:
        outcome.message = str(e)
        outcome.cells = [G.CellScore(c.grade_id, c.points, G.NOT_RUN if c.auto else G.MANUAL, 0.0
                                     if c.auto else None, "not run: the notebook could not be read")
                         for c in cells]
        return outcome
    from jupyter_client.manager import AsyncKernelManager

    merged, missing = merge_for_grading(source, student)
    # IPC sockets in a private folder, not TCP ports on localhost: two graders starting kernels at
    # once cannot pick the same port, and no other local account can reach the kernel
    sockets = tempfile.mkdtemp(prefix="classhub-kernel-")
    km = AsyncKernelManager(kernel_name=kernel_name, transport="ipc", ip=os.path.join(sockets, "k"))
    client = capped_client(merged, output_cap, km=km, timeout=max(1, int(time_limit)), allow_errors=True,
                           kernel_name=kernel_name, resources={"metadata": {"path": cwd}} if cwd else {})
    ran: set[int] = set()
    deadline = time.monotonic() + time_limit
    try:
        outcome.message = asyncio.run(_run(client, merged, ran, deadline, private))
    except Exception as e:  # the kernel could not start: nothing of the student's ran
        outcome.message = (f"The grader could not start a kernel ({type(e).__name__}: "
                           f"{G.truncate(str(e), 300)}); ask your teacher to regrade")
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    if client.capped:
        outcome.message = " ".join(filter(None, [outcome.message, (
            f"Outputs over {output_cap} bytes were left out; print less.")]))
    by_id = {_meta(c).get("grade_id"): (i, c) for i, c in enumerate(merged.cells)
             if _meta(c).get("grade_id")}
    for graded in cells:
        if graded.grade_id in missing:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.MISSING, 0.0,
                                             "this graded cell is not in your notebook (deleted?)"))
            continue
        if not graded.auto:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.MANUAL, None,
                                             "graded by your teacher"))
            continue
        index, cell = by_id[graded.grade_id]
        error = _error_of(cell)
        if error is not None:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.FAILED, 0.0, error))
        elif index in ran:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.PASSED, graded.points))
        else:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.NOT_RUN, 0.0,
                                             "not run (see the message above)"))
    return outcome


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


async def _run(client: Any, nb: NotebookNode, ran: set[int], deadline: float,
               private: bool = False) -> str:
    """Run every code cell in order until the deadline; the sentence of how it ended."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    async with client.async_setup_kernel():
        if private:
            await client.kc.execute_interactive(KERNEL_PREAMBLE, silent=True, store_history=False,
                                                timeout=max(1.0, deadline - time.monotonic()))
        for index, cell in enumerate(nb.cells):
            if cell.get("cell_type") != "code":
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return _timed_out(client, index)
            client.timeout = max(1, int(left))
            try:
                await client.async_execute_cell(cell, index)
            except CellTimeoutError:
                return _timed_out(client, index)
            except DeadKernelError:
                return (f"The kernel died in cell {index + 1} (out of memory, or the code ended "
                        "the process); later cells were not run.")
            ran.add(index)
    return ""


def _timed_out(client: Any, index: int) -> str:
    return (f"Grading stopped at the time limit in cell {index + 1} (an endless loop, or too slow); "
            "later cells were not run.")


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The result of a grading job as it is stored: every notebook's cells and message."""
    return {"notebooks": [o.as_json() for o in outcomes]}
