"""The command of a competition's jobs: ``python -m hub_ext.backends.competition_runner <folder>``
(issue 34, docs/teachers/competitions.md).

Two kinds of job, both in the grading sandbox (the grader account locally, uid 65534 without a
token in a Kubernetes pod; hub_ext.backends.grader says how the inputs get there):

- **notebook**: run a student's notebook (``work/submission.ipynb``) with nbclient in its own
  folder, under the time and memory limits, and hand back the predictions file it wrote there
  (the name the competition declares). The hidden labels are never among this job's inputs.
- **score**: run a teacher's scoring script (``work/scorer.py``) on the hidden labels of each
  split (``work/labels_public.csv``, ``work/labels_private.csv``) and the predictions
  (``work/predictions.csv``): ``score(labels_path, predictions_path)`` must return a finite
  number, checked strictly here and again by the service. Never in the service's process.

Like the grader, and through the same code (hub_ext.backends.sandbox_job): the settings
(``run.json``, with a nonce) are read and deleted before any code of a student or a teacher runs;
the result is the log's last line, ``CLASSHUB-COMPETITION-RESULT <nonce> <json>``, which no code
without the nonce can forge; this process makes itself non-dumpable, so another job of the same
account cannot read its memory or files through /proc (``private`` in run.json: where jobs run
as a grading account, not as the service's own, whose job service must still find its jobs'
processes by their environment).
"""

from __future__ import annotations

import asyncio
import base64
import os
import runpy
import signal
import stat
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# classhub's own code is read before this process becomes the sandbox's account: in a pod it
# lies in the job's root-only Secret (/grading/in/lib), which that account cannot read
from hub_ext.backends import autograde, sandbox_job
from hub_ext.core import grading as G

MARKER = "CLASSHUB-COMPETITION-RESULT"
#: the first cell a submitted notebook's kernel runs: the kernel, too, becomes non-dumpable, so
#: another student's notebook running as the same account cannot look into it through /proc
KERNEL_PREAMBLE = autograde.KERNEL_PREAMBLE
#: the help of the command's arguments
HELP = {"inputs": "the job's inputs: run.json and work/",
        "drop_to": "started as root (Kubernetes): hand a copy of work/ to this uid in --work, then "
                   "become it",
        "work": "with --drop-to: the scratch folder to run in"}


def main(argv: list[str] | None = None) -> int:
    args = sandbox_job.arguments("python -m hub_ext.backends.competition_runner", argv, **HELP)
    if isinstance(args, int):
        return args
    folder = Path(args.folder)
    config, private = sandbox_job.settings(folder, "run.json")
    # Imported before the hand-over: in a grading pod the bundle's files (lib/) are root's and
    # unreadable after it; `_notebook` and `_run` find it loaded. Not at the top: the service
    # imports this module for `parse_result` and never runs a notebook (notebook_run's docstring).
    from hub_ext.backends import notebook_run  # noqa: F401
    folder = sandbox_job.enter(folder, args, config, private, keep="work", one_time=("run.json",))
    nonce = str(config["nonce"])
    work = folder / "work"
    os.chdir(work)  # the student's or the teacher's code runs in its folder, with relative paths
    if config.get("kind") == "score":
        signal.signal(signal.SIGALRM, _out_of_time)  # the script's own time limit, then a sentence
        signal.alarm(max(1, int(float(config.get("time_limit") or 300))))
        result = _score(work)
        signal.alarm(0)
    else:
        result = _notebook(work, config, private)
    sandbox_job.report(MARKER, nonce, result)
    return 0


def _out_of_time(signum: int, frame: Any) -> None:
    raise TimeoutError("the scoring script ran past its time limit")


# ---------------------------------------------------------------------------- a notebook
def _notebook(work: Path, config: dict[str, Any], private: bool = True) -> dict[str, Any]:
    """Run the notebook; {"predictions": base64} or {"error": sentence for the student}."""
    name = str(config["predictions_file"])
    try:
        nb = autograde.read_notebook((work / "submission.ipynb").read_bytes(), "Your notebook")
    except G.GradingError as e:
        return {"error": str(e)}
    code = [i for i, c in enumerate(nb.cells) if c.get("cell_type") == "code"]
    if not code:
        return {"error": "Your notebook has no code cell; it must write " + name + "."}
    from nbformat.v4 import new_code_cell
    nb.cells.insert(0, new_code_cell(KERNEL_PREAMBLE if private else "pass"))
    from hub_ext.backends import notebook_run  # loaded by `main` before the hand-over

    time_limit = float(config["time_limit"])
    with notebook_run.private_client(nb, autograde.OUTPUT_CAP, time_limit, str(work)) as client:
        try:
            failure = asyncio.run(_run(client, nb, time.monotonic() + time_limit))
        except Exception as e:  # the kernel could not start: nothing of the student's ran
            failure = (f"The kernel could not start ({type(e).__name__}: {G.truncate(str(e), 300)}); "
                       "submit again later or ask your teacher.")
    if failure:
        return {"error": failure}
    return _predictions(work, name, int(config["max_bytes"]))


async def _run(client: Any, nb: Any, deadline: float) -> str:
    """Every code cell in order until the first error or the deadline; the sentence of a failure
    ("" when every cell ran). Cell numbers are the student's (the preamble is not counted)."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from hub_ext.backends import notebook_run

    async with client.async_setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.get("cell_type") != "code":
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return _timed_out(index)
            client.timeout = max(1, int(left))
            try:
                await client.async_execute_cell(cell, index)
            except CellTimeoutError:
                return _timed_out(index)
            except DeadKernelError:
                return (f"Your notebook's kernel died in cell {index} (out of memory, or the code "
                        "ended the process); no predictions were collected.")
            error = notebook_run.error_of(cell)
            if error is not None:
                if index == 0:
                    continue  # the preamble: a system without prctl runs the notebook all the same
                return f"Your notebook crashed in cell {index}: {error}"
    return ""


def _timed_out(index: int) -> str:
    return (f"Your notebook reached the competition's time limit in cell {index} (an endless loop, or "
            "too slow); no predictions were collected.")


def _predictions(work: Path, name: str, max_bytes: int) -> dict[str, Any]:
    """The predictions file the notebook wrote in its folder: a regular file (never a link out of
    it), at most ``max_bytes``."""
    try:
        fd = os.open(work / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return {"error": f"Your notebook ran but wrote no {name} in its folder; write the predictions "
                         f"there (e.g. df.to_csv({name!r}, index=False))."}
    except OSError as e:
        return {"error": f"Your notebook's {name} could not be read ({e.strerror}); write a plain file, "
                         "not a link."}
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {"error": f"Your notebook's {name} is not a plain file; write a CSV file."}
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        return {"error": f"Your notebook's {name} is larger than the {max_bytes} bytes this competition "
                         "takes; write a smaller file."}
    return {"predictions": base64.b64encode(data).decode()}


# ---------------------------------------------------------------------------- a scoring script
def _score(work: Path) -> dict[str, Any]:
    """{"public": x, "private": y} (None for an empty split), or {"error": sentence,
    "detail": the script's traceback for the teacher}."""
    try:
        found = runpy.run_path(str(work / "scorer.py"), run_name="classhub_scorer")
    except BaseException as e:
        return _failed("could not be loaded", e)
    score = found.get("score")
    if not callable(score):
        return {"error": "The scoring script defines no function score(labels_path, predictions_path); "
                         "the teacher fixes the script.", "detail": ""}
    out: dict[str, Any] = {}
    predictions = str(work / "predictions.csv")
    for split in ("public", "private"):
        labels = work / f"labels_{split}.csv"
        if not labels.exists():
            out[split] = None  # an empty split has no score
            continue
        try:
            value = score(str(labels), predictions)
        except ValueError as e:  # the script refuses the predictions: its sentence is the student's
            return {"error": "Your predictions were refused by the competition's scoring script: "
                             + (str(e).strip()[:500] or "no reason given") + ".",
                    "detail": "", "refused": True}
        except BaseException as e:
            return _failed(f"failed on the {split} split", e)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value \
                or value in (float("inf"), float("-inf")):
            shown = repr(value)
            return {"error": "The scoring script's score() returned something that is not a finite "
                             "number; the teacher fixes the script.",
                    "detail": f"score() returned {shown[:200]} ({type(value).__name__}) on the {split} "
                              "split; return a finite float."}
        out[split] = float(value)
    return out


def _failed(what: str, e: BaseException) -> dict[str, Any]:
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    return {"error": f"The scoring script {what} ({type(e).__name__}); the teacher was told and can "
                     "score the submission again.",
            "detail": "".join(lines[-8:])[-3000:]}


def parse_result(log: str, nonce: str) -> dict[str, Any] | None:
    """The runner's result in a job log (`hub_ext.core.grading.marked_result`), or None."""
    return G.marked_result(log, MARKER, nonce)


if __name__ == "__main__":
    sys.exit(main())
