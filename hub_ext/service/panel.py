"""What the JupyterLab panel needs from the service beyond the public API: copying a shared file.

``POST /api/panel/copy`` ``{"viewer_token": "...", "server": "", "path": "week1.ipynb"}``: a person
looking at someone else's server (a TA at a student's notebook, read-only) asks for their own
editable copy. The request comes from the *owner's* server (the panel talks only to the server
it runs in), so it is authenticated like a share-access report (`ShareAccessHandler`): the
server's own token says which server asks, and the hub says whom ``viewer_token`` belongs to
and that it may open this server. The owner's power is never used: the file is read from the
owner's server **with the viewer's token** (so the server's share enforcement, one-path shares
included, decides what may be read), and written into the viewer's own running server as a new
file next to nothing of theirs (``<name>-from-<owner>.<ext>``, never overwriting). The file goes
server to service to server; the browser only asks.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from typing import Any
from urllib.parse import quote

from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext.core import authz, bodies
from hub_ext.hubapi import HubAPIError
from hub_ext.service.apidoc import json_body, ok, op
from hub_ext.service.body_models import BodyError, PanelCopyBody
from hub_ext.service.declare import needs, takes
from hub_ext.service.sharing import ShareAccessHandler, server_in_body

#: The largest file copied (bytes); a notebook with outputs is rarely over a few MB.
MAX_COPY_BYTES = 64 * 1024 * 1024


def copy_name(path: str, owner: str, taken: set[str]) -> str:
    """``week1.ipynb`` from ``student1`` -> ``week1-from-student1.ipynb`` (then ``-2``, ``-3``...)
    in the root of the viewer's server: a copy never replaces a file of theirs."""
    stem, ext = posixpath.splitext(posixpath.basename(path))
    base = f"{stem}-from-{owner}".replace("/", "_")
    candidate, n = f"{base}{ext}", 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}{ext}"
    return candidate


class PanelCopyHandler(ShareAccessHandler):
    """``POST /api/panel/copy``: the viewer's own editable copy of a file of a server they see."""

    body_model = PanelCopyBody

    @needs(authz.COPY_SHARED_FILE, server=server_in_body)
    @takes(PanelCopyBody)
    async def post(self) -> None:  # type: ignore[override]
        owner, server, path = self.caller.name, self.body.server, self.body.path
        viewer = await self.viewer(owner, server, "copied")
        source = await self._listening(owner, server, "The shared server")
        target = await self._listening(viewer["name"], "", "Your own server")
        model = await self._read(source, path, self.body.viewer_token)
        taken = await self._names(target)
        name = copy_name(path, owner, taken)
        await self._write(target, name, model)
        await self.shares.audit(viewer["name"], "share_copied", owner=owner, server=server, path=path,
                                copy=name)
        user_url = f"/user/{quote(viewer['name'], safe='')}/"
        self.write_json({"path": name, "owner": owner,
                         "url": f"{user_url}lab/tree/{quote(name)}"}, 201)

    async def _listening(self, user: str, server: str, who: str) -> str:
        """Where `user`'s `server` listens (the hub's proxy table): a 409 when it is not running."""
        try:
            model = await self.hub.get(f"users/{quote(user, safe='')}")
        except HubAPIError:
            raise web.HTTPError(409, f"{who} is not running; start it and copy again.") from None
        found = (model.get("servers") or {}).get(server)
        if not found or not found.get("ready"):
            raise web.HTTPError(409, f"{who} is not running; start it and copy again.")
        prefix = found["url"]
        try:
            routes = await self.hub.get("proxy")
        except HubAPIError:
            raise web.HTTPError(502, "classhub could not read the hub's proxy table.") from None
        route = routes.get(prefix) or routes.get(prefix.rstrip("/"))
        if not route or (route.get("data") or {}).get("user") != user:
            raise web.HTTPError(409, f"{who} has no route in the proxy yet; try again in a moment.")
        return route["target"].rstrip("/") + prefix

    async def _fetch(self, url: str, token: str, **kwargs: Any) -> dict[str, Any]:
        client = AsyncHTTPClient(force_instance=True, max_body_size=2 * MAX_COPY_BYTES)
        try:
            response = await client.fetch(url, headers={"Authorization": f"token {token}",
                                                        "Content-Type": "application/json"},
                                          request_timeout=120, follow_redirects=False, **kwargs)
        finally:
            client.close()
        return await asyncio.to_thread(bodies.parse_json, response.body or b"{}", max_depth=64)

    async def _read(self, base: str, path: str, viewer_token: str) -> dict[str, Any]:
        url = f"{base}api/contents/{quote(path)}?content=1"
        try:
            model = await self._fetch(url, viewer_token)
        except HTTPClientError as e:
            if e.code in (401, 403, 404):
                raise web.HTTPError(404, f"No file {path!r} that you may read in the shared "
                                         "server.") from None
            raise web.HTTPError(502, f"The shared server answered {e.code} when classhub read "
                                     f"{path!r}.") from None
        except bodies.BodyError:
            raise web.HTTPError(502, f"The shared server's answer for {path!r} is not JSON.") from None
        if model.get("type") == "directory":  # the body's path names a folder
            raise BodyError(f"{path!r} is a folder; copy a notebook or a file.")
        if int(model.get("size") or 0) > MAX_COPY_BYTES:
            raise web.HTTPError(413, f"{path!r} is larger than {MAX_COPY_BYTES} bytes; ask its owner "
                                     "for an editable share instead.")
        return model

    async def _names(self, base: str) -> set[str]:
        token = self.hub_auth.api_token
        try:
            listing = await self._fetch(f"{base}api/contents?content=1", token)
        except HTTPClientError as e:
            raise web.HTTPError(502, f"Your server answered {e.code} when classhub listed it.") from None
        return {item["name"] for item in listing.get("content") or []}

    async def _write(self, base: str, name: str, model: dict[str, Any]) -> None:
        """Create the copy in the viewer's server with the service's token (access:servers):
        the viewer asked for it, authenticated by the hub, and it only ever adds a new file."""
        out = {"type": model["type"], "format": model.get("format"), "content": model.get("content")}
        payload = await asyncio.to_thread(json.dumps, out)
        try:
            await self._fetch(f"{base}api/contents/{quote(name)}", self.hub_auth.api_token,
                              method="PUT", body=payload)
        except HTTPClientError as e:
            raise web.HTTPError(502, f"Your server answered {e.code} when classhub wrote the copy.") from None


ROUTES: list[tuple[str, type]] = [("api/panel/copy", PanelCopyHandler)]

OPENAPI_PATHS: dict[str, Any] = {
    "/api/panel/copy": {"post": op(
        "A viewer's own editable copy of a file of a server shared with them",
        "a single-user server, with its own token, for a person looking at it (viewer_token); "
        "the file is read with the viewer's token and written into the viewer's running server "
        "as a new file",
        ok("The copy: its path and URL in the viewer's server", {
            "type": "object", "properties": {"path": {"type": "string"}, "owner": {"type": "string"},
                                             "url": {"type": "string"}}}, status="201"),
        errors=("400", "401", "403", "404", "409", "413", "502"),
        body=json_body({"type": "object", "required": ["viewer_token", "path"], "additionalProperties": False,
                        "properties": {"viewer_token": {"type": "string"}, "server": {"type": "string"},
                                       "path": {"type": "string"}}}),
    )},
}
