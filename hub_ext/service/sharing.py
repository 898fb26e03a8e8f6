"""The classhub service's sharing API: share my server, list, revoke, links, broadcasts, auto-start.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().

How a share reaches the servers: classhub's records (hub_ext.store.share_models) say what was
decided; `Shares.reconcile(owner, server)` makes the hub's shares of that server match them
(grant what is missing, revoke what is no longer wanted), with the scopes of
hub_ext.core.sharing.share_scopes. The single-user server (hub_ext.singleuser.authorizer) reads
those scopes from the hub on every request of a non-owner, so a revocation or expiry holds from
the next request on.

Why links are classhub's own and not JupyterHub share codes: deleting a JupyterHub share code
does not revoke the shares already exchanged for it, so an expired broadcast link would keep
working for everyone who used it. A classhub link is a code (stored as its sha256) that makes a
user share for whoever opens it while it is valid; when it ends, those shares end with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import html
import logging
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from tornado import web

from hub_ext import store
from hub_ext.core import authz, bodies, sharing
from hub_ext.hubapi import HubAPI, HubAPIError
from hub_ext.service.apidoc import json_body, ok, op
from hub_ext.service.body_models import BodyError, CourseSharingBody, ShareAccessBody, ShareBody
from hub_ext.service.declare import needs, takes
from hub_ext.service.handlers import APIHandler
from hub_ext.store.models import Course
from hub_ext.store.share_models import Share, ShareAcceptance, SharingSettings, ta_access_by_course

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _server_path(owner: str, server: str) -> str:
    return f"{quote(owner, safe='')}/{quote(server, safe='')}"


class Shares:
    """Share records in the store, kept in step with the hub's shares."""

    def __init__(self, sessions: Any, hub: HubAPI, prefix: str = "/services/classhub/") -> None:
        self.sessions = sessions
        #: reads never wait on a writer; every database call runs in a worker thread (`_db`)
        self.reads = store.readers(sessions)
        self.hub = hub
        self.prefix = prefix
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        #: servers whose hub shares are not yet in step with their ended records (the hub did not
        #: answer): tried again at every round of `expire_due` until they are
        self._unsynced: set[tuple[str, str]] = set()

    # -- model -------------------------------------------------------------------------------
    def model(self, share: Share, code: str | None = None) -> dict[str, Any]:
        open_url = f"{self.prefix}shares/{share.id}/open"
        result = {
            "id": share.id, "owner": share.owner, "server": share.server, "kind": share.kind,
            "target_kind": share.target_kind, "target": share.target or None, "path": share.path,
            "auto_start": share.auto_start, "created_at": share.created_at.isoformat(),
            "created_by": share.created_by,
            "expires_at": share.expires_at.isoformat() if share.expires_at else None,
            "active": self._active(share, _now()),
            "ended_at": share.ended_at.isoformat() if share.ended_at else None,
            "end_reason": share.end_reason,
            "open_url": open_url,
        }
        if share.target_kind == "link":
            result["accepted_by"] = sorted(a.user for a in share.acceptances)
        if code is not None:
            result["code"] = code
            result["open_url"] = f"{open_url}?code={code}"
        return result

    @staticmethod
    def _active(share: Share, now: datetime) -> bool:
        return share.ended_at is None and (share.expires_at is None or share.expires_at > now)

    def _query(self, session: Session, **where: Any) -> list[Share]:
        q = select(Share).options(selectinload(Share.acceptances)).filter_by(**where).order_by(Share.id)
        return list(session.scalars(q))

    @staticmethod
    async def _db(fn: Any, *args: Any) -> Any:
        """Database work off the event loop (docs/architecture.md, rule 7)."""
        return await asyncio.to_thread(fn, *args)

    def _one(self, share_id: int, code: str | None) -> dict[str, Any]:
        with self.reads() as session:
            return self.model(self._query(session, id=share_id)[0], code)

    async def one(self, share_id: int, code: str | None = None) -> dict[str, Any]:
        """The model of share `share_id` (which exists), with its link's code when given."""
        return await self._db(self._one, share_id, code)

    # -- decisions that change things --------------------------------------------------------
    async def create(self, spec: sharing.ShareSpec, actor: str) -> dict[str, Any]:
        code = secrets.token_urlsafe(24) if spec.target_kind == "link" else None
        share_id = await self._db(self._record, spec, actor, code)
        try:
            await self.reconcile(spec.owner, spec.server)
        except HubAPIError as e:
            await self._db(self._end, share_id, "failed")
            await self.reconcile(spec.owner, spec.server)
            if e.status in (400, 404):  # the body named a recipient or server the hub does not have
                raise BodyError("The hub refused the share: " + (
                    e.hub_message or f"no such user, group or server ({spec.owner}/{spec.server})")
                ) from None
            raise
        return await self.one(share_id, code)

    def _end(self, share_id: int, reason: str) -> None:
        with self.sessions() as session, session.begin():
            share = session.get(Share, share_id)
            share.ended_at, share.end_reason = _now(), reason

    def _record(self, spec: sharing.ShareSpec, actor: str, code: str | None) -> int:
        now = _now()
        with self.sessions() as session, session.begin():
            if spec.target_kind != "link":
                # one classhub share per (server, recipient): a new one replaces the old
                for old in self._query(session, owner=spec.owner, server=spec.server,
                                       target_kind=spec.target_kind, target=spec.target, ended_at=None):
                    old.ended_at, old.end_reason = now, "replaced"
            share = Share(
                owner=spec.owner, server=spec.server, kind=spec.kind, target_kind=spec.target_kind,
                target=spec.target, path=spec.path, auto_start=spec.auto_start,
                code_sha256=_digest(code) if code else None, created_at=now, created_by=actor,
                expires_at=now + timedelta(seconds=spec.seconds) if spec.seconds else None,
            )
            session.add(share)
            session.flush()
            store.record(session, actor, "share_created", now, share=share.id, owner=spec.owner,
                         server=spec.server, kind=spec.kind, target_kind=spec.target_kind,
                         target=spec.target, path=spec.path, seconds=spec.seconds,
                         auto_start=spec.auto_start)
            return share.id

    async def revoke(self, share_id: int, actor: str, reason: str = "revoked") -> dict[str, Any]:
        owner, server = await self._db(self._revoke, share_id, actor, reason)
        await self.reconcile(owner, server)
        return await self.one(share_id)

    def _revoke(self, share_id: int, actor: str, reason: str) -> tuple[str, str]:
        with self.sessions() as session, session.begin():
            share = session.get(Share, share_id)
            if share is None:
                raise web.HTTPError(404, "No share %s.", share_id)
            if share.ended_at is None:
                share.ended_at, share.end_reason = _now(), reason
                store.record(session, actor, f"share_{reason}", share.ended_at, share=share.id,
                             owner=share.owner, server=share.server, target_kind=share.target_kind,
                             target=share.target)
            return share.owner, share.server

    async def expire_due(self) -> int:
        """End every share whose time is up (at service start and in `expire_forever`).

        Looks first with a reader: the write lock is taken only when something is due, not
        every few seconds for nothing."""
        due, servers = await self._db(self._expire, _now())
        await self._reconcile_each(servers | self._unsynced)
        return due

    async def _reconcile_each(self, servers: set[tuple[str, str]]) -> None:
        """`reconcile` each server, whatever another one does.

        Why: a record ends before its hub share is revoked, so it is never due again; one
        server the hub could not sync (restarting, or a deleted owner) must neither leave the
        others' ended shares working, nor be forgotten: it stays in `_unsynced` and is tried at
        the next round. A server the hub no longer has (404) has no share left to end."""
        for owner, server in sorted(servers):
            try:
                await self.reconcile(owner, server)
            except Exception as e:
                if isinstance(e, HubAPIError) and e.status == 404:
                    self._unsynced.discard((owner, server))
                else:
                    self._unsynced.add((owner, server))
                log.warning("classhub: shares of %s/%s not in step with the hub yet: %s", owner, server, e)
            else:
                self._unsynced.discard((owner, server))

    def _due(self, session: Session, now: datetime) -> list[Share]:
        return [s for s in self._query(session, ended_at=None) if s.expires_at and s.expires_at <= now]

    def _expire(self, now: datetime) -> tuple[int, set[tuple[str, str]]]:
        with self.reads() as session:
            if not self._due(session, now):
                return 0, set()
        with self.sessions() as session, session.begin():
            due = self._due(session, now)
            for s in due:
                s.ended_at, s.end_reason = now, "expired"
                store.record(session, "classhub", "share_expired", now, share=s.id, owner=s.owner,
                             server=s.server, target_kind=s.target_kind, target=s.target)
            return len(due), {(s.owner, s.server) for s in due}

    def _servers(self, **where: Any) -> set[tuple[str, str]]:
        with self.reads() as session:
            return {(s.owner, s.server) for s in self._query(session, **where)}

    async def reconcile_groups(self) -> None:
        """Servers with an active group share: members who joined or left since the last look."""
        await self._reconcile_each(await self._db(lambda: self._servers(target_kind="group",
                                                                         ended_at=None)))

    async def reconcile_all(self) -> None:
        """Every server classhub ever shared: its hub shares match the records
        (docs/architecture.md, rule 4)."""
        await self._reconcile_each(await self._db(self._servers))

    async def desired(self, owner: str, server: str) -> dict[tuple[str, str], frozenset[str]]:
        """(user, name) -> the hub scopes the active records grant them on this server.

        A group share becomes a user share for each member (but the owner): JupyterHub (6.1)
        counts a user's own shares in their tokens' permissions, not their groups' shares, so a
        hub group share would not open the server to a member's browser or API token.
        """
        want: dict[tuple[str, str], set[str]] = {}
        for kind, path, target_kind, target, accepted in await self._db(self._active_records, owner,
                                                                        server):
            scopes = sharing.share_scopes(kind, owner, server, one_path=path is not None)
            if target_kind == "link":
                names = accepted
            elif target_kind == "group":
                group = await self.hub.group(target)
                names = list((group or {}).get("users", []))
            else:
                names = [target]
            for name in names:
                if name != owner:
                    want.setdefault(("user", name), set()).update(scopes)
        return {k: frozenset(v) for k, v in want.items()}

    def _active_records(self, owner: str, server: str) -> list[tuple]:
        now = _now()
        with self.reads() as session:
            return [(s.kind, s.path, s.target_kind, s.target, [a.user for a in s.acceptances])
                    for s in self._query(session, owner=owner, server=server, ended_at=None)
                    if self._active(s, now)]

    async def hub_shares(self, owner: str, server: str) -> dict[tuple[str, str], frozenset[str]]:
        """(user|group, name) -> scopes of the hub's shares of this server."""
        found: dict[tuple[str, str], frozenset[str]] = {}
        offset = 0
        while True:
            try:
                page = await self.hub.get(f"shares/{_server_path(owner, server)}?offset={offset}&limit=200")
            except HubAPIError as e:
                if e.status == 404:
                    return found  # no such server (yet, or any more): nothing shared
                raise
            items = page.get("items", []) if isinstance(page, dict) else page
            for item in items:
                key = ("user", item["user"]["name"]) if item.get("user") else ("group", item["group"]["name"])
                found[key] = frozenset(item.get("scopes", []))
            nxt = (page.get("_pagination") or {}).get("next") if isinstance(page, dict) else None
            if not nxt or not items:
                return found
            offset = nxt.get("offset", offset + len(items))

    async def reconcile(self, owner: str, server: str) -> None:
        """Grant and revoke hub shares of `owner`/`server` until they match the records."""
        lock = self._locks.setdefault((owner, server), asyncio.Lock())
        async with lock:
            want = await self.desired(owner, server)
            have = await self.hub_shares(owner, server)
            path = f"shares/{_server_path(owner, server)}"
            limit = asyncio.Semaphore(8)  # a broadcast to a class: many members at once, gently

            async def fix(key: tuple[str, str]) -> None:
                kind, name = key
                async with limit:
                    if key in have:
                        await self.hub.request("PATCH", path, {kind: name})  # no scopes: revoke all
                    if want.get(key):
                        await self.hub.request("POST", path, {kind: name, "scopes": sorted(want[key])})

            changes = [k for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)]
            await asyncio.gather(*(fix(k) for k in changes))

    async def accept_link(self, share_id: int, code: str, user: str) -> None:
        found = await self._db(self._accept, share_id, code, user)
        if found:
            await self.reconcile(*found)

    def _accept(self, share_id: int, code: str, user: str) -> tuple[str, str] | None:
        with self.sessions() as session, session.begin():
            share = session.get(Share, share_id)
            if share is None or share.code_sha256 is None or not hmac.compare_digest(
                    share.code_sha256, _digest(code)):
                raise web.HTTPError(403, "This link's code is not valid; ask the owner for the link again.")
            if share.owner == user:
                return None
            if not any(a.user == user for a in share.acceptances):
                now = _now()
                session.add(ShareAcceptance(share_id=share.id, user=user, accepted_at=now))
                store.record(session, user, "share_link_accepted", now, share=share.id, owner=share.owner,
                             server=share.server)
            return share.owner, share.server

    # -- course settings ---------------------------------------------------------------------
    async def set_ta_access(self, actor: str, course: str, allowed: bool) -> None:
        """Whether `course`'s TAs open its students' servers without a share."""
        await self._db(self._set_ta_access, actor, course, allowed)

    def _set_ta_access(self, actor: str, course: str, allowed: bool) -> None:
        with self.sessions() as session, session.begin():
            found = session.scalars(select(Course).filter_by(name=course)).one_or_none()
            if found is None:
                raise web.HTTPError(404, f"No course {course}.")
            row = session.get(SharingSettings, found.id) or SharingSettings(course_id=found.id)
            row.ta_server_access = allowed
            session.add(row)
            store.record(session, actor, "course_sharing_set", _now(), course=course,
                         ta_server_access=allowed)

    async def course_settings(self, course: str) -> dict[str, Any]:
        return {"course": course,
                "ta_server_access": (await self._db(self._ta_access)).get(course),
                "applies": "at once (null: the hub-wide default)"}

    def _ta_access(self) -> dict[str, bool]:
        with self.reads() as session:
            return ta_access_by_course(session)

    # -- questions (async: the database is asked in a worker thread) --------------------------
    async def mine(self, owner: str, include_ended: bool = False) -> list[dict[str, Any]]:
        return await self._db(self._mine, owner, include_ended)

    def _mine(self, owner: str, include_ended: bool) -> list[dict[str, Any]]:
        with self.reads() as session:
            now = _now()
            return [self.model(s) for s in self._query(session, owner=owner)
                    if include_ended or self._active(s, now)]

    async def with_me(self, user: str, groups: list[str]) -> list[dict[str, Any]]:
        return await self._db(self._with_me, user, groups)

    def _with_me(self, user: str, groups: list[str]) -> list[dict[str, Any]]:
        now = _now()
        with self.reads() as session:
            result = []
            for s in self._query(session, ended_at=None):
                if not self._active(s, now):
                    continue
                if ((s.target_kind == "user" and s.target == user)
                        or (s.target_kind == "group" and s.target in groups)
                        or (s.target_kind == "link" and any(a.user == user for a in s.acceptances))):
                    result.append(self.model(s))
            return result

    async def get(self, share_id: int | str) -> Share:
        """The share with this id; 404 (`no_share`) when there is none or the id cannot be one."""
        return await self._db(self._get, share_id)

    def _get(self, share_id: int | str) -> Share:
        number = share_id if isinstance(share_id, int) else bodies.path_id(share_id)
        if number is None:
            raise no_share(share_id)
        with self.reads() as session:
            found = self._query(session, id=number)
            if not found:
                raise no_share(share_id)
            share = found[0]
            session.expunge(share)
            return share

    async def paths_for(self, owner: str, server: str, viewer: str, groups: list[str]) -> list[str]:
        """The paths of the viewer's active one-path shares of this server."""
        return sorted({m["path"] for m in await self.with_me(viewer, groups)
                       if m["owner"] == owner and m["server"] == server and m["path"]})

    async def audit(self, actor: str, action: str, **details: Any) -> None:
        await self._db(self._audit, actor, action, details)

    def _audit(self, actor: str, action: str, details: dict[str, Any]) -> None:
        with self.sessions() as session, session.begin():
            store.record(session, actor, action, _now(), **details)


async def expire_forever(shares: Shares, interval: float, group_every: float = 60) -> None:
    """End shares whose time is up, every `interval` seconds (a broadcast ends by itself); every
    `group_every` seconds, follow group shares to the groups' current members."""
    last_groups = asyncio.get_running_loop().time()
    while True:
        try:
            await shares.expire_due()
            if asyncio.get_running_loop().time() - last_groups >= group_every:
                last_groups = asyncio.get_running_loop().time()
                await shares.reconcile_groups()
        except Exception:  # the hub restarting: try again next round
            log.exception("classhub: expiring shares failed")
        await asyncio.sleep(interval)


def no_share(share_id: int | str | None = None) -> web.HTTPError:
    """The one answer for a share that does not exist and for one that is not the caller's: the
    two must not be told apart, or share ids (and their owners) could be enumerated."""
    return web.HTTPError(404, authz.NO_SHARE)


# -- handlers (thin) -------------------------------------------------------------------------------

class _ShareHandler(APIHandler):
    """Sharing's rules (hub_ext.core.authz) look at the caller's hub groups and admin flag as the
    hub answers now, not as the login's cached model had them."""

    @property
    def shares(self) -> Shares:
        return self.settings["shares"]

    async def make_caller(self, model: dict[str, Any], access: bool) -> authz.Caller:
        caller = await super().make_caller(model, access)
        if not (caller.is_user and access):
            return caller
        user = await self.hub.user(caller.name)
        return dataclasses.replace(caller, admin=bool(user.get("admin")),
                                   groups=frozenset(user.get("groups") or ()))


async def _requested_share(handler: SharesHandler, arguments: dict[str, Any]) -> authz.ShareRef:
    """The share a POST /api/shares asks for (the body: 400 first when it cannot be one)."""
    model = handler.require_user()
    handler.spec = handler.body_as(ShareBody).spec(model["name"])
    return authz.ShareRef(handler.spec.owner, handler.spec.target_kind, handler.spec.target)


async def _stored_share(handler: ShareHandler | OpenShareHandler, arguments: dict[str, Any]
                        ) -> authz.ShareRef:
    """The share named in the path (404 when there is none), looked up for a logged-in caller
    only: nobody learns which share ids exist without logging in."""
    handler.require_user()
    handler.share = await handler.shares.get(arguments["share_id"])
    return authz.ShareRef(handler.share.owner, handler.share.target_kind, handler.share.target or None)


class SharesHandler(_ShareHandler):
    """``GET /api/shares``: my shares (``?ended=1`` with ended ones); ``POST``: share my server."""

    spec: sharing.ShareSpec

    @needs(authz.READ_OWN_SHARES)
    async def get(self) -> None:
        self.write_json({"shares": await self.shares.mine(self.caller.name,
                                                          self.get_argument("ended", "") == "1")})

    @needs(authz.SHARE_SERVER, share=_requested_share)
    @takes(ShareBody)
    async def post(self) -> None:
        self.write_json(await self.shares.create(self.spec, self.caller.name), 201)


class SharedWithMeHandler(_ShareHandler):
    """``GET /api/shares/with-me``: active shares I can open (directly, through a group or a link)."""

    @needs(authz.READ_OWN_SHARES)
    async def get(self) -> None:
        self.write_json({"shares": await self.shares.with_me(self.caller.name, sorted(self.caller.groups))})


class ShareHandler(_ShareHandler):
    """``GET /api/shares/<id>``: one share; ``DELETE``: revoke it now (owner or admin); someone
    else's share is a 404 like a missing one (hub_ext.core.authz)."""

    share: Share

    @needs(authz.READ_SHARE, share=_stored_share)
    async def get(self, share_id: str) -> None:
        self.write_json(await self.shares.one(self.share.id))

    @needs(authz.REVOKE_SHARE, share=_stored_share)
    async def delete(self, share_id: str) -> None:
        self.write_json(await self.shares.revoke(self.share.id, self.caller.name))


class SharePathsHandler(_ShareHandler):
    """``GET /api/shares/paths?viewer=<name>&server=<name>``: asked by the owner's server (with its
    token) for the paths a viewer's one-path shares allow."""

    @needs(authz.READ_SHARE_PATHS)
    async def get(self) -> None:
        viewer = self.get_argument("viewer")
        server = self.get_argument("server", "")
        try:
            groups = (await self.hub.user(viewer)).get("groups", [])
        except HubAPIError:
            groups = []
        self.write_json({"paths": await self.shares.paths_for(self.caller.name, server, viewer, groups)})


def server_of_token_note(note: str, owner: str) -> str | None:
    """The server a token is for, from the note the hub gives a server's token at spawn
    ("Server at [<base>]/user/<owner>/[<server>/]"), or None when it is no such token."""
    marker = "/user/" + quote(owner, safe="@~") + "/"
    at = note.rfind(marker)
    if not note.startswith("Server at ") or at < 0:
        return None
    tail = note[at + len(marker):]
    if tail == "":
        return ""
    return tail[:-1] if tail.endswith("/") and "/" not in tail[:-1] else None


def server_in_body(handler: ShareAccessHandler, arguments: dict[str, Any]) -> str:
    """The server a report or copy request is about (the body; 400 first when it is wrong)."""
    handler.require_user()
    return handler.body_as(handler.body_model).server


class ShareAccessHandler(_ShareHandler):
    """``POST /api/shares/accessed`` ``{"viewer_token": "...", "server": ""}``: the owner's server
    reports that a non-owner used it; written to the audit log as ``share_accessed``.

    Only a server may report, and only about itself: the request must carry the server's own
    token (the one JupyterHub gave it at spawn, noted "Server at /user/<owner>/<server>/"). Who
    used it comes from the hub, which is asked whom ``viewer_token`` (the viewer's token for
    this server) belongs to and whether it may open this server; a name in the body is never
    believed (docs/admins/security.md, "Security model", rule 3)."""

    body_model: type[ShareAccessBody] = ShareAccessBody

    async def make_caller(self, model: dict[str, Any], access: bool) -> authz.Caller:
        """The caller, with the server its token was made for (`authz.Caller.server_token`)."""
        caller = await super().make_caller(model, access)
        server = await self._token_server(model) if caller.is_user else None
        return dataclasses.replace(caller, server_token=server)

    @needs(authz.REPORT_SHARE_ACCESS, server=server_in_body)
    @takes(ShareAccessBody)
    async def post(self) -> None:
        owner, server = self.caller.name, self.body.server
        viewer = await self.viewer(owner, server, "recorded")
        await self.shares.audit(viewer["name"], "share_accessed", owner=owner, server=server)
        self.write_json({"recorded": True}, 201)

    async def viewer(self, owner: str, server: str, nothing: str) -> dict[str, Any]:
        """Who ``viewer_token`` (in the body) belongs to; 403 unless someone else who may open
        `owner`'s `server` (hub_ext.core.authz.may_view_server)."""
        model = await self.hub_auth.user_for_token(self.body.viewer_token, use_cache=False, sync=False)
        viewer = authz.Caller(name=model["name"], kind=model.get("kind", "user"),
                              scopes=frozenset(model.get("scopes") or ())) if model else authz.ANONYMOUS
        verdict = authz.may_view_server(viewer, owner, server)
        if not verdict:
            raise web.HTTPError(verdict.status, f"{verdict.message}; nothing was {nothing}.")
        return model

    async def _token_server(self, model: dict[str, Any]) -> str | None:
        """The server whose own token the caller sent (the hub's note on the token), or None."""
        token_id = model.get("token_id")
        if not token_id:
            return None
        try:
            token = await self.hub.get(f"users/{quote(model['name'], safe='')}/tokens/{token_id}")
        except HubAPIError:
            return None
        return server_of_token_note((token or {}).get("note") or "", model["name"])


class OpenShareHandler(_ShareHandler):
    """``GET /shares/<id>/open[?code=...]``: a recipient follows a share (a link needs its code).

    Lands in the owner's server (at the shared path); a stopped server is started first when the
    owner allowed auto-start for this share, else a page says the owner must start it.
    """

    share: Share

    @needs(authz.OPEN_SHARE, share=_stored_share)
    async def get(self, share_id: str) -> None:
        share, name = self.share, self.caller.name
        if not Shares._active(share, _now()):
            ended = "expired" if share.end_reason in (None, "expired") else "been revoked"
            raise web.HTTPError(410, f"This share has {ended}; ask {share.owner} to share again.")
        if share.target_kind == "link":
            await self.shares.accept_link(share.id, self.get_argument("code", ""), name)
        await self.shares.audit(name, "share_opened", share=share.id, owner=share.owner, server=share.server)
        owner = await self.hub.user(share.owner)
        server = (owner.get("servers") or {}).get(share.server)
        started = False
        if not (server and server.get("ready")):
            if not share.auto_start:
                raise web.HTTPError(409, f"{share.owner}'s server is not running; {share.owner} must "
                                         "start it before you can open it.")
            await self._start(share.owner, share.server)
            started = True
            await self.shares.audit(name, "share_auto_started", share=share.id, owner=share.owner,
                              server=share.server)
        base = f"/user/{quote(share.owner, safe='')}/{quote(share.server, safe='')}"
        url = base.rstrip("/") + "/" + (f"lab/tree/{quote(share.path)}" if share.path else "")
        if "application/json" in self.request.headers.get("Accept", ""):
            self.write_json({"url": url, "started": started})
        else:
            self.redirect(url)

    async def _start(self, owner: str, server: str) -> None:
        named = f"servers/{quote(server, safe='')}" if server else "server"
        path = f"users/{quote(owner, safe='')}/{named}"
        try:
            await self.hub.request("POST", path)
        except HubAPIError as e:
            if e.status != 400:  # 400: already starting
                raise
        for _ in range(600):
            model = await self.hub.user(owner)
            s = (model.get("servers") or {}).get(server)
            if s and s.get("ready"):
                return
            if s is None and _ > 20:
                raise web.HTTPError(502, f"{owner}'s server did not start; ask {owner}.")
            await asyncio.sleep(0.25)
        raise web.HTTPError(504, f"{owner}'s server took too long to start; try again.")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if "application/json" in self.request.headers.get("Accept", "") or self.request.headers.get(
                "Authorization"):
            return super().write_error(status_code, **kwargs)
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(f"<!doctype html><title>Shared server</title><h1>{status_code}</h1>"
                    f"<p>{html.escape(message)}</p><p><a href='/hub/home'>Back to the hub</a></p>")


class CourseSharingHandler(APIHandler):
    """``/api/courses/<course>/sharing``: GET (members) and PUT (teachers, admins) the course's
    sharing settings: ``{"ta_server_access": bool}`` (its TAs may open its students' servers
    without a share). Course roles are JupyterHub roles that classhub replaces in the running
    hub (hub_ext.hubside): a change applies at once."""

    @property
    def shares(self) -> Shares:
        return self.settings["shares"]

    @needs(authz.READ_COURSE, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.shares.course_settings(course))

    @needs(authz.EDIT_MEMBERS, course="course")
    @takes(CourseSharingBody)
    async def put(self, course: str) -> None:
        await self.shares.set_ta_access(self.caller.name, course, self.body.ta_server_access)
        await self.courses.push_roles()
        self.write_json(await self.shares.course_settings(course))


ROUTES: list[tuple[str, type]] = [
    ("api/shares", SharesHandler),
    ("api/shares/with-me", SharedWithMeHandler),
    ("api/shares/paths", SharePathsHandler),
    ("api/shares/accessed", ShareAccessHandler),
    (r"api/shares/([^/]+)", ShareHandler),
    (r"shares/([^/]+)/open", OpenShareHandler),
    (r"api/courses/([^/]+)/sharing", CourseSharingHandler),
]

def _openapi_paths() -> dict[str, Any]:

    owner = "the server's owner and hub admins"
    user = "any logged-in user"
    share = {"type": "object", "description": "A share: id, owner, server, kind, target_kind, target, "
             "path, auto_start, created_at, expires_at, active, ended_at, end_reason, open_url (with "
             "the code, for a link, only in the answer that made it), accepted_by (links)"}
    shares = {"type": "object", "properties": {"shares": {"type": "array", "items": share}}}
    settings = {"type": "object", "properties": {"course": {"type": "string"},
                                                 "ta_server_access": {"type": ["boolean", "null"]}}}
    body = json_body({"type": "object", "properties": {
        "kind": {"type": "string", "enum": ["read-only", "edit"]},
        "user": {"type": "string"}, "group": {"type": "string"}, "link": {"type": "boolean"},
        "path": {"type": "string", "description": "one file, relative to the server's root"},
        "minutes": {"type": "integer"}, "expires_in": {"type": "integer", "description": "seconds"},
        "auto_start": {"type": "boolean"}, "owner": {"type": "string"}, "server": {"type": "string"},
    }, "example": {"kind": "read-only", "group": "cs101", "minutes": 90}})
    return {
        "/api/shares": {
            "get": op("My shares (?ended=1 includes ended ones)", user, ok("Shares", shares)),
            "post": op("Share my server read-only or editable with a user, a group (broadcast) or as "
                        "an expiring link", owner, ok("The share", share, "201"),
                        errors=("400", "401", "403"), body=body),
        },
        "/api/shares/with-me": {"get": op("Active shares I can open", user, ok("Shares", shares))},
        "/api/shares/paths": {"get": op(
            "Paths of a viewer's one-path shares of the caller's server (asked by that server)",
            "the server's owner (its server token)", ok("Paths", {"type": "object"}),
            errors=("400", "401", "403"), params=("viewer", "server"))},
        "/api/shares/accessed": {"post": op(
            "Record in the audit log that a non-owner used the caller's server (sent by that server)",
            "the server's owner (its server token)", ok("Recorded", {"type": "object"}, "201"),
            errors=("400", "401", "403"),
            body=json_body({"type": "object", "properties": {"viewer": {"type": "string"},
                                                              "server": {"type": "string"}}}))},
        "/api/shares/{share}": {
            "get": op("One of my shares", owner, ok("The share", share), errors=("401", "403", "404"),
                       params=("share",)),
            "delete": op("Revoke a share now: the next request of its recipients is refused", owner,
                          ok("The ended share", share), errors=("401", "403", "404"), params=("share",)),
        },
        "/shares/{share}/open": {"get": op(
            "Follow a share into the owner's server (started first when the share allows auto-start)",
            "the share's recipients (a link: anyone with its code)",
            {"302": {"description": "Into the server"}, "409": {"description": "Server not running"},
             "410": {"description": "Share ended"}}, errors=("401", "403", "404"), params=("share",))},
        "/api/courses/{course}/sharing": {
            "get": op("The course's sharing settings", "members of the course and hub admins",
                       ok("Settings", settings), params=("course",)),
            "put": op("Let the course's TAs open its students' servers without a share (applies "
                       "from the next hub start)", "teachers of the course and hub admins",
                       ok("Settings", settings), errors=("400", "401", "403", "404"), params=("course",),
                       body=json_body({"type": "object", "properties": {
                           "ta_server_access": {"type": "boolean"}}})),
        },
    }


OPENAPI_PATHS: dict[str, Any] = _openapi_paths()
