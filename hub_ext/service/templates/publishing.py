"""Publishing a template version: from a folder of the teacher's running server (read through its
contents API with the teacher's own credentials) or from an uploaded archive; checked, staged,
then stored (or, on Kubernetes without the volume in the hub, written by a publisher pod that
fetches the checked upload once from `UploadHandler`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import os
import secrets
import tarfile
import tempfile
from collections.abc import Awaitable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jupyterhub.utils import url_path_join
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext import store
from hub_ext.backends.templates import (
    FILES,
    ClasshubTemplates,
    Stager,
    TemplateStorage,
    version_location,
)
from hub_ext.core import authz, bodies
from hub_ext.core import templates as rules
from hub_ext.core.seeding import TemplateRefused
from hub_ext.service import body_models
from hub_ext.service.declare import PUBLIC, needs, refuses
from hub_ext.service.handlers import APIHandler
from hub_ext.service.templates.base import (
    _FETCH_PARALLEL,
    _JSON_BODY_MAX,
    TemplatesBase,
    _now,
)
from hub_ext.service.templates.bodies import PublishFromServer, PublishMetadata
from hub_ext.store.template_models import (
    Template,
    TemplateVersion,
    find_template,
    version_json,
)

_NOT_RUNNING = ("Your server is not running; start it, put the template's files in a folder, and "
                "publish again.")


class ContentsReader:
    """Reads a folder of a single-user server through its contents API, with the caller's token.

    Parsing the answers, decoding files and writing them to the staging folder run in worker
    threads: a teacher publishing a 4 GiB folder must not stall the service for everyone else."""

    def __init__(self, base: str, token: str) -> None:
        self.base = base.rstrip("/") + "/api/contents/"
        self.headers = {"Authorization": f"token {token}"}
        # One file is one JSON response (base64): allow a file up to the template limit.
        self.client = AsyncHTTPClient(force_instance=True, max_body_size=2**31 - 1)

    async def get(self, path: str, **query: str) -> dict[str, Any]:
        url = self.base + quote(path, safe="/") + "?" + "&".join(f"{k}={v}" for k, v in query.items())
        try:
            response = await self.client.fetch(url, headers=self.headers, request_timeout=120,
                                               follow_redirects=False)
        except HTTPClientError as e:
            if e.code in (401, 403):
                raise web.HTTPError(403, "Your server refused to let classhub read your files with your "
                                         "credentials; log in again, or send a token with the scope "
                                         "access:servers!user.") from None
            if e.code == 404:
                raise web.HTTPError(404, f"No folder {path or '/'} in your server.") from None
            raise web.HTTPError(502, f"Your server answered {e.code} when classhub read {path!r}.") from None
        try:
            return await asyncio.to_thread(bodies.parse_json, response.body, max_depth=8)
        except bodies.BodyError:
            raise web.HTTPError(502, f"Your server's answer for {path!r} is not the JSON of its "
                                     "contents API.") from None

    async def copy_into(self, folder: str, stager: Stager) -> None:
        """Copy ``folder`` recursively (hidden files are not listed by jupyter-server)."""
        root = await self.get(folder, content="1")
        if root.get("type") != "directory":
            raise rules.TemplateError(f"{folder!r} in your server is a file; publish a folder.")
        files: list[tuple[str, str]] = []
        listed, size = 0, 0  # refuse from the listings, before downloading anything
        pending = [(root, "")]
        while pending:
            model, rel = pending.pop()
            for item in sorted(model.get("content") or [], key=lambda m: m["name"]):
                sub = f"{rel}{item['name']}"
                listed, size = listed + 1, size + int(item.get("size") or 0)
                if listed > stager.limits.max_files:
                    raise TemplateRefused(f"{sub!r}: more than {stager.limits.max_files} files and folders")
                if size > stager.limits.max_bytes:
                    raise TemplateRefused(f"{sub!r}: the folder has over {stager.limits.max_bytes} bytes")
                if item.get("type") == "directory":
                    await asyncio.to_thread(stager.folder, sub)
                    pending.append((await self.get(item["path"], content="1"), sub + "/"))
                else:
                    files.append((item["path"], sub))
        semaphore = asyncio.Semaphore(_FETCH_PARALLEL)

        async def fetch(path: str, rel: str) -> tuple[str, bytes]:
            async with semaphore:
                model = await self.get(path, content="1", type="file", format="base64")
                return rel, await asyncio.to_thread(base64.b64decode, model.get("content") or "")

        def store_batch(batch: list[tuple[str, bytes]]) -> None:
            for rel, data in batch:
                stager.file(rel, data)

        for start in range(0, len(files), 64):  # bounded memory: a batch at a time
            batch = await asyncio.gather(*(fetch(p, r) for p, r in files[start:start + 64]))
            await asyncio.to_thread(store_batch, batch)


# ---------------------------------------------------------------------------------------------
# Handlers


class PublishHandler(TemplatesBase):
    """``POST /api/courses/<course>/templates/<name>/versions``: publish the next version.

    JSON body ``{"source": {"server_path": "lab1"}, "home_folder": "lab1", "image", "profile",
    "start_command", "description", "staff_only"}`` copies a folder of the caller's running server
    (its files land in ``home_folder`` of each home; "" or none: the top of the home;
    ``staff_only``: the course's students see it only once an assignment released from it opens);
    any other body is an archive (zip or tar, optionally compressed) with the same fields as query
    arguments (``start_command`` as a JSON list, ``staff_only`` as true or false). Teachers of the
    course and admins.

    Who may publish is decided before the body is read: a refused caller's archive is read and
    dropped, never stored (see APIHandler.refuse_after_body); an archive over the size limit is
    answered 413.
    """

    _staged = None
    _archive = None

    async def prepare(self) -> None:
        if self.request.method != "POST":
            return super().prepare()
        try:
            await self._prepare_upload()
        except (web.HTTPError, body_models.BodyError) as e:  # a BodyError is a 400 (handlers.BAD_REQUEST)
            self._cleanup()
            self.refuse_after_body(e)

    @refuses(rules.TemplateError)
    async def _prepare_upload(self) -> None:
        course, name = self.path_args
        self.caller = await self.authorize(authz.PUBLISH_TEMPLATE, course=course)
        rules.require_name(name)
        await self.db(self._require_course, course)
        limits = self.templates.limits
        kind = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            self.start_body(_JSON_BODY_MAX)
            return
        if kind.startswith("multipart/"):
            raise web.HTTPError(415, "Send the archive itself as the body (Content-Type "
                                     "application/zip or application/x-tar), not a multipart form.")
        # Headers and padding of an archive take room too: allow them on top of the content limit.
        self.start_body(limits.max_bytes + 1024 * limits.max_files + 1024 * 1024)
        self._body_buffer = None  # the archive goes to a file, not to memory
        self._staged = self.templates.storage().staging()
        self._archive = open(self._staged / "upload", "wb")  # noqa: SIM115 - closed in post/on_finish

    def data_received(self, chunk: bytes) -> Awaitable[int] | None:
        if self._archive is None:
            super().data_received(chunk)
        elif self.accept_chunk(chunk):
            # tornado awaits the write before it reads on (flow control); the disk is never
            # waited on on the loop (docs/architecture.md, rule 7)
            return asyncio.to_thread(self._archive.write, chunk)
        return None

    def on_finish(self) -> None:
        self._cleanup()

    def on_connection_close(self) -> None:
        super().on_connection_close()  # ends an answer's linger at once (APIHandler.finish)
        self._cleanup()

    def _cleanup(self) -> None:
        """Forget the upload: the staged folder leaves staging at once (one rename) and its
        files are removed, with the archive's file closed, on a worker thread: an upload can be
        thousands of files or a large archive, and removing them must not stall the loop
        (docs/architecture.md, rule 7)."""
        archive, staged = self._archive, self._staged
        self._archive = self._staged = None
        if archive is None and staged is None:
            return
        if staged is not None:
            staged = TemplateStorage.set_aside(staged)

        def remove() -> None:
            if archive is not None:
                archive.close()
            if staged is not None:
                TemplateStorage.discard(staged)

        asyncio.get_running_loop().run_in_executor(None, remove)

    def _require_course(self, course: str) -> None:
        with self.settings["sessions"]() as session:
            self._course(session, course)

    @refuses(rules.TemplateError)
    @needs(authz.PUBLISH_TEMPLATE, course="course")
    async def post(self, course: str, name: str) -> None:
        storage = _staging_storage(self.templates)
        limits = self.templates.limits
        if self._archive is None:
            body = self.body_as(PublishFromServer)
            meta, folder, home_folder = body.columns(), body.source.server_path, body.home_folder
            self._staged = storage.staging()
            reader = ContentsReader(await self.server_url(_NOT_RUNNING), self.caller_token())
            try:
                await reader.copy_into(folder, Stager(self._staged, limits))
            except TemplateRefused as e:
                raise rules.TemplateError(_not_published(e, self._staged)) from None
            finally:
                reader.client.close()
            source = f"server:{self.caller.name}:/{folder}"
        else:
            assert self._archive is not None and self._staged is not None
            await asyncio.to_thread(self._archive.close)
            self._archive = None
            if self._body_received == 0:
                raise rules.TemplateError('The body is empty: send an archive, or JSON {"source": '
                                          '{"server_path": "..."}} with Content-Type application/json.')
            given = body_models.parse(PublishMetadata, self._query_metadata())
            meta, home_folder = given.columns(), given.home_folder
            try:
                await asyncio.to_thread(storage.extract, self._staged / "upload", self._staged, limits)
            except TemplateRefused as e:
                raise rules.TemplateError(_not_published(e, self._staged)) from None
            await asyncio.to_thread(os.unlink, self._staged / "upload")
            source = "archive"
        if home_folder:  # the files land in this folder of each home (docs/templates.md)
            await asyncio.to_thread(_nest, self._staged / FILES, home_folder)
        try:
            manifest, digest = await asyncio.to_thread(storage.seal, self._staged, limits)
        except TemplateRefused as e:
            raise rules.TemplateError(_not_published(e, self._staged)) from None
        location = None
        if self.templates.writes_through_pods:
            location = await self._install_with_pod(course, name, digest)
        result = await self.db(self._record, course, name, meta, source, manifest, digest, location)
        self.write_json(result, 201)

    async def _install_with_pod(self, course: str, name: str, digest: str) -> str:
        """Kubernetes: a publisher pod fetches the checked tree and stores it on the volume."""
        from hub_ext.backends.kubernetes import client
        from hub_ext.backends.kubernetes.templates import PublishFailed, publish_with_pod

        course_id, template_id, expected = await self.db(self._ensure_template, course, name)
        location = version_location(course_id, template_id, expected)
        staged = self._staged
        assert staged is not None
        await asyncio.to_thread(_tar_files, staged)
        upload, secret = secrets.token_hex(16), secrets.token_hex(24)
        uploads = self.settings.setdefault("template_uploads", {})
        uploads[upload] = (staged / "upload.tar", secret)
        prefix = self.settings.get("prefix", "/services/classhub/")
        url = self.templates.fetch_url.rstrip("/") + url_path_join(prefix, "api/template-uploads", upload)
        try:
            await publish_with_pod(client.core_v1(), self.templates, url=url, token=secret,
                                   location=location, digest=digest)
        except PublishFailed as e:
            raise web.HTTPError(500, f"Not published: the publisher pod failed ({e}).") from None
        finally:
            uploads.pop(upload, None)
        return location

    def _ensure_template(self, course: str, name: str) -> tuple[int, int, int]:
        with self.settings["sessions"].begin() as session:
            row = self._course(session, course)
            template = find_template(session, course, name)
            if template is None:
                template = Template(course_id=row.id, name=name, created_at=_now(),
                                    created_by=self.caller.name)
                session.add(template)
                session.flush()
            number = 1 + (session.scalar(select(func.max(TemplateVersion.version))
                                         .where(TemplateVersion.template_id == template.id)) or 0)
            return row.id, template.id, number

    def _query_metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key in ("image", "profile", "description", "start_command", "home_folder", "staff_only"):
            value = self.get_query_argument(key, None)
            if value is not None:
                data[key] = value
        if "start_command" in data:  # a JSON list; anything else is refused by PublishMetadata
            with contextlib.suppress(bodies.BodyError):
                data["start_command"] = bodies.parse_json(data["start_command"])
        return data

    def _record(self, course: str, name: str, meta: dict[str, Any], source: str, manifest, digest: str,
                stored_at: str | None):
        """Number the version and record it; ``stored_at``: where a publisher pod already put it
        (else the staged folder is moved into place here, inside the transaction)."""
        now = _now()
        for _ in range(5):  # two teachers publishing at once: the loser takes the next number
            try:
                with self.settings["sessions"].begin() as session:
                    row = self._course(session, course)
                    template = find_template(session, course, name)
                    if template is None:
                        template = Template(course_id=row.id, name=name, created_at=now,
                                            created_by=self.caller.name)
                        session.add(template)
                        session.flush()
                    number = 1 + (session.scalar(select(func.max(TemplateVersion.version))
                                                 .where(TemplateVersion.template_id == template.id)) or 0)
                    location = stored_at or version_location(row.id, template.id, number)
                    version = TemplateVersion(
                        template_id=template.id, version=number, source=source, location=location,
                        manifest_sha256=digest, files=manifest.file_count, bytes=manifest.total_bytes,
                        created_at=now, created_by=self.caller.name, **meta)
                    session.add(version)
                    session.flush()
                    if stored_at is None:
                        self.templates.storage().commit(self._staged, location)
                        self._staged = None
                    store.record(session, self.caller.name, "template_published", now, course=course,
                                 template=name, version=number, files=manifest.file_count,
                                 bytes=manifest.total_bytes, source=source, manifest_sha256=digest)
                    return version_json(course, name, version)
            except (IntegrityError, FileExistsError):
                if self._staged is None and stored_at is None:  # moved, then the commit failed
                    raise
                continue
        raise web.HTTPError(409, "Another version of this template was being published; publish again.")


def _not_published(refusal: TemplateRefused, staged: Path | None) -> str:
    """The refusal as a sentence without the service's own folders (where an upload is staged
    is nobody's business): the archive and the template are named as such."""
    text = str(refusal)
    if staged is not None:
        for path, name in ((staged / "upload", "the archive"), (staged / FILES, "the template"),
                           (staged, "the upload")):
            for kind in ("archive ", "template ", ""):
                text = text.replace(f"{kind}{os.fspath(path)!r}", name)
            text = text.replace(os.fspath(path), name)
    return f"Not published: {text}. Nothing was stored."


def _nest(files: Path, folder: str) -> None:
    """Move the staged files one folder down, into ``folder`` (``lab1`` or ``course/lab1``), so
    they land there in each home. Only the service writes the staging folder (a new one per
    publish), and ``folder`` was checked by the body model: no ``..``, no absolute path."""
    aside = files.with_name(files.name + ".nesting")
    files.rename(aside)
    target = files.joinpath(*folder.split("/"))
    target.parent.mkdir(mode=0o755, parents=True)
    aside.rename(target)
    target.chmod(0o755)


def _staging_storage(settings: ClasshubTemplates) -> TemplateStorage:
    """Where uploads are checked: the storage itself, or (publisher pods) a local scratch folder."""
    if settings.writes_through_pods:
        return TemplateStorage(Path(tempfile.gettempdir()) / "classhub-template-staging")
    return settings.storage()


def _tar_files(staged: Path) -> None:
    """The checked tree as an uncompressed tar, for the publisher pod to fetch."""
    with tarfile.open(staged / "upload.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(staged / "files", arcname=".")


class UploadHandler(APIHandler):
    """``GET /api/template-uploads/<id>``: the publisher pod fetches a checked upload, once.

    Not for people: the id and the ``Authorization: token <secret>`` exist only while one publish
    waits for its pod; anything else is a 404. The token is spent by its first use: a second
    fetch (a copy of the token in another pod, a replay) is a 404 too, so the tree (which may
    hold what students must not see yet) leaves the service once, to the publisher pod.
    """

    @needs(PUBLIC)  # the one-time token of the publish in progress is checked here
    async def get(self, upload: str) -> None:
        uploads = self.settings.get("template_uploads", {})
        found = uploads.get(upload)
        header = self.request.headers.get("Authorization", "")
        if found is None or not hmac.compare_digest(header.encode(), f"token {found[1]}".encode()):
            raise web.HTTPError(404, "No such upload.")
        uploads.pop(upload, None)  # spent (before any await: no second request gets it)
        self.set_header("Content-Type", "application/x-tar")
        with open(found[0], "rb") as data:
            while chunk := await asyncio.to_thread(data.read, 1 << 20):
                self.write(chunk)
                await self.flush()
        self.finish()
