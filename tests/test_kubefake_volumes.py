"""The fake kubelet mounts an ``nfs`` volume as a kubelet does, and enforces ``readOnly: true``:
a process in the pod (root, in this test's container) gets "Read-only file system" for a write
or a delete, cannot remount the mount read-write, and cannot reach the export's own folder to
go around the mount; a read-write mount of the same export writes through (tests/kubefake/
kubelet.py). A command run with ``pods/exec`` (a terminal, kubectl exec) is in the same mount
namespace and gets the same answers. Course data on Kubernetes relies on this (docs/admins/course-data.md)."""

from __future__ import annotations

import json
import sys
import uuid

import kubernetes
import pytest
from kubernetes.stream import stream

from tests.kubefake import FakeCluster
from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

PROBE = r"""
import json, os, subprocess, sys
ro, rw, export = sys.argv[1:4]
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return os.strerror(e.errno)
def write(path):
    with open(path, "w") as f:
        f.write("changed")
remount = subprocess.run(["mount", "-o", "remount,bind,rw", ro], capture_output=True, text=True)
print("RESULT " + json.dumps({
    "read": open(os.path.join(ro, "README.md")).read(),
    "write": attempt(lambda: write(os.path.join(ro, "README.md"))),
    "delete": attempt(lambda: os.unlink(os.path.join(ro, "README.md"))),
    "create": attempt(lambda: write(os.path.join(ro, "new.txt"))),
    "remount": remount.returncode,
    "write_after_remount": attempt(lambda: write(os.path.join(ro, "README.md"))),
    "export_listing": sorted(os.listdir(export)) if os.path.isdir(export) else None,
    "write_export": attempt(lambda: write(os.path.join(export, "course", "README.md"))),
    "write_rw": attempt(lambda: write(os.path.join(rw, "from-the-pod.txt"))),
    "cwd": os.getcwd(),
}), flush=True)
"""


def _pod(name: str, command: list[str], restart: str) -> dict:
    return {"metadata": {"name": name}, "spec": {
        "restartPolicy": restart, "terminationGracePeriodSeconds": 0,
        "volumes": [{"name": "data", "nfs": {"server": "nfs.example.edu", "path": "/exports/courses"}}],
        "containers": [{
            "name": "probe", "image": "python:3.12-slim", "workingDir": "/home/jovyan",
            "command": command,
            "volumeMounts": [
                {"name": "data", "mountPath": "/home/jovyan/data/course", "subPath": "course",
                 "readOnly": True},
                {"name": "data", "mountPath": "/home/jovyan/staff/course", "subPath": "course"}],
        }]}}


def test_a_read_only_nfs_mount_refuses_every_write_from_the_pod(tmp_path):
    export = tmp_path / "export"
    (export / "course").mkdir(parents=True)
    (export / "course" / "README.md").write_text("course data\n")
    with FakeCluster(nodes=[{"name": "n", "allocatable": {"cpu": "4", "memory": "8Gi"}}],
                     kubelet_mode="process") as cluster:
        cluster.export_nfs("nfs.example.edu", "/exports/courses", export)
        name = f"ro-{uuid.uuid4().hex[:6]}"
        # relative to the working directory: the pod's root is a folder, not "/" (kubelet.py)
        cluster.create("pods", _pod(name, [sys.executable, "-c", PROBE, "data/course", "staff/course",
                                           str(export)], "Never"))
        wait_for(lambda: (cluster.get("pods", name) or {}).get("status", {}).get("phase")
                 in ("Succeeded", "Failed"), 30, what="the probe pod to end")
        log = cluster.kubelet.logs(cluster.get("pods", name)["metadata"]["uid"], "probe").render(0, False)
        assert cluster.get("pods", name)["status"]["phase"] == "Succeeded", log
    line = next(x for x in log.splitlines() if x.startswith("RESULT "))
    seen = json.loads(line[len("RESULT "):])
    assert seen["read"] == "course data\n"
    for attempt in ("write", "delete", "create", "write_after_remount", "write_export"):
        assert seen[attempt] in ("Read-only file system", "No such file or directory"), (attempt, seen)
    assert seen["write"] == seen["delete"] == seen["create"] == "Read-only file system", seen
    assert seen["remount"] != 0 and seen["export_listing"] == [], seen
    assert seen["write_rw"] == "ok" and seen["cwd"].endswith("/home/jovyan"), seen
    # the host's export is as it was, except what the read-write mount wrote
    assert (export / "course" / "README.md").read_text() == "course data\n"
    assert sorted(p.name for p in (export / "course").iterdir()) == ["README.md", "from-the-pod.txt"]


def test_pods_exec_runs_in_the_containers_mounts(tmp_path):
    export = tmp_path / "export"
    (export / "course").mkdir(parents=True)
    (export / "course" / "README.md").write_text("course data\n")
    with FakeCluster(nodes=[{"name": "n", "allocatable": {"cpu": "4", "memory": "8Gi"}}],
                     kubelet_mode="process") as cluster:
        cluster.export_nfs("nfs.example.edu", "/exports/courses", export)
        cluster.write_kubeconfig(tmp_path / "kubeconfig")
        name = f"sh-{uuid.uuid4().hex[:6]}"
        cluster.create("pods", _pod(name, ["/bin/sh", "-c", "while true; do sleep 5; done"], "Always"))
        wait_for(lambda: (cluster.get("pods", name) or {}).get("status", {}).get("phase") == "Running",
                 30, what="the shell pod to run")
        api = kubernetes.config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
        try:
            client = stream(
                kubernetes.client.CoreV1Api(api).connect_get_namespaced_pod_exec, name, "default",
                command=["/bin/sh", "-c", "cat data/course/README.md; rm data/course/README.md; "
                         "echo changed > staff/course/from-exec.txt"],
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
            client.run_forever(timeout=30)
            out, err = client.read_stdout(), client.read_stderr()
        finally:
            api.close()
    assert out == "course data\n" and "Read-only file system" in err, (out, err)
    assert (export / "course" / "README.md").exists() and (export / "course" / "from-exec.txt").exists()


# ---------------------------------------------------------------------------- Secret, ConfigMap, stats
SECRET_PROBE = r"""
import json, os, sys
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return os.strerror(e.errno)
inputs = "/kubefake-test/in"
with open("/kubefake-test/work/out.bin", "wb") as f:
    f.write(os.urandom(300000))
with open("notes.bin", "wb") as f:  # in the home (the working directory)
    f.write(os.urandom(200000))
print("RESULT " + json.dumps({
    "listing": sorted(n for n in os.listdir(inputs) if not n.startswith("..")),
    "hidden": sorted(n for n in os.listdir(inputs) if n.startswith(".."))[1:],
    "nested": open(os.path.join(inputs, "source", "lab1.ipynb")).read(),
    "plain": open(os.path.join(inputs, "grading.json")).read(),
    "modes": {p: oct(os.stat(os.path.join(inputs, p)).st_mode & 0o777)
              for p in ("grading.json", "source/lab1.ipynb")},
    "link": os.readlink(os.path.join(inputs, "source")),
    "write": attempt(lambda: open(os.path.join(inputs, "new"), "w")),
    "config": open("etc/settings/app.conf").read(),
    "cwd": os.getcwd(),
}), flush=True)
import time
time.sleep(600)
"""


def test_secret_and_configmap_volumes_hold_their_keys_as_files_read_only(tmp_path):
    """A Secret volume's ``items`` at their paths with their modes (and ``defaultMode``), as
    kubelet's atomic writer lays them out (``..data``), always read-only; a mount at a path this
    machine does not have (``/kubefake-test/...``) is at that very path in the pod; an emptyDir
    is writable; the node's stats summary measures each volume's folder (what classhub's home
    sizes read) and names a claim's volume by its pvcRef."""
    import base64

    with FakeCluster(nodes=[{"name": "n", "allocatable": {"cpu": "4", "memory": "8Gi"}}],
                     kubelet_mode="process") as cluster:
        cluster.write_kubeconfig(tmp_path / "kubeconfig")
        b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
        cluster.create("secrets", {"metadata": {"name": "inputs"}, "data": {
            "f0": b64('{"nonce": "n"}'), "f1": b64("notebook"), "unused": b64("left out")}})
        cluster.create("configmaps", {"metadata": {"name": "settings"}, "data": {"app.conf": "debug = 1\n"}})
        cluster.create("persistentvolumeclaims", {"metadata": {"name": "claim-sam"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        name = f"secret-{uuid.uuid4().hex[:6]}"
        cluster.create("pods", {"metadata": {"name": name}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "volumes": [
                {"name": "inputs", "secret": {"secretName": "inputs", "defaultMode": 0o440, "items": [
                    {"key": "f0", "path": "grading.json"},
                    {"key": "f1", "path": "source/lab1.ipynb", "mode": 0o400}]}},
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "work", "emptyDir": {}},
                {"name": "home", "persistentVolumeClaim": {"claimName": "claim-sam"}}],
            "containers": [{
                "name": "probe", "image": "python:3.12-slim", "workingDir": "/home/jovyan",
                "command": [sys.executable, "-c", SECRET_PROBE],
                "volumeMounts": [
                    {"name": "inputs", "mountPath": "/kubefake-test/in"},
                    {"name": "work", "mountPath": "/kubefake-test/work"},
                    {"name": "settings", "mountPath": "/home/jovyan/etc/settings"},
                    {"name": "home", "mountPath": "/home/jovyan"}],
            }]}})
        uid = wait_for(lambda: (cluster.get("pods", name) or {}).get("metadata", {}).get("uid"), 30,
                       what="the pod")
        line = wait_for(lambda: next((x for x in cluster.kubelet.logs(uid, "probe").render(0, False)
                                      .splitlines() if x.startswith("RESULT ")), None), 60,
                        what="the probe's result")
        seen = json.loads(line[len("RESULT "):])
        api = kubernetes.config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
        try:
            core = kubernetes.client.CoreV1Api(api)
            raw = core.connect_get_node_proxy_with_path("n", "stats/summary", _preload_content=False)
            summary = json.loads(raw.data)
            with pytest.raises(kubernetes.client.ApiException) as missing:
                core.connect_get_node_proxy_with_path("nowhere", "stats/summary")
            # a terminal in the pod (pods/exec) is in its root, in its working directory
            shell = stream(core.connect_get_namespaced_pod_exec, name, "default",
                           command=["/bin/sh", "-c", "cat /kubefake-test/in/grading.json; pwd"],
                           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
            shell.run_forever(timeout=30)
            exec_out = shell.read_stdout()
        finally:
            api.close()
    assert seen["listing"] == ["grading.json", "source"] and seen["hidden"] == ["..data"], seen
    assert (seen["plain"], seen["nested"]) == ('{"nonce": "n"}', "notebook"), seen
    assert seen["modes"] == {"grading.json": "0o440", "source/lab1.ipynb": "0o400"}, seen
    assert seen["link"] == "..data/source" and seen["write"] == "Read-only file system", seen
    assert seen["config"] == "debug = 1\n", seen
    assert seen["cwd"].endswith("/home/jovyan"), seen
    assert missing.value.status == 404
    assert exec_out == '{"nonce": "n"}' + seen["cwd"] + "\n", exec_out
    assert summary["node"]["nodeName"] == "n"
    (pod,) = [p for p in summary["pods"] if p["podRef"]["name"] == name]
    volumes = {v["name"]: v for v in pod["volume"]}
    assert set(volumes) == {"inputs", "settings", "work", "home"}, volumes
    assert 300000 <= volumes["work"]["usedBytes"] < 400000, volumes["work"]
    assert 200000 <= volumes["home"]["usedBytes"] < 300000, volumes["home"]
    assert volumes["home"]["pvcRef"] == {"name": "claim-sam", "namespace": "default"}
    assert "pvcRef" not in volumes["work"] and volumes["work"]["capacityBytes"] > 0
