"""Seeding on a real file system (hub_ext.backends.seeding).

What a user would notice: a malicious template or upload that writes outside its folder or fills
the disk, a symlink planted in a home that makes seeding write into /etc or another student's
files, an edited notebook overwritten, a non-ASCII name mangled, a re-seed that takes as long as
the first one.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from hub_ext.backends import seeding
from hub_ext.backends.seeding import (
    HomeError,
    apply,
    extract_archive,
    read_marker,
    scan_home,
    scan_template,
    seed_home,
    verify_template,
)
from hub_ext.core.seeding import (
    DIR,
    FILE,
    MARKER_PATH,
    SPECIAL,
    STUDENT_MODIFIED,
    SYMLINK,
    Manifest,
    Marker,
    SeedLimits,
    TemplateRefused,
    home_paths,
    plan,
)
from tests.system_accounts import require_root
from tests.test_core_seeding import scenarios

pytestmark = pytest.mark.unit

CAFE = b"caf\xe9"  # a Latin-1 name: not valid UTF-8, must survive byte for byte


def write(path: Path | bytes, data: bytes | str, mode: int = 0o644) -> None:
    path = os.fsencode(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def snapshot(root: Path) -> dict[bytes, tuple]:
    """Everything under ``root``: type, mode, content hash (or link target), mtime."""
    found: dict[bytes, tuple] = {}
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                detail = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                detail = hashlib.sha256(Path(os.fsdecode(path)).read_bytes()).hexdigest()
            else:
                detail = None
            found[os.path.relpath(path, base)] = (stat.S_IFMT(st.st_mode), st.st_mode & 0o777, detail,
                                                   st.st_mtime_ns)
    return found


@pytest.fixture
def template(tmp_path: Path) -> Path:
    root = tmp_path / "template"
    write(root / "README.md", "# Lab\n")
    write(root / "nb" / "lab1.ipynb", '{"cells": []}')
    write(root / "nb" / "run.sh", "#!/bin/sh\necho hi\n", 0o755)
    write(os.path.join(os.fsencode(root), b"nb", CAFE + b".txt"), "latin-1 name")
    write(root / "données" / "é.csv", "a,b\n1,2\n")
    (root / "empty").mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every home, that seeding must never change."""
    folder = tmp_path / "outside"
    write(folder / "lab1.ipynb", "not yours")
    write(folder / "secret", "do not touch")
    return folder


# ---------------------------------------------------------------------------------------------
# Templates from folders


def test_scan_template_hashes_files_keeps_exec_bits_and_byte_exact_names(template):
    write(template / ".classhub" / "template.json", "{}")  # a seeded teacher home: not template content
    manifest = scan_template(template)
    cafe = os.fsdecode(b"nb/" + CAFE + b".txt")
    assert set(manifest) == {"README.md", "nb", "nb/lab1.ipynb", "nb/run.sh", cafe, "données",
                             "données/é.csv", "empty"}
    assert manifest["nb/run.sh"].executable and not manifest["nb/lab1.ipynb"].executable
    assert manifest["README.md"].digest == hashlib.sha256(b"# Lab\n").hexdigest()
    assert manifest["empty"].kind == DIR
    verify_template(template, manifest)
    write(template / "README.md", "# changed\n")
    with pytest.raises(TemplateRefused, match="no longer matches"):
        verify_template(template, manifest)


def test_template_with_a_symlink_to_etc_is_refused(template):
    os.symlink("/etc", template / "nb" / "etc")
    with pytest.raises(TemplateRefused, match=r"nb/etc.*symbolic link"):
        scan_template(template)


def test_template_that_is_itself_a_symlink_is_refused(template, tmp_path):
    os.symlink(template, tmp_path / "link")
    with pytest.raises(TemplateRefused, match="not a folder"):
        scan_template(tmp_path / "link")


def test_template_with_a_hard_link_or_fifo_is_refused(template):
    os.link(template / "README.md", template / "again.md")
    with pytest.raises(TemplateRefused, match="hard link"):
        scan_template(template)
    os.unlink(template / "again.md")
    os.mkfifo(template / "nb" / "pipe")
    with pytest.raises(TemplateRefused, match=r"nb/pipe.*FIFO"):
        scan_template(template)


def test_template_over_the_byte_limit_is_refused(template):
    write(template / "big.bin", b"\0" * 5000)
    with pytest.raises(TemplateRefused, match="larger than 4000 bytes"):
        scan_template(template, SeedLimits(max_bytes=4000))


def test_template_with_too_many_files_is_refused(tmp_path):
    """The 100k-tiny-files attack, scaled down: the limit, not the disk, decides."""
    root = tmp_path / "many"
    root.mkdir()
    for i in range(10_001):
        fd = os.open(root / f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
    with pytest.raises(TemplateRefused, match="more than 10000 files"):
        scan_template(root, SeedLimits(max_files=10_000))


# ---------------------------------------------------------------------------------------------
# Templates from archives


def test_zip_is_extracted_with_names_exec_bits_and_missing_folders(tmp_path):
    archive = tmp_path / "t.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("./nb/lab1.ipynb", "{}")  # no folder entry for nb/: created anyway
        info = zipfile.ZipInfo("nb/run.sh")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        zf.writestr(info, "#!/bin/sh\n")
        zf.writestr("données/é.csv", "a\n")
    manifest = extract_archive(archive, tmp_path / "out")
    assert manifest == scan_template(tmp_path / "out")
    assert set(manifest) == {"nb", "nb/lab1.ipynb", "nb/run.sh", "données", "données/é.csv"}
    assert manifest["nb/run.sh"].executable


def test_tar_gz_is_extracted_byte_exact(tmp_path, template):
    archive = tmp_path / "t.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(template, arcname=".")
    manifest = extract_archive(archive, tmp_path / "out")
    assert manifest == scan_template(template)
    assert CAFE + b".txt" in os.listdir(os.fsencode(tmp_path / "out" / "nb"))


def _tar(path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    with tarfile.open(path, "w") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, **kw) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in kw.items():
        setattr(info, key, value)
    return info


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([(_member("ok.txt"), b"fine"), (_member("../evil.txt"), b"pwned")], r"'\.\./evil\.txt'.*'\.\.'"),
        ([(_member("/tmp/evil.txt"), b"pwned")], "absolute path"),
        ([(_member("a/../../evil.txt"), b"pwned")], r"'\.\.'"),
        ([(_member("etc", tarfile.SYMTYPE, linkname="/etc"), None)], "symbolic or hard link"),
        ([(_member("ok.txt"), b"x"), (_member("pw", tarfile.LNKTYPE, linkname="/etc/passwd"), None)],
         "symbolic or hard link"),
        ([(_member("null", tarfile.CHRTYPE, devmajor=1, devminor=3), None)], "device"),
        ([(_member("pipe", tarfile.FIFOTYPE), None)], "FIFO"),
    ],
    ids=["dotdot", "absolute", "nested-dotdot", "symlink", "hardlink", "device", "fifo"],
)
def test_malicious_tar_is_refused_and_nothing_is_left(tmp_path, members, why):
    archive = _tar(tmp_path / "evil.tar", *members)
    before = snapshot(tmp_path)
    with pytest.raises(TemplateRefused, match=why):
        extract_archive(archive, tmp_path / "out")
    assert snapshot(tmp_path) == before  # no evil.txt anywhere, no half-extracted out/


def test_zip_slip_and_zip_symlink_are_refused(tmp_path):
    slip = tmp_path / "slip.zip"
    with zipfile.ZipFile(slip, "w") as zf:
        zf.writestr("fine.txt", "ok")
        zf.writestr("../../evil.txt", "pwned")
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("etc")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc")
    before = snapshot(tmp_path)
    with pytest.raises(TemplateRefused, match=r"evil\.txt"):
        extract_archive(slip, tmp_path / "out")
    with pytest.raises(TemplateRefused, match="symbolic link"):
        extract_archive(link, tmp_path / "out")
    assert snapshot(tmp_path) == before
    assert not (tmp_path.parent / "evil.txt").exists()


def test_compression_bomb_stops_at_the_byte_limit(tmp_path):
    """200 MB of zeros in a few hundred KB: unpacking stops once 10 MB were actually written."""
    bomb = tmp_path / "bomb.zip"
    zeros = bytes(1 << 20)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf, \
            zf.open("zeros.bin", "w", force_zip64=True) as out:
        for _ in range(200):
            out.write(zeros)
    assert bomb.stat().st_size < 1_000_000
    with pytest.raises(TemplateRefused, match="compression bomb"):
        extract_archive(bomb, tmp_path / "out", SeedLimits(max_bytes=10 * 1024 * 1024))
    assert not (tmp_path / "out").exists()


def test_archive_with_too_many_members_is_refused(tmp_path):
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(10_001):
            zf.writestr(f"f{i}", "")
    with pytest.raises(TemplateRefused, match="more than 10000"):
        extract_archive(archive, tmp_path / "out", SeedLimits(max_files=10_000))
    assert not (tmp_path / "out").exists()


def test_not_an_archive_is_refused(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"this is not an archive" * 100)
    with pytest.raises(TemplateRefused, match=r"not a \.zip or \.tar"):
        extract_archive(junk, tmp_path / "out")


# ---------------------------------------------------------------------------------------------
# Seeding homes


def test_first_seed_copies_everything_and_records_the_marker(template, tmp_path):
    manifest = scan_template(template)
    home = tmp_path / "home"
    home.mkdir()
    result = seed_home(template, manifest, home, template="intro", version=1)
    assert scan_template(home) == manifest
    assert os.stat(home / "nb" / "run.sh").st_mode & 0o777 == 0o755
    assert CAFE + b".txt" in os.listdir(os.fsencode(home / "nb"))
    marker = read_marker(home)
    assert marker is not None and (marker.template, marker.version) == ("intro", "1")
    assert marker.manifest == manifest and result.marker_written
    assert set(marker.files) == {p for p, e in manifest.items() if e.kind == FILE}


def test_reseed_without_changes_reads_no_file_and_writes_nothing(template, tmp_path, monkeypatch):
    manifest = scan_template(template)
    home = tmp_path / "home"
    home.mkdir()
    seed_home(template, manifest, home, template="intro", version=1)
    before = snapshot(home)
    hashed: list[str] = []
    real = seeding._hash_at
    monkeypatch.setattr(seeding, "_hash_at", lambda fd, name, st: hashed.append(name) or real(fd, name, st))
    result = seed_home(template, manifest, home, template="intro", version=1)
    assert hashed == [] and result.plan.writes() == [] and not result.marker_written
    assert snapshot(home) == before
    # a student edit is noticed (its stat changed) and that file alone is read
    write(home / "README.md", "# my notes\n")
    result = seed_home(template, manifest, home, template="intro", version=1)
    assert hashed == ["README.md"]
    assert result.plan.decisions("README.md")[0].reason == STUDENT_MODIFIED


def test_reseed_v2_follows_the_rules(template, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    seed_home(template, scan_template(template), home, template="intro", version=1)
    # the student works
    write(home / "nb" / "lab1.ipynb", '{"cells": ["mine"]}')
    os.unlink(home / "données" / "é.csv")
    os.unlink(home / "README.md")
    os.mkdir(home / "README.md")  # file -> folder, by the student
    # the teacher publishes v2
    v2 = tmp_path / "v2"
    write(v2 / "README.md", "# Lab v2\n")
    write(v2 / "nb" / "lab1.ipynb", '{"cells": ["v2"]}')
    write(v2 / "nb" / "run.sh", "#!/bin/sh\necho v2\n", 0o755)
    write(v2 / "nb" / "lab2.ipynb", "{}")
    write(v2 / "données" / "é.csv", "a,b\n3,4\n")
    write(v2 / "empty" / "now-a-file-inside", "x")
    write(os.path.join(os.fsencode(v2), b"nb", CAFE + b".txt"), "latin-1 name v2")
    result = seed_home(v2, scan_template(v2), home, template="intro", version=2)
    reasons = {a.path: a.reason for a in result.plan.actions}
    assert (home / "nb" / "lab1.ipynb").read_text() == '{"cells": ["mine"]}'  # kept
    assert (home / "nb" / "lab1.template-v2.ipynb").read_text() == '{"cells": ["v2"]}'  # saved beside
    assert (home / "nb" / "run.sh").read_text().endswith("v2\n")  # untouched by student: updated
    assert os.stat(home / "nb" / "run.sh").st_mode & 0o111
    assert (home / "nb" / "lab2.ipynb").exists()  # new: added
    assert not (home / "données" / "é.csv").exists()  # deleted by the student: stays deleted
    assert (home / "README.md").is_dir() and (home / "README.template-v2.md").read_text() == "# Lab v2\n"
    assert (home / "empty" / "now-a-file-inside").exists()
    cafe = os.path.join(os.fsencode(home / "nb"), CAFE + b".txt")
    assert Path(os.fsdecode(cafe)).read_text() == "latin-1 name v2"
    assert reasons["données/é.csv"] == "student_deleted" and reasons["nb/lab1.ipynb"] == STUDENT_MODIFIED
    assert read_marker(home).version == "2"
    # v3 removes a file: the student's copy is left alone
    os.unlink(v2 / "nb" / "lab2.ipynb")
    seed_home(v2, scan_template(v2), home, template="intro", version=3)
    assert (home / "nb" / "lab2.ipynb").exists()


def test_planted_symlink_in_home_is_never_followed(template, tmp_path, outside):
    """home/nb -> /tmp/outside: the template's nb/ goes beside it; outside nothing changes."""
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(outside, home / "nb")
    os.symlink(outside / "secret", home / "README.md")
    before = snapshot(outside)
    result = seed_home(template, scan_template(template), home, template="intro", version=1)
    assert snapshot(outside) == before
    assert os.readlink(home / "nb") == str(outside)
    assert os.readlink(home / "README.md") == str(outside / "secret")
    assert (home / "nb.template-v1" / "lab1.ipynb").read_text() == '{"cells": []}'
    assert (home / "README.template-v1.md").read_text() == "# Lab\n"
    assert any(a.conflict for a in result.plan.actions)


def test_symlink_swapped_in_after_the_scan_is_not_followed(template, tmp_path, outside):
    """The race: nb/ was a folder when planned, is a symlink when applied."""
    home = tmp_path / "home"
    home.mkdir()
    manifest = scan_template(template)
    (home / "nb").mkdir()
    decided = plan(None, manifest, scan_home(home, home_paths(None, manifest, 1)), version=1)
    os.rmdir(home / "nb")
    os.symlink(outside, home / "nb")
    before = snapshot(outside)
    result = apply(decided, template, home)
    assert snapshot(outside) == before
    assert {a.target for a, _ in result.skipped} >= {"nb/lab1.ipynb", "nb/run.sh"}
    assert (home / "README.md").exists()


def test_symlinked_marker_folder_stops_seeding_before_any_change(template, tmp_path, outside):
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(outside, home / ".classhub")
    before = snapshot(tmp_path)
    with pytest.raises(HomeError, match="not a folder"):
        seed_home(template, scan_template(template), home, template="intro", version=1)
    assert snapshot(tmp_path) == before


def test_a_home_that_is_a_link_is_refused_before_any_change(template, tmp_path, outside):
    """Seeding runs as root: a home replaced by a link to another folder is never written."""
    home = tmp_path / "home"
    os.symlink(outside, home)
    before = snapshot(tmp_path)
    with pytest.raises(HomeError, match="not a folder classhub can open"):
        seed_home(template, scan_template(template), home, template="intro", version=1)
    assert snapshot(tmp_path) == before


def test_scan_home_reports_symlinks_and_does_not_look_behind_them(tmp_path, outside):
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(outside, home / "nb")
    os.mkfifo(home / "pipe")
    found = scan_home(home, ["nb", "nb/lab1.ipynb", "pipe", "missing", "missing/x"])
    assert dict(found) == {"nb": found["nb"], "pipe": found["pipe"]}
    assert found["nb"].kind == SYMLINK and found["pipe"].kind == SPECIAL


def test_damaged_marker_means_first_seed_rules(template, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write(home / "README.md", "mine")
    write(home / MARKER_PATH, "{ not json")
    seed_home(template, scan_template(template), home, template="intro", version=1)
    assert (home / "README.md").read_text() == "mine"
    assert (home / "README.template-v1.md").read_text() == "# Lab\n"


def test_created_files_belong_to_the_student(template, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must run the suite as root: chown to another user needs it")
        pytest.skip("chown to another user needs root (the --system-users mode runs as root)")
    seed_home(template, scan_template(template), home, template="intro", version=1, uid=4321, gid=4322)
    for path in [home / "nb", home / "nb" / "lab1.ipynb", home / ".classhub", home / MARKER_PATH]:
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (4321, 4322), path


@pytest.mark.parametrize("made_by", ["write_marker", "link_into_home"])
def test_a_hard_link_swapped_in_for_a_new_folder_is_not_handed_to_the_student(tmp_path, monkeypatch,
                                                                              made_by):
    """Root makes a folder in a student's home and gives it to them (``~/.classhub`` for the
    seeding marker, ``~/data`` for the courses' data). Between the ``mkdir`` and the ``chown``
    the student, who owns the home, puts a hard link to a file in its place (here replayed at
    that very moment); chown by name would make the file theirs (security rule 7)."""
    from hub_ext.backends import coursedata

    require_root()
    home = tmp_path / "home"
    home.mkdir()
    victim = tmp_path / "shadow"  # a file the student may read and write, not theirs to own
    victim.write_text("root's\n")
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        if dir_fd is not None and os.path.samestat(os.fstat(dir_fd), os.stat(home)):
            os.rmdir(path, dir_fd=dir_fd)
            os.link(victim, path, dst_dir_fd=dir_fd)  # what the student does in the window

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    if made_by == "write_marker":
        with pytest.raises(seeding.HomeError):  # the marker's folder is no folder: nothing written
            seeding.write_marker(home, Marker("cs101/lab1", "v1", Manifest()), uid=4321, gid=4322)
    else:
        data = tmp_path / "data"
        data.mkdir()
        settings = coursedata.ClasshubCourseData(root_dir=str(data))
        assert coursedata.link_into_home(home, settings, {"cs101": "student"}, uid=4321, gid=4322)
    st = os.stat(victim)
    assert (st.st_uid, st.st_gid) == (0, 0), "root handed the linked file to the student"


# ---------------------------------------------------------------------------------------------
# Property: the real file system does what the pure plan says, and re-applying changes nothing

_CONTENT = {hashlib.sha256(t.encode()).hexdigest(): t.encode() for t in ["one", "two", "three", "mine"]}


def _realize(root: bytes, manifest: Manifest, outside: bytes) -> None:
    for path, entry in sorted(manifest.items(), key=lambda pe: pe[0].split("/")):
        full = os.path.join(root, os.fsencode(path))
        if entry.kind == DIR:
            os.mkdir(full)
        elif entry.kind == FILE:
            with open(full, "wb") as out:
                out.write(_CONTENT[entry.digest])
            os.chmod(full, 0o755 if entry.executable else 0o644)
        elif entry.kind == SYMLINK:
            os.symlink(outside, full)
        else:
            os.mkfifo(full)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_property_apply_matches_the_plan_and_is_idempotent(scenario):
    base, new, home_manifest = scenario
    with tempfile.TemporaryDirectory() as tmp:
        root = os.fsencode(tmp)
        template, home, outside = (os.path.join(root, n) for n in (b"t", b"h", b"o"))
        for folder in (template, home, outside):
            os.mkdir(folder)
        with open(os.path.join(outside, b"keep"), "wb") as out:
            out.write(b"outside")
        _realize(template, new, outside)
        _realize(home, home_manifest, outside)
        paths = home_paths(base, new, 2)
        found = scan_home(home, paths)
        assert found == Manifest({p: e for p, e in home_manifest.items() if p in set(paths)})
        decided = plan(base, new, found, version=2)
        before_outside = snapshot(Path(os.fsdecode(outside)))
        result = apply(decided, template, home)
        assert result.skipped == []
        assert scan_home(home, paths) == decided.expected_home(found)
        after = snapshot(Path(os.fsdecode(home)))
        again = apply(decided, template, home)
        assert again.skipped == [] and snapshot(Path(os.fsdecode(home))) == after
        assert snapshot(Path(os.fsdecode(outside))) == before_outside
