"""The course data API: a course's shared data folder and the storage in view (issue 35).

- ``GET /api/courses/<course>/data``: the folder's files, its size and limit, and where members
  find it in their server (members).
- ``POST /api/courses/<course>/data``: make a folder (teachers and TAs).
- ``PUT /api/courses/<course>/data/files/<path>``: upload a file, whole or in chunks
  (``Content-Range: bytes <first>-<last>/<total>``; ``bytes */<total>`` with an empty body asks
  where the kept part ends, to resume a broken upload). The body streams to a partial file on a
  worker thread and the file is renamed into place when complete (teachers and TAs).
- ``DELETE /api/courses/<course>/data/files/<path>``: remove a file or a folder (teachers and TAs).
- ``PUT /api/courses/<course>/data/limit``: the course's own data folder limit (hub admins;
  members see it in the listing).
- ``POST /api/courses/<course>/data/copy``: copy a folder of the caller's own running server into
  the course's data folder (teachers and TAs): read with the link-safe walk of the assignment
  snapshot in local mode, through the caller's server with their credentials on Kubernetes;
  staged in the partial folder and renamed into place whole.
- ``GET /api/courses/<course>/storage``: the size of every member's home and of the data folder,
  computed on worker threads and cached (teachers and TAs).
- ``GET /api/storage/me``: the caller's home size against its limit, and their courses' data
  folders (the JupyterLab panel).

Thin handlers (docs/architecture.md, rule 3): paths and ranges are checked by
hub_ext.core.coursedata, files are written by hub_ext.backends.coursedata (through descriptors,
``O_NOFOLLOW``), who may do what is declared with ``@needs`` (hub_ext.core.authz), every change
is in the audit log. File work never runs on the event loop (rule 7).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from pydantic import field_validator
from sqlalchemy import select
from tornado import web

from hub_ext import store
from hub_ext.backends.coursedata import (
    ClasshubCourseData,
    CourseDataStore,
    SizeCache,
    Upload,
    UploadConflict,
    folder_name,
    no_room,
    size_of,
)
from hub_ext.backends.local import accounts
from hub_ext.backends.submissions import SnapshotLimits, SnapshotRefused, snapshot_folder
from hub_ext.backends.templates import FILES, Stager
from hub_ext.core import authz
from hub_ext.core import templates as template_rules
from hub_ext.core.coursedata import (
    DataExists,
    DataFull,
    DataPathError,
    check_data_path,
    check_limit,
    home_level,
    human_bytes,
    parse_content_range,
)
from hub_ext.core.seeding import SeedLimits, TemplateRefused
from hub_ext.service import body_models
from hub_ext.service.apidoc import ok, op
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.handlers import APIHandler
from hub_ext.service.templates.base import TemplatesBase
from hub_ext.service.templates.publishing import ContentsReader
from hub_ext.store.models import Course

_COURSE = r"courses/([^/]+)"
log = logging.getLogger("classhub.coursedata")


class DataFolderBody(body_models.Body):
    """``POST /api/courses/<course>/data``: a new folder in the course's data folder."""

    example: ClassVar[str] = '{"folder": "images/train"}'
    folder: str

    @field_validator("folder", mode="before")
    @classmethod
    def _folder(cls, v: Any) -> str:
        if not isinstance(v, str):
            raise ValueError("folder must be a path inside the course's data folder, e.g. images/train.")
        try:
            check_data_path(v.strip("/"))
        except DataPathError as e:
            raise ValueError(f"folder: {e}.") from None
        return v.strip("/")


class DataLimitBody(body_models.Body):
    """``PUT /api/courses/<course>/data/limit``: the course's own data folder limit in bytes
    (0: no limit; null: back to the hub's configured default)."""

    example: ClassVar[str] = '{"max_bytes": 107374182400}'
    max_bytes: int | None

    @field_validator("max_bytes", mode="before")
    @classmethod
    def _max_bytes(cls, v: Any) -> int | None:
        try:
            return check_limit(v)
        except DataPathError as e:
            raise ValueError(f"{e}.") from None


class DataCopyBody(body_models.Body):
    """``POST /api/courses/<course>/data/copy``: a folder of your running server (relative to
    your home) copied to ``to`` in the course's data folder (default: the folder's own name)."""

    example: ClassVar[str] = '{"server_path": "datasets/cats", "to": "cats"}'
    server_path: str
    to: str | None = None

    @field_validator("server_path", "to", mode="before")
    @classmethod
    def _paths(cls, v: Any) -> str | None:
        if v is None:
            return None
        if not isinstance(v, str):
            raise ValueError("server_path and to are folder paths, e.g. datasets/cats.")
        try:
            check_data_path(v.strip("/"))
        except DataPathError as e:
            raise ValueError(f"{e}.") from None
        return v.strip("/")

    @property
    def target(self) -> str:
        return self.to or self.server_path.rsplit("/", 1)[-1]


def own_limit_reader(app_settings: dict[str, Any]) -> Any:
    """A function of a course name to its own data folder limit in the database (None: not set);
    called on worker threads by the store at each check."""
    def read(course: str) -> int | None:
        sessions = app_settings.get("sessions")  # looked up at each call: the store may come first
        if sessions is None:
            return None
        with sessions() as session:
            return session.scalar(select(Course.data_max_bytes).where(Course.name == course))

    return read


def settings_of(app_settings: dict[str, Any]) -> ClasshubCourseData:
    if "course_data" not in app_settings:
        app_settings["course_data"] = ClasshubCourseData()
    return app_settings["course_data"]


def store_of(app_settings: dict[str, Any]) -> CourseDataStore:
    """The service's one CourseDataStore (its size cache and its lock are shared by requests)."""
    if "course_data_store" not in app_settings:
        data = settings_of(app_settings)
        group_of = ((lambda c: accounts.ensure_course_group(c, data.group_prefix))
                    if data.system_groups else None)
        app_settings["course_data_store"] = CourseDataStore(data, group_of, own_limit_reader(app_settings))
    return app_settings["course_data_store"]


class DataBase(APIHandler):
    """What the course data handlers share: the settings, the store (on worker threads), the
    course lookup (a 404 for a course that does not exist, for admins) and the audit log."""

    @property
    def data(self) -> ClasshubCourseData:
        return settings_of(self.settings)

    @property
    def folders(self) -> CourseDataStore:
        if not self.data.root_dir:
            raise web.HTTPError(409, "This hub keeps no course data folders; a hub admin sets "
                                     "c.ClasshubCourseData.root_dir (docs/admins/course-data.md).")
        return store_of(self.settings)

    async def audit(self, action: str, **details: Any) -> None:
        def write() -> None:
            with self.settings["sessions"].begin() as session:
                store.record(session, self.caller.name, action, datetime.now(timezone.utc), **details)

        await asyncio.to_thread(write)

    def where(self, course: str) -> str:
        return f"~/{self.data.home_folder}/{folder_name(course)}"

    async def limits(self, course: str) -> dict[str, int | None]:
        """The limit that applies, the course's own (None: not set) and the configured default."""
        own = await asyncio.to_thread(own_limit_reader(self.settings), course)
        return {"limit": self.data.limit_of(course, own), "own_limit": own,
                "default_limit": self.data.limit_of(course)}


def _refusal(e: Exception) -> web.HTTPError:
    """The answer to a refused path, range or size: 413 over the limit, else 400."""
    text = str(e).strip().rstrip(".") + "."
    return web.HTTPError(413 if isinstance(e, DataFull) else 400, text.replace("%", "%%"))


class DataHandler(DataBase):
    """``/api/courses/<course>/data``: GET the listing (members), POST a new folder (staff)."""

    @needs(authz.READ_COURSE_DATA, course="course")
    async def get(self, course: str) -> None:
        await self.courses.get(course)  # 404 for a course that does not exist
        listing = await asyncio.to_thread(self.folders.listing, course)
        self.write_json({"course": course, "path": self.where(course), **listing,
                         **await self.limits(course)})

    @refuses(DataPathError)
    @needs(authz.WRITE_COURSE_DATA, course="course")
    @takes(DataFolderBody)
    async def post(self, course: str) -> None:
        await self.courses.get(course)
        await asyncio.to_thread(self.folders.make_folder, course, self.body.folder)
        await self.audit("course_data_folder", course=course, path=self.body.folder)
        self.write_json({"course": course, "path": self.body.folder, "kind": "folder"}, 201)


class DataFileHandler(DataBase):
    """``/api/courses/<course>/data/files/<path>``: PUT a file (whole or a chunk), DELETE a file
    or a folder (teachers and TAs of the course, hub admins).

    Who may upload is decided before the body is read: a refused caller's body is read and
    dropped, never written (APIHandler.refuse_after_body)."""

    _upload: Upload | None = None

    async def prepare(self) -> None:
        if self.request.method != "PUT":
            return super().prepare()
        try:
            await self._begin()
        except UploadConflict as e:
            self.refuse_after_body(_Conflict(e))
        except (DataPathError, DataFull) as e:
            self._drop()
            self.refuse_after_body(_refusal(e))
        except web.HTTPError as e:
            self._drop()
            self.refuse_after_body(e)

    async def _begin(self) -> None:
        course, path = self.path_args
        self.caller = await self.authorize(authz.WRITE_COURSE_DATA, course=course)
        await self.courses.get(course)
        declared = self.request.headers.get("Content-Length", "")
        length = int(declared) if declared.isdigit() else None
        rng = parse_content_range(self.request.headers.get("Content-Range"), length)
        folders = self.folders
        if rng is None and length is not None:
            await asyncio.to_thread(folders.room_for, course, length)
        self._upload = await asyncio.to_thread(folders.upload, course, path, rng)
        limit = await asyncio.to_thread(folders.limit, course)
        self.start_body(rng.length if rng is not None else (limit or 2**62))
        self._body_buffer = None  # the file goes to disk, not to memory

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        if self._upload is None:
            super().data_received(chunk)
        elif self.accept_chunk(chunk):
            # tornado awaits the write before it reads on (flow control); the disk is never
            # waited on on the loop (docs/architecture.md, rule 7)
            return asyncio.to_thread(self._upload.write, chunk)
        return None

    def _drop(self) -> None:
        """Forget this request's bytes (on a worker thread): a whole upload's partial file goes,
        a chunk is cut back to where the kept part ended."""
        upload, self._upload = self._upload, None
        if upload is None:
            return

        def drop() -> None:
            upload.abort()
            upload.close()

        asyncio.get_running_loop().run_in_executor(None, drop)

    def on_finish(self) -> None:
        self._drop()

    def on_connection_close(self) -> None:
        super().on_connection_close()
        self._drop()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A chunk that does not start where the kept part ends: the 409 says where it does."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, _Conflict):
            self.set_header("Content-Type", "application/json; charset=utf-8")
            self.finish(json.dumps({"status": 409, "message": exc.log_message.replace("%%", "%"),
                                    "offset": exc.offset}))
            return
        super().write_error(status_code, **kwargs)

    @needs(authz.WRITE_COURSE_DATA, course="course")
    async def put(self, course: str, path: str) -> None:
        """Upload a file, whole or one chunk (Content-Range), into the course's data folder."""
        upload, self._upload = self._upload, None
        assert upload is not None
        try:
            result = await asyncio.to_thread(upload.finish)
        except (DataPathError, DataFull) as e:
            raise _refusal(e) from None
        if result["complete"]:
            await self.audit("course_data_uploaded", course=course, path=path, bytes=result["total"])
            self.write_json({"course": course, **result}, 201)
        else:
            self.write_json({"course": course, "path": path, **result})

    @needs(authz.WRITE_COURSE_DATA, course="course")
    async def delete(self, course: str, path: str) -> None:
        """Remove a file or a folder (with what it holds) from the course's data folder."""
        await self.courses.get(course)
        try:
            kind = await asyncio.to_thread(self.folders.delete, course, path)
        except DataPathError as e:
            status = 404 if str(e).startswith("No ") else 400
            raise web.HTTPError(status, str(e).replace("%", "%%") + ".") from None
        await self.audit("course_data_deleted", course=course, path=path, kind=kind)
        self.set_status(204)
        self.finish()


class _Conflict(web.HTTPError):
    """A chunk that does not start where the kept part ends: 409 with the offset to resume at."""

    def __init__(self, conflict: UploadConflict) -> None:
        super().__init__(409, str(conflict).replace("%", "%%") + ".")
        self.offset = conflict.offset


class StorageHandler(DataBase):
    """``GET /api/courses/<course>/storage``: each member's home size (against the course's home
    limit) and the data folder's size (teachers and TAs of the course, hub admins)."""

    @needs(authz.READ_HOME_SIZES, course="course")
    async def get(self, course: str) -> None:
        members = await self.courses.members(course)
        limit = self.data.home_limit_of(course)
        sizes, source = await home_sizes(self.settings, [m["username"] for m in members])
        homes = [{"user": m["username"], "role": m["role"], "bytes": sizes.get(m["username"]),
                  "level": home_level(sizes.get(m["username"]) or 0, limit)} for m in members]
        data_bytes = await asyncio.to_thread(self.folders.size, course) if self.data.root_dir else None
        self.write_json({"course": course, "homes": homes, "home_limit": limit,
                         "homes_shown": source is not None, "homes_from": source,
                         "data_bytes": data_bytes,
                         "data_limit": (await self.limits(course))["limit"]})



async def home_sizes(app_settings: dict[str, Any],
                     users: list[str]) -> tuple[dict[str, int | None], str | None]:
    """(user -> bytes of their home or None, where the sizes come from: ``"files"`` (local homes,
    walked on worker threads), ``"kubelet"`` (Kubernetes: running servers' home volumes, from the
    nodes' stats) or None (not shown)). Both cached for ``size_cache_seconds``."""
    data = settings_of(app_settings)
    if app_settings.get("mode") == "kubernetes":
        if not data.kubelet_home_sizes:
            return dict.fromkeys(users), None
        found = await kube_home_sizes(app_settings)
        if found is None:  # the cluster refused (the log says what to grant)
            return dict.fromkeys(users), None
        return {user: found.get(user) for user in users}, "kubelet"
    if not data.homes_dir:
        return dict.fromkeys(users), None
    sizes = await asyncio.to_thread(lambda: {user: home_size(app_settings, user) for user in users})
    return sizes, "files"


async def kube_home_sizes(app_settings: dict[str, Any]) -> dict[str, int] | None:
    """user -> bytes of the home of each running server (hub_ext.backends.kubernetes.homes), asked
    of the cluster at most once per ``size_cache_seconds`` (one request at a time); None, logged,
    when the cluster refused or did not answer, until the next try."""
    data = settings_of(app_settings)
    lock = app_settings.setdefault("kube_home_sizes_lock", asyncio.Lock())
    async with lock:
        at, found = app_settings.get("kube_home_sizes", (float("-inf"), None))
        if time.monotonic() - at < data.size_cache_seconds:
            return found
        from hub_ext.backends.kubernetes import client, homes

        jobs = app_settings.get("jobs")
        api = getattr(getattr(jobs, "backend", None), "core", None) or client.core_v1()
        try:
            found = await homes.home_sizes(api)
        except homes.HomeSizesUnavailable as e:
            log.warning("home sizes: %s", e)
            found = None
        except Exception as e:  # the cluster did not answer: no sizes this time
            log.warning("home sizes: the cluster did not answer (%s)", e)
            found = None
        app_settings["kube_home_sizes"] = (time.monotonic(), found)
        return found


def home_size(app_settings: dict[str, Any], user: str) -> int | None:
    """The bytes of ``user``'s home (local mode; None where homes are not on this machine or
    missing), cached for ``size_cache_seconds``. A worker thread's work."""
    data = settings_of(app_settings)
    if not data.homes_dir:
        return None
    cache = app_settings.get("home_sizes")
    if cache is None:
        cache = app_settings["home_sizes"] = SizeCache(data.size_cache_seconds)
    home = Path(data.homes_dir) / accounts.safe_name(user)
    return cache.get(f"home\0{user}", lambda: size_of(home))


class MyStorageHandler(DataBase):
    """``GET /api/storage/me``: your home's size against its limit, and where your courses' data
    folders are in your server (the JupyterLab panel)."""

    @needs(authz.READ_OWN_USAGE)
    async def get(self) -> None:
        roles = await self.courses.roles_of(self.caller.name)
        sizes, _ = await home_sizes(self.settings, [self.caller.name])
        size = sizes[self.caller.name]
        limits = [v for v in (self.data.home_limit_of(c) for c in roles) if v]
        limit = min(limits) if limits else None
        level = home_level(size or 0, limit)
        warning = None
        if level != "fine":
            warning = (f"Your home holds {human_bytes(size or 0)} of its {human_bytes(limit or 0)} limit: "
                       "delete what you no longer need (the course's data is in ~/data, no need to "
                       "copy it).")
        self.write_json({"user": self.caller.name, "bytes": size, "limit": limit, "level": level,
                         "warning": warning,
                         # staff write in their server only where it mounts the store read-write
                         "courses": [{"course": c, "role": r, "path": self.where(c),
                                      "writable": r in ("teacher", "ta")
                                      and self.settings.get("mode") == "kubernetes"}
                                     for c, r in sorted(roles.items())] if self.data.root_dir else []})


class DataLimitHandler(DataBase):
    """``PUT /api/courses/<course>/data/limit``: a hub admin sets the course's own data folder
    limit (teachers and TAs see it in the listing, cannot change it). Lowering it below what the
    folder holds refuses new uploads and copies; nothing is deleted."""

    @needs(authz.SET_COURSE_DATA_LIMIT, course="course")
    @takes(DataLimitBody)
    async def put(self, course: str) -> None:
        await self.courses.get(course)
        value = self.body.max_bytes

        def write() -> None:
            with self.settings["sessions"].begin() as session:
                row = session.scalar(select(Course).where(Course.name == course))
                if row is None:
                    raise web.HTTPError(404, f"No course {course!r}.")
                row.data_max_bytes = value

        await asyncio.to_thread(write)
        await self.audit("course_data_limit", course=course, max_bytes=value)
        self.write_json({"course": course, **await self.limits(course)})


class DataCopyHandler(DataBase, TemplatesBase):
    """``POST /api/courses/<course>/data/copy``: copy a folder of the caller's own server into the
    course's data folder (teachers and TAs). The copy is staged in the partial folder within the
    limits (files, bytes, depth, the room the course's limit leaves) and renamed into place
    whole; a refused or broken copy leaves nothing in the course's folder."""

    @refuses(DataPathError)
    @needs(authz.WRITE_COURSE_DATA, course="course")
    @takes(DataCopyBody)
    async def post(self, course: str) -> None:
        await self.courses.get(course)
        folders, body = self.folders, self.body
        room = await asyncio.to_thread(folders.room_left, course)
        cap = self.data.copy_max_bytes if self.data.copy_max_bytes > 0 else 2**62
        limits = SnapshotLimits(max_files=self.data.copy_max_files, max_depth=self.data.copy_max_depth,
                                max_bytes=min(cap, room) if room is not None else cap)
        staged = await asyncio.to_thread(folders.copy_staging)
        skipped: list[str] = []
        try:
            try:
                if self.settings.get("mode") == "local":
                    skipped = await self._from_home(body.server_path, staged, limits)
                    files_dir = staged
                else:
                    await self._through_server(body.server_path, staged, limits)
                    files_dir = staged / FILES
            except (SnapshotRefused, TemplateRefused) as e:
                if room is not None and room < cap and "bytes" in str(e):
                    raise _refusal(no_room(room, await asyncio.to_thread(folders.limit, course),
                                           course)) from None
                text = str(e).replace("submit again", "copy again").replace("submit a smaller",
                                                                            "copy a smaller")
                raise DataPathError(f"Not copied: {text.rstrip('.')}") from None
            try:
                size, files = await asyncio.to_thread(folders.place_folder, course, files_dir, body.target)
            except DataExists as e:
                raise web.HTTPError(409, f"{e}.".replace("%", "%%")) from None
            except DataFull as e:
                raise _refusal(e) from None
        finally:
            await asyncio.to_thread(folders.discard, staged)
        source = f"~/{body.server_path}"
        await self.audit("course_data_copied", course=course, path=body.target, source=source,
                         files=files, bytes=size)
        self.write_json({"course": course, "path": body.target, "source": source, "files": files,
                         "bytes": size, "skipped": skipped}, 201)

    async def _from_home(self, folder: str, staged: Path, limits: SnapshotLimits) -> list[str]:
        """Local mode: the caller's home, read as the assignment snapshot reads a student's (one
        folder at a time with ``O_NOFOLLOW``; links, special files and files the home's owner
        does not own are left out and named), on a worker thread."""
        if not self.data.homes_dir:
            raise web.HTTPError(409, "This hub does not know where homes are "
                                     "(c.ClasshubCourseData.homes_dir); upload the files instead.")
        home = Path(self.data.homes_dir) / accounts.safe_name(self.caller.name)
        try:
            taken = await asyncio.to_thread(snapshot_folder, home, folder, staged, limits)
        except SnapshotRefused as e:
            text = str(e)
            if text.startswith(("There is no folder", "Your home folder")):
                raise web.HTTPError(404, f"There is no folder {folder!r} in your home (a link is not "
                                         "followed); name a folder of your server, e.g. datasets/cats."
                                    .replace("%", "%%")) from None
            raise
        return taken.skipped

    async def _through_server(self, folder: str, staged: Path, limits: SnapshotLimits) -> None:
        """Kubernetes: the home is a volume of the caller's pod, read through their own running
        server with their own credentials (as the template publisher reads a teacher's folder)."""
        url = await self.server_url("Your server is not running; start it, then copy the folder again.")
        reader = ContentsReader(url, self.caller_token())
        try:
            await asyncio.to_thread(os.mkdir, staged, 0o700)
            stager = await asyncio.to_thread(Stager, staged, SeedLimits(
                max_files=limits.max_files, max_bytes=limits.max_bytes, max_depth=limits.max_depth))
            await reader.copy_into(folder, stager)
        except template_rules.TemplateError:
            raise DataPathError(f"{folder!r} in your server is a file; name a folder") from None
        finally:
            reader.client.close()


ROUTES: list[tuple[str, type]] = [
    (f"api/{_COURSE}/data", DataHandler),
    (rf"api/{_COURSE}/data/files/(.+)", DataFileHandler),
    (f"api/{_COURSE}/data/limit", DataLimitHandler),
    (f"api/{_COURSE}/data/copy", DataCopyHandler),
    (f"api/{_COURSE}/storage", StorageHandler),
    ("api/storage/me", MyStorageHandler),
]


def _openapi_paths() -> dict[str, Any]:
    member, staff = "members of the course and hub admins", "teachers and TAs of the course and hub admins"
    errs = ("401", "403", "404")
    listing = {"type": "object", "properties": {
        "course": {"type": "string"}, "path": {"type": "string"}, "bytes": {"type": "integer"},
        "count": {"type": "integer"}, "limit": {"type": ["integer", "null"]},
        "own_limit": {"type": ["integer", "null"]}, "default_limit": {"type": ["integer", "null"]},
        "truncated": {"type": "boolean"},
        "files": {"type": "array", "items": {"type": "object", "properties": {
            "path": {"type": "string"}, "kind": {"type": "string"}, "size": {"type": "integer"},
            "modified": {"type": "integer"}}}}}}
    progress = {"type": "object", "properties": {
        "course": {"type": "string"}, "path": {"type": "string"}, "offset": {"type": "integer"},
        "total": {"type": "integer"}, "complete": {"type": "boolean"}}}
    file_params = ("course", "path")
    return {
        "/api/courses/{course}/data": {
            "get": op("The course's data folder: its files, size, limit and where members find it",
                      member, ok("The listing", listing), errors=errs, params=("course",)),
            "post": op("Make a folder in the course's data folder", staff,
                       ok("The folder", {"type": "object"}, "201"), errors=("400", *errs, "409"),
                       params=("course",)),
        },
        "/api/courses/{course}/data/files/{path}": {
            "put": op("Upload a file: the body is the file, or one chunk of it with Content-Range "
                      "'bytes <first>-<last>/<total>' ('bytes */<total>' with no body: where the kept "
                      "part ends). The file appears when complete", staff,
                      {**ok("Complete: the file is in place", progress, "201"),
                       **ok("A chunk kept; send the next from offset", progress)},
                      errors=("400", *errs, "409", "413"), params=file_params,
                      body={"required": True, "content": {"application/octet-stream": {
                          "schema": {"type": "string", "format": "binary"}}}}),
            "delete": op("Remove a file or a folder from the course's data folder", staff,
                         {"204": {"description": "Removed"}}, errors=("400", *errs), params=file_params),
        },
        "/api/courses/{course}/data/limit": {"put": op(
            "Set the course's own data folder limit (0: none; null: the hub's default). Lowering it "
            "below what the folder holds refuses new uploads, deletes nothing", "hub admins",
            ok("The limits", {"type": "object", "properties": {
                "course": {"type": "string"}, "limit": {"type": ["integer", "null"]},
                "own_limit": {"type": ["integer", "null"]},
                "default_limit": {"type": ["integer", "null"]}}}),
            errors=("400", *errs), params=("course",))},
        "/api/courses/{course}/data/copy": {"post": op(
            "Copy a folder of your own running server into the course's data folder (links are not "
            "followed; limits and the course's limit apply; nothing is kept from a refused copy)", staff,
            ok("Copied", {"type": "object", "properties": {
                "course": {"type": "string"}, "path": {"type": "string"}, "source": {"type": "string"},
                "files": {"type": "integer"}, "bytes": {"type": "integer"},
                "skipped": {"type": "array", "items": {"type": "string"}}}}, "201"),
            errors=("400", *errs, "409", "413"), params=("course",))},
        "/api/courses/{course}/storage": {"get": op(
            "The size of each member's home and of the course's data folder", staff,
            ok("Sizes", {"type": "object"}), errors=errs, params=("course",))},
        "/api/storage/me": {"get": op(
            "Your home's size against its limit, and your courses' data folders", "any user",
            ok("Your storage", {"type": "object"}))},
    }


OPENAPI_PATHS: dict[str, Any] = _openapi_paths()
