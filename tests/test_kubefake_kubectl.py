"""kubectl against the standalone fake (``python -m tests.kubefake``), stopped with SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

KUBECTL = shutil.which("kubectl")
ROOT = Path(__file__).resolve().parents[1]


def test_kubectl_get_nodes_and_pods_all_namespaces(tmp_path):
    if KUBECTL is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing: CI's machine image must provide it")
        pytest.skip("kubectl is not installed")
    kubeconfig = tmp_path / "kubeconfig"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.kubefake", "--port", "0", "--kubeconfig", str(kubeconfig)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: kubeconfig.exists() or server.poll() is not None, timeout=20, what="kubeconfig")
        assert server.poll() is None, server.stdout.read() if server.stdout else ""
        kubectl = [KUBECTL, "--kubeconfig", str(kubeconfig)]
        pod = (
            '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hello","namespace":"kube-system"},'
            '"spec":{"containers":[{"name":"c","image":"busybox:1"}]}}'
        )
        subprocess.run(
            [*kubectl, "create", "--validate=false", "-f", "-"],
            input=pod,
            text=True,
            check=True,
            capture_output=True,
            timeout=30,
        )
        out = subprocess.run(
            [*kubectl, "get", "nodes,pods", "-A"], text=True, capture_output=True, timeout=30
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert any(line.split()[:2] == ["node/gpu-h200-0", "Ready"] for line in lines), out.stdout
        pod_lines = [line.split() for line in lines if "pod/hello" in line]
        assert pod_lines and pod_lines[0][0] == "kube-system", out.stdout
        header = next(line.split() for line in lines if line.startswith("NAMESPACE"))
        assert header[:4] == ["NAMESPACE", "NAME", "READY", "STATUS"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert code == 0
