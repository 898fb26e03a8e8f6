"""Competitions on Kubernetes: a real hub on the fake cluster (the second run mode).

Competitions run no pods (a predictions file is scored by the service), so what changes on a
cluster is where the service keeps files and who it is: the labels and predictions go to the
configured storage folder (``c.ClasshubAssignments.storage_dir``, docs/teachers/competitions.md),
readable by the service only; students are scored at once and ranked on the public split.
One test: create, labels, two students' submissions, the leaderboard, the files on disk.
"""

from __future__ import annotations

import functools
import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.hubproc import api
from tests.kubehub import KubeHub, process_cluster

pytestmark = pytest.mark.cluster

NODES = [{"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}}]
C = "courses/k101/competitions"
TRUTH = {f"row{i}": float(i) for i in range(10)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from process_cluster(tmp_path_factory, NODES)


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kubecompetitions") / "submissions"


@pytest.fixture(scope="module")
def hub(cluster, storage, tmp_path_factory):
    hub = KubeHub(tmp_path_factory.mktemp("kubecompetitionshub"), cluster.kubeconfig_path,
                  start_timeout=60, extra_config=f'c.ClasshubAssignments.storage_dir = "{storage}"\n')
    hub.start()
    yield hub
    hub.stop()


#: the classhub API as tests.hubproc.api calls it, with the time a pod start may take on a busy machine
service = functools.partial(api, timeout=120)


def _csv(header: str, rows: dict[str, float]) -> bytes:
    return (header + "\n" + "".join(f"{k},{v}\n" for k, v in rows.items())).encode()


def test_labels_in_the_storage_folder_submissions_scored_and_ranked(hub: KubeHub, storage: Path):
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
