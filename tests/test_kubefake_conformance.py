"""KubeSpawner's own test suite (vendored in tests/upstream_kubespawner, see its SOURCE) against the
fake cluster, as KubeSpawner's CI runs it against k3s: ``python -m tests.kubefake`` in one process,
the suite in another with ``KUBECONFIG`` pointing at it.

Every test must pass, except the ones listed in ``CANNOT_PASS`` with the reason; a listed test
that starts passing fails this check too, so the list cannot go stale. Set
``KUBEFAKE_CONFORMANCE_LATENCIES=realistic`` to run it with the fake's realistic latencies
(about 4x slower, same result).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "upstream_kubespawner"
JUPYTERHUB_6 = (
    "its session fixture ssl_app calls JupyterHub.init_internal_ssl outside an event loop; "
    "JupyterHub 6 (what classhub installs) creates its HTTP client there and needs a running "
    "loop (KubeSpawner 7.1.0's suite targets JupyterHub 5)"
)
CANNOT_PASS = {
    "test_spawner.py::test_variable_expansion": JUPYTERHUB_6,
    "test_spawner.py::test_spawn_internal_ssl": JUPYTERHUB_6
    + "; beyond that it reads certificates that the hub pod's container extracts from a mounted "
    "Secret, and the fake kubelet has no container filesystem or volume mounts",
}
MIN_PASSED = 205  # KubeSpawner 7.1.0: 207 tests


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """``file.py::test`` -> (passed|failed|error|skipped, message) from a JUnit XML report."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = (case.get("classname") or "").rsplit(".", 1)[-1]
        key = f"{module}.py::{case.get('name')}"
        result, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                result, message = ("failed" if tag == "failure" else tag), node.get("message") or ""
                break
        if out.get(key, ("passed",))[0] == "passed":  # a teardown error can be a second entry
            out[key] = (result, message)
    return out


@pytest.fixture
def fake_cluster(tmp_path):
    """``python -m tests.kubefake`` as a separate process; yields its kubeconfig path."""
    kubeconfig = tmp_path / "kubeconfig"
    latencies = os.environ.get("KUBEFAKE_CONFORMANCE_LATENCIES", "none")
    log = (tmp_path / "kubefake.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.kubefake", "--port", "0", "--kubeconfig", str(kubeconfig),
         "--latencies", latencies],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: kubeconfig.exists() or server.poll() is not None, timeout=60, what="kubeconfig")
        assert server.poll() is None, (tmp_path / "kubefake.log").read_text()
        yield kubeconfig
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_kubespawner_suite_passes_against_the_fake(fake_cluster, tmp_path):
    junit = tmp_path / "junit.xml"
    env = {
        **os.environ,
        "KUBEFAKE_CONFORMANCE": "1",
        "KUBECONFIG": str(fake_cluster),
        "PYTHONPATH": str(SUITE),  # the compat plugin
        # `python3` in an exec'd command is this interpreter, as it would be the image's
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE / "suite"), "-c", str(SUITE / "pytest.ini"),
         "--rootdir", str(SUITE), "--confcutdir", str(SUITE / "suite"), "-p", "compat",
         "-q", "--timeout", "120", f"--junitxml={junit}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    tail = (run.stdout + run.stderr)[-6000:]
    assert junit.exists(), tail
    results = outcomes(junit)
    passed = sorted(k for k, (r, _) in results.items() if r == "passed")
    broken = {k: v for k, v in results.items() if v[0] != "passed"}
    unexpected = {k: v for k, v in broken.items() if k not in CANNOT_PASS}
    assert not unexpected, f"KubeSpawner tests failing against the fake: {unexpected}\n{tail}"
    now_passing = [k for k in CANNOT_PASS if results.get(k, ("missing",))[0] == "passed"]
    assert not now_passing, f"listed as unable to pass but passed: {now_passing}; remove them"
    missing = [k for k in CANNOT_PASS if k not in results]
    assert not missing, f"listed tests not in the suite any more: {missing}"
    assert len(passed) >= MIN_PASSED, f"only {len(passed)} passed\n{tail}"
    print(f"KubeSpawner suite against kubefake: {len(passed)} passed, {len(broken)} listed: {sorted(broken)}")
