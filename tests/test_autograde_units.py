"""Autograding without a hub: nbgrader-format notebooks, hidden tests, scores and the grades CSV.

What a teacher and a student notice: the released notebook never holds a hidden test; a student
who edits a test cell is graded by the teacher's test anyway; a passing test scores its points,
a failing one none with the error in the feedback; an endless loop, a crashed kernel, a flood of
output or a broken notebook end with a sentence saying so and every cell scored; the gradebook
CSV has one row per student.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import nbformat
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from hub_ext.backends import autograde, grader, notebook_run
from hub_ext.backends.local.processes import exited
from hub_ext.core import grading as G

pytestmark = pytest.mark.unit

HIDDEN = "assert double(21) == 42  # hidden-secret-check"


def nbg(grade_id: str, *, grade: bool = False, solution: bool = False, locked: bool = False,
        points: float | None = None) -> dict:
    meta = {"grade_id": grade_id, "grade": grade, "solution": solution, "locked": locked,
            "schema_version": 3}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def source_notebook() -> nbformat.NotebookNode:
    """A teacher's source: a solution, two tests (one with hidden tests) and a written answer."""
    return new_notebook(cells=[
        new_markdown_cell("# Lab 1", metadata=nbg("intro", locked=True)),
        new_code_cell("def double(x):\n    return 2 * x\n", metadata=nbg("answer", solution=True)),
        new_code_cell(f"assert double(1) == 2\n{G.BEGIN_HIDDEN}\n{HIDDEN}\n{G.END_HIDDEN}\n",
                      metadata=nbg("q1", grade=True, points=2)),
        new_code_cell("assert double(0) == 0\n", metadata=nbg("q2", grade=True, points=3)),
        new_markdown_cell("Explain.", metadata=nbg("essay", grade=True, solution=True, points=1)),
    ])


def student(answer: str, *, q1: str | None = None) -> bytes:
    """The released version with the student's answer (and, to cheat, their own q1)."""
    nb = autograde.student_version(source_notebook())
    nb.cells[1].source = answer
    if q1 is not None:
        nb.cells[2].source = q1
    return nbformat.writes(nb).encode()


def test_released_version_has_no_hidden_test_and_passes_the_release_check() -> None:
    source = source_notebook()
    released = autograde.student_version(source)
    text = nbformat.writes(released)
    assert "hidden-secret-check" not in text and "HIDDEN" not in text
    assert "assert double(1) == 2" in text
    cells = autograde.check_release(source, released, "lab1.ipynb")
    assert [(c.grade_id, c.points, c.auto) for c in cells] == [
        ("q1", 2, True), ("q2", 3, True), ("essay", 1, False)]
    with pytest.raises(G.GradingError, match="still holds hidden tests"):
        autograde.check_release(source, source, "lab1.ipynb")
    leaked = autograde.student_version(source)
    leaked.cells[2].source += HIDDEN + "\n"
    with pytest.raises(G.GradingError, match="lines of its hidden tests"):
        autograde.check_release(source, leaked, "lab1.ipynb")
    short = autograde.student_version(source)
    del short.cells[3]
    with pytest.raises(G.GradingError, match="lacks graded cells q2"):
        autograde.check_release(source, short, "lab1.ipynb")


def test_merge_puts_the_teachers_tests_back_over_the_students_copy() -> None:
    nb = nbformat.reads(student("def double(x): return 0", q1="pass  # all good"), as_version=4)
    nb.cells.append(new_code_cell("pass", metadata=nbg("q1", grade=True, points=100)))
    merged, missing = autograde.merge_for_grading(source_notebook(), nb)
    assert missing == set()
    assert HIDDEN in merged.cells[2].source  # the teacher's cell, hidden tests included
    assert "nbgrader" not in merged.cells[-1].metadata  # a copied grade_id scores nothing
    del nb.cells[3]
    assert autograde.merge_for_grading(source_notebook(), nb)[1] == {"q2"}


def test_bad_source_notebooks_are_refused_with_a_sentence() -> None:
    nb = source_notebook()
    nb.cells[3].metadata = nbg("q1", grade=True, points=1)
    with pytest.raises(G.GradingError, match="used twice"):
        autograde.graded_cells(nb, "lab1.ipynb")
    nb = source_notebook()
    nb.cells[1].source += f"\n{G.BEGIN_HIDDEN}\nx\n{G.END_HIDDEN}\n"
    with pytest.raises(G.GradingError, match="graded test cell"):
        autograde.graded_cells(nb, "lab1.ipynb")
    with pytest.raises(G.GradingError, match="no graded cell"):
        autograde.graded_cells(new_notebook(cells=[new_code_cell("1")]), "lab1.ipynb")
    with pytest.raises(G.GradingError, match="not a valid notebook"):
        autograde.read_notebook(b'{"cells": 3}', "lab1.ipynb")


def _scores(outcome: autograde.Outcome) -> dict[str, tuple[str, float | None]]:
    return {c.grade_id: (c.status, c.score) for c in outcome.cells}


def test_grading_runs_the_hidden_tests_and_scores_each_cell() -> None:
    right = notebook_run.grade(source_notebook(), student("def double(x):\n    return x + x\n"),
                            "lab1.ipynb", time_limit=60)
    assert right.message == ""
    assert _scores(right) == {"q1": ("passed", 2), "q2": ("passed", 3), "essay": ("manual", None)}
    # passes the visible test, fails the hidden one; rewriting q1 does not help
    wrong = notebook_run.grade(source_notebook(), student("def double(x):\n    return x if x < 2 else 0\n",
                                                       q1="pass"), "lab1.ipynb", time_limit=60)
    assert _scores(wrong)["q1"] == ("failed", 0) and _scores(wrong)["q2"] == ("passed", 3)
    assert "AssertionError" in wrong.cells[0].message
    assert G.total(wrong.cells).score == 3


def _kernels_left() -> list[str]:
    """Kernels this process started that still run (`processes.exited`: a zombie has ended)."""
    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "ipykernel" in " ".join(p.cmdline()) and not exited(p.pid):
                left.append(f"{p.pid}, {sum(p.cpu_times()[:2]):.1f} s of CPU so far")
        except psutil.Error:
            continue
    return left


def test_endless_loops_crashes_floods_and_broken_files_end_with_a_sentence() -> None:
    looping = notebook_run.grade(source_notebook(), student("while True:\n    pass\n"), "lab1.ipynb",
                              time_limit=3)
    assert "time limit" in looping.message
    assert {c.status for c in looping.cells if c.grade_id != "essay"} == {"not-run"}
    # the loop ends with its grading, not with the process that graded it
    assert _kernels_left() == []
    crashed = notebook_run.grade(source_notebook(), student("import os\nos._exit(1)\n"), "lab1.ipynb",
                              time_limit=60)
    assert "kernel died" in crashed.message and _scores(crashed)["q2"] == ("not-run", 0)
    flood = notebook_run.grade(source_notebook(), student(
        "for i in range(5000):\n    print('x' * 1000)\ndouble = lambda x: 2 * x\n"),
        "lab1.ipynb", time_limit=60, output_cap=100_000)
    assert "left out" in flood.message and _scores(flood)["q2"] == ("passed", 3)
    broken = notebook_run.grade(source_notebook(), b"{not json", "lab1.ipynb", time_limit=60)
    assert "not a valid notebook" in broken.message
    assert _scores(broken)["q1"] == ("not-run", 0)
    assert _kernels_left() == []


def test_the_grader_deletes_its_inputs_and_its_result_line_needs_the_nonce(tmp_path, capfd) -> None:
    (tmp_path / "source").mkdir()
    (tmp_path / "submission").mkdir()
    (tmp_path / "source" / "lab1.ipynb").write_text(nbformat.writes(source_notebook()))
    (tmp_path / "submission" / "lab1.ipynb").write_bytes(student(
        "import os, glob\nprint('FAKE', os.path.exists('../grading.json'), glob.glob('../source/*'))\n"
        f"print('\\n{grader.MARKER} n0nce {{\"notebooks\": []}}')\n"
        "def double(x):\n    return 2 * x\n"))
    (tmp_path / "grading.json").write_text(json.dumps(
        {"nonce": "s3cret", "time_limit": 60, "notebooks": ["lab1.ipynb"]}))
    assert grader.main([str(tmp_path)]) == 0
    assert not (tmp_path / "grading.json").exists() and not (tmp_path / "source").exists()
    log = capfd.readouterr().out
    assert grader.parse_result(log, "n0nce") is None  # the notebook's own line is not taken
    result = grader.parse_result(log, "s3cret")
    cells = {c["grade_id"]: c["status"] for c in result["notebooks"][0]["cells"]}
    assert cells == {"q1": "passed", "q2": "passed", "essay": "manual"}


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30), max_size=8),
       st.lists(st.text(alphabet="abc =()1", min_size=1, max_size=20), min_size=1, max_size=5))
def test_strip_hidden_keeps_every_visible_line_and_drops_every_hidden_one(visible: list[str],
                                                                         hidden: list[str]) -> None:
    visible = [v.replace("\n", " ").replace("\r", " ").replace("\x0b", " ").replace("\x0c", " ")
               .replace("\x1c", " ").replace("\x1d", " ").replace("\x1e", " ").replace("\x85", " ")
               .replace("\u2028", " ").replace("\u2029", " ").replace("#", "") for v in visible]
    secret = [f"HIDDEN_{i}_{h}" for i, h in enumerate(hidden)]
    source = "\n".join([*visible[:1], G.BEGIN_HIDDEN, *secret, G.END_HIDDEN, *visible[1:]]) + "\n"
    stripped = G.strip_hidden(source)
    assert stripped.splitlines() == visible
    assert not any(s in stripped for s in secret)
    assert set(G.hidden_lines(source)) <= {s.strip() for s in secret}


def test_unclosed_or_nested_markers_are_refused() -> None:
    for bad in (f"{G.BEGIN_HIDDEN}\nx\n", f"x\n{G.END_HIDDEN}\n",
                f"{G.BEGIN_HIDDEN}\n{G.BEGIN_HIDDEN}\n{G.END_HIDDEN}\n", f"x = 1 {G.BEGIN_HIDDEN}\n"):
        with pytest.raises(G.GradingError):
            G.strip_hidden(bad)


@given(st.lists(st.tuples(st.floats(0, 100), st.booleans(), st.booleans()), max_size=10),
       st.data())
def test_total_is_the_sum_of_scores_or_overrides_and_never_over_the_max(cells, data) -> None:
    scores = [G.CellScore(f"c{i}", points, G.PASSED if passed else G.FAILED,
                          points if passed else 0.0) if auto else
              G.CellScore(f"c{i}", points, G.MANUAL, None)
              for i, (points, passed, auto) in enumerate(cells)]
    overrides = {s.grade_id: G.check_override(s, data.draw(st.floats(0, s.points)))
                 for s in scores if data.draw(st.booleans())}
    result = G.total(scores, overrides)
    assert result.max_score == pytest.approx(sum(p for p, _, _ in cells))
    assert (result.score or 0) <= result.max_score + 1e-6
    assert set(result.ungraded) == {s.grade_id for s in scores
                                    if s.score is None and s.grade_id not in overrides}
    with pytest.raises(G.GradingError, match="worth"):
        G.check_override(G.CellScore("q", 2, G.PASSED, 2), 3)


def test_grades_csv_is_one_row_per_student_in_username_score_form() -> None:
    text = G.grades_csv([G.GradeRow("bob", 3, 5, late=True), G.GradeRow("=cmd", None, 5),
                         G.GradeRow("alice", 4.5, 5)])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [["username", "score", "max", "late", "submitted"], ["'=cmd", "", "5", "0", "1"],
                    ["alice", "4.5", "5", "0", "1"], ["bob", "3", "5", "1", "1"]]


def test_the_gradebook_lists_the_whole_roster_and_no_staff() -> None:
    """Every student of the course has a row, with or without a submission (no score, submitted
    0: the LMS reads "no grade", not a zero); a student removed after submitting keeps theirs; a
    teacher who tried Submit is no student (an LMS import stops at a name it does not know)."""
    last = {"bob": G.GradeRow("bob", 3, 5, late=True), "teacher1": G.GradeRow("teacher1", 5, 5),
            "gone": G.GradeRow("gone", 2, 5)}
    rows = G.gradebook(["carol", "bob", "alice"], last, staff=["teacher1", "ta1"], max_score=5)
    assert [r.student for r in rows] == ["alice", "bob", "carol", "gone"]
    text = list(csv.reader(io.StringIO(G.grades_csv(rows))))
    assert text[1:] == [["alice", "", "5", "0", "0"], ["bob", "3", "5", "1", "1"],
                        ["carol", "", "5", "0", "0"], ["gone", "2", "5", "0", "1"]]
    assert G.gradebook([], {}) == []


def test_the_grader_module_runs_as_a_command() -> None:
    assert sys.modules["hub_ext.backends.grader"].main(["a", "b"]) == 2


def test_the_service_starts_without_the_notebook_runners_libraries() -> None:
    """nbformat, jupyter_client and nbclient load where a notebook is read or run (the service's
    worker threads, the grader), not with the service, which every hub starts: about 0.1 s of CPU
    per start (hub_ext.backends.autograde's docstring)."""
    code = ("import sys\nimport hub_ext.service.app\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nbformat', 'jupyter_client', "
            "'nbclient')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_a_grading_pod_has_no_token_no_home_and_its_profile_limits() -> None:
    """The fake cluster's view of a grading job's pod, as the backend writes it (validated
    against the PyTorchJob CRD the API server checks)."""
    from hub_ext.backends.jobs import Launch, ReplicaLaunch
    from hub_ext.backends.kubernetes import jobs as kube
    from hub_ext.service.jobs.sandboxed import grader_command
    from tests.test_jobs_kube import PYTORCHJOB

    sandbox = {"secret": "classhub-grading-0123abcd", "items": json.dumps([["f0", "grading.json"],
                                                                         ["f1", "source/lab1.ipynb"]])}
    job = Launch(job_id="grade-lab1-7-1a2b3c4d", owner="teacher1", course="gpu101",
                 command=grader_command("python", sandbox), env={"LEAK": "x"}, workdir="", master_port=0,
                 replicas=(ReplicaLaunch("grader", 0, 0, "gpu-a"),), max_runtime=600,
                 requests={"grader": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"}},
                 pods={"grader": {"limits": {"cpu": "4", "memory": "8Gi"}}}, sandbox=sandbox)
    obj = kube.pytorch_job(job, namespace="classhub", image="quay.io/jupyter/pytorch-notebook")
    jsonschema.validate(obj, PYTORCHJOB)
    pod = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert pod["metadata"]["labels"]["classhub.io/grading"] == "true"
    assert [v["name"] for v in spec["volumes"]] == ["grading-inputs", "grading-work"]  # no home
    assert spec["volumes"][0]["secret"]["defaultMode"] == 0o400
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "8Gi", "cpu": "4"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert [e["name"] for e in container["env"]] == ["CLASSHUB_JOB_ID"]  # nothing of the service's
    assert container["command"][-4:] == ["--drop-to", str(kube.GRADER_UID), "--work", kube.GRADING_WORK]
    assert obj["spec"]["runPolicy"]["cleanPodPolicy"] == "None"  # its log is read after it ends
    bundle = kube.grader_bundle()
    assert {"lib/hub_ext/backends/grader.py", "lib/hub_ext/core/grading.py"} <= set(bundle)


@pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                    reason="dropping to another account needs root (CI runs as root: there it runs)")
def test_the_grader_started_as_root_drops_to_the_grader_uid_before_student_code() -> None:
    """Kubernetes' path (the inputs are a read-only Secret it cannot delete): the student's code
    runs as the grader uid and cannot read the inputs, which stay root's."""
    with tempfile.TemporaryDirectory() as top:  # pytest's tmp_path is not traversable by others
        _drop_and_grade(Path(top))


def _drop_and_grade(tmp_path: Path) -> None:
    inputs, work = tmp_path / "in", tmp_path / "work"
    (inputs / "source").mkdir(parents=True)
    (inputs / "submission").mkdir()
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    (inputs / "source" / "lab1.ipynb").write_text(nbformat.writes(source_notebook()))
    (inputs / "submission" / "lab1.ipynb").write_bytes(student(
        f"import os\ntry:\n    got = open({str(inputs / 'source' / 'lab1.ipynb')!r}).read()[:20]\n"
        "except OSError as e:\n    got = type(e).__name__\n"
        "class Spy(int):\n    def __eq__(self, other):\n"
        "        raise AssertionError(f'uid={os.getuid()} got={got}')\n    __hash__ = int.__hash__\n"
        "def double(x):\n    return Spy(2 * x)\n"))
    (inputs / "grading.json").write_text(json.dumps({"nonce": "n", "time_limit": 60,
                                                     "notebooks": ["lab1.ipynb"]}))
    os.chmod(inputs, 0o700)
    code = (f"import sys; sys.path.insert(0, {str(Path(autograde.__file__).parents[2])!r}); "
            "from hub_ext.backends.grader import main; sys.exit(main())")
    done = subprocess.run([sys.executable, "-I", "-c", code, str(inputs), "--drop-to", "65534", "--work",
                           str(work)], capture_output=True, text=True, timeout=120, env={
                               "PATH": os.environ["PATH"], "HOME": str(work)})
    result = grader.parse_result(done.stdout, "n")
    assert result is not None, done.stderr[-2000:]
    (q1,) = [c for c in result["notebooks"][0]["cells"] if c["grade_id"] == "q1"]
    assert "uid=65534 got=PermissionError" in q1["message"], q1


def test_the_grading_pods_bundle_holds_every_classhub_module_its_commands_import() -> None:
    """A grading pod runs the grader and the competition runner from the Secret's ``lib/`` only
    (its image need not have classhub): a classhub module they import that the bundle leaves out
    fails every grading on Kubernetes, and nothing else would notice (the test hub has classhub
    installed)."""
    import ast

    from hub_ext.backends.kubernetes import jobs as kube

    bundle = kube.grader_bundle()
    modules = {p[len("lib/"):-len(".py")].replace("/", ".").removesuffix(".__init__")
               for p in bundle}
    source_root = Path(kube.__file__).resolve().parents[3]  # the folder holding hub_ext/

    def is_module(name: str) -> bool:
        path = source_root.joinpath(*name.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    missing = set()
    for path, source in bundle.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names
                                        if is_module(f"{node.module}.{a.name}"))]
            else:
                names = []
            missing |= {f"{path}: {name}" for name in names
                        if name.split(".")[0] == "hub_ext" and name not in modules}
    assert {"hub_ext.backends.grader", "hub_ext.backends.competition_runner"} <= modules
    assert not missing, missing
