"""``pods/exec`` as the Python client's ``stream()`` and kubectl use it, and a stand-in container
reachable on a port only its probe names (a real container's undeclared ports are reachable)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from typing import Any

import aiohttp
import kubernetes
import pytest
import requests
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

from tests.kubefake import FakeCluster
from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

KUBECTL = shutil.which("kubectl")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster() as c:
        c.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield c


@pytest.fixture(scope="module")
def v1(cluster):
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


@pytest.fixture(scope="module")
def shell_pod(v1, cluster):
    """A pod like KubeSpawner's test suite's exec pod: ``sh -c 'while true; do sleep 5; done'``."""
    name = f"exec-{uuid.uuid4().hex[:6]}"
    v1.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "python",
                        "image": "python:3.12-slim",
                        "args": ["/bin/sh", "-c", "while true; do sleep 5; done"],
                        "env": [{"name": "GREETING", "value": "hello from the pod"}],
                    }
                ],
            },
        },
    )
    wait_for(lambda: v1.read_namespaced_pod(name, "default").status.phase == "Running", what="exec pod")
    return name


def run(v1: Any, pod: str, command: list[str]) -> Any:
    client = stream(
        v1.connect_get_namespaced_pod_exec, pod, "default", command=command,
        stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
    )  # fmt: skip
    client.run_forever(timeout=30)
    return client


def test_exec_separates_stdout_and_stderr_and_reports_the_exit_code(v1, shell_pod):
    code = (
        "import os, sys; print(os.environ['GREETING'], os.environ['POD_NAME']); "
        "sys.stderr.write('oops'); sys.exit(3)"
    )
    client = run(v1, shell_pod, [sys.executable, "-c", code])
    assert client.read_stdout().strip() == f"hello from the pod {shell_pod}"
    assert client.read_stderr() == "oops"
    assert client.returncode == 3


def test_exec_success_is_returncode_zero(v1, shell_pod):
    client = run(v1, shell_pod, [sys.executable, "-c", "print(21 * 2)"])
    assert client.read_stdout().strip() == "42" and client.returncode == 0


def test_exec_feeds_stdin_and_v5_closes_it(v1, shell_pod):
    client = stream(
        v1.connect_get_namespaced_pod_exec, shell_pod, "default",
        command=[sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
        stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False,
    )  # fmt: skip
    assert client.subprotocol == "v5.channel.k8s.io"
    client.write_stdin("hello\n")
    client.close_channel(0)  # v5: end of stdin
    client.run_forever(timeout=30)
    assert client.read_stdout().strip() == "HELLO" and client.returncode == 0


def test_exec_of_a_missing_program_is_a_failure_status(v1, shell_pod):
    client = run(v1, shell_pod, ["no-such-program-kubefake"])
    error = json.loads(client.read_channel(3))
    assert error["status"] == "Failure"
    assert 'exec: "no-such-program-kubefake"' in error["message"]


def test_exec_refusals_answer_before_the_upgrade(v1, cluster, shell_pod):
    with pytest.raises(ApiException) as missing:
        stream(v1.connect_get_namespaced_pod_exec, "no-such-pod", "default", command=["true"], stdout=True)
    assert "404" in str(missing.value.reason)  # the client reports the failed handshake as status 0
    url = f"{cluster.url}/api/v1/namespaces/default/pods/{shell_pod}/exec"
    plain = requests.get(url, params={"command": "true", "stdout": "true"}, timeout=10)
    assert plain.status_code == 400 and plain.json()["message"] == "Upgrade request required"
    wrong = requests.get(url, params={"command": "true", "container": "nope"}, timeout=10)
    assert wrong.json()["message"] == f"container nope is not valid for pod {shell_pod}"


def test_kubectl_exec(cluster, shell_pod):
    if KUBECTL is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing: CI's machine image must provide it")
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig_path), "exec", shell_pod, "--",
         sys.executable, "-c", "import sys; print('via kubectl'); sys.exit(4)"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.stdout.strip() == "via kubectl"
    assert out.returncode == 4, out.stderr


def test_a_stand_in_answers_on_the_port_its_probe_checks(v1, cluster):
    """KubeSpawner's test hub pod declares no port; its readiness probe checks 8081."""
    v1.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "hub"},
            "spec": {
                "containers": [
                    {
                        "name": "hub",
                        "image": "quay.io/jupyterhub/jupyterhub:latest",
                        "readinessProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1},
                    }
                ]
            },
        },
    )

    def ready() -> Any:
        pod = v1.read_namespaced_pod("hub", "default")
        return (
            pod
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            else None
        )

    pod = wait_for(ready, what="the hub pod to become Ready")
    assert requests.get(f"http://{pod.status.pod_ip}:8081/", timeout=10).status_code == 200


def test_exec_speaks_v4_to_a_client_that_offers_only_v4(cluster, shell_pod):
    """kubernetes_asyncio and older clients offer ``v4.channel.k8s.io`` only: the same frames,
    and the exit status on channel 3 before the server closes."""

    async def exchange() -> tuple[str | None, list[bytes]]:
        url = (
            f"{cluster.url}/api/v1/namespaces/default/pods/{shell_pod}/exec"
            f"?command={sys.executable}&command=-c&command=print(7)&stdout=true&stderr=true"
        )
        frames = []
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(url, protocols=("v4.channel.k8s.io",)) as ws,
        ):
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    frames.append(msg.data)
            return ws.protocol, frames

    protocol, frames = asyncio.run(exchange())
    assert protocol == "v4.channel.k8s.io"
    assert b"".join(f[1:] for f in frames if f[0] == 1).strip() == b"7"
    assert frames[-1][0] == 3 and json.loads(frames[-1][1:]) == {"metadata": {}, "status": "Success"}
