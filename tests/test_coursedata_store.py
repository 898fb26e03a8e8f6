"""Course data folders on disk (hub_ext.backends.coursedata): uploads land inside the course's
folder and nowhere else, whole or not at all; sizes and limits; the link at spawn.

The attacks are those a teacher's upload path or a member's own files could try: ``..`` and
absolute paths, a link or a hard link planted where the upload goes, a link in place of
``~/data``. They run on a real file system (tmp_path), as the service would meet them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hub_ext.backends.coursedata import (
    PARTIAL,
    ClasshubCourseData,
    CourseDataStore,
    UploadConflict,
    folder_name,
    link_into_home,
    pod_volumes,
)
from hub_ext.backends.submissions import SnapshotLimits, SnapshotRefused, snapshot_folder
from hub_ext.core.coursedata import DataExists, DataPathError, check_limit, parse_content_range

pytestmark = pytest.mark.unit


def _store(tmp_path: Path, **settings) -> CourseDataStore:
    return CourseDataStore(ClasshubCourseData(root_dir=str(tmp_path / "course-data"), **settings))


def _put(store: CourseDataStore, course: str, path: str, data: bytes, header: str | None = None) -> dict:
    upload = store.upload(course, path, parse_content_range(header, len(data)))
    upload.write(data)
    return upload.finish()


def _outside(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    return secret


def test_an_upload_is_listed_read_only_and_sized(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert _put(store, "ML 101", "images/cat.png", b"meow")["complete"]
    listing = store.listing("ML 101")
    assert [(e["path"], e["kind"], e["size"]) for e in listing["files"]] == [
        ("images", "folder", 0), ("images/cat.png", "file", 4)]
    placed = store.root / folder_name("ML 101") / "images" / "cat.png"
    assert placed.read_bytes() == b"meow"
    assert oct(placed.stat().st_mode & 0o777) == "0o444"
    assert oct(placed.parent.stat().st_mode & 0o777) == "0o555"
    assert store.size("ML 101") == 4
    if os.geteuid() != 0:  # as the students' servers in single-account mode: cannot write it
        with pytest.raises(PermissionError):
            placed.write_bytes(b"woof")
        with pytest.raises(PermissionError):
            placed.unlink()


def test_on_kubernetes_staff_servers_write_where_the_mount_lets_them(tmp_path: Path) -> None:
    """strict_modes off (configure() on Kubernetes): the kubelet's read-only mount stops students,
    and a teacher's server (the same uid as the hub pod) may write into the folders."""
    store = _store(tmp_path, strict_modes=False)
    _put(store, "ml", "images/a.png", b"x")
    placed = store.root / "ml" / "images" / "a.png"
    assert oct(placed.stat().st_mode & 0o777) == "0o644"
    assert oct(placed.parent.stat().st_mode & 0o777) == "0o755"


@pytest.mark.parametrize("path", ["../escape.txt", "a/../../escape.txt", "/etc/passwd", "a//b",
                                  "./a", "a\\..\\b", ".classhub-partial/x", ""])
def test_traversal_and_absolute_paths_are_refused_with_a_sentence(tmp_path: Path, path: str) -> None:
    store = _store(tmp_path)
    with pytest.raises(DataPathError) as refused:
        _put(store, "ml", path, b"x")
    assert "data folder" in str(refused.value) or "name" in str(refused.value)
    assert not (tmp_path / "escape.txt").exists()


def test_a_link_planted_as_a_folder_is_refused_not_followed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.ensure("ml")
    course = store.root / folder_name("ml")
    os.chmod(course, 0o755)
    (course / "images").symlink_to(tmp_path)  # as a member with the service's account could
    with pytest.raises(DataPathError, match="link"):
        _put(store, "ml", "images/evil.txt", b"x")
    assert not (tmp_path / "evil.txt").exists()


def test_a_link_or_hard_link_at_the_name_is_replaced_never_written_through(tmp_path: Path) -> None:
    store = _store(tmp_path)
    secret = _outside(tmp_path)
    store.ensure("ml")
    course = store.root / folder_name("ml")
    os.chmod(course, 0o755)
    (course / "soft.txt").symlink_to(secret)
    os.link(secret, course / "hard.txt")
    _put(store, "ml", "soft.txt", b"new")
    _put(store, "ml", "hard.txt", b"new")
    assert secret.read_text() == "private"
    assert not (course / "soft.txt").is_symlink()
    assert (course / "hard.txt").stat().st_ino != secret.stat().st_ino


def test_deleting_through_a_planted_link_removes_the_link_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "a.txt").write_text("mine")
    store.ensure("ml")
    course = store.root / folder_name("ml")
    os.chmod(course, 0o755)
    (course / "dir").symlink_to(keep)
    assert store.delete("ml", "dir") == "file"  # the link itself
    assert (keep / "a.txt").read_text() == "mine"
    (course / "dir2").symlink_to(keep)
    with pytest.raises(DataPathError, match="link"):
        store.delete("ml", "dir2/a.txt")
    assert (keep / "a.txt").read_text() == "mine"


def test_deleting_a_folder_takes_what_it_holds(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _put(store, "ml", "set/a/1.bin", b"1")
    _put(store, "ml", "set/b.bin", b"22")
    assert store.delete("ml", "set") == "folder"
    assert store.listing("ml")["files"] == []
    assert store.size("ml") == 0
    with pytest.raises(DataPathError, match="No"):
        store.delete("ml", "set")


def test_a_broken_upload_leaves_nothing_in_the_course_folder(tmp_path: Path) -> None:
    store = _store(tmp_path)
    upload = store.upload("ml", "big.bin", None)
    upload.write(b"x" * 1000)
    upload.abort()
    upload.close()
    assert store.listing("ml")["files"] == []
    assert not any((store.root / ".classhub-partial").iterdir())


def test_a_chunked_upload_resumes_where_the_kept_part_ends(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = _put(store, "ml", "data.bin", b"abcd", "bytes 0-3/10")
    assert first == {"offset": 4, "complete": False, "total": 10}
    assert store.listing("ml")["files"] == []  # nothing half-written in view
    # a chunk broken on the way is cut back: the kept part still ends at 4
    broken = store.upload("ml", "data.bin", parse_content_range("bytes 4-7/10", 4))
    broken.write(b"ef")
    broken.abort()
    broken.close()
    assert _put(store, "ml", "data.bin", b"", "bytes */10")["offset"] == 4
    with pytest.raises(UploadConflict) as conflict:
        _put(store, "ml", "data.bin", b"ijk", "bytes 7-9/10")
    assert conflict.value.offset == 4 and "byte 4" in str(conflict.value)
    _put(store, "ml", "data.bin", b"efgh", "bytes 4-7/10")
    assert _put(store, "ml", "data.bin", b"ij", "bytes 8-9/10")["complete"]
    assert (store.root / folder_name("ml") / "data.bin").read_bytes() == b"abcdefghij"


def test_an_upload_nobody_resumes_is_removed_after_a_day(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _put(store, "ml", "old.bin", b"ab", "bytes 0-1/4")
    partial = store.root / ".classhub-partial"
    [kept] = list(partial.iterdir())
    os.utime(kept, (0, 0))  # left long ago
    _put(store, "ml", "new.bin", b"cd", "bytes 0-1/4")  # the next upload sweeps
    assert [p.name for p in partial.iterdir()] == [store.partial_name("ml", "new.bin", 4)]


def test_two_requests_never_write_one_partial_file_at_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = store.upload("ml", "data.bin", parse_content_range("bytes 0-1/4", 2))
    with pytest.raises(UploadConflict, match="in progress"):
        store.upload("ml", "data.bin", parse_content_range("bytes 0-1/4", 2))
    first.write(b"ab")
    assert first.finish()["offset"] == 2
    _put(store, "ml", "data.bin", b"cd", "bytes 2-3/4")  # the lock went with the first request
    assert (store.root / "ml" / "data.bin").read_bytes() == b"abcd"


def test_the_course_limit_refuses_with_the_sizes(tmp_path: Path) -> None:
    store = _store(tmp_path, max_bytes=10, course_max_bytes={"big": 0})
    _put(store, "ml", "a.bin", b"x" * 8)
    with pytest.raises(DataPathError, match="over its limit of 10 B"):
        _put(store, "ml", "b.bin", b"x" * 8, "bytes 0-7/8")
    with pytest.raises(DataPathError, match="ask a hub admin to raise the course's limit"):
        _put(store, "ml", "c.bin", b"x" * 8)
    _put(store, "ml", "a.bin", b"y" * 9)  # replacing a file counts the difference
    _put(store, "big", "a.bin", b"x" * 100)  # 0: no limit for this course
    assert [e["path"] for e in store.listing("ml")["files"]] == ["a.bin"]


def test_the_link_at_spawn_never_replaces_a_members_own_file(tmp_path: Path) -> None:
    settings = ClasshubCourseData(root_dir=str(tmp_path / "course-data"))
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / folder_name("bio")).write_text("my notes")
    skipped = link_into_home(home, settings, {"ml": "student", "bio": "student"})
    assert os.readlink(home / "data" / "ml") == str((tmp_path / "course-data" / "ml").resolve())
    assert (home / "data" / "bio").read_text() == "my notes" and skipped == ["~/data/bio"]
    assert link_into_home(home, settings, {"ml": "student"}) == []  # again: nothing to do

    other = tmp_path / "home2"
    other.mkdir()
    (other / "data").symlink_to(tmp_path)  # a link of the member's own at ~/data
    assert "not a folder" in link_into_home(other, settings, {"ml": "student"})[0]
    assert not (tmp_path / "ml").exists()


def test_pods_mount_the_course_read_only_for_students_and_read_write_for_staff() -> None:
    settings = ClasshubCourseData(volume={"nfs": {"server": "nfs.example.edu", "path": "/courses"}})
    volumes, mounts = pod_volumes(settings, {"ml": "student", "bio": "teacher", "cs": "ta"})
    assert volumes == [{"name": "course-data", "nfs": {"server": "nfs.example.edu", "path": "/courses"}}]
    by_path = {m["mountPath"]: (m["subPath"], m["readOnly"]) for m in mounts}
    assert by_path == {"/home/jovyan/data/ml": ("ml", True), "/home/jovyan/data/bio": ("bio", False),
                       "/home/jovyan/data/cs": ("cs", False)}
    per_course = ClasshubCourseData(volume={"persistentVolumeClaim": {"claimName": "data-{course}"}})
    volumes, mounts = pod_volumes(per_course, {"ml": "student"})
    assert volumes[0]["persistentVolumeClaim"] == {"claimName": "data-ml"} and "subPath" not in mounts[0]


def test_an_admins_own_limit_overrides_the_configured_one_and_deletes_nothing(tmp_path: Path) -> None:
    own: dict[str, int | None] = {}
    store = CourseDataStore(ClasshubCourseData(root_dir=str(tmp_path / "course-data"), max_bytes=10),
                            own_limit=own.get)
    _put(store, "ml", "a.bin", b"x" * 8)
    own["ml"] = 100  # raised for this course only
    _put(store, "ml", "b.bin", b"x" * 50)
    assert store.limit("ml") == 100 and store.limit("bio") == 10
    own["ml"] = 20  # lowered below what the folder holds: new uploads are refused, files stay
    with pytest.raises(DataPathError, match="over its limit of 20 B"):
        _put(store, "ml", "c.bin", b"x")
    assert [e["path"] for e in store.listing("ml")["files"]] == ["a.bin", "b.bin"]
    own["ml"] = 0  # no limit
    _put(store, "ml", "c.bin", b"x" * 1000)
    assert check_limit(None) is None and check_limit(0) == 0
    for bad in (-1, 1.5, "10 GB", True):
        with pytest.raises(DataPathError, match="whole number of bytes"):
            check_limit(bad)


def _copy(store: CourseDataStore, home: Path, folder: str, to: str, max_bytes: int = 10**9) -> list[str]:
    """A copy from a home as the service makes it: the snapshot's walk into a staged folder, then
    placed whole; the staged folder goes either way."""
    staged = store.copy_staging()
    try:
        taken = snapshot_folder(home, folder, staged, SnapshotLimits(max_bytes=max_bytes))
        store.place_folder("ml", staged, to)
        return taken.skipped
    finally:
        store.discard(staged)


def test_a_folder_copied_from_a_home_lands_whole_and_follows_no_link(tmp_path: Path) -> None:
    store = _store(tmp_path, max_bytes=100)
    home = tmp_path / "home"
    (home / "cats" / "train").mkdir(parents=True)
    (home / "cats" / "train" / "1.png").write_bytes(b"meow")
    (home / "cats" / "leak").symlink_to(_outside(tmp_path))  # a link pointing outside the home
    (home / "cats" / "all").symlink_to(tmp_path)
    assert sorted(_copy(store, home, "cats", "cats")) == ["all (a symbolic link)", "leak (a symbolic link)"]
    assert [(e["path"], e["size"]) for e in store.listing("ml")["files"]] == [
        ("cats", 0), ("cats/train", 0), ("cats/train/1.png", 4)]
    placed = store.root / "ml" / "cats" / "train" / "1.png"
    assert oct(placed.stat().st_mode & 0o777) == "0o444"
    assert oct(placed.parent.stat().st_mode & 0o777) == "0o555"
    assert not list((store.root / PARTIAL).iterdir())  # nothing left staged

    with pytest.raises(DataExists, match="already exists"):
        _copy(store, home, "cats", "cats")
    (home / "big").mkdir()
    (home / "big" / "a.bin").write_bytes(b"x" * 200)
    with pytest.raises(DataPathError, match="over its limit of 100 B"):
        _copy(store, home, "big", "big")
    with pytest.raises(SnapshotRefused, match="no folder"):
        _copy(store, home, "leak-dir", "x")
    (home / "via").symlink_to(home / "cats")  # the named folder itself is a link: refused
    with pytest.raises(SnapshotRefused, match="no folder"):
        _copy(store, home, "via", "via")
    assert [e["path"] for e in store.listing("ml")["files"]] == ["cats", "cats/train", "cats/train/1.png"]
    assert not list((store.root / PARTIAL).iterdir())
