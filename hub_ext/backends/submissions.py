"""Submissions on a real file system: snapshot a student's assignment folder, keep it, zip it.

Why here (docs/architecture.md, rule 2): reading a home is work on local files, which only the
backends do. The snapshot is the seeding engine's discipline turned around
(hub_ext.backends.seeding): the service may run as root (``--system-users``) and the folder is
the student's, so nothing the student planted may make it read what the student could not:

- the home is opened once; below it every folder is opened one component at a time with
  ``O_NOFOLLOW`` relative to its parent's descriptor (seeding's ``_Walker``), so a link swapped
  in anywhere on the path is never followed;
- symbolic links and special files (FIFOs, sockets, devices) are not taken, and neither is a
  file or folder the home's owner does not own (a hard link to someone else's file): each is
  named in the submission's ``skipped`` list, so the student sees what was left out;
- each file is opened ``O_NOFOLLOW|O_NONBLOCK`` and checked with ``fstat`` to be the regular
  file that was listed; bytes are counted as actually read, so a file growing while it is copied
  stops at the limit;
- ``folder`` (the assignment's) is checked as a clean relative path (no ``..``, no absolute
  path) before anything is opened; names inside are taken as they are, byte-exact.

Snapshots are written into the submissions storage, a folder of the service's own (mode 0700:
students never read each other's work through it); each snapshot lands in a fresh folder under a
temporary name and is renamed into place whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traitlets import Integer, TraitError, Unicode, validate
from traitlets.config import Configurable

from hub_ext.backends.seeding import _O_DIR, _O_READ, HomeError, _open_home, _Walker
from hub_ext.core.seeding import TemplateRefused, check_path
from hub_ext.envtraits import apply_env

__all__ = [
    "ClasshubAssignments",
    "Snapshot",
    "SnapshotLimits",
    "SnapshotRefused",
    "SubmissionStorage",
    "snapshot_folder",
]

_CHUNK = 1 << 20
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class SnapshotRefused(ValueError):
    """The folder cannot be submitted as it is; the message says what to change."""


@dataclass(frozen=True)
class SnapshotLimits:
    """Upper bounds of one submission, so one student cannot fill the service's disk."""

    max_files: int = 2_000  # files and folders together
    max_bytes: int = 512 * 1024**2  # bytes of file content actually read
    max_depth: int = 32  # path components


@dataclass
class Snapshot:
    """What a snapshot took: counts, and the entries left out with the reason."""

    files: int = 0
    folders: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


class ClasshubAssignments(Configurable):
    """Assignment settings of the classhub service (``c.ClasshubAssignments.<name>``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        apply_env(self, given=kwargs)

    storage_dir = Unicode(
        "", config=True,
        help="""Folder where the service keeps submissions (local mode; ``classhub local`` and
        ``configure()`` with a data dir set it to ``<data-dir>/submissions``). Made mode 0700:
        only the service's account reads it.""",
    ).tag(env="CLASSHUB_SUBMISSIONS_DIR")
    max_bytes = Integer(
        SnapshotLimits.max_bytes, config=True,
        help="Largest submission, in bytes of file content (default 512 MiB); a larger folder is "
        "refused with a sentence and nothing is kept.",
    )
    max_files = Integer(
        SnapshotLimits.max_files, config=True,
        help="Most files and folders in one submission (default 2000).",
    )
    max_depth = Integer(
        SnapshotLimits.max_depth, config=True,
        help="Deepest folder nesting in a submission (default 32).",
    )

    competition_max_bytes = Integer(
        8 * 1024 * 1024, config=True,
        help="Largest competition CSV (hidden labels or a predictions file), in bytes (default "
        "8 MiB); a larger upload is refused with a sentence and nothing is kept.",
    )
    competition_max_rows = Integer(
        200_000, config=True,
        help="Most rows of a competition CSV (default 200000).",
    )
    competition_notebook_max_bytes = Integer(
        32 * 1024 * 1024, config=True,
        help="Largest notebook a student submits to a competition (it runs as a job and writes the "
        "predictions file), in bytes (default 32 MiB); a larger one is refused with a sentence.",
    )

    @validate("max_bytes", "max_files", "max_depth", "competition_max_bytes", "competition_max_rows",
              "competition_notebook_max_bytes")
    def _at_least_one(self, proposal: Any) -> int:
        if proposal.value < 1:
            raise TraitError(f"{proposal.trait.name} must be at least 1")
        return proposal.value

    @property
    def limits(self) -> SnapshotLimits:
        return SnapshotLimits(max_files=self.max_files, max_bytes=self.max_bytes, max_depth=self.max_depth)

    def storage(self) -> SubmissionStorage:
        if not self.storage_dir:
            raise SnapshotRefused("Submissions are not kept on this hub: an admin sets "
                                  "c.ClasshubAssignments.storage_dir")
        return SubmissionStorage(self.storage_dir)


def submission_location(assignment_id: int, student_key: str) -> str:
    """Where a new snapshot goes, relative to the storage root: ids and a random tail only (the
    student's name appears as a hex key, never as a path of their choosing)."""
    return f"a{int(assignment_id)}/{student_key}/{secrets.token_hex(8)}"


class SubmissionStorage:
    """Snapshots under ``root``: ``a<assignment id>/<student key>/<random>/`` each."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _ensure_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def take(self, home: str | os.PathLike[str], folder: str, location: str,
             limits: SnapshotLimits) -> Snapshot:
        """Snapshot ``folder`` of ``home`` into ``location``; SnapshotRefused leaves nothing."""
        self._ensure_root()
        target = self.root / location
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = target.with_name(target.name + ".partial")
        try:
            taken = snapshot_folder(home, folder, staging, limits)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return taken

    def staging(self) -> Path:
        """A fresh folder to stage a snapshot read through a server (Kubernetes), inside the
        storage (so keeping it is a rename)."""
        self._ensure_root()
        base = self.root / ".staging"
        base.mkdir(mode=0o700, exist_ok=True)
        path = base / secrets.token_hex(8)
        path.mkdir(mode=0o700)
        return path

    @staticmethod
    def discard(staged: Path) -> None:
        shutil.rmtree(staged, ignore_errors=True)

    def keep_staged(self, files: Path, location: str, size: int) -> Snapshot:
        """Move a staged tree (written by hub_ext.backends.templates.Stager: no links in it)
        into ``location``; what it holds, counted."""
        target = self.root / location
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        files.rename(target)
        taken = Snapshot(bytes=size)
        for path in target.rglob("*"):
            if path.is_dir():
                taken.folders += 1
            else:
                taken.files += 1
        return taken

    def files(self, location: str) -> Path:
        return self.root / location

    def listing(self, location: str) -> list[dict[str, Any]]:
        """The snapshot's files (path, bytes), in path order; nothing in it is a link."""
        base = self.files(location)
        found = []
        for path in sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink()):
            found.append({"path": path.relative_to(base).as_posix(), "bytes": path.stat().st_size})
        return found

    def zip_into(self, out: Any, entries: Iterable[tuple[str, str]]) -> None:
        """Write a zip of snapshots to ``out``: each (prefix in the archive, location)."""
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
            for prefix, location in entries:
                base = self.files(location)
                for path in sorted(base.rglob("*")):
                    if path.is_file() and not path.is_symlink():
                        archive.write(path, f"{prefix}/{path.relative_to(base).as_posix()}")


def _owned(st: os.stat_result, owner: int) -> bool:
    return st.st_uid == owner


def snapshot_folder(home: str | os.PathLike[str], folder: str, dest: str | os.PathLike[str],
                    limits: SnapshotLimits) -> Snapshot:
    """Copy ``home/folder`` into the new folder ``dest`` (see the module doc for what is taken).

    SnapshotRefused: ``folder`` is not a clean relative path, is missing or not a folder, or the
    content is over ``limits``; the message names the path and the limit.
    """
    try:
        check_path(folder)
    except TemplateRefused as e:
        raise SnapshotRefused(f"The assignment's folder {e}") from None
    parts = folder.split("/")
    try:
        root_fd = _open_home(home)
    except HomeError:
        raise SnapshotRefused("Your home folder does not exist yet: start the assignment first") from None
    walker = _Walker(root_fd)
    owner = os.fstat(root_fd).st_uid
    try:
        try:
            top = walker.dir_fd(parts)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise SnapshotRefused(f"There is no folder {folder!r} in your home (a link is not "
                                      "followed): start the assignment, or put your work there") from None
            raise
        os.mkdir(dest, 0o700)
        out_fd = os.open(dest, _O_DIR)
        try:
            taken = Snapshot()
            _copy_tree(top, out_fd, "", 1, owner, limits, taken)
            return taken
        finally:
            os.close(out_fd)
    finally:
        walker.close()


def _entries(fd: int) -> Iterator[tuple[str, os.stat_result]]:
    for name in sorted(os.listdir(fd)):
        try:
            yield name, os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we looked: it is not part of the submission


def _copy_tree(src_fd: int, dst_fd: int, prefix: str, depth: int, owner: int, limits: SnapshotLimits,
               taken: Snapshot) -> None:
    for name, st in _entries(src_fd):
        rel = f"{prefix}{name}"
        if stat.S_ISLNK(st.st_mode):
            taken.skipped.append(f"{rel} (a symbolic link)")
            continue
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            taken.skipped.append(f"{rel} (not a file or folder)")
            continue
        if not _owned(st, owner):
            taken.skipped.append(f"{rel} (not owned by you)")
            continue
        if taken.files + taken.folders + 1 > limits.max_files:
            raise SnapshotRefused(f"{rel!r}: more than {limits.max_files} files and folders; "
                                  "submit a smaller folder")
        if depth > limits.max_depth:
            raise SnapshotRefused(f"{rel!r}: deeper than {limits.max_depth} folders")
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, _O_DIR, dir_fd=src_fd)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    taken.skipped.append(f"{rel} (changed while it was read)")
                    continue
                raise
            try:
                os.mkdir(name, 0o700, dir_fd=dst_fd)
                out = os.open(name, _O_DIR, dir_fd=dst_fd)
                try:
                    taken.folders += 1
                    _copy_tree(sub, out, rel + "/", depth + 1, owner, limits, taken)
                finally:
                    os.close(out)
            finally:
                os.close(sub)
            continue
        _copy_file(src_fd, dst_fd, name, rel, st, owner, limits, taken)


def _copy_file(src_fd: int, dst_fd: int, name: str, rel: str, st: os.stat_result, owner: int,
               limits: SnapshotLimits, taken: Snapshot) -> None:
    try:
        fd = os.open(name, _O_READ, dir_fd=src_fd)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
            taken.skipped.append(f"{rel} (changed while it was read)")
            return
        raise
    try:
        now = os.fstat(fd)
        if (not stat.S_ISREG(now.st_mode) or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev)
                or not _owned(now, owner)):
            taken.skipped.append(f"{rel} (changed while it was read)")
            return
        out = os.open(name, _O_CREATE, 0o600, dir_fd=dst_fd)
        with open(fd, "rb", buffering=0, closefd=False) as reader, open(out, "wb") as writer:
            while chunk := reader.read(_CHUNK):
                taken.bytes += len(chunk)
                if taken.bytes > limits.max_bytes:
                    raise SnapshotRefused(f"{rel!r}: the folder holds over {limits.max_bytes} bytes; "
                                          "remove large files (data sets, checkpoints) and submit again")
                writer.write(chunk)
        taken.files += 1
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
