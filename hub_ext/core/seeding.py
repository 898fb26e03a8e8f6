"""Template seeding: manifests, the seeded-home marker and the three-way merge plan.

Why a pure module: "the teacher's v2 never eats my homework" is the promise students care about,
and it must hold the same way in both run modes (local: a function call before the server starts;
Kubernetes: the same code in a container of the user pod). The decision is a pure function of three
manifests, so it is tested exhaustively (hypothesis) without touching a disk; the seeding engine
of both modes (hub_ext/backends/seeding.py) only scans trees into manifests and carries out the plan.

Vocabulary:
- A *template version* is a directory tree. Its :class:`Manifest` maps relative POSIX paths to
  :class:`Entry` values (a file: size, sha256, exec bit; or a folder). Paths are ``str`` decoded
  with ``os.fsdecode`` (surrogateescape), so any byte name round-trips exactly; no Unicode
  normalisation is done. Templates hold only files and folders: no symlinks, hard links or devices.
- *base* is the manifest seeded last (read from the marker), *new* the version being seeded, *home*
  what the student's home holds now at the paths that matter (:func:`home_paths`).
- The marker ``.classhub/template.json`` (:data:`MARKER_PATH`) in the home records the template
  name, version, its manifest, and a stat cache (size, mtime_ns, inode, sha256) of the home files
  at template paths, so a no-change re-seed does not re-read file contents (see :class:`Marker`).
  The top-level ``.classhub/`` folder belongs to classhub and is never part of a template.
- A *sidecar* is where the template's copy is saved when the student's version is kept:
  ``lab1.ipynb`` -> ``lab1.template-v2.ipynb`` (the tag goes before the last extension, so the file
  still opens in JupyterLab); ``.bashrc`` -> ``.bashrc.template-v2``; a folder ``data`` ->
  ``data.template-v2/`` (see :func:`sidecar_name`).

Rules (per template path P; "same" = same type, size, sha256 and exec bit):

| home at P         | base at P          | new at P      | decision                                     |
|-------------------|--------------------|---------------|----------------------------------------------|
| missing           | missing / other    | file/folder   | ``added``: copied / created                  |
|                   | type than new      |               |                                              |
| missing           | same type as new   | file/folder   | ``student_deleted``: not brought back (with  |
|                   |                    |               | ``restore_deleted=True``: ``restored``)      |
| same as new       | any                | file/folder   | ``up_to_date``: nothing to do                |
| file, == base     | file               | file, changed | ``updated``: replaced by the new version     |
| file, != base     | file, == new       | file          | ``student_modified``: kept, nothing saved    |
| file, != base     | file, != new       | file          | ``student_modified``: kept; new saved beside |
| file, != new      | missing            | file          | ``student_created``: kept; new saved beside  |
| folder/symlink/   | any                | file          | ``type_conflict``: kept; new saved beside    |
| other             |                    |               | (nothing saved when base == new)             |
| file/symlink/     | any                | folder        | ``type_conflict``: kept; the folder's new or |
| other             |                    |               | changed files saved in ``P.template-vN/``    |
| present           | present            | missing       | ``removed_in_template``: left alone          |
| (parent folder deleted by the student) | any           | ``parent_deleted``: not added                |
| (its folder is saved beside, see above)| any           | ``parent_conflict``: copied there if new or  |
|                                        |               | changed since base                           |
| (the sidecar path holds something else)| any           | ``sidecar_taken``: nothing written; conflict |

Consequences: nothing in the home is ever deleted; a file is overwritten only when it is exactly
the version seeded last (``updated``); symlinks in the home are never written through (they are
"other" and kept). A template switching a path between file and folder is a new thing at that path:
"deleted by the student" only applies when base had the same type. Inside a sidecar folder, files
the new version did not change since base are not copied (the student removed the folder on
purpose; only what the teacher changed or added is shown). Each decision is an :class:`Action`
with a stable ``reason`` code (for logs and metrics) and a sentence (:attr:`Action.message`).

Pure: standard library only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "ADDED",
    "COPY",
    "DIR",
    "DIR_ENTRY",
    "FILE",
    "HASH",
    "MARKER_DIR",
    "MARKER_PATH",
    "MKDIR",
    "NONE",
    "PARENT_CONFLICT",
    "PARENT_DELETED",
    "REMOVED_IN_TEMPLATE",
    "RESTORED",
    "SIDECAR_TAKEN",
    "SPECIAL",
    "STUDENT_CREATED",
    "STUDENT_DELETED",
    "STUDENT_MODIFIED",
    "SYMLINK",
    "TYPE_CONFLICT",
    "UPDATED",
    "UP_TO_DATE",
    "Action",
    "CachedFile",
    "Entry",
    "Manifest",
    "Marker",
    "Plan",
    "SeedLimits",
    "StatKey",
    "TemplateRefused",
    "base_for",
    "check_path",
    "check_version",
    "home_paths",
    "path_key",
    "plan",
    "sidecar_name",
]

MARKER_DIR = ".classhub"
MARKER_PATH = ".classhub/template.json"
MARKER_FORMAT = "classhub-template-marker/1"
HASH = "sha256"

# Entry kinds. Templates hold only FILE and DIR; SYMLINK and SPECIAL appear in home scans.
FILE = "file"
DIR = "dir"
SYMLINK = "symlink"
SPECIAL = "special"
_KINDS = frozenset({FILE, DIR, SYMLINK, SPECIAL})

# Action operations.
COPY = "copy"
MKDIR = "mkdir"
NONE = "none"

# Reason codes: stable strings (logs, metrics, UI); never reword them.
ADDED = "added"
RESTORED = "restored"
UPDATED = "updated"
UP_TO_DATE = "up_to_date"
STUDENT_MODIFIED = "student_modified"
STUDENT_CREATED = "student_created"
STUDENT_DELETED = "student_deleted"
TYPE_CONFLICT = "type_conflict"
PARENT_CONFLICT = "parent_conflict"
PARENT_DELETED = "parent_deleted"
SIDECAR_TAKEN = "sidecar_taken"
REMOVED_IN_TEMPLATE = "removed_in_template"

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class TemplateRefused(ValueError):
    """A template (folder, archive or manifest) that classhub will not seed, with the reason."""


@dataclass(frozen=True)
class SeedLimits:
    """Upper bounds for a template, so one upload cannot fill the disk or exhaust inodes."""

    max_files: int = 20_000  # files and folders together (archive members)
    max_bytes: int = 4 * 1024**3  # total size of all files, counted as bytes actually read
    max_depth: int = 64  # path components


class StatKey(NamedTuple):
    """What the marker remembers of a home file to recognise it unchanged without reading it."""

    size: int
    mtime_ns: int
    ino: int


class CachedFile(NamedTuple):
    """A stat-cache row: a home file's stat key and the sha256 of its content at that time."""

    stat: StatKey
    digest: str


@dataclass(frozen=True)
class Entry:
    """One path of a manifest. Equality ignores ``stat`` (where it was seen, not what it is)."""

    kind: str
    size: int = 0
    digest: str = ""
    executable: bool = False
    stat: StatKey | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown entry kind {self.kind!r}")

    @property
    def is_file(self) -> bool:
        return self.kind == FILE

    @property
    def is_dir(self) -> bool:
        return self.kind == DIR

    def to_json(self) -> dict[str, Any]:
        if self.kind == FILE:
            return {"type": FILE, "size": self.size, HASH: self.digest, "exec": self.executable}
        return {"type": self.kind}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        kind = data["type"]
        if kind == FILE:
            size, digest = data["size"], data[HASH]
            if not isinstance(size, int) or size < 0 or not isinstance(digest, str):
                raise ValueError("a file entry needs a size and a sha256")
            return cls(FILE, size, digest, bool(data.get("exec", False)))
        return cls(kind)


DIR_ENTRY = Entry(DIR)


def check_path(path: str) -> str:
    """``path`` if it is a clean relative POSIX path, else :class:`TemplateRefused` naming it.

    Refused: empty, absolute, ``.``/``..`` or empty components (``a//b``), NUL bytes, backslashes
    (a Windows archive's separator: accepting it would make ``a\\..\\b`` mean two things).
    """
    if not isinstance(path, str) or not path:
        raise TemplateRefused(f"{path!r}: an empty path")
    if path.startswith("/"):
        raise TemplateRefused(f"{path!r}: an absolute path")
    if "\x00" in path or "\\" in path:
        raise TemplateRefused(f"{path!r}: NUL or backslash in a path")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise TemplateRefused(f"{path!r}: '..', '.' or an empty component in a path")
    return path


def path_key(path: str) -> tuple[str, ...]:
    """Sort key that puts a folder right before its contents (``a``, ``a/b``, ``a.txt``)."""
    return tuple(path.split("/"))


def check_version(version: int | str) -> str:
    """The version as the string used in sidecar names; refused if it could not be a file name."""
    text = str(version)
    if not _VERSION.match(text):
        raise ValueError(f"template version {text!r}: use letters, digits, '.', '_' or '-'")
    return text


def sidecar_name(path: str, version: int | str, *, is_dir: bool = False) -> str:
    """Where the template's copy of ``path`` goes when the student's version is kept.

    ``nb/lab1.ipynb`` -> ``nb/lab1.template-v2.ipynb``; ``.bashrc`` -> ``.bashrc.template-v2``;
    ``archive.tar.gz`` -> ``archive.tar.template-v2.gz``; folders: ``data`` -> ``data.template-v2``.
    """
    return _sidecar(path, f".template-v{check_version(version)}", is_dir)


def _sidecar(path: str, tag: str, is_dir: bool) -> str:
    head, _, name = path.rpartition("/")
    if is_dir:
        side = name + tag
    else:
        stem, ext = posixpath.splitext(name)
        side = stem + tag + ext
    return f"{head}/{side}" if head else side


class Manifest(Mapping[str, Entry]):
    """An immutable mapping of relative paths to entries; every path passes :func:`check_path`."""

    __slots__ = ("_checked", "_entries")

    def __init__(self, entries: Mapping[str, Entry] | Iterable[tuple[str, Entry]] = ()) -> None:
        data = dict(entries)
        for path in data:
            check_path(path)
        self._entries = data
        self._checked = False

    def __getitem__(self, path: str) -> Entry:
        return self._entries[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: object) -> bool:
        return path in self._entries

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Manifest):
            return self._entries == other._entries
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Manifest({self._entries!r})"

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self._entries.values() if e.kind == FILE)

    @property
    def file_count(self) -> int:
        """The regular files, without folders: what "N files" means to a teacher (``len`` counts
        every entry, which the seeding limits need)."""
        return sum(1 for e in self._entries.values() if e.kind == FILE)

    def check_template(self, what: str = "template") -> None:
        """Refuse what a template may not hold: other kinds, orphans, the marker folder."""
        if self._checked:
            return
        for path, entry in self._entries.items():
            if entry.kind not in (FILE, DIR):
                raise TemplateRefused(f"{what}: {path!r} is a {entry.kind}; only files and folders")
            if path == MARKER_DIR or path.startswith(MARKER_DIR + "/"):
                raise TemplateRefused(f"{what}: {path!r} is inside classhub's own {MARKER_DIR}/")
            parent = posixpath.dirname(path)
            if parent and self._entries.get(parent) != DIR_ENTRY:
                raise TemplateRefused(f"{what}: {path!r} has no parent folder entry {parent!r}")
        self._checked = True

    def to_json(self) -> dict[str, Any]:
        return {"hash": HASH, "entries": {p: e.to_json() for p, e in sorted(self._entries.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        if data.get("hash") != HASH:
            raise ValueError(f"manifest hash {data.get('hash')!r} is not {HASH}")
        return cls((p, Entry.from_json(e)) for p, e in data["entries"].items())


@dataclass(frozen=True)
class Marker:
    """What a seeded home remembers: template, version, its manifest and a stat cache.

    ``files`` maps home paths (template paths only) to :class:`CachedFile`. A home file whose
    (size, mtime_ns, inode) still equal the cached ones is taken to hold the cached sha256 without
    being read. This is git's index trick: it is fooled only by a same-size rewrite that also
    restores the mtime to the nanosecond on the same inode, which a student can only do to their
    own file on purpose (and then their file is treated as unchanged: updated to the template's).
    """

    template: str
    version: str
    manifest: Manifest
    files: Mapping[str, CachedFile] = field(default_factory=dict)
    seeded_at: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": MARKER_FORMAT,
                "template": self.template,
                "version": self.version,
                "seeded_at": self.seeded_at,
                "manifest": self.manifest.to_json(),
                "files": {p: [*c.stat, c.digest] for p, c in sorted(self.files.items())},
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | bytes, known: Manifest | None = None) -> Marker:
        """Parse a marker; ``ValueError`` for anything malformed (callers treat it as no marker).

        The marker lives in the student's home, so it is validated like any upload. If its
        manifest equals ``known`` (the usual re-seed of the same version), ``known`` is reused
        instead of building a second one. ``files`` keys are not path-checked: they are only
        ever looked up with template paths.
        """
        try:
            data = json.loads(text)
            if data.get("format") != MARKER_FORMAT:
                raise ValueError(f"marker format {data.get('format')!r} is not {MARKER_FORMAT}")
            files = {
                p: CachedFile(StatKey(int(s), int(m), int(i)), str(d))
                for p, (s, m, i, d) in data.get("files", {}).items()
            }
            raw = data["manifest"]
            same = known is not None and raw == known.to_json()
            return cls(
                template=str(data["template"]),
                version=check_version(data["version"]),
                manifest=known if same and known is not None else Manifest.from_json(raw),
                files=files,
                seeded_at=str(data.get("seeded_at", "")),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed marker: {exc!r}") from exc


def base_for(marker: Marker | None, template: str) -> Manifest | None:
    """The base of the three-way merge: the marker's manifest if it was this template's, else None.

    A home seeded from another template (or never) is merged as a first seed: files the student
    already has are kept and the template's copy is saved beside them.
    """
    if marker is None or marker.template != template:
        return None
    return marker.manifest


@dataclass(frozen=True)
class Action:
    """One decision about one template path.

    ``op`` is COPY (write ``entry``'s content from the template's ``path`` to ``target``), MKDIR
    (create folder ``target``) or NONE. ``expect`` is what the home held at ``target`` when planned
    (None: nothing); the backend re-checks it before writing and never writes over anything else.
    """

    path: str
    op: str
    reason: str
    target: str | None = None
    entry: Entry | None = None
    expect: Entry | None = None
    conflict: bool = False

    @property
    def message(self) -> str:
        """A sentence for the student (the spawn page, the re-seed dialog)."""
        p, t = self.path, self.target
        if self.op != NONE and t is not None and t != p:
            return f"{p}: {_REASON_TEXT.get(self.reason, self.reason)}; the template's copy is saved as {t}"
        if self.op == NONE and t is not None and t != p and self.reason != SIDECAR_TAKEN:
            return f"{p}: {_REASON_TEXT.get(self.reason, self.reason)}; the template's copy is in {t}"
        if self.reason == SIDECAR_TAKEN:
            where = t or "the place beside it"
            return f"{p}: yours is kept; {where} is taken, so the template's copy is not saved"
        return f"{p}: {_REASON_TEXT.get(self.reason, self.reason)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "op": self.op,
            "reason": self.reason,
            "target": self.target,
            "conflict": self.conflict,
            "message": self.message,
        }


_REASON_TEXT = {
    ADDED: "added",
    RESTORED: "restored (you had deleted it)",
    UPDATED: "updated to the new version",
    UP_TO_DATE: "already up to date",
    STUDENT_MODIFIED: "you changed it, so your version is kept",
    STUDENT_CREATED: "you already had your own, so yours is kept",
    STUDENT_DELETED: "you deleted it, so it is not brought back",
    TYPE_CONFLICT: "a file in one place and a folder in the other; yours is kept",
    PARENT_CONFLICT: "its folder is not a folder in your home",
    PARENT_DELETED: "you deleted its folder, so it is not added",
    REMOVED_IN_TEMPLATE: "no longer in the template; left alone",
}


@dataclass(frozen=True)
class Plan:
    """The decisions of one seeding, in an order the backend can apply (folders before contents)."""

    version: str
    actions: tuple[Action, ...]

    def writes(self) -> list[Action]:
        return [a for a in self.actions if a.op != NONE]

    def conflicts(self) -> list[Action]:
        return [a for a in self.actions if a.conflict]

    def summary(self) -> dict[str, int]:
        """Decisions per reason code, e.g. for the log line and the Prometheus counter."""
        return dict(Counter(a.reason for a in self.actions))

    def decisions(self, path: str) -> list[Action]:
        return [a for a in self.actions if a.path == path]

    def expected_home(self, home: Mapping[str, Entry]) -> Manifest:
        """The home (at the scanned paths) after this plan is applied: the model of ``apply``."""
        result = dict(home)
        for action in self.actions:
            if action.op == MKDIR and action.target is not None:
                result.setdefault(action.target, DIR_ENTRY)
            elif action.op == COPY and action.target is not None and action.entry is not None:
                result[action.target] = action.entry
        return Manifest(result)

    def to_json(self) -> dict[str, Any]:
        actions = [a.to_json() for a in self.actions]
        return {"version": self.version, "summary": self.summary(), "actions": actions}


def home_paths(base: Manifest | None, new: Manifest, version: int | str) -> list[str]:
    """Every home path :func:`plan` may look at, sorted with :func:`path_key`.

    The template paths of base and new, each path's sidecar, and each path's place inside the
    sidecar folder of each of its ancestors (used when a template folder is a file in the home).
    A scanner that stops at a missing folder makes the sidecar candidates nearly free.
    """
    tag = f".template-v{check_version(version)}"
    wanted: set[str] = set(new)
    if base is not None:
        wanted.update(base)
    for path, entry in new.items():
        wanted.add(_sidecar(path, tag, entry.kind == DIR))
        parts = path.split("/")
        for i in range(1, len(parts)):
            ancestor = "/".join(parts[:i])
            wanted.add(_sidecar(ancestor, tag, True) + "/" + "/".join(parts[i:]))
    return sorted(wanted, key=path_key)


# Where a template folder's contents go.
_HERE, _REMAP, _DELETED, _BLOCKED = "here", "remap", "deleted", "blocked"


@dataclass
class _Place:
    mode: str
    target: str = ""
    created: bool = True
    parent: _Place | None = None
    path: str = ""


class _Planner:
    def __init__(self, base: Manifest, new: Manifest, home: Mapping[str, Entry], version: str,
                 restore: bool) -> None:
        self.base, self.new, self.home = base, new, home
        self.tag, self.restore = f".template-v{version}", restore
        self.root = _Place(_HERE)
        self.places: dict[str, _Place] = {}
        self.claimed: set[str] = set()
        self.actions: list[Action] = []

    def emit(self, path: str, op: str, reason: str, target: str | None = None, *,
             expect: Entry | None = None, conflict: bool = False) -> None:
        entry = self.new.get(path) or self.base.get(path)
        self.actions.append(Action(path, op, reason, target, entry, expect, conflict))
        if op != NONE and target is not None:
            self.claimed.add(target)

    def taken(self, target: str) -> bool:
        """A sidecar target that a template path or an earlier decision already uses."""
        return target in self.new or target in self.claimed

    def decide(self, path: str) -> None:
        parent, _, name = path.rpartition("/")
        place = self.places[parent] if parent else self.root
        n = self.new[path]
        if place.mode == _DELETED:
            self.emit(path, NONE, PARENT_DELETED)
            self.places[path] = place
        elif place.mode == _BLOCKED:
            self.emit(path, NONE, SIDECAR_TAKEN, conflict=True)
            self.places[path] = place
        elif place.mode == _REMAP:
            self.in_sidecar(path, n, place, f"{place.target}/{name}")
        elif n.kind == DIR:
            self.folder(path, place)
        else:
            self.file(path, n)

    def folder(self, path: str, parent: _Place) -> None:
        b, h = self.base.get(path), self.home.get(path)
        if h is None:
            if b is not None and b.kind == DIR and not self.restore:
                self.emit(path, NONE, STUDENT_DELETED)
                self.places[path] = _Place(_DELETED)
            else:
                self.emit(path, MKDIR, RESTORED if b is not None and b.kind == DIR else ADDED, path)
                self.places[path] = _Place(_HERE, path)
        elif h.kind == DIR:
            self.emit(path, NONE, UP_TO_DATE, path)
            self.places[path] = _Place(_HERE, path)
        else:
            side = _sidecar(path, self.tag, True)
            hs = self.home.get(side)
            if self.taken(side) or (hs is not None and hs.kind != DIR):
                self.emit(path, NONE, SIDECAR_TAKEN, side, conflict=True)
                self.places[path] = _Place(_BLOCKED)
                return
            place = _Place(_REMAP, side, created=hs is not None, parent=parent, path=path)
            self.places[path] = place
            eager = b is None or b.kind != DIR  # a new folder: saved beside even if it is empty
            self.emit(path, NONE, TYPE_CONFLICT, side if hs is not None else None, conflict=True)
            if eager:
                self.ensure(place)

    def file(self, path: str, n: Entry) -> None:
        b, h = self.base.get(path), self.home.get(path)
        base_file = b is not None and b.kind == FILE
        if h is None:
            if base_file and not self.restore:
                self.emit(path, NONE, STUDENT_DELETED)
            else:
                self.emit(path, COPY, RESTORED if base_file else ADDED, path)
        elif h == n:
            self.emit(path, NONE, UP_TO_DATE, path)
        elif h.kind == FILE and base_file and h == b:
            self.emit(path, COPY, UPDATED, path, expect=h)
        else:
            if h.kind != FILE or (b is not None and b.kind != FILE):
                reason = TYPE_CONFLICT
            else:
                reason = STUDENT_MODIFIED if base_file else STUDENT_CREATED
            if b is not None and b == n:  # the template did not change it: nothing new to show
                self.emit(path, NONE, reason)
            else:
                self.save_beside(path, n, reason, _sidecar(path, self.tag, False))

    def save_beside(self, path: str, n: Entry, reason: str, side: str) -> None:
        hs = self.home.get(side)
        if self.taken(side) or (hs is not None and hs != n):
            self.emit(path, NONE, SIDECAR_TAKEN, side, conflict=True)
        elif hs is None:
            self.emit(path, COPY, reason, side, conflict=True)
        else:
            self.emit(path, NONE, reason, side, conflict=True)

    def in_sidecar(self, path: str, n: Entry, parent: _Place, target: str) -> None:
        """A path whose folder is saved beside: only what the template added or changed is copied."""
        b, ht = self.base.get(path), self.home.get(target)
        clash = ht is not None and (ht.kind != n.kind or (n.kind == FILE and ht != n))
        if self.taken(target) or clash:
            self.emit(path, NONE, SIDECAR_TAKEN, target, conflict=True)
            if n.kind == DIR:
                self.places[path] = _Place(_BLOCKED)
            return
        if n.kind == DIR:
            place = _Place(_REMAP, target, created=ht is not None, parent=parent, path=path)
            self.places[path] = place
            if ht is None and (b is None or b.kind != DIR):
                self.ensure(place)
            else:
                self.emit(path, NONE, PARENT_CONFLICT, target if ht is not None else None)
        elif b is not None and b == n:
            self.emit(path, NONE, PARENT_CONFLICT)  # unchanged since base: not worth a copy
        elif ht is None:
            self.ensure(parent)
            self.emit(path, COPY, PARENT_CONFLICT, target, conflict=True)
        else:
            self.emit(path, NONE, PARENT_CONFLICT, target, conflict=True)

    def ensure(self, place: _Place) -> None:
        """Create a sidecar folder (and its sidecar parents) the first time something goes in."""
        if place.created:
            return
        if place.parent is not None:
            self.ensure(place.parent)
        self.emit(place.path, MKDIR, PARENT_CONFLICT, place.target, conflict=True)
        place.created = True

    def removed(self, path: str) -> None:
        if path in self.home:
            self.emit(path, NONE, REMOVED_IN_TEMPLATE, path)


def plan(
    base: Manifest | None,
    new: Manifest,
    home: Mapping[str, Entry],
    *,
    version: int | str,
    restore_deleted: bool = False,
) -> Plan:
    """Decide, for every template path, what seeding ``new`` into ``home`` does (rules: module doc).

    ``base`` is the manifest seeded last (None: first seed, or another template); ``home`` must
    hold the home's entries at (at least) :func:`home_paths`; a path it lacks is taken as missing.
    (Only ``home.get`` and ``in`` are used, in :func:`path_key` order, so a backend may pass a
    mapping that looks paths up on demand instead of scanning all candidates first.)
    ``version`` names the sidecars (``.template-v<version>``). Raises :class:`TemplateRefused` if
    ``new`` or ``base`` is not a well-formed template manifest.
    """
    tag = check_version(version)
    new.check_template("new template")
    if base is not None:
        base.check_template("base template")
    planner = _Planner(base if base is not None else Manifest(), new, home, tag, restore_deleted)
    for path in sorted(new, key=path_key):
        planner.decide(path)
    if base is not None:
        for path in sorted((p for p in base if p not in new), key=path_key):
            planner.removed(path)
    return Plan(tag, tuple(planner.actions))
