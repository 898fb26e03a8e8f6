"""Course roles reach the hub through ``JupyterHub.extra_handlers`` on JupyterHub 5 and 6.

Why: classhub's service replaces the course roles in the running hub through a handler that
``configure()`` registers with ``JupyterHub.extra_handlers`` (hub_ext/hubside.py), a setting
JupyterHub has marked deprecated since 3.1 and still honours in 5 and 6 (setup.cfg allows
``jupyterhub>=5.3,<7``). The suite's environment has one JupyterHub, the newest 6.x, and its hub
tests (tests/test_course_roles.py, the course-roles attacks of tests/test_security_attacks.py)
fail there the day the handler stops being served. This module runs the course-roles hub test
once more on the last JupyterHub 5 release: that release is installed, without its
dependencies (classhub's environment already satisfies them), into a folder of its own inside
the environment's prefix and put first on the path of a child pytest and of every process it starts
(hub, service, servers). A second virtual environment with all of classhub's dependencies
would cost minutes of installs for the same check; this costs one wheel and one hub start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jupyterhub
import pytest

pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parent.parent
#: The last JupyterHub 5 release (the oldest major setup.cfg allows).
JUPYTERHUB_5 = "5.5.4"
COURSE_ROLES_TEST = ("tests/test_course_roles.py::"
                     "test_teacher_and_ta_reach_their_students_servers_through_the_hub")


def jupyterhub_5() -> Path:
    """A folder holding JupyterHub 5 and its data files (installed on first use, kept for later
    runs). ``--target`` installs beside the environment without touching it (pip ignores what is
    installed there; ``--prefix`` would uninstall the environment's JupyterHub 6)."""
    target = Path(sys.prefix) / "jupyterhub5" / JUPYTERHUB_5
    if not (target / "jupyterhub" / "__init__.py").exists():
        out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                              str(target), f"jupyterhub=={JUPYTERHUB_5}"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"installing JupyterHub {JUPYTERHUB_5} failed:\n{out.stderr[-2000:]}"
    assert jupyterhub.__version__.startswith("6."), "the environment's own JupyterHub is untouched"
    return target


def test_the_suite_runs_jupyterhub_6():
    """The rest of the suite is the JupyterHub 6 half of the check."""
    assert jupyterhub.version_info[0] == 6, jupyterhub.__version__


def test_course_roles_reach_a_jupyterhub_5_hub(tmp_path):
    site = jupyterhub_5()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o755)
    env = {**os.environ, "TMPDIR": str(scratch),
           "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    child = (f"import sys, jupyterhub, pytest; assert jupyterhub.__version__ == {JUPYTERHUB_5!r}, "
             f"jupyterhub.__file__; sys.exit(pytest.main([{COURSE_ROLES_TEST!r}, '-q', "
             f"'-p', 'no:cacheprovider', '-p', 'no:randomly', '--basetemp', {str(tmp_path / 'base')!r}]))")
    out = subprocess.run([sys.executable, "-c", child], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout, out.stdout[-2000:]
    # the hub that ran it was JupyterHub 5, and it served the deprecated setting
    logs = "".join(p.read_text(errors="replace") for p in scratch.rglob("*.log"))
    assert f"Running JupyterHub version {JUPYTERHUB_5}" in logs
    assert "JupyterHub.extra_handlers is deprecated" in logs
