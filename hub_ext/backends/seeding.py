"""Seeding on a real file system: read templates safely, carry out a plan in a student's home.

The decisions live in :mod:`hub_ext.core.seeding`; this module only turns trees into manifests and a
plan into files. It is the one seeding engine of both run modes: the local spawner calls
:func:`seed_home` before the server starts, and in Kubernetes the same function runs in an init or
sidecar container of the user pod with the template volume and the home mounted.

Safety, because the home belongs to the student and the template to whoever uploaded it:
- Templates (:func:`scan_template`, :func:`extract_archive`) are refused, with the path named, for
  ``..``/absolute names, symlinks, hard links, devices/FIFOs/sockets, and past :class:`SeedLimits`
  (files, bytes actually read or written, depth). An archive is never given to ``extractall``:
  each member is checked and streamed, counting real bytes, so a compression bomb stops at the limit.
- In the home, no symlink is ever followed: folders are opened one component at a time with
  ``O_NOFOLLOW`` relative to their parent's descriptor (``dir_fd``), files are created with
  ``O_EXCL|O_NOFOLLOW`` under a temporary name and put in place with ``link`` (never clobbers) or
  ``rename`` over exactly the file the plan expected (re-checked just before). A symlink a student
  planted (``notebooks -> /tmp/outside``) is a "symlink" entry to the planner and kept as it is.
- The home folder itself is opened normally (an admin may reach homes through a symlink); only
  what is inside it is distrusted.

Speed: the template manifest is computed once, at publish time, and stored with the template;
seeding copies with ``copy_file_range`` (the kernel's copy, what ``cp`` uses) and checks each
source's size against the manifest. A no-change re-seed reads no file contents: the marker's stat
cache (size, mtime_ns, inode per file; see :class:`hub_ext.core.seeding.Marker`) vouches for files
that were not touched, the plan is then empty, and the marker is not even rewritten.

Crash safety: every file appears whole (temporary file, then link/rename); the marker is written
last. A seeding cut short leaves complete files and the old marker; the next seeding treats files
it wrote as "already up to date" (same content) and carries on.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import secrets
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO

from hub_ext.core.seeding import (
    COPY,
    DIR,
    DIR_ENTRY,
    FILE,
    MARKER_DIR,
    MARKER_PATH,
    MKDIR,
    SPECIAL,
    SYMLINK,
    Action,
    CachedFile,
    Entry,
    Manifest,
    Marker,
    Plan,
    SeedLimits,
    StatKey,
    TemplateRefused,
    base_for,
    check_path,
    check_version,
    path_key,
    plan,
)

__all__ = [
    "ApplyResult",
    "HomeError",
    "HomeView",
    "SeedResult",
    "apply",
    "extract_archive",
    "mkdir_owned",
    "read_marker",
    "scan_home",
    "scan_template",
    "seed_home",
    "verify_template",
    "walk_tree",
    "write_marker",
]

log = logging.getLogger(__name__)

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the lstat must not hang the seeding in open().
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_MARKER_MAX_BYTES = 64 * 1024 * 1024
_NOT_A_FOLDER = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
DEFAULT_LIMITS = SeedLimits()


class HomeError(RuntimeError):
    """The student's home cannot be seeded as it is; the message says what to change."""


# ---------------------------------------------------------------------------------------------
# Small file-system helpers


class _Walker:
    """Opens folders below a root one component at a time (``O_NOFOLLOW``, ``dir_fd``).

    Only the chain of folders to the current one stays open, so walking paths in
    :func:`path_key` order reuses descriptors and any tree depth needs few of them.
    """

    def __init__(self, root_fd: int) -> None:
        self.root = root_fd
        self.chain: list[tuple[str, int]] = []

    def dir_fd(self, parts: Sequence[str]) -> int:
        """A descriptor of folder ``parts``; ``OSError`` (ELOOP, ENOTDIR, ENOENT) if it is not one."""
        keep = 0
        while keep < len(self.chain) and keep < len(parts) and self.chain[keep][0] == parts[keep]:
            keep += 1
        for _, fd in self.chain[keep:]:
            os.close(fd)
        del self.chain[keep:]
        for name in parts[keep:]:
            parent = self.chain[-1][1] if self.chain else self.root
            self.chain.append((name, os.open(name, _O_DIR, dir_fd=parent)))
        return self.chain[-1][1] if self.chain else self.root

    def close(self) -> None:
        for _, fd in self.chain:
            os.close(fd)
        self.chain.clear()
        os.close(self.root)


def mkdir_owned(parent_fd: int, name: str, mode: int, uid: int | None = None,
                gid: int | None = None) -> bool:
    """Make the folder ``name`` in ``parent_fd`` and give it to ``uid``/``gid`` (None: unchanged);
    False when something of that name exists already (left alone).

    Why not ``mkdir`` then ``chown`` by name: the parent is a user's home (or a folder of it), and
    between the two its owner may put a hard link to a file in the new folder's place; chown by
    name (``follow_symlinks=False`` does not help: a hard link is the file) would hand that file
    to them. The folder is opened with ``O_DIRECTORY|O_NOFOLLOW`` and given away through its
    descriptor, and only while it is still the one this process made (its own): anything swapped
    in is not a folder (not opened) or is already someone else's (left as it is)."""
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        return False
    if uid is None and gid is None:
        return True
    try:
        fd = os.open(name, _O_DIR, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (*_NOT_A_FOLDER, errno.EACCES):  # replaced meanwhile: nothing to give away
            return True
        raise
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
    finally:
        os.close(fd)
    return True


#: Folder levels :func:`walk_tree` enters below its root by default (no real tree is deeper; each
#: level holds one descriptor while the walk is below it).
WALK_MAX_DEPTH = 256


def walk_tree(root_fd: int,
              max_depth: int = WALK_MAX_DEPTH) -> Iterator[tuple[str, list[str], list[str], int]]:
    """``os.fwalk(".", dir_fd=root_fd, follow_symlinks=False)`` (top-down) for a tree someone else
    may change while root walks it: ``(path, folders, other names, folder fd)``, ``path`` being
    ``"."``, ``"./a"``, ``"./a/b"``...; emptying or shortening ``folders`` prunes the walk.

    Why not ``os.fwalk``: it checks a folder with ``lstat`` and then opens it by name without
    ``O_NOFOLLOW``, so a link swapped in between is followed (root opens a FIFO, blocking for
    good, or a device the link names), and it recurses once per level (a deep enough tree raises
    ``RecursionError``). Here a folder is whatever ``lstat`` says (a link is never one), each is
    opened with ``O_DIRECTORY|O_NOFOLLOW`` relative to its parent's descriptor (a link or file
    swapped in meanwhile fails to open and is passed over: nothing blocks, nothing is followed),
    the walk keeps its own stack, and folders more than ``max_depth`` levels below the root are
    not entered. ``root_fd`` is the caller's (not closed); the others are closed as the walk
    leaves them, or when the generator is closed.
    """

    def listing(fd: int) -> tuple[list[str], list[str]]:
        folders, names = [], []
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    (folders if entry.is_dir(follow_symlinks=False) else names).append(entry.name)
                except OSError:  # gone meanwhile
                    continue
        return folders, names

    folders, names = listing(root_fd)
    yield ".", folders, names, root_fd
    # each frame: (path, fd, depth, the folders still to enter); the root's fd is the caller's
    stack: list[tuple[str, int, int, Iterator[str]]] = [(".", root_fd, 0, iter(folders))]
    try:
        while stack:
            path, fd, depth, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                stack.pop()
                if fd != root_fd:
                    os.close(fd)
                continue
            if depth >= max_depth:
                continue
            try:
                sub = os.open(name, _O_DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (*_NOT_A_FOLDER, errno.EACCES):  # gone, or a link/file swapped in
                    continue
                raise
            here = f"{path}/{name}"
            stack.append((here, sub, depth + 1, iter(())))
            folders, names = listing(sub)
            yield here, folders, names, sub
            stack[-1] = (here, sub, depth + 1, iter(folders))
    finally:
        for _, fd, _, _ in stack:
            if fd != root_fd:
                os.close(fd)


def printable(name: str) -> str:
    """`name` for a log line: readable where it is text, ``\\xNN`` for bytes that are not UTF-8
    (names are kept byte-exact, as surrogate escapes, which log handlers cannot encode)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _split(path: str) -> tuple[list[str], str]:
    parts = path.split("/")
    return parts[:-1], parts[-1]


def _hash_fd(fd: int, limit: int | None = None) -> tuple[str, int]:
    """sha256 and length of what ``fd`` holds; stops reading once past ``limit`` bytes."""
    digest = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    total = 0
    with open(fd, "rb", buffering=0, closefd=False) as reader:
        while (n := reader.readinto(buf)) > 0:
            digest.update(view[:n])
            total += n
            if limit is not None and total > limit:
                break
    return digest.hexdigest(), total


def _hash_at(dir_fd: int, name: str, st: os.stat_result) -> str | None:
    """sha256 of regular file ``name`` if it is still the file ``st`` describes, else None.

    "Still" means: same inode, and exactly ``st.st_size`` bytes read (a file growing while it is
    read must not slip past a byte limit or get a hash that matches no size).
    """
    try:
        fd = os.open(name, _O_READ, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            return None
        digest, size = _hash_fd(fd, limit=st.st_size)
        return digest if size == st.st_size else None
    finally:
        os.close(fd)


def _copy_fd(src: int, dst: int, size: int) -> int:
    """Copy ``src`` to ``dst`` in the kernel where it can (copy_file_range, then sendfile)."""
    copied = 0
    try:
        while copied < size:
            n = os.copy_file_range(src, dst, min(size - copied, 1 << 30))
            if n == 0:
                break
            copied += n
        return copied
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
            raise
    with open(src, "rb", buffering=0, closefd=False) as reader, open(dst, "wb", closefd=False) as out:
        reader.seek(copied)
        out.seek(copied)
        while chunk := reader.read(_CHUNK):
            out.write(chunk)
            copied += len(chunk)
    return copied


def _mode(executable: bool) -> int:
    return 0o755 if executable else 0o644


def _stat_key(st: os.stat_result) -> StatKey:
    return StatKey(st.st_size, st.st_mtime_ns, st.st_ino)


def _kind(st: os.stat_result) -> str:
    if stat.S_ISREG(st.st_mode):
        return FILE
    if stat.S_ISDIR(st.st_mode):
        return DIR
    if stat.S_ISLNK(st.st_mode):
        return SYMLINK
    return SPECIAL


# ---------------------------------------------------------------------------------------------
# Templates: folders and archives


def scan_template(
    root: str | os.PathLike[str],
    limits: SeedLimits = DEFAULT_LIMITS,
    *,
    exclude: Iterable[str] = (MARKER_DIR,),
) -> Manifest:
    """The manifest of template folder ``root``; :class:`TemplateRefused` names what is not allowed.

    Refused: symlinks (anywhere, ``root`` included), files with more than one hard link, devices,
    FIFOs and sockets, more than ``limits.max_files`` entries, more than ``limits.max_bytes`` bytes
    (counted as read), deeper than ``limits.max_depth``, files that change while being read.
    Top-level names in ``exclude`` (classhub's own ``.classhub/``) are not part of a template.
    """
    skip = set(exclude)
    entries: dict[str, Entry] = {}
    budget = [limits.max_bytes]

    def refuse(rel: str, why: str) -> TemplateRefused:
        return TemplateRefused(f"template {os.fspath(root)!r}: {rel!r}: {why}")

    def walk(fd: int, prefix: str, depth: int) -> None:
        for name in sorted(os.listdir(fd)):
            if not prefix and name in skip:
                continue
            rel = prefix + name
            if len(entries) >= limits.max_files:
                raise refuse(rel, f"more than {limits.max_files} files and folders")
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise refuse(rel, "a symbolic link (templates hold only files and folders)")
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= limits.max_depth:
                    raise refuse(rel, f"deeper than {limits.max_depth} folders")
                entries[rel] = DIR_ENTRY
                sub = os.open(name, _O_DIR, dir_fd=fd)
                try:
                    walk(sub, rel + "/", depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    raise refuse(rel, f"a hard link ({st.st_nlink} names for one file)")
                if st.st_size > budget[0]:
                    raise refuse(rel, f"the template is larger than {limits.max_bytes} bytes")
                digest = _hash_at(fd, name, st)
                if digest is None:
                    raise refuse(rel, "changed while it was read")
                entries[rel] = Entry(FILE, st.st_size, digest, bool(st.st_mode & 0o100))
                budget[0] -= st.st_size
            else:
                raise refuse(rel, "a device, FIFO or socket (templates hold only files and folders)")

    try:
        root_fd = os.open(root, _O_DIR)
    except OSError as exc:
        raise TemplateRefused(f"template {os.fspath(root)!r}: not a folder ({exc.strerror})") from exc
    try:
        walk(root_fd, "", 0)
    finally:
        os.close(root_fd)
    return Manifest(entries)


def verify_template(
    root: str | os.PathLike[str], manifest: Manifest, limits: SeedLimits = DEFAULT_LIMITS
) -> None:
    """Raise :class:`TemplateRefused` unless folder ``root`` still matches ``manifest`` exactly.

    For a template volume that others could write to: the cost is one full read of the template.
    """
    found = scan_template(root, limits)
    if found != manifest:
        differ = sorted(set(found.items()) ^ set(manifest.items()), key=lambda item: path_key(item[0]))
        raise TemplateRefused(
            f"template {os.fspath(root)!r} no longer matches its manifest: {differ[0][0]!r} and "
            f"{len(differ) - 1} more differ"
        )


@dataclass
class _Member:
    name: str
    kind: str
    executable: bool
    open: Callable[[], IO[bytes]] | None


def _zip_members(archive: zipfile.ZipFile, limits: SeedLimits, where: str) -> Iterator[_Member]:
    infos = archive.infolist()
    if len(infos) > limits.max_files:
        raise TemplateRefused(f"archive {where}: {len(infos)} members, more than {limits.max_files}")
    for info in infos:
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if stat.S_ISLNK(mode):
            raise TemplateRefused(f"archive {where}: {info.filename!r}: a symbolic link")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise TemplateRefused(f"archive {where}: {info.filename!r}: a device, FIFO or socket")
        if info.is_dir() or kind == stat.S_IFDIR:
            yield _Member(info.filename, DIR, False, None)
        else:
            yield _Member(info.filename, FILE, bool(mode & 0o100), lambda info=info: archive.open(info))


def _tar_members(archive: tarfile.TarFile, limits: SeedLimits, where: str) -> Iterator[_Member]:
    for count, member in enumerate(archive, start=1):  # lazy: a million headers are not all read
        if count > limits.max_files:
            raise TemplateRefused(f"archive {where}: more than {limits.max_files} members")
        if member.issym() or member.islnk():
            raise TemplateRefused(f"archive {where}: {member.name!r}: a symbolic or hard link")
        if member.isdir():
            yield _Member(member.name, DIR, False, None)
        elif member.isreg():

            def opener(member: tarfile.TarInfo = member) -> IO[bytes]:
                reader = archive.extractfile(member)
                assert reader is not None  # a regular member always has data
                return reader

            yield _Member(member.name, FILE, bool(member.mode & 0o100), opener)
        else:
            raise TemplateRefused(f"archive {where}: {member.name!r}: a device, FIFO or socket")


def _member_path(name: str, where: str) -> str | None:
    """The relative path of an archive member (``./`` prefixes dropped); None for the root entry."""
    if name.startswith("/"):
        raise TemplateRefused(f"archive {where}: member {name!r}: an absolute path")
    clean = name.rstrip("/")
    while clean.startswith("./"):
        clean = clean[2:]
    if clean in ("", "."):
        return None
    try:
        return check_path(clean)
    except TemplateRefused as exc:
        raise TemplateRefused(f"archive {where}: member {name!r}: {str(exc).split(': ', 1)[-1]}") from exc


def extract_archive(
    archive_path: str | os.PathLike[str], dest: str | os.PathLike[str], limits: SeedLimits = DEFAULT_LIMITS
) -> Manifest:
    """Unpack a .zip or .tar(.gz/.bz2/.xz) into new folder ``dest``; its manifest.

    Each member is checked before anything is written (names like ``../x`` or ``/etc/x``, symlink,
    hard link and device members are refused) and streamed with the bytes actually written counted
    against ``limits.max_bytes``, whatever the headers claim. On any refusal ``dest`` is removed, so
    a refused upload leaves nothing behind.
    """
    where = repr(os.fspath(archive_path))
    os.mkdir(dest, 0o755)
    try:
        return _extract(archive_path, dest, limits, where)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _extract(archive_path: str | os.PathLike[str], dest: str | os.PathLike[str], limits: SeedLimits,
             where: str) -> Manifest:
    with contextlib.ExitStack() as stack:
        members: Iterator[_Member]
        if zipfile.is_zipfile(archive_path):
            try:
                zf = stack.enter_context(zipfile.ZipFile(archive_path))
            except zipfile.BadZipFile as exc:
                raise TemplateRefused(f"archive {where}: a damaged zip file ({exc})") from exc
            members = _zip_members(zf, limits, where)
        else:
            try:
                tf = stack.enter_context(tarfile.open(archive_path, "r:*"))
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise TemplateRefused(f"archive {where}: not a .zip or .tar(.gz) archive") from exc
            members = _tar_members(tf, limits, where)
        walker = _Walker(os.open(dest, _O_DIR))
        stack.callback(walker.close)
        writer = _Extractor(walker, limits, where)
        try:
            for member in members:
                writer.add(member)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, RuntimeError, ValueError) as exc:
            if isinstance(exc, TemplateRefused):
                raise
            raise TemplateRefused(f"archive {where}: damaged or encrypted ({exc})") from exc
        manifest = Manifest(writer.entries)
        manifest.check_template(f"archive {where}")
        return manifest


class _Extractor:
    """Writes checked archive members below a fresh folder, keeping the count and byte budget."""

    def __init__(self, walker: _Walker, limits: SeedLimits, where: str) -> None:
        self.walker, self.limits, self.where = walker, limits, where
        self.entries: dict[str, Entry] = {}
        self.written = 0

    def refuse(self, path: str, why: str) -> TemplateRefused:
        return TemplateRefused(f"archive {self.where}: {path!r}: {why}")

    def folder(self, path: str) -> None:
        """Create folder ``path`` and any parents the archive did not list."""
        have = self.entries.get(path)
        if have is not None:
            if have.kind != DIR:
                raise self.refuse(path, "both a file and a folder")
            return
        parent, name = _rsplit(path)
        if parent:
            self.folder(parent)
        self.count(path)
        os.mkdir(name, 0o755, dir_fd=self.walker.dir_fd(parent.split("/") if parent else []))
        self.entries[path] = DIR_ENTRY

    def count(self, path: str) -> None:
        if len(self.entries) >= self.limits.max_files:
            raise self.refuse(path, f"more than {self.limits.max_files} files and folders")
        if path.count("/") + 1 > self.limits.max_depth:
            raise self.refuse(path, f"deeper than {self.limits.max_depth} folders")

    def add(self, member: _Member) -> None:
        path = _member_path(member.name, self.where)
        if path is None:
            return
        if member.kind == DIR:
            self.folder(path)
            return
        if path in self.entries:
            raise self.refuse(path, "listed twice")
        parent, name = _rsplit(path)
        if parent:
            self.folder(parent)
        self.count(path)
        assert member.open is not None
        dir_fd = self.walker.dir_fd(parent.split("/") if parent else [])
        fd = os.open(name, _O_CREATE, 0o600, dir_fd=dir_fd)
        digest = hashlib.sha256()
        size = 0
        with open(fd, "wb") as out, member.open() as reader:
            while chunk := reader.read(_CHUNK):
                size += len(chunk)
                self.written += len(chunk)
                if self.written > self.limits.max_bytes:
                    raise self.refuse(path, f"more than {self.limits.max_bytes} bytes unpacked "
                                            "(a compression bomb?)")
                digest.update(chunk)
                out.write(chunk)
            os.fchmod(out.fileno(), _mode(member.executable))
        self.entries[path] = Entry(FILE, size, digest.hexdigest(), member.executable)


def _rsplit(path: str) -> tuple[str, str]:
    head, _, tail = path.rpartition("/")
    return head, tail


# ---------------------------------------------------------------------------------------------
# The home: scan, apply, marker


def _open_home(home: str | os.PathLike[str]) -> int:
    """The home's descriptor; a home that is a link is refused (it could name any folder)."""
    try:
        return os.open(home, _O_DIR)
    except OSError as exc:
        why = exc.strerror
        raise HomeError(f"home {os.fspath(home)!r} is not a folder classhub can open ({why})") from exc


class HomeView(Mapping[str, Entry]):
    """The home, looked at path by path on demand, never following a symlink (a context manager).

    :func:`plan` only asks about the paths it needs (a sidecar name only when there is a conflict),
    so handing it this view instead of a full :func:`scan_home` saves thousands of ``stat`` calls
    per seeding. A symlink is a ``symlink`` entry and what lies behind it is missing. A file whose
    (size, mtime_ns, inode) equal its ``cache`` row is not read (its cached sha256 is used).
    """

    def __init__(self, home: str | os.PathLike[str], cache: Mapping[str, CachedFile] | None = None) -> None:
        self.cache = cache or {}
        self.walker = _Walker(_open_home(home))
        self.seen: dict[str, Entry | None] = {}
        self.folders: dict[str, bool] = {"": True}  # is this home path a real folder we can open?

    def __enter__(self) -> HomeView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.walker.close()

    def lookup(self, path: str) -> Entry | None:
        if path not in self.seen:
            self.seen[path] = self._stat(path)
        return self.seen[path]

    def get(self, path: str, default: Entry | None = None) -> Entry | None:  # type: ignore[override]
        entry = self.lookup(path)
        return default if entry is None else entry

    def __getitem__(self, path: str) -> Entry:
        entry = self.lookup(path)
        if entry is None:
            raise KeyError(path)
        return entry

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self.lookup(path) is not None

    def __iter__(self) -> Iterator[str]:
        return (p for p, e in list(self.seen.items()) if e is not None)

    def __len__(self) -> int:
        return sum(1 for e in self.seen.values() if e is not None)

    def snapshot(self) -> Manifest:
        """What was looked at and found, as a manifest."""
        return Manifest({p: e for p, e in self.seen.items() if e is not None})

    def _stat(self, path: str) -> Entry | None:
        parent, _, name = path.rpartition("/")
        grand = parent.rpartition("/")[0]
        if not self.folders.get(grand, True) or not self.folders.get(parent, True):
            self.folders[parent] = False
            return None
        try:
            dir_fd = self.walker.dir_fd(parent.split("/") if parent else [])
        except OSError as exc:
            if exc.errno not in _NOT_A_FOLDER:
                raise HomeError(f"cannot read {path!r} in the home: {exc.strerror}") from exc
            self.folders[parent] = False
            return None
        self.folders[parent] = True
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        kind = _kind(st)
        if kind != FILE:
            return Entry(kind)
        key = _stat_key(st)
        cached = self.cache.get(path)
        if cached is not None and cached.stat == key:
            digest: str | None = cached.digest
        else:
            digest = _hash_at(dir_fd, name, st)
        if digest is None:  # replaced while we looked: a file we do not know
            return Entry(SPECIAL)
        return Entry(FILE, st.st_size, digest, bool(st.st_mode & 0o100), stat=key)


def scan_home(
    home: str | os.PathLike[str], paths: Iterable[str], *, cache: Mapping[str, CachedFile] | None = None
) -> Manifest:
    """What the home holds at ``paths`` (others are not looked at), never following a symlink.

    See :class:`HomeView` (the same, on demand) for symlinks and the stat cache.
    """
    with HomeView(home, cache) as view:
        for path in sorted(paths, key=path_key):
            view.lookup(path)
        return view.snapshot()


@dataclass
class ApplyResult:
    """What :func:`apply` did: stat keys of files now at their targets, folders made, skips."""

    files: dict[str, StatKey] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)
    skipped: list[tuple[Action, str]] = field(default_factory=list)


class _Applier:
    def __init__(self, template_root: str | os.PathLike[str], home: str | os.PathLike[str],
                 uid: int | None, gid: int | None) -> None:
        self.src = _Walker(os.open(template_root, _O_DIR))
        try:
            self.dst = _Walker(_open_home(home))
        except BaseException:
            self.src.close()
            raise
        self.owner = (-1 if uid is None else uid, -1 if gid is None else gid)
        self.chown = uid is not None or gid is not None
        self.result = ApplyResult()

    def close(self) -> None:
        self.src.close()
        self.dst.close()

    def skip(self, action: Action, why: str) -> None:
        log.warning("seeding: %s not done: %s", printable(action.target), printable(str(why)))
        self.result.skipped.append((action, why))

    def run(self, action: Action) -> None:
        assert action.target is not None
        parent, name = _split(action.target)
        try:
            dir_fd = self.dst.dir_fd(parent)
        except OSError as exc:
            if exc.errno not in _NOT_A_FOLDER:
                raise
            self.skip(action, f"{'/'.join(parent)!r} is not a folder (symlinks are not followed)")
            return
        if action.op == MKDIR:
            self.mkdir(action, dir_fd, name)
        elif action.op == COPY:
            self.copy(action, dir_fd, name)

    def mkdir(self, action: Action, dir_fd: int, name: str) -> None:
        try:
            os.mkdir(name, 0o755, dir_fd=dir_fd)
        except FileExistsError:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                self.skip(action, "something else appeared there; it is kept")
            return
        fd = os.open(name, _O_DIR, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o755)
            if self.chown:
                os.fchown(fd, *self.owner)
        finally:
            os.close(fd)
        self.result.folders.append(action.target or name)

    def holds(self, dir_fd: int, name: str, st: os.stat_result, want: Entry) -> bool:
        """Whether the file at ``name`` (described by ``st``) has ``want``'s content and exec bit."""
        if not stat.S_ISREG(st.st_mode) or st.st_size != want.size:
            return False
        if bool(st.st_mode & 0o100) != want.executable:
            return False
        if want.stat is not None and _stat_key(st) == want.stat:
            return True
        return _hash_at(dir_fd, name, st) == want.digest

    def copy(self, action: Action, dir_fd: int, name: str) -> None:
        entry = action.entry
        assert entry is not None and action.target is not None
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if self.holds(dir_fd, name, st, entry):  # done already (a re-run)
                self.result.files[action.target] = _stat_key(st)
                return
            if action.expect is None or not self.holds(dir_fd, name, st, action.expect):
                self.skip(action, "the file changed since the home was scanned; it is kept")
                return
        elif action.expect is not None:
            self.skip(action, "the file was removed since the home was scanned")
            return
        tmp = f".classhub-tmp-{secrets.token_hex(8)}"
        key = self.write_tmp(action, dir_fd, tmp, entry)
        try:
            if st is None:
                self.link_new(action, dir_fd, tmp, name, entry, key)
            else:
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                self.result.files[action.target] = key
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)

    def link_new(self, action: Action, dir_fd: int, tmp: str, name: str, entry: Entry, key: StatKey) -> None:
        """Put ``tmp`` at ``name`` only if nothing is there (link never overwrites)."""
        assert action.target is not None
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if self.holds(dir_fd, name, st, entry):
                self.result.files[action.target] = _stat_key(st)
            else:
                self.skip(action, "something appeared there since the home was scanned; it is kept")
            return
        except OSError as exc:  # a file system without hard links: check, then rename
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            else:
                self.skip(action, "something appeared there since the home was scanned; it is kept")
                return
        self.result.files[action.target] = key

    def write_tmp(self, action: Action, dir_fd: int, tmp: str, entry: Entry) -> StatKey:
        """Copy the template's file to ``tmp`` in the target folder; its stat key when done."""
        parent, name = _split(action.path)
        src = os.open(name, _O_READ, dir_fd=self.src.dir_fd(parent))
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size:
                raise TemplateRefused(f"template file {action.path!r} changed since it was published")
            dst = os.open(tmp, _O_CREATE, 0o600, dir_fd=dir_fd)
            try:
                if _copy_fd(src, dst, entry.size) != entry.size:
                    raise TemplateRefused(f"template file {action.path!r} changed since it was published")
                os.fchmod(dst, _mode(entry.executable))
                if self.chown:
                    os.fchown(dst, *self.owner)
                return _stat_key(os.fstat(dst))
            except BaseException:
                os.close(dst)
                dst = -1
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            finally:
                if dst >= 0:
                    os.close(dst)
        finally:
            os.close(src)


def apply(
    plan_: Plan,
    template_root: str | os.PathLike[str],
    home: str | os.PathLike[str],
    *,
    uid: int | None = None,
    gid: int | None = None,
) -> ApplyResult:
    """Carry out ``plan_``: copy files from ``template_root`` into ``home``, create folders.

    Before each write the target is re-checked against what the plan expected; anything else
    found there (the student was quicker, a symlink appeared) is kept and the action is reported
    in ``skipped``. Applying the same plan twice changes nothing the second time. ``uid``/``gid``
    own what is created (running as root for --system-users accounts).
    """
    applier = _Applier(template_root, home, uid, gid)
    try:
        for action in plan_.writes():
            applier.run(action)
    finally:
        applier.close()
    return applier.result


def read_marker(home: str | os.PathLike[str], known: Manifest | None = None) -> Marker | None:
    """The home's marker, or None (never seeded, or a marker that is damaged: seeded as first time).

    ``known``: the manifest being seeded, reused if the marker's equals it (see Marker.from_json).

    Raises :class:`HomeError` if ``.classhub`` exists and is not a folder (e.g. a symlink).
    """
    walker = _Walker(_open_home(home))
    try:
        parent, name = _split(MARKER_PATH)
        try:
            dir_fd = walker.dir_fd(parent)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise HomeError(
                    f"{MARKER_DIR!r} in the home is not a folder; classhub keeps its marker there. "
                    "Rename or remove it and start again."
                ) from exc
            raise
        try:
            fd = os.open(name, _O_READ, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):
                return None
            raise
        with open(fd, "rb") as reader:
            if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
                return None
            text = reader.read(_MARKER_MAX_BYTES + 1)
        if len(text) > _MARKER_MAX_BYTES:
            log.warning("seeding: marker in %s is too large; seeding as a first seed", home)
            return None
        try:
            return Marker.from_json(text, known)
        except ValueError as exc:
            log.warning("seeding: marker in %s is damaged (%s); seeding as a first seed", home,
                        printable(str(exc)))
            return None
    finally:
        walker.close()


def write_marker(home: str | os.PathLike[str], marker: Marker, *, uid: int | None = None,
                 gid: int | None = None) -> None:
    """Write ``.classhub/template.json`` atomically (temporary file, fsync, rename)."""
    owner = (-1 if uid is None else uid, -1 if gid is None else gid)
    root = _open_home(home)
    try:
        mkdir_owned(root, MARKER_DIR, 0o755, uid, gid)
        try:
            dir_fd = os.open(MARKER_DIR, _O_DIR, dir_fd=root)
        except OSError as exc:
            raise HomeError(f"{MARKER_DIR!r} in the home is not a folder; cannot record the seeding") from exc
        try:
            tmp = f".template-{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, _O_CREATE, 0o644, dir_fd=dir_fd)
            try:
                with open(fd, "w", encoding="utf-8", errors="surrogateescape") as out:
                    out.write(marker.to_json())
                    out.flush()
                    if uid is not None or gid is not None:
                        os.fchown(out.fileno(), *owner)
                    os.fsync(out.fileno())
                os.replace(tmp, MARKER_PATH.rsplit("/", 1)[1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        os.close(root)


@dataclass
class SeedResult:
    """One seeding: the plan (decisions with reasons), what was done, and the marker now in the home."""

    plan: Plan
    applied: ApplyResult
    marker: Marker
    marker_written: bool


def seed_home(
    template_root: str | os.PathLike[str],
    manifest: Manifest,
    home: str | os.PathLike[str],
    *,
    template: str,
    version: int | str,
    restore_deleted: bool = False,
    uid: int | None = None,
    gid: int | None = None,
    now: datetime | None = None,
) -> SeedResult:
    """Seed (or re-seed) ``home`` from template ``template`` version ``version``: the whole flow.

    Reads the marker, scans the home at the paths that matter (stat cache first), plans the
    three-way merge, applies it and records the marker. ``manifest`` is the version's manifest
    stored at publish time (:func:`scan_template` / :func:`extract_archive`).
    """
    tag = check_version(version)
    old = read_marker(home, manifest)
    base = base_for(old, template)
    with HomeView(home, old.files if old is not None else None) as found:
        decided = plan(base, manifest, found, version=tag, restore_deleted=restore_deleted)
    applied = apply(decided, template_root, home, uid=uid, gid=gid)
    files: dict[str, CachedFile] = {}
    for path, entry in manifest.items():
        if entry.kind != FILE:
            continue
        if path in applied.files:
            files[path] = CachedFile(applied.files[path], entry.digest)
            continue
        have = found.seen.get(path)
        if have is not None and have.kind == FILE and have.stat is not None:
            files[path] = CachedFile(have.stat, have.digest)
    stamp = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")
    marker = Marker(template, tag, manifest, files, stamp)
    unchanged = old is not None and (old.template, old.version, old.manifest, dict(old.files)) == (
        template, tag, manifest, files)
    if not unchanged:
        write_marker(home, marker, uid=uid, gid=gid)
    elif old is not None:
        marker = old
    log.info("seeding %s v%s into %s: %s", template, tag, home, decided.summary())
    return SeedResult(decided, applied, marker, not unchanged)
