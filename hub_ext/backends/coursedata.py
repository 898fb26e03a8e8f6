"""Course data folders on a file system, the settings both run modes share, and storage sizes.

Why one module for both run modes: a course's data folder is a folder of files under one root,
whether that root is under the local data dir or on the Kubernetes course-data volume that the
hub pod mounts. The layout is::

    <root>/                       0711, the service's: members pass through, nobody lists it
    <root>/<course folder>/...    the files (0444) and folders (0555) of one course
    <root>/.classhub-partial/     uploads in progress (0700): nothing half-written is ever in a
                                  course's folder

Who writes: only the classhub service, for the course's teachers and TAs (hub_ext.core.authz,
WRITE_COURSE_DATA). Members read it at ``~/data/<course folder>`` in their server: a link the
local spawner makes at spawn (`link_into_home`), a mount on Kubernetes (`pod_volumes`: read-only
for students, read-write for staff). How the system keeps students from writing (docs/teachers/
course-data.md, docs/admins/course-data.md):

- local mode with ``--system-users``: the service runs as root, each course folder is
  ``root:<course group>`` mode 0750 (files 0444, folders 0555), and a member's server process
  gets the course's Unix group (`ensure_course_group` in the local backend) as a supplementary
  group: students of other courses cannot even enter it, members only read.
- local mode with one account: every server runs as the service's own account, so no file mode
  can stop a determined member (a terminal can ``chmod``); files and folders are read-only
  (0444/0555) so JupyterLab refuses to change or delete them, and the service lifts the write
  bit of one folder only while it writes into it. A read-only bind mount is impossible without
  privileges; the docs say so.

Every step below works through directory descriptors opened with ``O_NOFOLLOW``: an upload path is
checked by hub_ext.core.coursedata (no ``..``, no absolute path) and a link planted anywhere on
the way is refused, never followed. An upload is written to a partial file first and renamed into
place whole (``rename`` replaces a link or a hard link at the name instead of writing through it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import escapism
from traitlets import Bool, Dict, Float, Integer, Unicode
from traitlets.config import Configurable

from hub_ext.backends.seeding import mkdir_owned, walk_tree
from hub_ext.core.coursedata import (
    RESERVED_PREFIX,
    DataExists,
    DataFull,
    DataPathError,
    Range,
    check_data_path,
    effective_limit,
    human_bytes,
    over_limit,
)

__all__ = [
    "ClasshubCourseData",
    "CourseDataStore",
    "Upload",
    "UploadConflict",
    "folder_name",
    "link_into_home",
    "pod_volumes",
    "tree_size",
]

PARTIAL = f"{RESERVED_PREFIX}-partial"
FILE_MODE, DIR_MODE = 0o444, 0o555
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SAFE_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789")
_STAFF = frozenset({"teacher", "ta"})


class ClasshubCourseData(Configurable):
    """Course data folders and the storage view (issue 35), shared by the service and the spawners.

    Set them as ``c.ClasshubCourseData.<name>``; ``configure()`` hands the section to the classhub
    service (hub_ext.envtraits).
    """

    root_dir = Unicode(
        "", config=True,
        help="""Folder holding one data folder per course.

        ``configure()`` sets it to ``<data-dir>/course-data`` in local mode. On Kubernetes, where
        the hub pod mounts the course-data volume (read-write): uploads from the course page are
        written there. Empty: no course data folders.""",
    )
    max_bytes = Integer(
        50 * 1024**3, config=True,
        help="""Largest a course's data folder may grow, in bytes (default 50 GiB); 0: no limit.
        An upload that would pass it is refused with the sizes.""",
    )
    course_max_bytes = Dict(
        value_trait=Integer(), config=True,
        help="""Per-course data folder limits in bytes (course name -> bytes; 0: no limit), over
        ``max_bytes``. Set by hub admins.""",
    )
    home_limit_bytes = Integer(
        0, config=True,
        help="""Size of a home at which its owner is warned (from 90 %) in the JupyterLab panel and
        the course's teachers see it marked on the course page; 0: no limit.""",
    )
    course_home_limit_bytes = Dict(
        value_trait=Integer(), config=True,
        help="Per-course home size limits in bytes (course name -> bytes), over ``home_limit_bytes``.",
    )
    homes_dir = Unicode(
        "", config=True,
        help="""Local mode: the folder of the users' homes, whose sizes the course page shows
        (``configure()`` sets ``<data-dir>/homes``). Empty: home sizes are not shown.""",
    )
    kubelet_home_sizes = Bool(
        True, config=True,
        help="""Kubernetes: show the size of each running server's home, as each node's kubelet
        measures it (its stats summary, read through the API server: the ``nodes/proxy``
        permission of helm-values/home-sizes-rbac.yaml). A stopped server's home shows "-".
        False: no home sizes on Kubernetes (and no need for that permission).""",
    )
    system_groups = Bool(
        False, config=True,
        help="""Local mode with system users: each course folder belongs to a Unix group
        ``<group_prefix><course>`` that members' servers get, mode 0750 (``configure()`` sets it
        with ``system_users``).""",
    )
    group_prefix = Unicode("classhub-", config=True, help="Prefix of the course groups' Unix names.")
    size_cache_seconds = Float(
        60.0, config=True,
        help="How long a computed folder or home size is reused before it is computed again.",
    )
    partial_max_age = Float(
        86400.0, config=True,
        help="""Seconds an unfinished upload is kept for its sender to resume; older partial files
        are removed when the next upload begins.""",
    )
    strict_modes = Bool(
        True, config=True,
        help="""Keep files 0444 and folders 0555, so that servers running as the service's own
        account cannot change them (local mode). ``configure()`` turns it off on Kubernetes, where
        students' mounts are read-only and teachers' and TAs' servers write through theirs
        (files 0644, folders 0755).""",
    )
    home_folder = Unicode(
        "data", config=True,
        help="""The folder in each home (local mode) or under the home mount (Kubernetes) where the
        courses' data folders appear, one per course: ``~/data/<course>``.""",
    )
    volume = Dict(
        config=True,
        help="""Kubernetes: the pod volume source of the course data, without its name, e.g.
        ``{"nfs": {"server": "nfs.example.edu", "path": "/exports/courses"}}`` or
        ``{"persistentVolumeClaim": {"claimName": "course-data"}}``; each course is its
        ``subPath`` (the course's folder). A ``{course}`` in it (say a ``claimName`` of
        ``course-data-{course}``) makes one volume per course, mounted whole. Empty: no mount.""",
    )
    copy_max_files = Integer(
        20_000, config=True,
        help="""Most files and folders one "copy a folder from my server" brings into a course's
        data folder (docs/teachers/course-data.md).""",
    )
    copy_max_bytes = Integer(
        0, config=True,
        help="""Most bytes one copy from a server brings in; 0: only the course's data folder limit
        (what is left of it) bounds a copy.""",
    )
    copy_max_depth = Integer(32, config=True, help="Deepest folder nesting a copy from a server brings in.")
    mount_path = Unicode(
        "/home/jovyan/data", config=True,
        help="Kubernetes: where the courses' folders appear in user pods (``<mount_path>/<course>``).",
    )

    def limit_of(self, course: str, own: int | None = None) -> int | None:
        """The data folder limit of ``course`` in bytes (None: no limit): ``own``, the limit a hub
        admin set for the course (0: none), over the configured one."""
        value = self.course_max_bytes.get(course, self.max_bytes)
        return effective_limit(own, value if value and value > 0 else None)

    def home_limit_of(self, course: str) -> int | None:
        value = self.course_home_limit_bytes.get(course, self.home_limit_bytes)
        return value if value and value > 0 else None


def folder_name(course: str, max_length: int = 64) -> str:
    """The folder of ``course``: lowercase, with unsafe characters escaped as ``-xx`` (as the
    local backend's home folders and KubeSpawner's escaped slugs), a hash suffix when too long."""
    escaped = escapism.escape(course, safe=_SAFE_CHARS, escape_char="-").lower()
    if not escaped:
        raise DataPathError("an empty course name has no data folder")
    if len(escaped) > max_length:
        escaped = f"{escaped[: max_length - 9]}-{hashlib.sha256(course.encode()).hexdigest()[:8]}"
    return escaped


class UploadConflict(Exception):
    """A chunk that does not start where the kept part ends; ``offset`` is where it does."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass
class _Cached:
    at: float
    value: Any


class SizeCache:
    """Sizes computed at most once per ``ttl`` seconds per key (called from worker threads)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._values: dict[str, _Cached] = {}

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and time.monotonic() - hit.at < self.ttl:
            return hit.value
        value = compute()
        with self._lock:
            self._values[key] = _Cached(time.monotonic(), value)
        return value

    def forget(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)


def _refuse_link(path: str) -> DataPathError:
    return DataPathError(f"{path!r} goes through a link or a file where a folder should be; "
                         "choose another path")


@contextlib.contextmanager
def _writable(fd: int) -> Iterator[None]:
    """Lift the owner's write bit of the folder ``fd`` while the service writes into it (the
    single-account mode keeps folders 0555; root, in system-users mode, needs no bit)."""
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if os.geteuid() != 0 and not mode & stat.S_IWUSR:
        os.fchmod(fd, mode | stat.S_IWUSR)
        try:
            yield
        finally:
            os.fchmod(fd, mode)
    else:
        yield


def tree_size(root_fd: int) -> tuple[int, int]:
    """(bytes, files) of the regular files under the folder ``root_fd``, links never followed,
    hard links counted once. The tree may be a student's home, changing under the walk:
    `walk_tree` opens nothing a link names and enters at most ``WALK_MAX_DEPTH`` levels."""
    seen: set[tuple[int, int]] = set()
    total = files = 0
    for _, _, names, fd in walk_tree(root_fd):
        for name in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total, files = total + st.st_size, files + 1
    return total, files


def size_of(path: Path) -> int | None:
    """Bytes under ``path`` (a folder; None when it is missing, a link or unreadable)."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        return tree_size(fd)[0]
    finally:
        os.close(fd)


class CourseDataStore:
    """The course data folders under ``root`` (see the module doc). Every method does file work:
    call it from a worker thread (docs/architecture.md, rule 7)."""

    def __init__(self, settings: ClasshubCourseData,
                 group_of: Callable[[str], int | None] | None = None,
                 own_limit: Callable[[str], int | None] | None = None) -> None:
        if not settings.root_dir:
            raise DataPathError("This hub keeps no course data folders; a hub admin sets "
                                "c.ClasshubCourseData.root_dir")
        self.settings = settings
        self.root = Path(settings.root_dir).resolve()
        self.group_of = group_of or (lambda course: None)
        # the course's own limit (the database's, set by hub admins), read at each check
        self.own_limit = own_limit or (lambda course: None)
        self.sizes = SizeCache(settings.size_cache_seconds)
        self.file_mode, self.dir_mode = (FILE_MODE, DIR_MODE) if settings.strict_modes else (0o644, 0o755)
        self._lock = threading.Lock()  # one change at a time: the write bit is lifted per folder

    # -- opening folders ----------------------------------------------------------------------
    def _root_fd(self) -> int:
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        fd = os.open(self.root, _DIR_FLAGS)
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o711 and os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o711)
        return fd

    def _course_fd(self, course: str, create: bool) -> int:
        """The course's folder, made (with its group and mode) when ``create``."""
        name = folder_name(course)
        root = self._root_fd()
        try:
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=root)
            except FileNotFoundError:
                if not create:
                    raise
            gid = self.group_of(course)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=root)
            fd = os.open(name, _DIR_FLAGS, dir_fd=root)
            if gid is not None:
                os.fchown(fd, -1, gid)
                os.fchmod(fd, 0o750)
            else:
                os.fchmod(fd, self.dir_mode)
            return fd
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _refuse_link(name) from None
            raise
        finally:
            os.close(root)

    def ensure(self, course: str) -> Path:
        """Make the course's folder (the spawner links it before anything is uploaded)."""
        os.close(self._course_fd(course, create=True))
        return self.root / folder_name(course)

    def _walk_to(self, course_fd: int, parts: tuple[str, ...], create: bool, path: str) -> int:
        """The folder ``parts`` under the course's folder (a new descriptor), made when ``create``."""
        fd = os.dup(course_fd)
        try:
            for part in parts:
                try:
                    sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise DataPathError(f"No folder {path!r} in the course's data folder") from None
                    with _writable(fd), contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    os.fchmod(sub, self.dir_mode)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _refuse_link(path) from None
                    raise
                os.close(fd)
                fd = sub
            return fd
        except BaseException:
            os.close(fd)
            raise

    # -- reading --------------------------------------------------------------------------------
    def listing(self, course: str, max_entries: int = 5000) -> dict[str, Any]:
        """The course's files and folders (links are not listed: only the service writes here)."""
        try:
            fd = self._course_fd(course, create=False)
        except FileNotFoundError:
            return {"files": [], "bytes": 0, "count": 0, "truncated": False}
        entries: list[dict[str, Any]] = []
        total = count = 0
        truncated = False
        try:
            for top, dirs, names, dfd in walk_tree(fd):
                dirs.sort()
                prefix = "" if top == "." else top[2:] + "/"
                for name in sorted(dirs + names):
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    kind = ("folder" if stat.S_ISDIR(st.st_mode)
                            else "file" if stat.S_ISREG(st.st_mode) else None)
                    if kind is None:
                        continue
                    if kind == "file":
                        total, count = total + st.st_size, count + 1
                    if len(entries) < max_entries:
                        entries.append({"path": prefix + name, "kind": kind,
                                        "size": st.st_size if kind == "file" else 0,
                                        "modified": int(st.st_mtime)})
                    else:
                        truncated = True
        finally:
            os.close(fd)
        entries.sort(key=lambda e: e["path"].split("/"))
        self.sizes.get(course, lambda: total)  # a fresh listing is a fresh size
        return {"files": entries, "bytes": total, "count": count, "truncated": truncated}

    def size(self, course: str) -> int:
        """The bytes of the course's files (cached, see ``size_cache_seconds``)."""

        def compute() -> int:
            try:
                fd = self._course_fd(course, create=False)
            except FileNotFoundError:
                return 0
            try:
                return tree_size(fd)[0]
            finally:
                os.close(fd)

        return self.sizes.get(course, compute)

    # -- changing -------------------------------------------------------------------------------
    def make_folder(self, course: str, path: str) -> None:
        parts = check_data_path(path)
        with self._lock:
            course_fd = self._course_fd(course, create=True)
            try:
                os.close(self._walk_to(course_fd, parts, create=True, path=path))
            finally:
                os.close(course_fd)

    def delete(self, course: str, path: str) -> str:
        """Remove a file or a folder (with what it holds); "file" or "folder"."""
        parts = check_data_path(path)
        with self._lock:
            try:
                course_fd = self._course_fd(course, create=False)
            except FileNotFoundError:
                raise DataPathError(f"No {path!r} in the course's data folder") from None
            try:
                parent = self._walk_to(course_fd, parts[:-1], create=False, path=path)
            finally:
                os.close(course_fd)
            try:
                try:
                    st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    raise DataPathError(f"No {path!r} in the course's data folder") from None
                with _writable(parent):
                    if stat.S_ISDIR(st.st_mode):
                        _remove_tree(parent, parts[-1])
                        kind = "folder"
                    else:
                        os.unlink(parts[-1], dir_fd=parent)
                        kind = "file"
            finally:
                os.close(parent)
        self.sizes.forget(course)
        return kind

    def room_for(self, course: str, adding: int) -> None:
        """Refuse (DataPathError) when ``adding`` bytes would pass the course's limit."""
        message = over_limit(self.size(course), adding, self.limit(course), course)
        if message:
            raise DataFull(message)

    def limit(self, course: str) -> int | None:
        """The limit that applies to ``course`` now (None: none)."""
        return self.settings.limit_of(course, self.own_limit(course))

    # -- copies of a folder from a staff member's server (docs/teachers/course-data.md) -----------
    def copy_staging(self) -> Path:
        """A fresh folder name for a copy in progress, inside the partial folder (0700, on the
        same file system: keeping the copy is one rename). The caller creates it."""
        os.close(self._partial_fd())
        return self.root / PARTIAL / f"copy-{secrets.token_hex(12)}"

    @staticmethod
    def discard(staged: Path) -> None:
        """Remove a copy that was not kept (what it holds is the service's own, no links)."""
        if staged.exists() and not staged.is_symlink():
            with contextlib.suppress(OSError):
                _make_owner_writable(staged)
            shutil.rmtree(staged, ignore_errors=True)

    def room_left(self, course: str) -> int | None:
        """Bytes the course's data folder may still grow by (None: no limit)."""
        limit = self.limit(course)
        return None if limit is None else max(0, limit - self.size(course))

    def place_folder(self, course: str, staged: Path, to: str) -> tuple[int, int]:
        """Put the staged folder (written by the service: no links in it) at ``to`` in the course's
        data folder, whole, with the course's modes and group; (bytes, files). DataExists when
        ``to`` is taken, DataFull over the limit: the staged folder stays for the caller to discard."""
        parts = check_data_path(to)
        gid = self.group_of(course)
        staged_fd = os.open(staged, _DIR_FLAGS)
        try:
            size, files = tree_size(staged_fd)
            for _, dirs, names, fd in walk_tree(staged_fd):
                for name in names:
                    if gid is not None:
                        os.chown(name, -1, gid, dir_fd=fd, follow_symlinks=False)
                    os.chmod(name, self.file_mode, dir_fd=fd, follow_symlinks=False)
                for name in dirs:  # a folder keeps its write bit until it is in place
                    if gid is not None:
                        os.chown(name, -1, gid, dir_fd=fd, follow_symlinks=False)
            with self._lock:
                self.sizes.forget(course)
                self.room_for(course, size)
                course_fd = self._course_fd(course, create=True)
                try:
                    parent = self._walk_to(course_fd, parts[:-1], create=True, path=to)
                finally:
                    os.close(course_fd)
                try:
                    with contextlib.suppress(FileNotFoundError):
                        os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                        raise DataExists(f"{to!r} already exists in the course's data folder; delete it "
                                         "first or copy to another name")
                    source = os.open(staged.parent, _DIR_FLAGS)
                    try:
                        with _writable(parent):
                            os.rename(staged.name, parts[-1], src_dir_fd=source, dst_dir_fd=parent)
                    finally:
                        os.close(source)
                finally:
                    os.close(parent)
            # in place: the folders lose their write bit (the files' modes were set above)
            for _, dirs, _, fd in walk_tree(staged_fd):
                for name in dirs:
                    os.chmod(name, self.dir_mode, dir_fd=fd, follow_symlinks=False)
            if gid is not None:
                os.fchown(staged_fd, -1, gid)
            os.fchmod(staged_fd, self.dir_mode)
        finally:
            os.close(staged_fd)
        self.sizes.forget(course)
        return size, files

    def upload(self, course: str, path: str, rng: Range | None) -> Upload:
        """Begin receiving a file (whole, or the chunk ``rng``); see `Upload`."""
        parts = check_data_path(path)
        total = rng.total if rng is not None else None
        if total is not None:
            self.room_for(course, total)
        self.sweep_partials()
        return Upload(self, course, path, parts, rng)

    def sweep_partials(self) -> int:
        """Remove partial files older than ``partial_max_age`` (uploads nobody resumed); how many."""
        fd = self._partial_fd()
        removed = 0
        cutoff = time.time() - self.settings.partial_max_age
        try:
            for entry in list(os.scandir(fd)):
                with contextlib.suppress(FileNotFoundError):
                    old = entry.stat(follow_symlinks=False).st_mtime < cutoff
                    if entry.is_file(follow_symlinks=False) and old:
                        os.unlink(entry.name, dir_fd=fd)
                        removed += 1
        finally:
            os.close(fd)
        return removed

    def _partial_fd(self) -> int:
        root = self._root_fd()
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(PARTIAL, 0o700, dir_fd=root)
            try:
                return os.open(PARTIAL, _DIR_FLAGS, dir_fd=root)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse_link(PARTIAL) from None
                raise
        finally:
            os.close(root)

    def partial_name(self, course: str, path: str, total: int) -> str:
        """The partial file of one ranged upload: the same course, path and size resume it."""
        return hashlib.sha256(f"{course}\0{path}\0{total}".encode("utf-8", "surrogateescape")).hexdigest()


def _make_owner_writable(path: Path) -> None:
    """Give the owner the write bit on every folder under ``path`` (so it can be removed)."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRWXU)
        for _, dirs, _, dfd in walk_tree(fd):
            for name in dirs:
                mode = stat.S_IMODE(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
                os.chmod(name, mode | stat.S_IRWXU, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(fd)


def no_room(room: int, limit: int | None, course: str) -> DataFull:
    """The refusal of a copy bigger than the ``room`` left under the course's ``limit``."""
    return DataFull(f"The folder is larger than the room left in the data folder of {course} "
                    f"({human_bytes(room)} of its {human_bytes(limit or 0)} limit); copy a smaller "
                    "folder, delete files first, or ask a hub admin to raise the course's limit")


def _remove_tree(parent: int, name: str) -> None:
    """Remove the folder ``name`` in ``parent`` and all it holds, through descriptors (a link
    inside is removed, never followed)."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        with _writable(fd):
            for entry in list(os.scandir(fd)):
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(fd, entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


class Upload:
    """One request's bytes of a file: ``write`` each chunk, then ``finish`` (placed whole when the
    file is complete) or ``abort`` (nothing of this request is kept). Whole uploads go to a fresh
    partial file; ranged ones to the partial file of (course, path, size), which a broken upload
    leaves for the next request to resume (``bytes */<total>`` asks where it ends)."""

    def __init__(self, store: CourseDataStore, course: str, path: str, parts: tuple[str, ...],
                 rng: Range | None) -> None:
        self.store, self.course, self.path, self.parts, self.rng = store, course, path, parts, rng
        self.received = 0
        self._dir = store._partial_fd()
        if rng is None:
            self.name = f"whole-{secrets.token_hex(16)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        else:
            self.name = store.partial_name(course, path, rng.total)
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self._fd = os.open(self.name, flags, 0o600, dir_fd=self._dir)
        except BaseException:
            os.close(self._dir)
            raise
        try:  # one request at a time writes a partial file (released when it is closed)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            kept = os.fstat(self._fd).st_size
            self.close()
            raise UploadConflict(kept, f"Another upload of {path!r} is in progress; wait for it, then "
                                       "resume") from None
        self.start = os.fstat(self._fd).st_size if rng is not None else 0
        if rng is not None and rng.first is not None and rng.first != self.start:
            if rng.first == 0:  # the client starts over
                os.ftruncate(self._fd, 0)
                self.start = 0
            else:
                kept = self.start
                self.close()
                raise UploadConflict(kept, f"{kept} bytes of {path!r} are kept; send the chunk that starts "
                                           f"at byte {kept} (Content-Range: bytes {kept}-.../{rng.total})")
        os.lseek(self._fd, self.start, os.SEEK_SET)

    @property
    def offset(self) -> int:
        """Where the kept part ends (before this request's bytes)."""
        return self.start

    def write(self, chunk: bytes) -> None:
        limit = self.rng.length if self.rng is not None else None
        if limit is not None and self.received + len(chunk) > limit:
            raise DataPathError("The body is longer than its Content-Range; send exactly the range's bytes")
        view = memoryview(chunk)
        while view:
            view = view[os.write(self._fd, view):]
        self.received += len(chunk)

    def finish(self) -> dict[str, Any]:
        """Keep this request's bytes; place the file when it is complete. The answer says where
        the kept part ends (``offset``) and whether the file is in place (``complete``)."""
        rng = self.rng
        try:
            if rng is not None and rng.first is None:  # only asked how much is kept
                return {"offset": self.start, "complete": False, "total": rng.total}
            if rng is not None and self.received != rng.length:
                raise DataPathError(f"The body has {self.received} bytes but its Content-Range names "
                                    f"{rng.length}; send exactly the range's bytes")
            end = self.start + self.received
            if rng is not None and not rng.completes:
                os.fsync(self._fd)
                return {"offset": end, "complete": False, "total": rng.total}
            os.fsync(self._fd)
            self._place(end)
            return {"offset": end, "complete": True, "total": end, "path": self.path}
        except BaseException:
            self.abort()
            raise
        finally:
            self.close()

    def _place(self, size: int) -> None:
        store = self.store
        gid = store.group_of(self.course)
        os.fchmod(self._fd, store.file_mode)
        if gid is not None:
            os.fchown(self._fd, -1, gid)
        with store._lock:
            replaced = 0
            course_fd = store._course_fd(self.course, create=True)
            try:
                parent = store._walk_to(course_fd, self.parts[:-1], create=True, path=self.path)
            finally:
                os.close(course_fd)
            try:
                name = self.parts[-1]
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        raise DataPathError(f"{self.path!r} is a folder in the course's data folder; "
                                            "delete it first or choose another name")
                    replaced = st.st_size if stat.S_ISREG(st.st_mode) else 0
                store.sizes.forget(self.course)
                store.room_for(self.course, size - replaced)
                with _writable(parent):
                    # rename replaces a link (or a hard link) at the name; it never writes through it
                    os.rename(self.name, name, src_dir_fd=self._dir, dst_dir_fd=parent)
            finally:
                os.close(parent)
        store.sizes.forget(self.course)
        self.name = ""

    def abort(self) -> None:
        """Drop this request's bytes: a whole upload's partial file goes; a chunk is cut back to
        where the kept part ended (the next request resumes there)."""
        if not self.name or self._fd < 0:
            return
        if self.rng is None:
            with contextlib.suppress(OSError):
                os.unlink(self.name, dir_fd=self._dir)
            self.name = ""
        else:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.start)

    def close(self) -> None:
        for attr in ("_fd", "_dir"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, attr, -1)


# -- servers: where members see the folders -------------------------------------------------------

def link_into_home(home: Path, settings: ClasshubCourseData, courses: Mapping[str, str], *,
                   uid: int | None = None, gid: int | None = None) -> list[str]:
    """Link each course's folder at ``<home>/<home_folder>/<course folder>`` (local mode, at
    spawn). What a member made at those names is theirs: a file, a folder or a link of their own is
    left alone (never followed, never replaced), and the answer says which were skipped. Runs in
    a worker thread, through descriptors opened with ``O_NOFOLLOW`` (the hub may be root)."""
    if not settings.root_dir or not courses:
        return []
    root = Path(settings.root_dir).resolve()
    skipped: list[str] = []
    home_fd = os.open(home, _DIR_FLAGS)
    try:
        folder = settings.home_folder
        mkdir_owned(home_fd, folder, 0o755, uid, gid)
        try:
            data_fd = os.open(folder, _DIR_FLAGS, dir_fd=home_fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                return [f"~/{folder} is not a folder; rename it to see the courses' data there"]
            raise
        try:
            if uid is not None and os.fstat(data_fd).st_uid != uid:
                return [f"~/{folder} belongs to another account; the courses' data is not linked"]
            for course in sorted(courses):
                name = folder_name(course)
                target = str(root / name)
                try:
                    current = os.readlink(name, dir_fd=data_fd)
                except FileNotFoundError:
                    # the link stays root's: the member owns the folder, so may still remove it,
                    # and a chown by name could meet a hard link swapped in (seeding.mkdir_owned)
                    os.symlink(target, name, dir_fd=data_fd)
                    continue
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    current = None  # a file or folder of the member's own
                if current != target:
                    skipped.append(f"~/{folder}/{name}")
        finally:
            os.close(data_fd)
    finally:
        os.close(home_fd)
    return skipped


def pod_volumes(settings: ClasshubCourseData, courses: Mapping[str, str],
                user_folder: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Kubernetes: (volumes, volume mounts) that show each of ``courses`` (course -> role) at
    ``<mount_path>/<course folder>``: read-only for students, read-write for teachers and TAs.
    Enforced by the kubelet (a read-only mount), not by the browser."""
    if not settings.volume or not courses:
        return [], []
    import json

    source = json.dumps(settings.volume)
    per_course = "{course}" in source
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, (course, role) in enumerate(sorted(courses.items())):
        name = folder_name(course)
        mount: dict[str, Any] = {"mountPath": f"{settings.mount_path.rstrip('/')}/{name}",
                                 "readOnly": role not in _STAFF}
        if per_course:
            volume_name = f"course-data-{index}"
            volumes.append({"name": volume_name, **json.loads(source.replace("{course}", name))})
        else:
            volume_name = "course-data"
            if not volumes:
                volumes.append({"name": volume_name, **settings.volume})
            mount["subPath"] = name
        mounts.append({"name": volume_name, **mount})
    return volumes, mounts
