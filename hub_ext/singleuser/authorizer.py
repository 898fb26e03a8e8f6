"""Share enforcement inside the single-user server: a jupyter-server Authorizer.

JupyterHub's singleuser extension checks only ``access:servers`` and leaves finer rights to "a
custom Authorizer with custom scopes" (its JupyterHubAuthorizer docstring). This is that
Authorizer: it keeps JupyterHub's check (it subclasses JupyterHubAuthorizer) and then asks
hub_ext.core.sharing whether the caller's scopes allow the request (read-only, editable,
one path).

Why it asks the hub again for non-owners: HubAuth caches the hub's answer about a token for
``cache_max_age`` (300 s by default), so a revoked share would keep working for minutes. For
anyone but the owner this Authorizer re-reads the caller's scopes from the hub (at most once
per request, and not more often than ``recheck_seconds`` per token), so the next request after
a revocation is refused. The owner keeps JupyterHub's cached path (no extra hub requests).

Why it is installed at link time: jupyter-server creates its Authorizer (init_configurables)
after linking extensions and before loading them, so `link(serverapp)` (called from the
extension's ``_link_jupyter_server_extension``) sets ``ServerApp.authorizer_class``; no command
line argument is needed. Handlers that do not use jupyter-server's ``@authorized`` decorator
(JupyterLab's settings and workspaces) are covered by a check of every state-changing request
in `setup`.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import os
import time
import weakref
from typing import Any
from urllib.parse import quote

from jupyter_client.jsonutil import json_default
from jupyter_core.utils import ensure_async
from jupyterhub.singleuser.extension import JupyterHubAuthorizer
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.websocket import WebSocketHandler
from traitlets import Float, Unicode, default

from hub_ext.core import sharing

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ClasshubAuthorizer(JupyterHubAuthorizer):
    """JupyterHub's access check, then classhub's share rules (hub_ext.core.sharing)."""

    recheck_seconds = Float(
        0.0,
        config=True,
        help="How long a non-owner's scopes, as the hub reported them, are trusted before the "
        "hub is asked again. 0 (default) asks on every request, so a revoked share fails at once.",
    )
    service_api_url = Unicode(
        config=True,
        help="The classhub service's API, asked for the paths of one-path shares "
        "(default: $CLASSHUB_SERVICE_API_URL, which configure() sets for spawned servers).",
    )

    @default("service_api_url")
    def _service_api_url(self) -> str:
        return os.environ.get("CLASSHUB_SERVICE_API_URL", "")

    audit_seconds = Float(
        600.0,
        config=True,
        help="A non-owner's access to this server is reported to classhub's audit log at most once "
        "per this many seconds per person (0: never).",
    )
    watch_seconds = Float(
        2.0,
        config=True,
        help="How often the open websockets of non-owners (kernels, terminals) are checked again: "
        "a connection whose share was revoked or expired is closed (0 turns the check off).",
    )

    _fresh: dict[str, tuple[float, dict | None]]
    _paths: dict[str, tuple[float, frozenset[str]]]

    @property
    def owner(self) -> str:
        return os.environ.get("JUPYTERHUB_USER", "")

    @property
    def server_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVER_NAME", "")

    async def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        if not super().is_authorized(handler, user, action, resource):
            return False
        hub_user = user.hub_user
        if getattr(handler, "_classhub_silent", False) and resource == "events" and action != "write":
            return True  # quiet_answer: a silent event stream for a viewer who still holds a share
        if action == "write" and (refusal := self._course_data_refusal(handler, resource)):
            handler._classhub_refusal = refusal
            return False
        if hub_user.get("kind", "user") == "user" and hub_user.get("name") == self.owner:
            return True
        verdict = await self._decide(handler, action, resource)
        if not verdict:
            self.log.warning("classhub: refused %s %s (%s on %s) for %s: %s", handler.request.method,
                             handler.request.path, action, resource, hub_user.get("name"), verdict.message)
            handler._classhub_refusal = verdict.message
        else:
            self.log.info("classhub: %s %s by %s (shared access)", handler.request.method,
                          handler.request.path, hub_user.get("name"))
            if isinstance(handler, WebSocketHandler):
                self._watch(handler, action, resource)
            self._audit(hub_user.get("name", ""), self.hub_auth.get_token(handler))
        return bool(verdict)

    async def access_level(self, handler: Any) -> str:
        """The caller's level on this server (hub_ext.core.sharing: owner, edit, read-only, none),
        as the hub says now: what the JupyterLab panel shows and how documents open."""
        hub_user = handler.current_user.hub_user
        if hub_user.get("kind", "user") == "user" and hub_user.get("name") == self.owner:
            return sharing.OWNER
        if not hasattr(handler, "_classhub_level"):
            await self._decide(handler, "read", "contents")
        return getattr(handler, "_classhub_level", sharing.NONE)

    def _audit(self, viewer: str, viewer_token: str | None) -> None:
        """Tell classhub (its audit log) that `viewer` used this server, once in a while.

        The report carries this server's own token (who reports) and the viewer's token for
        this server (who used it): classhub asks the hub who that token belongs to and never
        takes a viewer's name from a report (docs/admins/security.md, "Security model", rule 3).
        """
        if self.audit_seconds <= 0 or not self.service_api_url or not viewer_token:
            return
        last = self.__dict__.setdefault("_audited", {})
        now = time.monotonic()
        if now - last.get(viewer, -1e18) < self.audit_seconds:
            return
        last[viewer] = now

        async def report() -> None:
            try:
                await AsyncHTTPClient().fetch(
                    f"{self.service_api_url.rstrip('/')}/shares/accessed", method="POST",
                    body=json.dumps({"viewer_token": viewer_token, "server": self.server_name}),
                    request_timeout=10,
                    headers={"Authorization": f"token {self.hub_auth.api_token}",
                             "Content-Type": "application/json"})
            except Exception as e:  # the audit must never break the request
                last.pop(viewer, None)
                self.log.warning("classhub: cannot report %s's access to the audit log: %s", viewer, e)

        task = asyncio.ensure_future(report())
        pending = self.__dict__.setdefault("_reports", set())
        pending.add(task)  # keep a reference until it is done
        task.add_done_callback(pending.discard)

    def _watch(self, handler: Any, action: str, resource: str) -> None:
        """Keep checking a non-owner's open websocket: a revocation also ends open connections."""
        if self.watch_seconds <= 0:
            return
        watched = self.__dict__.setdefault("_watched", weakref.WeakKeyDictionary())
        watched[handler] = (action, resource, time.monotonic())
        if self.__dict__.get("_watch_task") is None:
            self._watch_task = asyncio.ensure_future(self._watch_loop())

    async def _watch_loop(self) -> None:
        watched: weakref.WeakKeyDictionary = self.__dict__["_watched"]
        while True:
            await asyncio.sleep(self.watch_seconds)
            for handler, (action, resource, since) in list(watched.items()):
                if handler.ws_connection is None:  # closed, or not upgraded yet
                    if time.monotonic() - since > 30:
                        watched.pop(handler, None)
                    continue
                try:
                    for cached in ("_classhub_model", "_classhub_scopes", "_classhub_paths"):
                        handler.__dict__.pop(cached, None)
                    verdict = await self._decide(handler, action, resource)
                except Exception as e:  # the hub restarting: check again next round
                    self.log.warning("classhub: cannot re-check an open websocket: %s", e)
                    continue
                if not verdict:
                    self.log.warning("classhub: closing %s of %s: %s", handler.request.path,
                                     (handler._classhub_model or {}).get("name"), verdict.message)
                    watched.pop(handler, None)
                    handler.close(1008, "access to this server was revoked")

    async def _decide(self, handler: Any, action: str, resource: str) -> sharing.Verdict:
        model = await self._fresh_model(handler)
        if model is None or not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            return sharing.Verdict(False, "Your access to this server was revoked or has expired.")
        if "_classhub_scopes" not in handler.__dict__:  # once per request (prepare, then @authorized)
            handler._classhub_scopes = [*model.get("scopes", []), *await self._share_scopes(model)]
        scopes = handler._classhub_scopes
        grant = sharing.grant_from_scopes(scopes, self.owner, self.server_name,
                                          caller=model.get("name"), caller_kind=model.get("kind", "user"))
        handler._classhub_level = grant.level  # read by the contents answer and the lab panel
        try:
            path = sharing.request_path(resource, self._url_path(handler))
        except ValueError as e:
            return sharing.Verdict(False, str(e))
        if grant.paths is not None:
            if "_classhub_paths" not in handler.__dict__:
                handler._classhub_paths = await self._shared_paths(model["name"])
            shared = handler._classhub_paths
            resolved = frozenset(p for p in map(self._resolve, shared) if p is not None)
            grant = sharing.Grant(grant.level, resolved)
            if path is not None:
                path = self._resolve(path)
        handler._classhub_grant = grant  # read by `quiet_answer`
        checkpoint = sharing.is_checkpoint_url(resource, self._url_path(handler))
        return sharing.decide(grant, sharing.Request(action, resource, handler.request.method.upper(), path,
                                                     checkpoint))

    async def quiet_answer(self, handler: Any) -> bool:
        """Answer a non-owner's refused background request as JupyterLab expects; True when done.

        JupyterLab polls running kernels, sessions and terminals, its file browser's folder, and
        saves its layout, every few seconds (hub_ext.core.sharing.background_request says which
        requests and how they are answered). A refused one is answered here without a 403:
        the viewer's JupyterLab stays quiet and the owner's log keeps the refusals that mean
        something. Nothing is revealed or changed that the refusal would have protected.
        """
        method, url = handler.request.method.upper(), self._url_path(handler)
        if sharing.background_request(method, url, sharing.READ_ONLY) is None:
            return False  # not a background request (cheap: no hub question)
        hub_user = handler.current_user.hub_user
        if hub_user.get("kind", "user") == "user" and hub_user.get("name") == self.owner:
            return False
        _, action, resource = sharing.background_request(method, url, sharing.READ_ONLY)
        if await self._decide(handler, action, resource):
            return False  # allowed: the real handler answers
        known = sharing.background_request(method, url, getattr(handler, "_classhub_level", sharing.NONE))
        if known is None:
            return False  # no share any more: refused, so the viewer's JupyterLab learns it
        answer = known[0]
        if answer == sharing.SILENT_STREAM:  # the websocket opens; no event is ever sent on it
            handler._classhub_silent = True
            return False
        if answer == sharing.EMPTY_LIST:
            handler.set_header("Content-Type", "application/json")
            handler.finish("[]")
        elif answer == sharing.NOT_KEPT:
            handler.set_status(204)
            handler.finish()
        elif answer == sharing.EMPTY_WORKSPACE:  # JupyterLab starts with its default layout
            name = url.strip("/")[len("lab/api/workspaces"):].strip("/")
            handler.set_header("Content-Type", "application/json")
            handler.finish(json.dumps({"data": {}, "metadata": {"id": name}} if name
                                      else {"workspaces": {"ids": [], "values": []}}))
        else:
            grant = getattr(handler, "_classhub_grant", None)
            try:
                folder = self._resolve(sharing.request_path("contents", url) or "")
            except ValueError:
                return False  # a path that leaves the root: refused with its sentence
            paths = grant.paths if grant is not None else None
            listed = paths is not None and folder is not None
            children = sharing.shared_children(paths, folder) if listed else ()
            if not children:
                return False  # not above a shared file: refused as before
            cm = handler.contents_manager
            entries = []
            for child in children:
                try:
                    entries.append(await ensure_async(cm.get(child, content=False)))
                except web.HTTPError:
                    continue  # a shared file the owner removed since
            try:
                model = await ensure_async(cm.get(folder, content=False))
            except web.HTTPError:
                return False
            model = {**model, "content": entries, "format": "json", "writable": False}
            handler.set_header("Content-Type", "application/json")
            handler.finish(json.dumps(model, default=json_default))
        self.log.debug("classhub: answered %s %s for %s without a refusal (%s)", method,
                       handler.request.path, hub_user.get("name"), answer)
        return True

    async def read_refusal(self, handler: Any) -> str | None:
        """Why a non-owner may not make this read (GET, HEAD, OPTIONS) request, else None.

        Deny by default: handlers that skip jupyter-server's ``@authorized`` (JupyterLab's
        workspaces and settings, extensions' pages) are checked too, as a read of the resource
        `sharing.handler_resource` names; a path-limited viewer reads only the resources that
        reveal none of the owner's files (`sharing.NEUTRAL_RESOURCES`) and the shared paths."""
        hub_user = handler.current_user.hub_user
        if hub_user.get("kind", "user") == "user" and hub_user.get("name") == self.owner:
            return None
        if getattr(handler, "_classhub_silent", False):
            return None
        if isinstance(handler, web.StaticFileHandler) and getattr(handler, "auth_resource", None) is None:
            # the server's and its extensions' own static files (JupyterLab loads dozens per page,
            # and each check asks the hub); a handler of the owner's files (``files/``) names its
            # resource and is checked by its own @authorized
            return None
        if not super().is_authorized(handler, handler.current_user, "read", "lab"):
            return None  # JupyterHub's own check refuses it (and says so) in @authorized or later
        resource = sharing.handler_resource(self._url_path(handler), getattr(handler, "auth_resource", None))
        verdict = await self._decide(handler, "read", resource)
        if verdict:
            return None
        self.log.warning("classhub: refused %s %s (read on %s) for %s: %s", handler.request.method,
                         handler.request.path, resource, hub_user.get("name"), verdict.message)
        return verdict.message

    def _course_data_refusal(self, handler: Any, resource: str) -> str | None:
        """The sentence refusing a change under a course's data folder, else None: in local mode
        a path under $CLASSHUB_COURSE_DATA_DIR; on Kubernetes a path on a read-only mount (the
        kubelet refuses the write whatever this says; the sentence tells the student why).

        Why here too: in the single-account local mode every server runs as the account that
        owns the folders (root, on a machine where the hub runs as root), so file modes alone
        cannot stop JupyterLab; the server refuses, and says where uploads go
        (docs/admins/course-data.md)."""
        if resource != "contents":
            return None
        try:
            path = sharing.request_path(resource, self._url_path(handler))
        except ValueError:
            return None
        if path is None:
            return None
        target = os.path.join(self.root_dir, path)
        if not course_data_root():
            if not on_read_only_mount(target):
                return None
            return ("This folder is mounted read-only in your server (a course's data folder): "
                    "teachers and TAs upload and delete its files on the course's page in "
                    "classhub (Data).")
        if not in_course_data(target):
            return None
        return ("The course's data folder is read-only in your server: teachers and TAs upload "
                "and delete its files on the course's page in classhub (Data).")

    def _url_path(self, handler: Any) -> str:
        base = handler.settings.get("base_url", "/")
        path = handler.request.path
        return path[len(base):] if path.startswith(base) else path

    @property
    def root_dir(self) -> str:
        return os.path.realpath(getattr(self.parent, "root_dir", None) or os.getcwd())

    def _resolve(self, path: str) -> str | None:
        """`path` relative to the root after following symlinks; None when it leaves the root."""
        root = self.root_dir
        real = os.path.realpath(os.path.join(root, path))
        if real != root and not real.startswith(root + os.sep):
            return None
        return os.path.relpath(real, root).replace(os.sep, "/") if real != root else ""

    async def _fresh_model(self, handler: Any) -> dict | None:
        """The caller's model as the hub reports it now (once per request)."""
        if hasattr(handler, "_classhub_model"):
            return handler._classhub_model
        token = self.hub_auth.get_token(handler)
        model = None
        if token:
            key = hashlib.sha256(token.encode()).hexdigest()
            cache = self.__dict__.setdefault("_fresh", {})
            hit = cache.get(key)
            if hit and self.recheck_seconds > 0 and time.monotonic() - hit[0] < self.recheck_seconds:
                model = hit[1]
            else:
                model = await self.hub_auth.user_for_token(token, use_cache=False, sync=False)
                cache[key] = (time.monotonic(), model)
        handler._classhub_model = model
        return model

    async def _share_scopes(self, model: dict) -> list[str]:
        """The scopes the hub's shares of this server give the caller (directly or through a group).

        Why not only the token's scopes: JupyterHub issues a browser's OAuth token with the
        scopes of the viewer's roles, not of their shares, so the share's kind (read-only or
        editable) never reaches a cookie-authenticated request. The hub's share list does; this
        server reads it with its own token (``read:shares!server``, see configure()).
        """
        if model.get("kind", "user") != "user":
            return []
        name, groups = model.get("name"), set(model.get("groups") or [])
        server = f"{quote(self.owner, safe='')}/{quote(self.server_name, safe='')}"
        url = f"{self.hub_auth.api_url}/shares/{server}"
        found: list[str] = []
        offset = 0
        while True:
            try:
                response = await AsyncHTTPClient().fetch(
                    f"{url}?offset={offset}&limit=200", request_timeout=10,
                    headers={"Authorization": f"token {self.hub_auth.api_token}"})
            except Exception as e:  # the token's scopes alone decide then (fail closed)
                self.log.error("classhub: cannot read this server's shares from the hub: %s", e)
                return found
            page = json.loads(response.body)
            items = page.get("items", [])
            for item in items:
                user, group = item.get("user") or {}, item.get("group") or {}
                if user.get("name") == name or group.get("name") in groups:
                    found.extend(item.get("scopes", []))
            nxt = (page.get("_pagination") or {}).get("next")
            if not nxt or not items:
                return found
            offset = nxt.get("offset", offset + len(items))

    async def _shared_paths(self, viewer: str) -> frozenset[str]:
        """The paths classhub recorded for `viewer`'s one-path shares of this server (asked from
        the classhub service with this server's token; none when it cannot be asked)."""
        cache = self.__dict__.setdefault("_paths", {})
        hit = cache.get(viewer)
        if hit and self.recheck_seconds > 0 and time.monotonic() - hit[0] < self.recheck_seconds:
            return hit[1]
        paths: frozenset[str] = frozenset()
        if not self.service_api_url:
            self.log.error("classhub: one-path share but no CLASSHUB_SERVICE_API_URL; refusing")
        else:
            url = (f"{self.service_api_url.rstrip('/')}/shares/paths?viewer={quote(viewer, safe='')}"
                   f"&server={quote(self.server_name, safe='')}")
            try:
                response = await AsyncHTTPClient().fetch(
                    url, headers={"Authorization": f"token {self.hub_auth.api_token}"}, request_timeout=10)
                paths = frozenset(json.loads(response.body).get("paths", []))
            except Exception as e:  # refuse rather than guess
                self.log.error("classhub: cannot read shared paths from %s: %s", url, e)
        cache[viewer] = (time.monotonic(), paths)
        return paths


def course_data_root() -> str:
    """Where the courses' data folders are on this machine (local mode: the spawner sets
    $CLASSHUB_COURSE_DATA_DIR; empty on Kubernetes, where the mount is read-only itself)."""
    return os.environ.get("CLASSHUB_COURSE_DATA_DIR", "")


def on_read_only_mount(path: str) -> bool:
    """Whether ``path`` (or, when it does not exist yet, the folder it would be made in) is on a
    file system mounted read-only, as a student's course data mount is on Kubernetes
    (docs/admins/course-data.md)."""
    path = os.path.abspath(path)
    while True:
        try:
            return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return False
            path = parent
        except OSError:
            return False


def in_course_data(path: str) -> bool:
    """Whether ``path`` (links followed, as the file system would) is in a course's data folder."""
    root = os.path.realpath(course_data_root())
    real = os.path.realpath(os.path.expanduser(path))
    return real == root or real.startswith(root + os.sep)


def link(serverapp: Any) -> None:
    """Install `ClasshubAuthorizer` before jupyter-server creates its Authorizer (hub servers only)."""
    if not os.environ.get("JUPYTERHUB_API_TOKEN"):
        return  # not started by a hub: nothing to enforce shares against
    serverapp.authorizer_class = ClasshubAuthorizer


def _no_cached_refusals(hub_auth: Any) -> None:
    """Never let HubAuth's cache keep someone out: a cached answer without access to this server
    is asked again (a share granted a moment after a refusal works at once). Cached answers *with*
    access are kept for the owner; non-owners are re-checked by ClasshubAuthorizer anyway."""
    original = hub_auth.user_for_token

    async def checked(token: str, use_cache: bool, session_id: str) -> dict | None:
        model = await original(token, use_cache=use_cache, session_id=session_id, sync=False)
        if model is not None and use_cache and not hub_auth.check_scopes(hub_auth.access_scopes, model):
            model = await original(token, use_cache=False, session_id=session_id, sync=False)
            if model is not None:
                key = f"token:{session_id}:{hashlib.sha256(token.encode('utf8', 'replace')).hexdigest()}"
                hub_auth.cache[key] = model  # the cache keeps the fresh answer, as HubAuth would
        return model

    def user_for_token(token: str, use_cache: bool = True, session_id: str = "", *, sync: bool = True):
        if sync:
            return hub_auth._call_coroutine(True, checked, token, use_cache, session_id)
        return checked(token, use_cache, session_id)

    hub_auth.user_for_token = user_for_token


def setup(serverapp: Any) -> None:
    """Check state-changing requests of handlers that skip jupyter-server's ``@authorized``."""
    if not isinstance(serverapp.authorizer, ClasshubAuthorizer):
        serverapp.log.warning("classhub: share enforcement is off (authorizer is %s)",
                              type(serverapp.authorizer).__name__)
        return
    _no_cached_refusals(serverapp.authorizer.hub_auth)
    from jupyter_server.base.handlers import JupyterHandler

    if getattr(JupyterHandler.prepare, "_classhub", False):
        return
    original = JupyterHandler.prepare

    async def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        if self.current_user is not None and await self.authorizer.quiet_answer(self):
            return result  # answered (tornado skips the handler's method once finished)
        if self.request.method.upper() in SAFE_METHODS and self.current_user is not None and \
                (refusal := await self.authorizer.read_refusal(self)):
            raise web.HTTPError(403, refusal)
        if self.request.method.upper() not in SAFE_METHODS and self.current_user is not None and \
                not getattr(self, "classhub_changes_nothing_here", False):
            resource = sharing.handler_resource(self.authorizer._url_path(self),
                                                getattr(self, "auth_resource", None))
            allowed = self.authorizer.is_authorized(self, self.current_user, "write", resource)
            if not await ensure_async(allowed):
                refusal = getattr(self, "_classhub_refusal", "Not allowed on a shared server.")
                raise web.HTTPError(403, refusal)
        return result

    prepare._classhub = True  # type: ignore[attr-defined]
    JupyterHandler.prepare = prepare
    _read_only_contents_say_so()
    _silent_event_streams()
    serverapp.log.info("classhub: share enforcement on (owner %s)", os.environ.get("JUPYTERHUB_USER"))


def _read_only_contents_say_so() -> None:
    """A read-only viewer's contents answers say ``"writable": false``.

    JupyterLab reads that flag: the document gets its "read-only" indicator and is never saved
    (no autosave, no "File Save Error" on Ctrl+S); the server refuses the write anyway.
    """
    from jupyter_server.services.contents.handlers import ContentsHandler

    if getattr(ContentsHandler._finish_model, "_classhub", False):
        return
    original = ContentsHandler._finish_model

    def finish_model(self: Any, model: dict, location: bool = True) -> Any:
        if isinstance(model, dict) and (
                getattr(self, "_classhub_level", None) == sharing.READ_ONLY
                or (course_data_root() and in_course_data(os.path.join(
                    self.settings.get("server_root_dir", os.getcwd()), model.get("path") or "")))):
            model = {**model, "writable": False}
        return original(self, model, location)

    finish_model._classhub = True  # type: ignore[attr-defined]
    ContentsHandler._finish_model = finish_model


def _silent_event_streams() -> None:
    """A path-limited viewer's event stream (``api/events/subscribe``) opens but never carries an
    event: the server's events name every file the owner opens, saves, renames or deletes, and
    JupyterLab, refused, would ask again and again (see `ClasshubAuthorizer.quiet_answer`)."""
    from jupyter_server.services.events.handlers import SubscribeWebsocket

    if getattr(SubscribeWebsocket.open, "_classhub", False):
        return
    original = SubscribeWebsocket.open

    def open_(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_classhub_silent", False):
            return None  # no listener: nothing reaches this socket
        return original(self, *args, **kwargs)

    open_._classhub = True  # type: ignore[attr-defined]
    SubscribeWebsocket.open = open_
