"""The command of a grading job: ``python -m hub_ext.backends.grader <folder>`` (issue 34).

Why this shape:
- **One-time inputs.** The service puts the job's inputs in ``<folder>`` (a private per-job
  folder: local mode; a Secret volume: Kubernetes): ``grading.json`` (the notebooks to grade,
  the time limit, the output cap, the memory limit and a random nonce), ``source/`` (the
  teacher's notebooks with their hidden tests) and ``submission/`` (a copy of the student's
  snapshot). The grader reads them into memory and deletes ``grading.json`` and ``source/``
  (where it may) *before* any student code runs, so the student's code finds no hidden test
  and no nonce on disk.
- **The result is the log's last line**: ``CLASSHUB-GRADING-RESULT <nonce> <json>``. Both run
  modes already hand a job's log to the service (hub_ext.backends.jobs.JobBackend.logs), so no
  network, volume or token is needed to bring a result back; the nonce, which student code
  never saw, tells the grader's line from one the notebook printed.
- **Limits**: the memory limit becomes the address-space limit of this process, which the kernel
  inherits (local mode; on Kubernetes the pod's memory limit). The time limit bounds every cell
  (hub_ext.backends.autograde.grade); the job's max_runtime is a little longer, so the job
  service ends a grader that hangs anyway.
- **Non-dumpable** (``private`` in grading.json, where jobs run as a grading account rather than
  the service's own): this process and its kernels make themselves non-dumpable before any
  student code runs, so no other process of the account can read their memory, environment or
  open files through /proc (docs/teachers/autograding.md, "Isolation").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
from pathlib import Path

from hub_ext.backends import autograde
from hub_ext.core import grading as G

MARKER = "CLASSHUB-GRADING-RESULT"



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub_ext.backends.grader")
    parser.add_argument("folder", help="the job's inputs: grading.json, source/, submission/")
    parser.add_argument("--drop-to", type=int, help="started as root (Kubernetes): read the inputs, "
                        "hand a copy of the submission to this uid in --work, then become it")
    parser.add_argument("--work", help="with --drop-to: the scratch folder to grade in")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return int(e.code or 0) or 2
    folder = Path(args.folder)
    config = json.loads((folder / "grading.json").read_text())
    private = bool(config.get("private", True))
    if private:
        autograde.undumpable()
    sources = {path: (folder / "source" / path).read_bytes() for path in config["notebooks"]}
    if args.drop_to is not None:
        folder = _hand_over(folder, Path(args.work), args.drop_to)
        if private:
            autograde.undumpable()  # a change of uid makes a process dumpable again
    else:
        for done in (folder / "grading.json", folder / "source"):  # one-time: gone before code runs
            with contextlib.suppress(OSError):
                shutil.rmtree(done) if done.is_dir() else done.unlink()
    nonce = str(config["nonce"])
    if config.get("memory"):
        limit = int(config["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    work = folder / "submission"
    outcomes = []
    for path, source_data in sources.items():
        source = autograde.read_notebook(source_data, f"the source of {path}")
        target = work / path
        try:
            data = target.read_bytes()
        except OSError:
            outcome = autograde.Outcome(path, message=f"Your submission has no {path}; put your work in "
                                                      "the assignment's folder and submit again.")
            outcome.cells = [G.CellScore(c.grade_id, c.points, G.MISSING, 0.0 if c.auto else None,
                                         "not run: the notebook is missing")
                             for c in autograde.graded_cells(source, path)]
        else:
            outcome = autograde.grade(source, data, path, time_limit=float(config["time_limit"]),
                                      output_cap=int(config.get("output_cap", autograde.OUTPUT_CAP)),
                                      cwd=str(target.parent), private=private)
        outcomes.append(outcome)
    line = json.dumps(autograde.summary(outcomes), separators=(",", ":"))
    sys.stdout.flush()
    os.write(1, f"\n{MARKER} {nonce} {line}\n".encode())
    return 0


def _hand_over(inputs: Path, work: Path, uid: int) -> Path:
    """Copy the submission into ``work`` for ``uid`` and become ``uid`` (no groups): the inputs,
    root's and read-only, are out of the student's code's reach from here on."""
    shutil.copytree(inputs / "submission", work / "submission", dirs_exist_ok=True)
    for path in [work, *work.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    os.environ["HOME"] = str(work)
    return work


def parse_result(log: str, nonce: str) -> dict | None:
    """The grader's result in a job log (`hub_ext.core.grading.marked_result`), or None."""
    return G.marked_result(log, MARKER, nonce)


if __name__ == "__main__":
    sys.exit(main())
