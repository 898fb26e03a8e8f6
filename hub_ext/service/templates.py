"""The classhub service's templates API: publish, list, start from, re-seed, course settings.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().

Thin handlers (docs/architecture.md, rule 3): who may do what is decided by hub_ext.core.templates, files are
checked and stored by hub_ext.backends.local.templates (the seeding engine's limits), versions
and the audit log are in the store. Seeding itself happens in the spawner, when the server
starts with a ``template`` option: starting from a template and re-seeding are both "start my
server with this template", so one code path seeds in both run modes.

Publishing from a folder reads the teacher's running server through its contents API with the
caller's own credentials: the token the request came with (a personal API token, or the OAuth
token the service holds for a browser session, which may access the caller's own servers
because the service's ``oauth_client_allowed_scopes`` include ``access:servers!user``). The
service's own token is used only to find where the server listens (the hub's proxy table).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import re
import secrets
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jupyterhub.utils import url_path_join
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from tornado import web
from tornado.escape import xhtml_escape
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext import store
from hub_ext.backends.local.templates import (
    FILES,
    ClasshubTemplates,
    Stager,
    TemplateStorage,
    version_location,
)
from hub_ext.core import authz, bodies
from hub_ext.core import templates as rules
from hub_ext.core.seeding import TemplateRefused
from hub_ext.service.apidoc import json_body, ok, op
from hub_ext.service.handlers import APIHandler
from hub_ext.service.hubapi import HubAPIError
from hub_ext.store.models import AuditLog, Course
from hub_ext.store.template_models import (
    Template,
    TemplateSettings,
    TemplateVersion,
    find_template,
    find_version,
    reseed_mode,
    version_json,
)

_COURSE = r"courses/([^/]+)"
_TEMPLATE = rf"{_COURSE}/templates/([^/]+)"
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
                    r"(@sha256:[0-9a-f]{64})?$")
_PROFILE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_JSON_BODY_MAX = 1024 * 1024
_FETCH_PARALLEL = 8


def _now() -> datetime:
    return datetime.now(timezone.utc)


def settings_of(app_settings: dict[str, Any]) -> ClasshubTemplates:
    """The service's ClasshubTemplates (from its environment; see ClasshubTemplates)."""
    if "classhub_templates" not in app_settings:
        app_settings["classhub_templates"] = ClasshubTemplates()
    return app_settings["classhub_templates"]


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


# ---------------------------------------------------------------------------------------------
# Publishing input


def _metadata(data: dict[str, Any]) -> dict[str, Any]:
    """Checked image, profile, start command and description; 400 naming the bad field."""
    unknown = sorted(set(data) - {"image", "profile", "start_command", "description", "source"})
    if unknown:
        raise web.HTTPError(400, f"Unknown field(s) {', '.join(unknown)}; send image, profile, "
                                 "start_command, description and source.")
    image, profile = data.get("image") or None, data.get("profile") or None
    command, description = data.get("start_command") or None, data.get("description") or ""
    if image is not None and (not isinstance(image, str) or len(image) > 255 or not _IMAGE.match(image)):
        raise web.HTTPError(400, "image must be a container image reference, e.g. "
                                 "'quay.io/jupyter/scipy-notebook:2024-10-07'.")
    if profile is not None and (not isinstance(profile, str) or not _PROFILE.match(profile)):
        raise web.HTTPError(400, "profile must be the slug of a profile of the spawn form, e.g. 'cpu'.")
    if command is not None and (
        not isinstance(command, list) or not command or len(command) > 64
        or not all(isinstance(a, str) and 0 < len(a) <= 1024 for a in command)
    ):
        raise web.HTTPError(400, 'start_command must be a list of strings, e.g. ["jupyterhub-singleuser"].')
    if not isinstance(description, str) or len(description) > 4000:
        raise web.HTTPError(400, "description must be a text of at most 4000 characters.")
    return {"image": image, "profile": profile, "start_command": command, "description": description}


def _server_path(source: Any) -> str:
    """The folder of the teacher's server to publish ('' = the server's root)."""
    if not isinstance(source, dict) or set(source) != {"server_path"} or not isinstance(
            source["server_path"], str):
        raise web.HTTPError(400, 'source must be {"server_path": "<folder in your server>"}; to upload an '
                                 "archive, send it as the body (application/zip or application/x-tar).")
    path = source["server_path"].strip("/")
    if path and any(part in ("", ".", "..") for part in path.split("/")):
        raise web.HTTPError(400, "server_path must be a folder inside your server, without '..'.")
    return path


class ContentsReader:
    """Reads a folder of a single-user server through its contents API, with the caller's token."""

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
            return bodies.parse_json(response.body, max_depth=8)
        except bodies.BodyError:
            raise web.HTTPError(502, f"Your server's answer for {path!r} is not the JSON of its "
                                     "contents API.") from None

    async def copy_into(self, folder: str, stager: Stager) -> None:
        """Copy ``folder`` recursively (hidden files are not listed by jupyter-server)."""
        root = await self.get(folder, content="1")
        if root.get("type") != "directory":
            raise web.HTTPError(400, f"{folder!r} in your server is a file; publish a folder.")
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
                    stager.folder(sub)
                    pending.append((await self.get(item["path"], content="1"), sub + "/"))
                else:
                    files.append((item["path"], sub))
        semaphore = asyncio.Semaphore(_FETCH_PARALLEL)

        async def fetch(path: str, rel: str) -> tuple[str, bytes]:
            async with semaphore:
                model = await self.get(path, content="1", type="file", format="base64")
            return rel, base64.b64decode(model.get("content") or "")

        for start in range(0, len(files), 64):  # bounded memory: a batch at a time
            for rel, data in await asyncio.gather(*(fetch(p, r) for p, r in files[start:start + 64])):
                stager.file(rel, data)


# ---------------------------------------------------------------------------------------------
# Handlers


class TemplatesBase(APIHandler):
    """Authorization with hub_ext.core.templates, store access in a thread."""

    @property
    def templates(self) -> ClasshubTemplates:
        return settings_of(self.settings)

    async def check(self, decide, course: str):
        caller = await self.courses.caller(self.require_user())
        verdict = decide(caller, course)
        if not verdict:
            raise web.HTTPError(verdict.status, verdict.message)
        return caller

    async def db(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    def _course(self, session, course: str) -> Course:
        row = session.scalars(select(Course).where(Course.name == course)).one_or_none()
        if row is None:
            raise web.HTTPError(404, "No course %s; GET /api/courses lists the courses.", course)
        return row

    def _template_name(self, name: str) -> str:
        problem = rules.name_problem(name)
        if problem:
            raise web.HTTPError(400, _sentence(problem))
        return name


class TemplateListHandler(TemplatesBase):
    """``GET /api/courses/<course>/templates``: the course's templates and their versions."""

    async def get(self, course: str) -> None:
        await self.check(rules.may_read, course)
        self.write_json(await self.db(self._list, course))

    def _list(self, course: str) -> list[dict[str, Any]]:
        with self.settings["sessions"]() as session:
            row = self._course(session, course)
            found = session.scalars(select(Template).where(Template.course_id == row.id)
                                    .order_by(Template.name)).all()
            return [_template_json(course, t) for t in found]


def _template_json(course: str, template: Template) -> dict[str, Any]:
    versions = [version_json(course, template.name, v) for v in template.versions]
    return {"course": course, "name": template.name, "latest": versions[-1] if versions else None,
            "versions": versions}


class TemplateHandler(TemplatesBase):
    """``GET /api/courses/<course>/templates/<name>``: one template with all its versions."""

    async def get(self, course: str, name: str) -> None:
        await self.check(rules.may_read, course)
        self.write_json(await self.db(self._get, course, self._template_name(name)))

    def _get(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            self._course(session, course)
            template = find_template(session, course, name)
            if template is None:
                raise web.HTTPError(404, f"No template {name} in {course}; GET "
                                         f"/api/courses/{course}/templates lists them.")
            return _template_json(course, template)


class VersionHandler(TemplatesBase):
    """``GET /api/courses/<course>/templates/<name>/versions/<n>``: one version."""

    async def get(self, course: str, name: str, version: str) -> None:
        await self.check(rules.may_read, course)
        name = self._template_name(name)
        number = int(version.lstrip("v")) if re.fullmatch(r"v?[0-9]{1,7}", version) else None
        # what cannot be a version number names no version: the same 404 as a missing one
        found = await self.db(self._get, course, name, number) if number else None
        if found is None:
            raise web.HTTPError(404, "No version %s of template %s in %s; versions are numbers like 2 "
                                "(or v2).", version[:40], name, course)
        self.write_json(found)

    def _get(self, course: str, name: str, number: int) -> dict[str, Any] | None:
        with self.settings["sessions"]() as session:
            self._course(session, course)
            v = find_version(session, course, name, number)
            return version_json(course, name, v) if v is not None else None


class PublishHandler(TemplatesBase):
    """``POST /api/courses/<course>/templates/<name>/versions``: publish the next version.

    JSON body ``{"source": {"server_path": "lab1"}, "image", "profile", "start_command",
    "description"}`` copies a folder of the caller's running server; any other body is an
    archive (zip or tar, optionally compressed) with the same fields as query arguments
    (``start_command`` as a JSON list). Teachers of the course and admins.

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
        except web.HTTPError as e:
            self._cleanup()
            self.refuse_after_body(e)

    async def _prepare_upload(self) -> None:
        course, name = self.path_args
        self.caller = await self.check(rules.may_publish, course)
        self._template_name(name)
        await self.db(self._require_course, course)
        limits = self.templates.limits
        kind = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            self.start_body(_JSON_BODY_MAX)
            return
        if kind.startswith("multipart/"):
            raise web.HTTPError(400, "Send the archive itself as the body (Content-Type "
                                     "application/zip or application/x-tar), not a multipart form.")
        # Headers and padding of an archive take room too: allow them on top of the content limit.
        self.start_body(limits.max_bytes + 1024 * limits.max_files + 1024 * 1024)
        self._body_buffer = None  # the archive goes to a file, not to memory
        self._staged = self.templates.storage().staging()
        self._archive = open(self._staged / "upload", "wb")  # noqa: SIM115 - closed in post/on_finish

    def data_received(self, chunk: bytes) -> None:
        if self._archive is None:
            super().data_received(chunk)
        elif self.accept_chunk(chunk):
            self._archive.write(chunk)

    def on_finish(self) -> None:
        self._cleanup()

    def on_connection_close(self) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        if self._archive is not None:
            self._archive.close()
            self._archive = None
        if self._staged is not None:
            TemplateStorage.discard(self._staged)
            self._staged = None

    def _require_course(self, course: str) -> None:
        with self.settings["sessions"]() as session:
            self._course(session, course)

    async def post(self, course: str, name: str) -> None:
        storage = _staging_storage(self.templates)
        limits = self.templates.limits
        if self._archive is None:
            data = self.json_body()
            if not isinstance(data, dict):
                raise web.HTTPError(400, 'The body must be {"source": {"server_path": "lab1"}, ...}.')
            meta = _metadata(data)
            folder = _server_path(data.get("source"))
            self._staged = storage.staging()
            reader = ContentsReader(await self._server_url(), self._caller_token())
            try:
                await reader.copy_into(folder, Stager(self._staged, limits))
            except TemplateRefused as e:
                raise web.HTTPError(400, _not_published(e, self._staged)) from None
            finally:
                reader.client.close()
            source = f"server:{self.caller.name}:/{folder}"
        else:
            assert self._archive is not None and self._staged is not None
            self._archive.close()
            self._archive = None
            if self._body_received == 0:
                raise web.HTTPError(400, 'The body is empty: send an archive, or JSON {"source": '
                                         '{"server_path": "..."}} with Content-Type application/json.')
            meta = _metadata(self._query_metadata())
            try:
                await asyncio.to_thread(storage.extract, self._staged / "upload", self._staged, limits)
            except TemplateRefused as e:
                raise web.HTTPError(400, _not_published(e, self._staged)) from None
            os.unlink(self._staged / "upload")
            source = "archive"
        try:
            manifest, digest = await asyncio.to_thread(storage.seal, self._staged, limits)
        except TemplateRefused as e:
            raise web.HTTPError(400, _not_published(e, self._staged)) from None
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
        for key in ("image", "profile", "description", "start_command"):
            value = self.get_query_argument(key, None)
            if value is not None:
                data[key] = value
        if "start_command" in data:
            try:
                data["start_command"] = bodies.parse_json(data["start_command"])
            except bodies.BodyError:
                raise web.HTTPError(400, 'start_command must be a JSON list, e.g. ["jupyterhub-singleuser"].'
                                    ) from None
        return data

    def _caller_token(self) -> str:
        token = self.hub_auth.get_token(self)
        if not token:
            raise web.HTTPError(401, "Log in again: classhub needs your own credentials to read your server.")
        return token

    async def _server_url(self) -> str:
        """Where the caller's default server listens, from the hub's proxy table."""
        server = await self.hub.server(self.caller.name)
        if not server or not server.get("ready"):
            raise web.HTTPError(409, "Your server is not running; start it, put the template's files in a "
                                     "folder, and publish again.")
        prefix = server["url"]
        try:
            routes = await self.hub.get("proxy")
        except HubAPIError:
            raise web.HTTPError(502, "classhub could not read the hub's proxy table (it needs the scope "
                                     "'proxy').") from None
        route = routes.get(prefix) or routes.get(prefix.rstrip("/"))
        if not route or (route.get("data") or {}).get("user") != self.caller.name:
            raise web.HTTPError(409, "Your server has no route in the proxy yet; try again in a moment.")
        return route["target"].rstrip("/") + prefix

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
                        manifest_sha256=digest, files=len(manifest), bytes=manifest.total_bytes,
                        created_at=now, created_by=self.caller.name, **meta)
                    session.add(version)
                    session.flush()
                    if stored_at is None:
                        self.templates.storage().commit(self._staged, location)
                        self._staged = None
                    store.record(session, self.caller.name, "template_published", now, course=course,
                                 template=name, version=number, files=len(manifest),
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
    waits for its pod; anything else is a 404.
    """

    async def get(self, upload: str) -> None:
        found = self.settings.get("template_uploads", {}).get(upload)
        header = self.request.headers.get("Authorization", "")
        if found is None or not hmac.compare_digest(header.encode(), f"token {found[1]}".encode()):
            raise web.HTTPError(404, "No such upload.")
        self.set_header("Content-Type", "application/x-tar")
        with open(found[0], "rb") as data:
            while chunk := data.read(1 << 20):
                self.write(chunk)
                await self.flush()
        self.finish()


class StartHandler(TemplatesBase):
    """``POST /api/courses/<course>/templates/<name>/start``: (re)start my server from the template.

    Body (optional): ``{"version": 2, "restore_deleted": false}``. A running server is stopped
    first (its kernels end); the server starts with the version's profile (and image on
    Kubernetes), and the spawner seeds the home before JupyterLab opens (a re-seed: the
    three-way merge keeps the student's edits). Members of the course and admins, for their
    own server.
    """

    async def post(self, course: str, name: str) -> None:
        caller = await self.check(rules.may_use, course)
        restart = authz.decide(caller, authz.CONTROL_SERVER, user=caller.name)  # no confused deputy
        if not restart:
            raise web.HTTPError(restart.status, restart.message)
        name = self._template_name(name)
        body = self.json_body() if self.request.body else {}
        if not isinstance(body, dict) or not set(body) <= {"version", "restore_deleted"}:
            raise web.HTTPError(400, 'The body must be {} or {"version": 2, "restore_deleted": false}.')
        try:
            choice = rules.TemplateChoice.parse({"course": course, "name": name, **body})
        except rules.TemplateOptionError as e:
            raise web.HTTPError(400, _sentence(str(e))) from None
        version = await self.db(self._version, choice)
        options: dict[str, Any] = {"template": rules.TemplateChoice(
            course, name, version["version"], choice.restore_deleted).to_json()}
        if version["profile"]:
            options["profile"] = version["profile"]
        if version["image"] and self.settings.get("mode") == "kubernetes":
            options["image"] = version["image"]
        started = _now()
        try:
            if await self.hub.server(caller.name):
                await self.hub.stop_server(caller.name)
            server = await self.hub.start_server(caller.name, options)
        except HubAPIError as e:
            if e.status in (400, 403, 409) and e.hub_message:
                raise web.HTTPError(e.status, e.hub_message) from None
            if e.status == 500:
                raise web.HTTPError(500, f"Your server did not start: {e.hub_message}") from None
            raise
        seeded = await self.db(self._seeded, caller.name, started)
        shown = {k: server.get(k) for k in ("url", "ready", "user_options")}
        self.write_json({"template": version, "server": shown, "seeded": seeded})

    def _version(self, choice: rules.TemplateChoice) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            self._course(session, choice.course)
            v = find_version(session, choice.course, choice.name, choice.version)
            if v is None:
                which = f"version {choice.version} of " if choice.version else ""
                raise web.HTTPError(404, f"No {which}template {choice.name} in {choice.course}; GET "
                                         f"/api/courses/{choice.course}/templates lists them.")
            return version_json(choice.course, choice.name, v)

    def _seeded(self, user: str, since: datetime) -> dict[str, Any] | None:
        """What the spawner's seeding did for this start (its audit entry), if it seeded."""
        with self.settings["sessions"]() as session:
            entry = session.scalars(
                select(AuditLog).where(AuditLog.actor == user, AuditLog.action == "template_seeded",
                                       AuditLog.at >= since).order_by(AuditLog.id.desc()).limit(1)
            ).first()
            return dict(entry.details) if entry is not None else None


class SettingsHandler(TemplatesBase):
    """``/api/courses/<course>/template-settings``: ``{"reseed": "manual" | "on_start"}``.

    Members read it; teachers and admins set it. ``on_start``: each server start re-seeds a
    home with the newest version of the template it was seeded from.
    """

    async def get(self, course: str) -> None:
        await self.check(rules.may_read, course)
        self.write_json(await self.db(self._get, course))

    def _get(self, course: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            self._course(session, course)
            return {"course": course, "reseed": reseed_mode(session, course)}

    async def put(self, course: str) -> None:
        caller = await self.check(rules.may_publish, course)
        body = self.json_body()
        if not isinstance(body, dict) or set(body) != {"reseed"} or body["reseed"] not in rules.RESEED_MODES:
            raise web.HTTPError(400, 'The body must be {"reseed": "manual"} or {"reseed": "on_start"}.')
        self.write_json(await self.db(self._put, caller.name, course, body["reseed"]))

    def _put(self, actor: str, course: str, mode: str) -> dict[str, Any]:
        with self.settings["sessions"].begin() as session:
            row = self._course(session, course)
            setting = session.get(TemplateSettings, row.id)
            if setting is None:
                session.add(TemplateSettings(course_id=row.id, reseed=mode))
            else:
                setting.reseed = mode
            store.record(session, actor, "template_settings", _now(), course=course, reseed=mode)
        return {"course": course, "reseed": mode}


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>classhub templates</title>
<style>body{{font-family:sans-serif;max-width:50em;margin:2em auto}} li{{margin:.6em 0}}
small{{color:#555}}</style></head><body>
<h1>Course templates</h1>
{body}
<p id="status" role="status"></p>
<script>
async function start(course, name) {{
  const status = document.getElementById("status");
  status.textContent = "Starting your server from " + course + "/" + name + "...";
  const r = await fetch("api/courses/" + encodeURIComponent(course) + "/templates/"
      + encodeURIComponent(name) + "/start", {{method: "POST",
      headers: {{"X-XSRFToken": {xsrf}, "Content-Type": "application/json"}}, body: "{{}}"}});
  const data = await r.json();
  if (r.ok) {{ window.location.href = data.server.url; }}
  else {{ status.textContent = data.message; }}
}}
</script></body></html>"""


class TemplatesPageHandler(TemplatesBase):
    """``GET /templates``: a page listing the caller's courses' templates with a Start button."""

    async def get(self) -> None:
        caller = await self.courses.caller(self.require_user())
        rows = await self.db(self._rows, sorted(caller.courses))
        items = []
        for course, name, version in rows:
            desc = xhtml_escape(version.description or "")
            items.append(
                f'<li><strong>{xhtml_escape(course)} / {xhtml_escape(name)}</strong> '
                f"v{version.version} <small>{desc}</small> "
                f"<button data-course=\"{xhtml_escape(course)}\" "
                f"data-name=\"{xhtml_escape(name)}\" "
                "onclick=\"start(this.dataset.course, this.dataset.name)\">Start</button></li>")
        body = f"<ul>{''.join(items)}</ul>" if items else "<p>Your courses have no templates yet.</p>"
        xsrf = json.dumps(self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(_PAGE.format(body=body, xsrf=xsrf.replace("<", "\\u003c")))

    def _rows(self, courses: list[str]) -> list[tuple[str, str, TemplateVersion]]:
        rows = []
        with self.settings["sessions"]() as session:
            for course in courses:
                for template in session.scalars(select(Template).join(Course).where(Course.name == course)
                                                .order_by(Template.name)):
                    if template.versions:
                        rows.append((course, template.name, template.versions[-1]))
        return rows


ROUTES: list[tuple[str, type]] = [
    ("templates", TemplatesPageHandler),
    (f"api/{_COURSE}/templates", TemplateListHandler),
    (f"api/{_COURSE}/template-settings", SettingsHandler),
    (f"api/{_TEMPLATE}", TemplateHandler),
    (f"api/{_TEMPLATE}/versions", PublishHandler),
    (rf"api/{_TEMPLATE}/versions/([^/]+)", VersionHandler),
    (f"api/{_TEMPLATE}/start", StartHandler),
    (r"api/template-uploads/([^/]+)", UploadHandler),
]


def _openapi_paths() -> dict[str, Any]:

    member, teacher = "members of the course and hub admins", "teachers of the course and hub admins"
    errs = ("401", "403", "404")
    template_schema = {"type": "object", "properties": {
        "course": {"type": "string"}, "name": {"type": "string"},
        "latest": {"type": ["object", "null"]}, "versions": {"type": "array", "items": {"type": "object"}}}}
    version_schema = {"type": "object", "properties": {
        "course": {"type": "string"}, "template": {"type": "string"}, "version": {"type": "integer"},
        "tag": {"type": "string"}, "description": {"type": "string"}, "image": {"type": ["string", "null"]},
        "profile": {"type": ["string", "null"]}, "files": {"type": "integer"}, "bytes": {"type": "integer"},
        "source": {"type": "string"}, "created_by": {"type": "string"}, "created_at": {"type": "string"}}}
    params = ("course", "template")
    publish_body = {"required": True, "content": {
        "application/json": {"schema": {"type": "object", "properties": {
            "source": {"type": "object", "properties": {"server_path": {"type": "string"}}},
            "image": {"type": "string"}, "profile": {"type": "string"},
            "start_command": {"type": "array", "items": {"type": "string"}},
            "description": {"type": "string"}}}},
        "application/zip": {"schema": {"type": "string", "format": "binary"}},
        "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
    }}
    return {
        "/templates": {"get": op("A page listing your courses' templates, each with a Start button",
                                  "any logged-in user (their courses)",
                                  {"200": {"description": "HTML page"}})},
        "/api/courses/{course}/templates": {"get": op(
            "The course's templates and their versions", member,
            ok("Templates", {"type": "array", "items": template_schema}), errors=errs, params=("course",))},
        "/api/courses/{course}/template-settings": {
            "get": op("The course's template settings", member,
                       ok("Settings", {"type": "object"}), errors=errs, params=("course",)),
            "put": op("Set when homes are re-seeded: manual or on_start", teacher,
                       ok("Settings", {"type": "object"}), errors=("400", *errs), params=("course",),
                       body=json_body({"type": "object", "properties": {
                           "reseed": {"type": "string", "enum": list(rules.RESEED_MODES)}}})),
        },
        "/api/courses/{course}/templates/{template}": {"get": op(
            "One template with all its versions", member, ok("Template", template_schema),
            errors=("400", *errs), params=params)},
        "/api/courses/{course}/templates/{template}/versions": {"post": op(
            "Publish the next version from a folder of your running server (JSON) or an archive "
            "(zip/tar body; image, profile, description, start_command as query arguments)", teacher,
            ok("The version published", version_schema, "201"), errors=("400", *errs),
            params=params, body=publish_body)},
        "/api/courses/{course}/templates/{template}/versions/{version}": {"get": op(
            "One version", member, ok("Version", version_schema), errors=("400", *errs),
            params=(*params, "version"))},
        "/api/template-uploads/{upload}": {"get": op(
            "Internal: the Kubernetes publisher pod fetches a checked upload (a tar) once",
            "the publisher pod of a publish in progress, with its one-time token", {"200": {
                "description": "the tar", "content": {"application/x-tar": {"schema": {
                    "type": "string", "format": "binary"}}}}}, errors=("404",), public=True,
            params=("upload",))},
        "/api/courses/{course}/templates/{template}/start": {"post": op(
            "(Re)start your server from the template: its profile and image, your home seeded "
            "(a re-seed keeps your edits)", member + " (their own server)",
            ok("The server and what seeding did", {"type": "object"}), errors=("400", *errs),
            params=params, body={"required": False, "content": {"application/json": {"schema": {
                "type": "object", "properties": {"version": {"type": "integer"},
                                                 "restore_deleted": {"type": "boolean"}}}}}})},
    }


OPENAPI_PATHS: dict[str, Any] = _openapi_paths()
