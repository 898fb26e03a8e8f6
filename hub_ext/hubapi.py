"""A small client for the JupyterHub REST API, authenticated with a service's own token.

The service asks the hub (the source of truth for users, groups and servers) instead of keeping
copies, and starts or stops servers through the hub so every hub rule still applies. The culler
uses the same client: it stands beside both, not in the service (docs/architecture.md, rule 2).

Lists are read page by page (`pages`): the hub caps a page at ``api_page_max_limit`` (200 by
default), so a list read without following ``_pagination.next`` silently stops at the first page.
Reads and idempotent writes are retried with backoff when the hub answers 429 or 5xx (a hub
restarting, a busy proxy).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.web import HTTPError


class HubAPIError(HTTPError):
    """The hub refused or failed a request: the caller gets a 502 saying which one.

    ``status`` and ``hub_message`` keep what the hub said, for callers that pass a refusal
    (such as a 400 for invalid spawn options) on to the user.
    """

    def __init__(self, status: int, path: str, hub_message: str = "") -> None:
        super().__init__(502, "classhub could not ask the hub (%s answered %s)", path, status)
        self.status = status
        self.hub_message = hub_message


class HubAPI:
    """Calls ``<api_url>/<path>`` with ``Authorization: token <api_token>``."""

    #: Methods retried on 429/5xx: they mean the same when sent twice.
    RETRIED = frozenset({"GET", "PUT"})

    def __init__(self, api_url: str, api_token: str, retries: int = 4, backoff: float = 0.25) -> None:
        self.api_url = api_url.rstrip("/")
        self.api_token = api_token
        self.retries = retries
        self.backoff = backoff
        #: requests sent (the culler reports it per cycle)
        self.sent = 0
        self._recent: dict[str, tuple[float, asyncio.Future]] = {}

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> Any:
        """One API call; its JSON answer (None when empty). HubAPIError for a refusal."""
        attempt = 0
        while True:
            try:
                return await self._request(method, path, body, headers)
            except HubAPIError as e:
                if method not in self.RETRIED or attempt >= self.retries or not (
                        e.status == 429 or 500 <= e.status < 600):
                    raise
            await asyncio.sleep(self.backoff * 2**attempt)
            attempt += 1

    async def pages(self, path: str, limit: int = 200) -> AsyncIterator[Any]:
        """The items of every page of the hub list at `path` (a path with or without a query),
        following ``_pagination.next``; a hub that answers a bare list gives one page."""
        offset = 0
        sep = "&" if "?" in path else "?"
        while True:
            page = await self.request("GET", f"{path}{sep}offset={offset}&limit={limit}",
                                      headers={"Accept": "application/jupyterhub-pagination+json"})
            paginated = isinstance(page, dict) and "_pagination" in page
            items = page["items"] if paginated else page
            yield items
            following = page["_pagination"].get("next") if paginated else None
            if not following or not items:
                return
            offset = following.get("offset", offset + len(items))

    async def _request(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> Any:
        url = f"{self.api_url}/{path.lstrip('/')}"
        self.sent += 1
        try:
            response = await AsyncHTTPClient().fetch(
                url,
                method=method,
                headers={"Authorization": f"token {self.api_token}", **(headers or {})},
                body=None if body is None and method in ("GET", "DELETE") else json.dumps(body or {}),
                # The hub's group API takes a body with DELETE (which users to remove).
                allow_nonstandard_methods=method == "DELETE" and body is not None,
                request_timeout=60,
            )
        except HTTPClientError as e:
            message = ""
            if e.response is not None and e.response.body:
                try:
                    message = json.loads(e.response.body).get("message", "")
                except (ValueError, AttributeError):
                    message = ""
            raise HubAPIError(e.code, f"{method} {path}", message) from e
        if not response.body:
            return None
        try:
            return json.loads(response.body)
        except ValueError:
            return None

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def user(self, name: str) -> dict[str, Any]:
        return await self.get(f"users/{quote(name, safe='')}")

    async def recent_user(self, name: str, max_age: float = 5.0) -> dict[str, Any]:
        """The user's model, asked at most once per ``max_age`` seconds (concurrent callers share
        one request). For answers that only show who the caller is (``/api/me``): twenty
        students refreshing a page must not each cost the hub a request. Authorization never
        reads it (it asks the hub, or the caller's own token, every time)."""
        now = time.monotonic()
        cached = self._recent.get(name)
        if cached is None or now - cached[0] > max_age:
            cached = self._recent[name] = (now, asyncio.ensure_future(self.user(name)))
            if len(self._recent) > 4096:  # a bounded memo: drop the oldest answers
                for old in sorted(self._recent, key=lambda k: self._recent[k][0])[:1024]:
                    del self._recent[old]
        try:
            return await asyncio.shield(cached[1])
        except Exception:
            self._recent.pop(name, None)  # a failure is not remembered
            raise

    async def groups(self) -> list[dict[str, Any]]:
        """All groups with their properties."""
        return [group async for items in self.pages("groups") for group in items]

    async def users(self, state: str = "") -> list[dict[str, Any]]:
        """All users (``state="active"``: those with a running or starting server)."""
        query = f"users?state={state}" if state else "users"
        return [user async for items in self.pages(query) for user in items]

    async def admin_names(self) -> set[str]:
        """The hub's admins now."""
        return {user["name"] for user in await self.users() if user.get("admin")}

    async def profile_catalog(self, user: str) -> dict[str, Any]:
        """The profile catalog of `user`'s spawner (the hub-side endpoint of hub_ext.hubside)."""
        return await self.request("GET", f"classhub/profiles/{quote(user, safe='')}")

    async def home_volume(self, user: str) -> dict[str, Any] | None:
        """The home volume `user`'s notebook pod mounts (the hub-side endpoint of hub_ext.hubside),
        None when their spawner has none."""
        return (await self.request("GET", f"classhub/home/{quote(user, safe='')}") or {}).get("home")

    async def set_course_roles(self, courses: dict[str, Any]) -> dict[str, Any]:
        """Replace the hub's course roles (the hub-side endpoint of hub_ext.hubside)."""
        return await self.request("PUT", "classhub/course-roles", {"courses": courses})

    async def group(self, name: str) -> dict[str, Any] | None:
        """The group model (with ``users`` and ``properties``), or None when there is none."""
        try:
            return await self.get(f"groups/{quote(name, safe='')}")
        except HubAPIError as e:
            if e.status == 404:
                return None
            raise

    async def create_group(self, name: str) -> None:
        """Create an empty group (a 409 "already exists" is fine: the group is there)."""
        try:
            await self.request("POST", f"groups/{quote(name, safe='')}", {})
        except HubAPIError as e:
            if e.status != 409:
                raise

    async def delete_group(self, name: str) -> None:
        """Delete a group; one that is already gone is fine."""
        try:
            await self.request("DELETE", f"groups/{quote(name, safe='')}")
        except HubAPIError as e:
            if e.status != 404:
                raise

    async def add_group_users(self, name: str, users: list[str]) -> None:
        if users:
            await self.request("POST", f"groups/{quote(name, safe='')}/users", {"users": users})

    async def remove_group_users(self, name: str, users: list[str]) -> None:
        if users:
            await self.request("DELETE", f"groups/{quote(name, safe='')}/users", {"users": users})

    async def create_users(self, names: list[str]) -> dict[str, str]:
        """Make sure hub users ``names`` exist; returns {name: the hub's reason} for refused ones.

        One request for all. The hub refuses a whole batch when its username rules reject one
        name, so a refused batch is split in halves until the bad names are alone: a roster of
        500 with one bad name costs about 2 x log2(500) requests, not 500, and one bad name
        never keeps the others out. (The batch form is used even for one name because it applies
        the authenticator's rules; ``POST users/<name>`` does not.)
        """
        if not names:
            return {}
        try:
            await self.request("POST", "users", {"usernames": names})
            return {}
        except HubAPIError as e:
            if e.status == 409:  # "All N users already exist"
                return {}
            if e.status != 400:
                raise
            if len(names) == 1:
                return {names[0]: e.hub_message or "the hub refused the username (HTTP 400)"}
        half = len(names) // 2
        return {**await self.create_users(names[:half]), **await self.create_users(names[half:])}

    _version: tuple[int, ...] | None = None

    async def version(self) -> tuple[int, ...]:
        """The hub's version, e.g. (6, 1, 1); asked once."""
        if self._version is None:
            text = (await self.get("")).get("version", "0")
            self._version = tuple(int(p) for p in text.split(".")[:3] if p.isdigit())
        return self._version

    async def server(self, name: str) -> dict[str, Any] | None:
        """The user's default server model, or None when it is not running or pending."""
        return (await self.user(name)).get("servers", {}).get("")

    async def stop_server(self, name: str, timeout: float = 60) -> None:
        """Stop the default server and wait until the hub no longer lists it."""
        await self.request("DELETE", f"users/{quote(name, safe='')}/server")
        await self._wait(name, lambda s: s is None, timeout, "stop")

    async def start_server(self, name: str, user_options: dict, timeout: float = 300) -> dict:
        """Start the (stopped) default server with ``user_options`` and wait until it is ready.

        JupyterHub 6 stores the options on the stopped server first (PATCH) and starts it with
        them; JupyterHub 5, which cannot PATCH a server, gets them with the start request.
        A refusal (400/409) raises HubAPIError at once; a server that fails while starting
        raises HubAPIError with status 500.
        """
        path = f"users/{quote(name, safe='')}/server"
        if await self.version() >= (6,) and await self._has_server_record(name):
            await self.request("PATCH", path, {"user_options": user_options})
            await self.request("POST", path, {"user_options": None})
        else:
            await self.request("POST", path, {"user_options": user_options})
        server = await self._wait(name, lambda s: s is None or s.get("ready"), timeout, "start")
        if server is None:
            raise HubAPIError(500, f"start of {name}'s server", "the server failed to start")
        return server

    async def _has_server_record(self, name: str) -> bool:
        """Whether the hub keeps a (stopped) default server record that PATCH can update."""
        user = await self.get(f"users/{quote(name, safe='')}?include_stopped_servers=1")
        return "" in (user.get("servers") or {})

    async def _wait(self, name: str, done, timeout: float, what: str) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            server = await self.server(name)
            if done(server) and not (server and server.get("pending")):
                return server
            if time.monotonic() > deadline:
                raise HubAPIError(504, f"{what} of {name}'s server", f"no {what} in {timeout:.0f}s")
            await asyncio.sleep(0.25)
