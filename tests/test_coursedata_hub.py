"""Course data through a real ``classhub local`` hub and its proxy (issue 35, local mode).

What people notice: a teacher uploads a file whole and a larger one in chunks that resume after
a break; a student whose server was already running finds both at ``~/data/demo101`` in their
JupyterLab (through the contents API of their server), cannot change or delete them there and
is told why, and cannot upload or delete through classhub; a teacher of another course sees and
changes nothing; paths that climb out of the folder are refused with a sentence; the teacher
sees every member's home size, marked when over the course's home limit, and the student's
JupyterLab panel warns them; deleting removes the file for everyone.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.hubproc import HubSession, LocalHub, api, start_servers, tokens_with_an_outsider

pytestmark = pytest.mark.hub

COURSE = "demo101"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    data_dir = hub_root / "course-data"
    data_dir.mkdir()
    # a home limit every home passes (a started server writes a few KiB of settings)
    (data_dir / "jupyterhub_config.py").write_text(
        'c.ClasshubCourseData.course_home_limit_bytes = {"demo101": 1000}\n')
    hub = LocalHub(data_dir=data_dir).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return tokens_with_an_outsider(hub, ("teacher1", "ta1", "student1"), "teacher2", "teacher")


def put_file(hub: LocalHub, token: str, path: str, data: bytes, content_range: str | None = None,
             course: str = COURSE) -> requests.Response:
    headers = {"Content-Type": "application/octet-stream"}
    if content_range:
        headers["Content-Range"] = content_range
    return api(hub, "PUT", f"courses/{course}/data/files/{quote(path)}", token, data=data, headers=headers)


def contents(hub: LocalHub, user: str, token: str, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, f"{hub.url}/user/{user}/api/contents/{quote(path)}",
                            headers={"Authorization": f"token {token}"}, timeout=30, **kwargs)


def test_teachers_upload_students_read_and_nobody_else_writes(hub: LocalHub, tokens: dict[str, str]):
    teacher, student, other = tokens["teacher1"], tokens["student1"], tokens["teacher2"]
    start_servers(hub, {"student1": student})  # running before anything is uploaded

    # a whole file, then a 3 MiB one in 1 MiB chunks with a break after the first
    r = put_file(hub, teacher, "README.txt", b"Images of cats, 2026 edition.\n")
    assert r.status_code == 201, r.text
    big = os.urandom(3 * MIB)
    total = len(big)
    r = put_file(hub, teacher, "images/train.bin", big[:MIB], f"bytes 0-{MIB - 1}/{total}")
    assert r.status_code == 200 and r.json()["offset"] == MIB and not r.json()["complete"], r.text
    assert [f["path"] for f in api(hub, "GET", f"courses/{COURSE}/data", student).json()["files"]] == [
        "README.txt"]  # nothing half-uploaded in view (the folder is made at the end)
    r = put_file(hub, teacher, "images/train.bin", b"", f"bytes */{total}")
    assert r.json()["offset"] == MIB  # where to resume
    r = put_file(hub, teacher, "images/train.bin", big[2 * MIB:], f"bytes {2 * MIB}-{total - 1}/{total}")
    assert r.status_code == 409 and r.json()["offset"] == MIB, r.text
    r = put_file(hub, teacher, "images/train.bin", big[MIB:2 * MIB], f"bytes {MIB}-{2 * MIB - 1}/{total}")
    assert r.status_code == 200, r.text
    r = put_file(hub, teacher, "images/train.bin", big[2 * MIB:], f"bytes {2 * MIB}-{total - 1}/{total}")
    assert r.status_code == 201 and r.json()["complete"], r.text

    listing = api(hub, "GET", f"courses/{COURSE}/data", student).json()
    assert listing["path"] == "~/data/demo101"
    assert [(f["path"], f["size"]) for f in listing["files"]] == [
        ("README.txt", 30), ("images", 0), ("images/train.bin", total)]

    # the student's server shows them at ~/data/demo101, read-only
    r = contents(hub, "student1", student, "GET", "data/demo101/images/train.bin",
                 params={"content": "1", "type": "file", "format": "base64"})
    assert r.status_code == 200, r.text
    assert base64.b64decode(r.json()["content"]) == big and r.json()["writable"] is False
    r = contents(hub, "student1", student, "PUT", "data/demo101/README.txt",
                 json={"type": "file", "format": "text", "content": "mine now"})
    assert r.status_code == 403 and "read-only" in r.json()["message"], r.text
    r = contents(hub, "student1", student, "DELETE", "data/demo101/README.txt")
    assert r.status_code == 403 and "course's page" in r.json()["message"], r.text
    r = contents(hub, "student1", student, "GET", "data/demo101/README.txt",
                 params={"content": "1", "type": "file", "format": "text"})
    assert r.json()["content"] == "Images of cats, 2026 edition.\n"

    # classhub refuses the student's and another course's teacher's changes, and the listing
    for token, who in ((student, "You are a student"), (other, "not a member")):
        r = put_file(hub, token, "README.txt", b"overwritten")
        assert r.status_code == 403 and who in r.json()["message"], r.text
        r = api(hub, "DELETE", f"courses/{COURSE}/data/files/README.txt", token)
        assert r.status_code == 403, r.text
    r = api(hub, "GET", f"courses/{COURSE}/data", other)
    assert r.status_code == 403, r.text

    # paths that leave the folder: a sentence, nothing written
    for path in ("../escape.txt", "/etc/evil", "images/../../x", ".classhub-partial/x"):
        r = api(hub, "PUT", f"courses/{COURSE}/data/files/{quote(path, safe='')}", teacher, data=b"x",
                headers={"Content-Type": "application/octet-stream"})
        assert r.status_code in (400, 404), (path, r.status_code, r.text)
    assert not (hub.data_dir / "course-data" / "escape.txt").exists()
    assert not (hub.data_dir / "escape.txt").exists()

    # storage in view: the teacher sees each member's home; the student does not
    storage = api(hub, "GET", f"courses/{COURSE}/storage", tokens["ta1"])
    assert storage.status_code == 200, storage.text
    homes = {h["user"]: h["bytes"] for h in storage.json()["homes"]}
    assert set(homes) == {"teacher1", "ta1", "student1", "student2"} and homes["student1"] > 1000
    levels = {h["user"]: h["level"] for h in storage.json()["homes"]}
    assert levels["student1"] == "over" and levels["student2"] == "fine"  # no home yet: 0 bytes
    assert storage.json()["home_limit"] == 1000
    assert storage.json()["data_bytes"] == 30 + total
    assert api(hub, "GET", f"courses/{COURSE}/storage", student).status_code == 403
    mine = api(hub, "GET", "storage/me", student).json()
    assert mine["courses"] == [{"course": COURSE, "role": "student", "path": "~/data/demo101",
                                "writable": False}]

    # the JupyterLab panel of the student's server says where the data is, and the home's size
    panel = requests.get(f"{hub.url}/user/student1/api/classhub/panel/state", timeout=30,
                         headers={"Authorization": f"token {student}"}).json()
    assert panel["storage"]["courses"][0]["path"] == "~/data/demo101"
    assert panel["storage"]["bytes"] == homes["student1"] and panel["storage"]["level"] == "over"
    assert "limit: delete what you no longer need" in panel["storage"]["warning"]

    # the metrics count the uploads and the folder's size
    scrape = requests.get(f"{hub.url}/services/classhub/metrics",
                          headers={"Authorization": f"token {tokens['admin']}"}, timeout=30).text
    samples = {(s.name, s.labels.get("course")): s.value
               for family in text_string_to_metric_families(scrape) for s in family.samples}
    assert samples[("classhub_course_data_uploads_total", COURSE)] == 2
    assert samples[("classhub_course_data_bytes", COURSE)] == 30 + total

    # deleting removes it for everyone
    r = api(hub, "DELETE", f"courses/{COURSE}/data/files/images", teacher)
    assert r.status_code == 204, r.text
    assert contents(hub, "student1", student, "GET", "data/demo101/images").status_code == 404
    entries = api(hub, "GET", f"courses/{COURSE}/audit", teacher).json()["entries"]
    said = [e["sentence"] for e in entries]
    assert "teacher1 uploaded images/train.bin (3.0 MiB) to the course data" in said
    assert "teacher1 deleted the folder images from the course data" in said


def test_admins_set_the_limit_and_staff_copy_a_folder_of_their_server(hub: LocalHub, tokens: dict[str, str]):
    """The course's own limit (hub admins only; staff see it) and a copy from a staff member's
    home: a link in the folder that points outside is left out and named, a copy over the limit
    leaves nothing, and a limit lowered below what the folder holds refuses uploads only."""
    teacher, student, other = tokens["teacher1"], tokens["student1"], tokens["teacher2"]
    admin = tokens["admin"]
    listing = api(hub, "GET", f"courses/{COURSE}/data", teacher).json()
    assert listing["own_limit"] is None and listing["limit"] == listing["default_limit"] == 50 * 1024**3

    # only a hub admin sets it: not the course's own teacher or TA, a student, another course's teacher
    for token in (teacher, tokens["ta1"], student, other):
        r = api(hub, "PUT", f"courses/{COURSE}/data/limit", token, json={"max_bytes": 10**12})
        assert r.status_code == 403, r.text
    r = api(hub, "PUT", f"courses/{COURSE}/data/limit", admin, json={"max_bytes": "lots"})
    assert r.status_code == 400 and "whole number of bytes" in r.json()["message"], r.text
    used = listing["bytes"]
    r = api(hub, "PUT", f"courses/{COURSE}/data/limit", admin, json={"max_bytes": used + 1000})
    assert r.status_code == 200 and r.json()["limit"] == used + 1000, r.text
    assert api(hub, "GET", f"courses/{COURSE}/data", tokens["ta1"]).json()["own_limit"] == used + 1000

    # the teacher's home: a folder of data, a link in it pointing outside the home
    home = hub.data_dir / "homes" / "teacher1"
    (home / "datasets" / "cats").mkdir(parents=True, exist_ok=True)
    (home / "datasets" / "cats" / "1.txt").write_bytes(b"c" * 500)
    (home / "datasets" / "cats" / "leak").symlink_to(hub.data_dir / "demo-password")
    for token in (student, other):  # a student, another course's teacher: refused
        r = api(hub, "POST", f"courses/{COURSE}/data/copy", token, json={"server_path": "datasets/cats"})
        assert r.status_code == 403, r.text
    r = api(hub, "POST", f"courses/{COURSE}/data/copy", teacher, json={"server_path": "../etc"})
    assert r.status_code == 400, r.text
    r = api(hub, "POST", f"courses/{COURSE}/data/copy", teacher, json={"server_path": "datasets/cats"})
    assert r.status_code == 201, r.text
    assert (r.json()["files"], r.json()["bytes"], r.json()["skipped"]) == (1, 500, ["leak (a symbolic link)"])
    paths = [f["path"] for f in api(hub, "GET", f"courses/{COURSE}/data", student).json()["files"]]
    assert "cats/1.txt" in paths and "cats/leak" not in paths
    r = api(hub, "POST", f"courses/{COURSE}/data/copy", teacher, json={"server_path": "datasets/cats"})
    assert r.status_code == 409 and "already exists" in r.json()["message"], r.text

    # over the room left: refused with the sizes, nothing half-copied in the course's folder
    (home / "datasets" / "big").mkdir(exist_ok=True)
    (home / "datasets" / "big" / "a.bin").write_bytes(b"x" * 2000)
    r = api(hub, "POST", f"courses/{COURSE}/data/copy", teacher, json={"server_path": "datasets/big"})
    assert r.status_code == 413 and "room left in the data folder of demo101" in r.json()["message"], r.text
    paths = [f["path"] for f in api(hub, "GET", f"courses/{COURSE}/data", teacher).json()["files"]]
    assert not any(p.startswith("big") for p in paths)
    assert not list((hub.data_dir / "course-data" / ".classhub-partial").glob("copy-*"))

    # lowered below what the folder holds: new uploads are refused, nothing is deleted
    r = api(hub, "PUT", f"courses/{COURSE}/data/limit", admin, json={"max_bytes": 10})
    assert r.status_code == 200, r.text
    r = put_file(hub, teacher, "more.txt", b"more")
    assert r.status_code == 413 and "over its limit of 10 B" in r.json()["message"], r.text
    paths = [f["path"] for f in api(hub, "GET", f"courses/{COURSE}/data", teacher).json()["files"]]
    assert "cats/1.txt" in paths
    r = api(hub, "PUT", f"courses/{COURSE}/data/limit", admin, json={"max_bytes": None})
    assert r.status_code == 200 and r.json()["own_limit"] is None and r.json()["limit"] == 50 * 1024**3

    # the course page: staff get the copy form, only a hub admin the limit form
    pages = {u: HubSession(hub, u).get(f"/services/classhub/courses/{COURSE}").text
             for u in ("admin", "teacher1", "student1")}
    assert 'id="data-limit"' in pages["admin"] and 'id="data-limit"' not in pages["teacher1"]
    assert 'id="data-copy"' in pages["teacher1"] and 'id="data-copy"' not in pages["student1"]

    said = [e["sentence"] for e in api(hub, "GET", f"courses/{COURSE}/audit", teacher).json()["entries"]]
    assert "admin set the course data limit to 10 bytes" in said
    assert "admin set the course data limit to the hub's default" in said
    assert ("teacher1 copied ~/datasets/cats from their server to cats in the course data (1 file, "
            "500 bytes)") in said
