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
