"""Sharing in kubernetes mode: the same enforcement, switched on by the user image's config file.

The fake kubelet runs the pod's real ``jupyterhub-singleuser``; JUPYTER_CONFIG_PATH points it at a
copy of images/singleuser/classhub-singleuser.json, as the image's /etc/jupyter does, so this
checks that the file the images ship turns share enforcement on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import requests

from tests.hubproc import api
from tests.kubehub import KubeHub, process_cluster, request_server, wait_ready

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent
NODES = [{"name": "cpu-0", "allocatable": {"cpu": "8", "memory": "32Gi"}}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from process_cluster(tmp_path_factory, NODES)


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config_dir = tmp_path_factory.mktemp("image-etc-jupyter")
    (config_dir / "jupyter_server_config.d").mkdir()
    shutil.copy(ROOT / "images" / "singleuser" / "classhub-singleuser.json",
                config_dir / "jupyter_server_config.d")
    extra = f'c.Spawner.environment["JUPYTER_CONFIG_PATH"] = "{config_dir}"\n'
    hub = KubeHub(tmp_path_factory.mktemp("kubehub"), cluster.kubeconfig_path, start_timeout=40,
                  extra_config=extra)
    hub.start()
    yield hub
    hub.stop()


def test_read_only_share_is_enforced_in_a_pod(hub) -> None:
    owner, viewer = hub.login("student1"), hub.login("student2")
    owner_token, viewer_token = owner.new_token(), viewer.new_token()
    assert request_server(owner).status_code in (201, 202)
    wait_ready(owner, 60)

    def call(method: str, path: str, token: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{hub.url}/user/student1/{path}", timeout=30,
                                headers={"Authorization": f"token {token}"}, **kwargs)

    note = {"type": "file", "format": "text", "content": "lecture notes\n"}
    assert call("PUT", "api/contents/notes.txt", owner_token, json=note).status_code == 201
    r = api(hub, "POST", "shares", owner_token, json={"kind": "read-only", "user": "student2"})
    assert r.status_code == 201, r.text
    assert call("GET", "api/contents/notes.txt", viewer_token).json()["content"] == "lecture notes\n"
    assert call("PUT", "api/contents/notes.txt", viewer_token,
                json={**note, "content": "changed"}).status_code == 403
    assert call("POST", "api/kernels", viewer_token, json={}).status_code == 403
    assert call("POST", "api/terminals", viewer_token).status_code == 403
    assert api(hub, "DELETE", f"shares/{r.json()['id']}", owner_token).status_code == 200
    assert call("GET", "api/contents/notes.txt", viewer_token).status_code == 403
    assert call("GET", "api/contents/notes.txt", owner_token).json()["content"] == "lecture notes\n"
