"""Running a notebook to grade it: nbclient with a time limit and an output cap (issue 34).

Why a module of its own: only the grading job (``python -m hub_ext.backends.grader``) and the
competition runner run notebooks; the classhub service imports `hub_ext.backends.autograde` at
start (the release checks, the output cap, the grader's command) and starts with every hub, so
jupyter_client and nbclient are imported here, where a notebook runs, and not by the service
(about 0.1 s of CPU per service start; tests/test_autograde_units.py checks what the service
imports). It travels in the grading pod's bundle (`hub_ext.backends.kubernetes.jobs.grader_bundle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from hub_ext.backends import autograde
from hub_ext.core import grading as G

__all__ = ["CappedClient", "error_of", "grade", "private_client"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class CappedClient(NotebookClient):
    """nbclient's client keeping at most ``cap`` bytes of outputs (a notebook printing forever
    must not fill the grader's memory or the feedback); ``capped`` says whether outputs were left
    out. The kernel ends with the run (`async_setup_kernel`).

    ``replies`` holds, by cell index, the content of the kernel's ``execute_reply`` to each cell
    it ran: the protocol's verdict on a cell. A test scores from it (`grade`), not from the
    outputs alone: a cell nbclient returned without sending to the kernel (skipped) has no reply,
    and a cell whose error display the notebook's code suppressed still replies "error"."""

    def __init__(self, nb: NotebookNode, cap: int, **kw: Any) -> None:
        super().__init__(nb, shutdown_kernel="immediate", on_cell_executed=self._replied, **kw)
        self.cap, self.kept, self.capped = cap, 0, False
        self.replies: dict[int, dict[str, Any]] = {}

    def _replied(self, cell: NotebookNode, cell_index: int, execute_reply: dict[str, Any]) -> None:
        content = execute_reply.get("content") if isinstance(execute_reply, dict) else None
        self.replies[cell_index] = content if isinstance(content, dict) else {}

    def async_setup_kernel(self, **kwargs: Any) -> Any:
        """The kernel for a run, killed when the run ends, however it ended.

        Why: nbclient leaves running a kernel whose manager it was handed (``private_client``
        hands it one, for the IPC sockets), so a notebook stopped at its time limit went on
        spinning in its endless loop, a core's worth, for as long as the process that graded it
        lived. Killed at once: its cells' outputs are read already, and a busy kernel would not
        answer a polite shutdown request anyway."""
        kwargs.setdefault("cleanup_kc", True)
        return super().async_setup_kernel(**kwargs)

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


def error_of(cell: NotebookNode) -> str | None:
    """The error a cell ended with, as the student reads it (ANSI colours removed), or None."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            lines = [_ANSI.sub("", line) for line in out.get("traceback", [])]
            head = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".strip()
            tail = "\n".join(lines[-6:])
            return G.truncate(f"{head}\n{tail}" if tail else head)
    return None


@contextlib.contextmanager
def private_client(nb: NotebookNode, output_cap: int, time_limit: float, cwd: str | None,
                   kernel_name: str = "python3") -> Iterator[CappedClient]:
    """A client for ``nb`` (each cell bounded by ``time_limit``, outputs by ``output_cap``) whose
    kernel talks over IPC sockets in a folder of its own, removed afterwards: not TCP ports on
    localhost, so two jobs starting kernels at once cannot pick the same port and no other local
    account can reach the kernel. The grader and the competition runner both run notebooks so."""
    sockets = tempfile.mkdtemp(prefix="classhub-kernel-")  # 0700, this process's own
    try:
        km = AsyncKernelManager(kernel_name=kernel_name, transport="ipc", ip=os.path.join(sockets, "k"))
        yield CappedClient(nb, output_cap, km=km, timeout=max(1, int(time_limit)), allow_errors=True,
                           kernel_name=kernel_name, resources={"metadata": {"path": cwd}} if cwd else {})
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def grade(source: NotebookNode, student_data: bytes, where: str, *, time_limit: float,
          output_cap: int = autograde.OUTPUT_CAP, kernel_name: str = "python3",
          cwd: str | None = None, private: bool = False) -> autograde.Outcome:
    """Run ``student_data`` (the student's notebook file) with the teacher's tests and score each
    graded cell of ``source``. Never raises for what the student's notebook does: a notebook that
    cannot be read, a test that fails, a time limit reached, a kernel that died or outputs over
    the cap end as scores and a sentence in the `Outcome`. `private`: the kernel makes itself
    non-dumpable before any cell runs (as the grader does: hub_ext.backends.grader)."""
    cells = autograde.graded_cells(source, f"the source of {where}")
    outcome = autograde.Outcome(where)
    try:
        student = autograde.read_notebook(student_data, f"Your {where}")
    except G.GradingError as e:
        outcome.message = str(e)
        outcome.cells = [G.CellScore(c.grade_id, c.points, G.NOT_RUN if c.auto else G.MANUAL, 0.0
                                     if c.auto else None, "not run: the notebook could not be read")
                         for c in cells]
        return outcome
    merged, missing = autograde.merge_for_grading(source, student)
    ran: set[int] = set()
    deadline = time.monotonic() + time_limit
    with private_client(merged, output_cap, time_limit, cwd, kernel_name) as client:
        try:
            outcome.message = asyncio.run(_run(client, merged, ran, deadline, private))
        except Exception as e:  # the kernel could not start: nothing of the student's ran
            outcome.message = (f"The grader could not start a kernel ({type(e).__name__}: "
                               f"{G.truncate(str(e), 300)}); ask your teacher to regrade")
    if client.capped:
        outcome.message = " ".join(filter(None, [outcome.message, (
            f"Outputs over {output_cap} bytes were left out; print less.")]))
    by_id = {autograde.nbgrader_meta(c).get("grade_id"): (i, c) for i, c in enumerate(merged.cells)
             if autograde.nbgrader_meta(c).get("grade_id")}
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
        reply = client.replies.get(index)
        error = error_of(cell) or _reply_error(reply)
        if error is not None:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.FAILED, 0.0, error))
        elif index in ran and reply is not None:  # passed: the kernel ran it and replied "ok"
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.PASSED, graded.points))
        elif index in ran:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.NOT_RUN, 0.0,
                                             "not run: the kernel never ran this cell"))
        else:
            outcome.cells.append(G.CellScore(graded.grade_id, graded.points, G.NOT_RUN, 0.0,
                                             "not run (see the message above)"))
    return outcome


def _reply_error(reply: dict[str, Any] | None) -> str | None:
    """The error an ``execute_reply`` reports (any status but "ok"), or None: a test whose error
    display the notebook's code suppressed still fails."""
    if reply is None or reply.get("status") == "ok":
        return None
    head = f"{reply.get('ename') or 'Error'}: {reply.get('evalue') or ''}".strip()
    return G.truncate(f"{head} (the cell ended with status {str(reply.get('status'))[:40]!r})")


async def _run(client: CappedClient, nb: NotebookNode, ran: set[int], deadline: float,
               private: bool = False) -> str:
    """Run every code cell in order until the deadline; the sentence of how it ended."""
    async with client.async_setup_kernel():
        if private:
            await client.kc.execute_interactive(autograde.KERNEL_PREAMBLE, silent=True, store_history=False,
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


def _timed_out(client: CappedClient, index: int) -> str:
    return (f"Grading stopped at the time limit in cell {index + 1} (an endless loop, or too slow); "
            "later cells were not run.")
