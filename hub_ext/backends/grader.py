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
  (hub_ext.backends.notebook_run.grade); the job's max_runtime is a little longer, so the job
  service ends a grader that hangs anyway.
- **Non-dumpable** (``private`` in grading.json, where jobs run as a grading account rather than
  the service's own): this process and its kernels make themselves non-dumpable before any
  student code runs, so no other process of the account can read their memory, environment or
  open files through /proc (docs/teachers/autograding.md, "Isolation").
- What every command of the sandbox does around its own work (the arguments, the one-time
  settings, the hand-over to the grader uid, the memory limit, the result line) is
  hub_ext.backends.sandbox_job, shared with a competition's runner.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hub_ext.backends import autograde, sandbox_job
from hub_ext.core import grading as G

MARKER = "CLASSHUB-GRADING-RESULT"
#: the help of the command's arguments
HELP = {"inputs": "the job's inputs: grading.json, source/, submission/",
        "drop_to": "started as root (Kubernetes): read the inputs, hand a copy of the submission to "
                   "this uid in --work, then become it",
        "work": "with --drop-to: the scratch folder to grade in"}


def main(argv: list[str] | None = None) -> int:
    # Here, before the hand-over (in a grading pod the bundle's files are root's and unreadable
    # after it), not at the top: the service imports this module for `parse_result` only and
    # never runs a notebook (hub_ext.backends.notebook_run's docstring).
    from hub_ext.backends import notebook_run

    args = sandbox_job.arguments("python -m hub_ext.backends.grader", argv, **HELP)
    if isinstance(args, int):
        return args
    folder = Path(args.folder)
    config, private = sandbox_job.settings(folder, "grading.json")
    sources = {path: (folder / "source" / path).read_bytes() for path in config["notebooks"]}
    folder = sandbox_job.enter(folder, args, config, private, keep="submission",
                               one_time=("grading.json", "source"))
    nonce = str(config["nonce"])
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
            outcome = notebook_run.grade(source, data, path, time_limit=float(config["time_limit"]),
                                         output_cap=int(config.get("output_cap", autograde.OUTPUT_CAP)),
                                         cwd=str(target.parent), private=private)
        outcomes.append(outcome)
    sandbox_job.report(MARKER, nonce, autograde.summary(outcomes))
    return 0


def parse_result(log: str, nonce: str) -> dict | None:
    """The grader's result in a job log (`hub_ext.core.grading.marked_result`), or None."""
    return G.marked_result(log, MARKER, nonce)


if __name__ == "__main__":
    sys.exit(main())
