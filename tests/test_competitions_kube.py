"""Competitions on Kubernetes: a real hub on the fake cluster (the second run mode).

A predictions file is scored by the service, so what changes on a cluster is where the service
keeps files and who it is: the labels and predictions go to the configured storage folder
(``c.ClasshubAssignments.storage_dir``, docs/teachers/competitions.md), readable by the service
only; students are scored at once and ranked on the public split. A submitted notebook runs as
a job in a pod (the grading sandbox: the fake kubelet mounts the job's Secret, the runner drops
to uid 65534) and its predictions come back through the pod's log.
One test: create, labels, two students' submissions, the leaderboard, the files on disk, then a
notebook that runs in a pod and is scored.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.hubproc import api, wait_for
from tests.kubehub import KubeHub, process_cluster

pytestmark = pytest.mark.cluster

NODES = [{"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}}]
C = "courses/k101/competitions"
TRUTH = {f"row{i}": float(i) for i in range(10)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.kubefake.training import TrainingOperator

    for fake in process_cluster(tmp_path_factory, NODES):
        TrainingOperator(fake)  # competition notebooks run as jobs (PyTorchJobs)
        # the grading image's `python` (with nbclient): this test's own, as an image's ENV PATH
        fake.kubelet.image_env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        yield fake


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kubecompetitions") / "submissions"


@pytest.fixture(scope="module")
def hub(cluster, storage, tmp_path_factory):
    hub = KubeHub(tmp_path_factory.mktemp("kubecompetitionshub"), cluster.kubeconfig_path,
                  start_timeout=60, extra_config=f'c.ClasshubAssignments.storage_dir = "{storage}"\n'
                  'c.ClasshubKubeSpawner.profiles = [{"slug": "cpu", "kind": "cpu", "default": True, '
                  '"cpu_limit": "2", "mem_limit": "2Gi"}]\nc.ClasshubJobs.interval = 0.5\n')
    hub.start()
    yield hub
    hub.stop()


#: the classhub API as tests.hubproc.api calls it, with the time a pod start may take on a busy machine
service = functools.partial(api, timeout=120)


def _csv(header: str, rows: dict[str, float]) -> bytes:
    return (header + "\n" + "".join(f"{k},{v}\n" for k, v in rows.items())).encode()


def _pod_logs(cluster, prefix: str) -> str:
    """The logs of the pods whose name starts with ``prefix``: what a failed job said."""
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    v1 = kubernetes.client.CoreV1Api(client)
    try:
        return "\n".join(f"--- {p.metadata.name}\n" + v1.read_namespaced_pod_log(p.metadata.name, "default")
                         for p in v1.list_namespaced_pod("default").items
                         if p.metadata.name.startswith(prefix))
    finally:
        client.close()


def test_labels_in_the_storage_folder_submissions_scored_and_ranked(hub: KubeHub, storage: Path, cluster):
    admin = hub.login("admin").new_token()
    assert service(hub, "POST", "courses", admin, json={"name": "k101"}).status_code == 201
    r = service(hub, "PUT", "courses/k101/members", admin, json={"add": [
        {"username": "teacher1", "role": "teacher"}, {"username": "student1", "role": "student"},
        {"username": "student2", "role": "student"}]})
    assert r.status_code == 200, r.text
    teacher = hub.login("teacher1").new_token()
    s1, s2 = hub.login("student1").new_token(), hub.login("student2").new_token()
    ends = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    r = service(hub, "POST", C, teacher, json={"name": "house", "metric": "rmse", "ends_at": ends,
                                               "public_fraction": 0.5, "daily_limit": 3})
    assert r.status_code == 201, r.text
    r = service(hub, "PUT", f"{C}/house/labels", teacher, data=_csv("id,label", TRUTH),
                headers={"Content-Type": "text/csv"})
    assert r.status_code == 200 and r.json()["rows"] == 10, r.text

    # the hidden labels are a file of the service's own in the configured folder
    (labels,) = (storage / "competitions").glob("c*/labels-*.csv")
    assert labels.read_bytes() == _csv("id,label", TRUTH)
    assert stat.S_IMODE(os.stat(storage / "competitions").st_mode) == 0o700

    exact = service(hub, "POST", f"{C}/house/submissions", s1, data=_csv("id,prediction", TRUTH),
                    headers={"Content-Type": "text/csv"})
    assert exact.status_code == 201 and exact.json()["public_score"] == 0.0, exact.text
    off = {k: v + 2 for k, v in TRUTH.items()}
    r = service(hub, "POST", f"{C}/house/submissions", s2, data=_csv("id,prediction", off),
                headers={"Content-Type": "text/csv"})
    assert r.status_code == 201 and r.json()["public_score"] == 2.0, r.text
    r = service(hub, "POST", f"{C}/house/submissions", s2, data=b"id,prediction\nrow0,1\n",
                headers={"Content-Type": "text/csv"})
    assert r.status_code == 400 and "have no prediction" in r.json()["message"], r.text

    board = service(hub, "GET", f"{C}/house/leaderboard", s2).json()
    assert board["shown"] == "public" and board["private"] is None
    assert [(e["rank"], e["student"], e["score"]) for e in board["public"]] == [
        (1, "student1", 0.0), (2, "student2", 2.0)]
    assert service(hub, "GET", f"{C}/house", s2).json()["left_today"] == 2  # the refused one is free
    kept = list((storage / "competitions").rglob("*.csv"))
    assert len(kept) == 3  # the labels and the two accepted files
    r = service(hub, "GET", f"{C}/house/submissions/{exact.json()['id']}/file", s2)
    assert r.status_code == 404 and "row0" not in r.text

    # a notebook that computes its predictions runs as a job in a pod, as 65534, and is scored
    r = service(hub, "PUT", f"{C}/house/runner", teacher,
                json={"profile": "cpu", "time_limit": 120, "predictions_file": "predictions.csv"})
    assert r.status_code == 200 and r.json()["takes_notebooks"] is True, r.text
    rows = "".join(f"{k},{v}\\n" for k, v in TRUTH.items())
    notebook = new_notebook(cells=[new_code_cell(
        "import os\n"
        f"open('predictions.csv', 'w').write('id,prediction\\n{rows}')\n"
        "open('who.txt', 'w').write(str(os.getuid()))\n")])
    r = service(hub, "POST", f"{C}/house/notebooks", s2, data=nbformat.writes(notebook).encode(),
                headers={"Content-Type": "application/x-ipynb+json"})
    assert r.status_code == 202 and r.json()["state"] == "pending", r.text
    entry = r.json()["id"]

    def done():
        mine = service(hub, "GET", f"{C}/house/submissions", s2).json()
        found = next((e for e in mine if e["id"] == entry), None)
        return found if found and found["state"] != "pending" else None
    got = wait_for(done, 240, "the notebook's job to end")
    if os.geteuid() != 0:  # the fake kubelet maps only this account: the runner cannot become 65534
        assert got["state"] == "failed", got
    else:
        assert (got["state"], got["public_score"]) == ("scored", 0.0), (json.dumps(got)
                                                                        + _pod_logs(cluster, "compete-"))
        board = service(hub, "GET", f"{C}/house/leaderboard", s2).json()
        assert [(e["student"], e["score"]) for e in board["public"]] == [
            ("student1", 0.0), ("student2", 0.0)], board  # a tie goes to the earlier submission
