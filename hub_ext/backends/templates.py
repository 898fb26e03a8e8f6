"""Template storage on a file system, and the settings shared by publishing and seeding.

Why one module for both run modes: a template version is a folder of files plus its manifest,
whether that folder is under the local data dir or on the Kubernetes template volume (which the
publisher pod and the user pods' seeding containers mount). The layout is::

    <root>/c<course id>/t<template id>/v<N>-<random>/files/...      the files, read-only
    <root>/c<course id>/t<template id>/v<N>-<random>/manifest.json  the manifest (sha256 in the store)
    <root>/.staging/<random>/                               uploads being checked
    <root>/.discarded/<random>/                             refused uploads being removed

Names users choose never reach a path here: folders are named by database ids and numbers; the
files inside come from :func:`hub_ext.backends.seeding.extract_archive` or from the contents
API through :class:`Stager`, both of which refuse ``..``, absolute names and links.

A version folder is moved into place whole (``rename`` of the checked staging folder) and never
changed afterwards: the marker in a student's home names a version, which must keep meaning the
same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from traitlets import Float, Integer, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from hub_ext.backends.seeding import extract_archive, scan_template
from hub_ext.core.seeding import Manifest, SeedLimits, TemplateRefused, check_path
from hub_ext.envtraits import apply_env

__all__ = ["ClasshubTemplates", "Stager", "TemplateStorage", "manifest_digest"]

MANIFEST = "manifest.json"
FILES = "files"
STAGING = ".staging"
#: Staging folders being removed (`TemplateStorage.set_aside`).
DISCARDED = ".discarded"


class ClasshubTemplates(Configurable):
    """Template settings shared by the service (publishing) and the spawners (seeding).

    Set them as ``c.ClasshubTemplates.<name>`` in jupyterhub_config.py: the spawners read them in
    the hub, and ``configure()`` hands the same section to the classhub service, a separate
    process (hub_ext.envtraits: a value a trait cannot take stops it at start with a sentence
    naming the setting, never silently replaced).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        apply_env(self, given=kwargs)

    storage_dir = Unicode(
        "", config=True,
        help="""Folder holding published templates (local mode; $CLASSHUB_TEMPLATES_DIR).

        ``configure()`` sets it to ``<data-dir>/templates``. On Kubernetes, the template volume's
        mount path in the hub pod.
        """,
    ).tag(env="CLASSHUB_TEMPLATES_DIR")
    max_bytes = Integer(
        SeedLimits.max_bytes, config=True,
        help="""Largest template, in bytes of file content (default
        4 GiB). Publishing refuses larger folders and archives (counted as bytes actually read,
        so a compression bomb stops here); seeding refuses a stored version above it.""",
    ).tag(env="CLASSHUB_TEMPLATE_MAX_BYTES")
    max_files = Integer(
        SeedLimits.max_files, config=True,
        help="""Most files and folders in a template (default 20000),
        for publishing (folders, archive members) and seeding alike.""",
    ).tag(env="CLASSHUB_TEMPLATE_MAX_FILES")
    max_depth = Integer(
        SeedLimits.max_depth, config=True,
        help="Deepest folder nesting in a template (default 64).",
    ).tag(env="CLASSHUB_TEMPLATE_MAX_DEPTH")
    volume_claim = Unicode(
        "classhub-templates", config=True,
        help="""Kubernetes: the ReadWriteMany PVC that holds the templates (default
        ``classhub-templates``). The publisher pod mounts it
        read-write, user pods' seeding containers read-only.""",
    ).tag(env="CLASSHUB_TEMPLATES_PVC")
    mount_path = Unicode(
        "/srv/classhub-templates", config=True,
        help="""Kubernetes: where seeding containers and the publisher pod mount the template volume
        (default /srv/classhub-templates).""",
    ).tag(env="CLASSHUB_TEMPLATES_MOUNT_PATH")
    publisher_image = Unicode(
        "", config=True,
        help="""Kubernetes: image of the short-lived publisher pod that writes a new version onto
        the template volume; it needs classhub installed, e.g. the hub image. Not needed when
        ``storage_dir`` is set (the hub pod then
        mounts the volume and the service writes it itself).""",
    ).tag(env="CLASSHUB_PUBLISHER_IMAGE")
    publish_timeout = Float(
        300.0, config=True, help="Kubernetes: seconds the publisher pod may take before the publish fails."
    )
    namespace = Unicode(
        config=True,
        help="""Kubernetes: namespace of the publisher pod and the template PVC (default $POD_NAMESPACE,
        else the service account's namespace, else ``default``).""",
    )
    fetch_url = Unicode(
        config=True,
        help="""Kubernetes: the classhub service's URL as pods reach it, from which the publisher pod
        fetches the checked upload (default the service's own URL,
        $JUPYTERHUB_SERVICE_URL, e.g. http://hub:10101).""",
    )
    sidecar_threshold = Integer(
        256 * 1024**2,
        config=True,
        help="""Kubernetes: templates up to this many bytes are copied by an init container
        (JupyterLab opens with every file in place); larger ones by a sidecar container that
        copies while JupyterLab starts, so the student is not kept waiting.""",
    )
    seed_image = Unicode(
        "",
        config=True,
        help="""Kubernetes: image of the seeding container; empty means the server's own image
        (classhub user images include classhub, which the seeding command needs).""",
    )
    seed_python = Unicode(
        "python3", config=True,
        help="Kubernetes: the Python of ``seed_image`` (runs ``-m hub_ext.backends.templates_cli``).",
    ).tag(env="CLASSHUB_TEMPLATES_PYTHON")

    @validate("max_bytes", "max_files", "max_depth")
    def _at_least_one(self, proposal: Any) -> int:
        if proposal.value < 1:
            raise TraitError(f"{proposal.trait.name} must be at least 1")
        return proposal.value

    @default("fetch_url")
    def _fetch_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "")  # JupyterHub sets it for its services

    @default("namespace")
    def _namespace(self) -> str:
        if os.environ.get("POD_NAMESPACE"):
            return os.environ["POD_NAMESPACE"]
        try:
            return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
        except OSError:
            return "default"

    @property
    def writes_through_pods(self) -> bool:
        """Kubernetes without the volume mounted in the hub pod: a publisher pod writes versions.
        The mode is the service's (``ClasshubService.mode``, its parent here)."""
        mode = getattr(self.parent, "mode", None) or os.environ.get("CLASSHUB_MODE")
        return mode == "kubernetes" and not self.storage_dir

    @property
    def limits(self) -> SeedLimits:
        return SeedLimits(max_files=self.max_files, max_bytes=self.max_bytes, max_depth=self.max_depth)

    def storage(self) -> TemplateStorage:
        if not self.storage_dir:
            raise RuntimeError("ClasshubTemplates.storage_dir is not set")
        return TemplateStorage(self.storage_dir)


def manifest_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def version_location(course_id: int, template_id: int, version: int) -> str:
    """Where a version lives, relative to the storage root (ids only: no user-chosen names).

    The random tail makes every location new: a publish that failed after storing its files
    (the database refused the version) never blocks the next one, and the store maps numbers to
    locations.
    """
    return f"c{int(course_id)}/t{int(template_id)}/v{int(version)}-{secrets.token_hex(4)}"


class TemplateStorage:
    """Published template versions under ``root`` (see the module docstring for the layout)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def staging(self) -> Path:
        """A fresh, empty staging folder for an upload (removed by :meth:`discard` or moved)."""
        base = self.root / STAGING
        base.mkdir(parents=True, exist_ok=True, mode=0o755)
        path = base / secrets.token_hex(8)
        path.mkdir(mode=0o755)
        return path

    @staticmethod
    def discard(staged: Path) -> None:
        shutil.rmtree(staged, ignore_errors=True)

    @staticmethod
    def set_aside(staged: Path) -> Path:
        """Move a staging folder out of staging (one rename, beside it in ``.discarded``) and
        return where it is now: for :meth:`discard` on a worker thread, so an event loop never
        waits for an upload's files to be removed (docs/architecture.md, rule 7)."""
        aside = staged.parent.parent / DISCARDED
        try:
            aside.mkdir(mode=0o700, exist_ok=True)
            os.rename(staged, aside / staged.name)
        except OSError:  # gone already, or elsewhere: discard it where it is
            return staged
        return aside / staged.name

    def extract(self, archive: str | os.PathLike[str], staged: Path, limits: SeedLimits) -> Manifest:
        """Unpack an uploaded archive into ``staged/files``; refused archives leave nothing."""
        return extract_archive(archive, staged / FILES, limits)

    def seal(self, staged: Path, limits: SeedLimits) -> tuple[Manifest, str]:
        """Scan ``staged/files`` (links, devices, limits refused) and write its manifest.

        Returns the manifest and the sha256 of ``manifest.json`` (kept in the store).
        """
        manifest = scan_template(staged / FILES, limits)
        manifest.check_template("the template")
        data = json.dumps(manifest.to_json(), ensure_ascii=False, sort_keys=True).encode(
            "utf-8", "surrogateescape")
        (staged / MANIFEST).write_bytes(data)
        return manifest, manifest_digest(data)

    def commit(self, staged: Path, location: str) -> Path:
        """Move a sealed staging folder to ``location``; never replaces an existing version."""
        check_path(location)
        target = self.root / location
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        if target.exists():
            raise FileExistsError(f"template version {location} already exists")
        os.rename(staged, target)
        return target

    def remove(self, location: str) -> None:
        check_path(location)
        shutil.rmtree(self.root / location, ignore_errors=True)

    def files(self, location: str) -> Path:
        return self.root / check_path(location) / FILES

    def manifest(self, location: str, digest: str, limits: SeedLimits | None = None) -> Manifest:
        """The stored manifest of a version, checked against the sha256 the store recorded."""
        return read_manifest(self.root / check_path(location) / MANIFEST, digest, limits)


def read_manifest(path: str | os.PathLike[str], digest: str, limits: SeedLimits | None = None) -> Manifest:
    """Read a version's ``manifest.json``; :class:`TemplateRefused` if it is not what was published."""
    data = Path(path).read_bytes()
    if manifest_digest(data) != digest:
        raise TemplateRefused(f"{os.fspath(path)} is not the manifest that was published (sha256 differs)")
    manifest = Manifest.from_json(json.loads(data.decode("utf-8", "surrogateescape")))
    if limits is not None and (len(manifest) > limits.max_files or manifest.total_bytes > limits.max_bytes):
        raise TemplateRefused(
            f"the template has {len(manifest)} entries and {manifest.total_bytes} bytes, over "
            f"the limits ({limits.max_files} entries, {limits.max_bytes} bytes)")
    return manifest


class Stager:
    """Writes files fetched one by one (from a server's contents API) into a staging folder.

    Each path is checked (:func:`check_path`: no ``..``, no absolute names), folders are created
    without following links (the staging folder is new and only this object writes to it), and
    the byte, file and depth budgets are charged before anything is written.
    """

    def __init__(self, root: Path, limits: SeedLimits) -> None:
        self.root = root / FILES
        self.root.mkdir(mode=0o755)
        self.limits = limits
        self.entries = 0
        self.bytes = 0

    def _charge(self, path: str, size: int = 0) -> Path:
        check_path(path)
        parts = path.split("/")
        if len(parts) >= self.limits.max_depth:
            raise TemplateRefused(f"{path!r}: deeper than {self.limits.max_depth} folders")
        if self.entries + 1 > self.limits.max_files:
            raise TemplateRefused(f"{path!r}: more than {self.limits.max_files} files and folders")
        if self.bytes + size > self.limits.max_bytes:
            raise TemplateRefused(f"{path!r}: the template is larger than {self.limits.max_bytes} bytes")
        self.entries, self.bytes = self.entries + 1, self.bytes + size
        return self.root.joinpath(*parts)

    def folder(self, path: str) -> None:
        target = self._charge(path)
        target.mkdir(mode=0o755)

    def file(self, path: str, data: bytes) -> None:
        target = self._charge(path, len(data))
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with open(fd, "wb") as out:
            out.write(data)
