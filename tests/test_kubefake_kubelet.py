"""The fake kubelet: stand-in servers reachable at podIP:containerPort, real processes with the
container's command/env, phases and exit codes, logs (tailLines, follow, container), graceful
deletion with SIGTERM."""

from __future__ import annotations

import asyncio
import sys
import time

import kubernetes
import kubernetes_asyncio
import pytest
import requests
from kubernetes.client.rest import ApiException

from tests.kubefake import EXIT_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION, RUN_ANNOTATION, FakeCluster
from tests.kubefake.waiting import async_wait_for, wait_for

pytestmark = pytest.mark.cluster

PROCESS = {RUN_ANNOTATION: "process"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=[{"name": "node-0", "allocatable": {"cpu": "64", "memory": "64Gi"}}]) as c:
        c.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield c


@pytest.fixture(scope="module")
def v1(cluster):
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def make_pod(
    name: str, command=None, annotations=None, ports=(), restart="Never", env=(), containers=None, grace=30
) -> dict:
    container = {
        "name": "main",
        "image": "python:3.11",
        "ports": [{"containerPort": p} for p in ports],
        "env": list(env),
    }
    if command:
        container["command"] = command
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "containers": containers or [container],
        },
    }


def phase(v1, name: str) -> str:
    return v1.read_namespaced_pod(name, "default").status.phase


def is_ready(v1, name: str) -> bool:
    p = v1.read_namespaced_pod(name, "default")
    return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


def gone(v1, name: str) -> bool:
    try:
        v1.read_namespaced_pod(name, "default")
    except ApiException as exc:
        return exc.status == 404
    return False


def test_standin_pods_get_their_own_ip_and_serve_their_port(v1):
    for name in ("jupyter-a", "jupyter-b"):
        v1.create_namespaced_pod("default", make_pod(name, ports=[8888]))
    for name in ("jupyter-a", "jupyter-b"):
        wait_for(lambda name=name: is_ready(v1, name), what=f"{name} Ready")
    a, b = (v1.read_namespaced_pod(n, "default") for n in ("jupyter-a", "jupyter-b"))
    assert a.status.phase == b.status.phase == "Running"
    assert a.status.pod_ip != b.status.pod_ip and a.status.pod_ip.startswith("127.")
    for p in (a, b):
        reply = requests.get(f"http://{p.status.pod_ip}:8888/user/x/api", timeout=5).json()
        assert reply["pod"] == p.metadata.name and reply["path"] == "/user/x/api"
        state = p.status.container_statuses[0]
        assert state.ready and state.state.running is not None and state.restart_count == 0
    reasons = {
        e.reason
        for e in v1.list_namespaced_event("default", field_selector="involvedObject.name=jupyter-a").items
    }
    assert {"Scheduled", "Pulled", "Created", "Started"} <= reasons
    v1.delete_namespaced_pod("jupyter-a", "default", grace_period_seconds=1)
    wait_for(lambda: gone(v1, "jupyter-a"))
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{a.status.pod_ip}:8888/", timeout=2)


def test_process_runs_with_container_env_and_succeeds(v1):
    v1.create_namespaced_secret("default", {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})
    script = (
        "import os; print('ip', os.environ['POD_IP']); "
        "print('name', os.environ['MY_NAME'], os.environ['TOKEN'])"
    )
    env = [
        {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
    ]
    v1.create_namespaced_pod("default", make_pod("ok", [sys.executable, "-c", script], PROCESS, env=env))
    wait_for(lambda: phase(v1, "ok") == "Succeeded", what="Succeeded")
    p = v1.read_namespaced_pod("ok", "default")
    terminated = p.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.reason == "Completed"
    logs = v1.read_namespaced_pod_log("ok", "default")
    assert logs == f"ip {p.status.pod_ip}\nname ok s3cret\n"
    assert v1.read_namespaced_pod_log("ok", "default", tail_lines=1) == "name ok s3cret\n"


def test_failing_process_fails_the_pod_with_its_exit_code(v1):
    v1.create_namespaced_pod(
        "default", make_pod("bad", [sys.executable, "-c", "import sys; sys.exit(3)"], PROCESS)
    )
    wait_for(lambda: phase(v1, "bad") == "Failed", what="Failed")
    state = v1.read_namespaced_pod("bad", "default").status.container_statuses[0].state.terminated
    assert state.exit_code == 3 and state.reason == "Error"


def test_on_failure_restarts_and_counts(v1):
    v1.create_namespaced_pod(
        "default",
        make_pod(
            "flaky", [sys.executable, "-c", "print('try'); raise SystemExit(1)"], PROCESS, restart="OnFailure"
        ),
    )
    wait_for(
        lambda: v1.read_namespaced_pod("flaky", "default").status.container_statuses[0].restart_count >= 1,
        what="a restart",
    )
    assert phase(v1, "flaky") == "Running"
    v1.delete_namespaced_pod("flaky", "default", grace_period_seconds=0)


def test_process_serves_on_the_pod_ip(v1):
    command = [sys.executable, "-m", "http.server", "--bind", "$(POD_IP)", "8888"]
    pod = make_pod("server", command, PROCESS, ports=[8888])
    pod["spec"]["containers"][0]["readinessProbe"] = {"httpGet": {"path": "/", "port": 8888}}
    v1.create_namespaced_pod("default", pod)
    wait_for(lambda: is_ready(v1, "server"), what="readiness probe to pass")
    ip = v1.read_namespaced_pod("server", "default").status.pod_ip
    assert requests.get(f"http://{ip}:8888/", timeout=5).status_code == 200
    v1.delete_namespaced_pod("server", "default", grace_period_seconds=5)
    wait_for(lambda: gone(v1, "server"), what="pod removed after its process stopped")


def test_graceful_deletion_sends_sigterm_and_waits(v1, tmp_path):
    marker = tmp_path / "terminated"
    script = (
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(marker)!r}, 'w').write('bye'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    v1.create_namespaced_pod("default", make_pod("graceful", [sys.executable, "-c", script], PROCESS))
    wait_for(lambda: "ready" in v1.read_namespaced_pod_log("graceful", "default"), what="process up")
    start = time.monotonic()
    # The answer to the delete is the terminating pod (a separate read may already find it gone:
    # the process exits as soon as it gets SIGTERM).
    terminating = v1.delete_namespaced_pod("graceful", "default", grace_period_seconds=20)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 20
    wait_for(lambda: gone(v1, "graceful"), what="pod removed")
    assert time.monotonic() - start < 15, "the pod should go as soon as its process exits"
    assert marker.read_text() == "bye"


def test_grace_period_expiry_kills_with_sigkill(v1):
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    v1.create_namespaced_pod("default", make_pod("stubborn", [sys.executable, "-c", script], PROCESS))
    wait_for(lambda: "up" in v1.read_namespaced_pod_log("stubborn", "default"), what="process up")
    start = time.monotonic()
    v1.delete_namespaced_pod("stubborn", "default", grace_period_seconds=1)
    wait_for(lambda: gone(v1, "stubborn"), what="pod removed")
    assert 0.9 <= time.monotonic() - start < 8


def test_standin_exit_annotations_and_log_errors(v1):
    annotations = {EXIT_AFTER_ANNOTATION: "0.2", EXIT_CODE_ANNOTATION: "2"}
    containers = [{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]
    v1.create_namespaced_pod("default", make_pod("two", annotations=annotations, containers=containers))
    wait_for(lambda: phase(v1, "two") == "Failed", what="stand-ins exit 2")
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod_log("two", "default")
    assert err.value.status == 400 and "a container name must be specified" in err.value.body
    assert "stand-in" in v1.read_namespaced_pod_log("two", "default", container="b")
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod_log("two", "default", container="nope")
    assert err.value.status == 400


async def test_follow_logs_stream_until_the_container_exits(cluster, v1):
    script = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"
    v1.create_namespaced_pod("default", make_pod("ticker", [sys.executable, "-c", script], PROCESS))
    client = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    async with client:
        av1 = kubernetes_asyncio.client.CoreV1Api(client)

        async def running():
            p = await av1.read_namespaced_pod("ticker", "default")
            return p.status.phase in ("Running", "Succeeded")

        await async_wait_for(running, what="ticker running")
        resp = await av1.read_namespaced_pod_log("ticker", "default", follow=True, _preload_content=False)
        text = (await asyncio.wait_for(resp.read(), 10)).decode()
    assert text == "tick 0\ntick 1\ntick 2\n"


def test_deleting_a_pytorchjob_collects_its_running_pods(cluster, v1):
    co = kubernetes.client.CustomObjectsApi(v1.api_client)
    job = co.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train"}, "spec": {}},
    )
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "train",
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for role in ("master-0", "worker-0"):
        pod = make_pod(f"train-{role}", ports=[23456], restart="OnFailure")
        pod["metadata"]["ownerReferences"] = [owner]
        v1.create_namespaced_pod("default", pod)
    for role in ("master-0", "worker-0"):
        wait_for(lambda role=role: is_ready(v1, f"train-{role}"), what=f"{role} ready")
    co.delete_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", "train")
    for role in ("master-0", "worker-0"):
        wait_for(lambda role=role: gone(v1, f"train-{role}"), what=f"{role} collected")
