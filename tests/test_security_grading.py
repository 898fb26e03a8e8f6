"""Attacks on autograding by a student whose notebook the grader runs (the real runner the grading
job uses, `hub_ext.backends.notebook_run.grade`, with nbclient and a real kernel).

What a teacher relies on: a test cell scores its points only when the teacher's test ran in the
kernel and passed. A student's notebook must not turn a wrong answer into points by steering the
runner (a cell tag that makes nbclient skip the test) or by hiding the error a failing test raised
(IPython's error display replaced from an earlier cell).
"""

from __future__ import annotations

import nbformat
import pytest

from hub_ext.backends import notebook_run
from tests.test_autograde_units import _scores, source_notebook, student

pytestmark = pytest.mark.unit

#: a wrong answer: the teacher's q1 (double(1) == 2, and a hidden test) fails with it
WRONG = "def double(x):\n    return x if x < 1 else 0\n"


def _grade(data: bytes):
    return notebook_run.grade(source_notebook(), data, "lab1.ipynb", time_limit=60, private=True)


def test_a_skip_tag_on_a_test_cell_never_passes_the_test() -> None:
    """The student tags every cell ``skip-execution`` (nbclient's default skip tag): before, the
    test cells were skipped, raised nothing, and scored full points with a wrong answer."""
    nb = nbformat.reads(student(WRONG), as_version=4)
    for cell in nb.cells:
        cell.metadata["tags"] = ["skip-execution", "raises-exception"]
    nb.cells[1].metadata["tags"] = []  # the student's own answer runs
    scores = _scores(_grade(nbformat.writes(nb).encode()))
    assert scores["q1"] == ("failed", 0), scores  # the teacher's test ran, and failed
    assert scores["q2"] == ("passed", 3), scores  # double(0) == 0 holds: the test ran


@pytest.mark.parametrize("hide", [
    "get_ipython()._showtraceback = lambda *a, **k: None\n",
    "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n",
], ids=["showtraceback", "custom_exc"])
def test_a_failing_test_whose_error_display_is_hidden_still_fails(hide: str) -> None:
    """The student's cell replaces how IPython shows an error, so a failing test leaves no error
    output; before, "no error output" scored as passed. The kernel's reply still says "error"."""
    outcome = _grade(student(WRONG + hide))
    scores = _scores(outcome)
    assert scores["q1"] == ("failed", 0), scores
    assert scores["q2"] == ("passed", 3), scores
    (q1,) = [c for c in outcome.cells if c.grade_id == "q1"]
    assert "AssertionError" in q1.message, q1.message
