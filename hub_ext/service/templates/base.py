"""What every templates handler shares: the settings, the course lookup and the store calls
(in worker threads)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from tornado import web

from hub_ext.backends.templates import (
    ClasshubTemplates,
)
from hub_ext.core import authz
from hub_ext.hubapi import HubAPIError
from hub_ext.service.handlers import APIHandler
from hub_ext.store.assignment_models import hidden_from
from hub_ext.store.assignment_models import visibility as store_visibility
from hub_ext.store.models import Course

_COURSE = r"courses/([^/]+)"
_TEMPLATE = rf"{_COURSE}/templates/([^/]+)"
_JSON_BODY_MAX = 1024 * 1024
_FETCH_PARALLEL = 8


def _now() -> datetime:
    return datetime.now(timezone.utc)


def settings_of(app_settings: dict[str, Any]) -> ClasshubTemplates:
    """The service's ClasshubTemplates (from its environment; see ClasshubTemplates)."""
    if "classhub_templates" not in app_settings:
        app_settings["classhub_templates"] = ClasshubTemplates()
    return app_settings["classhub_templates"]


def hidden_versions(session: Any, caller: authz.Caller, course: str) -> set[int]:
    """What ``caller`` may not see of ``course``'s templates now (``hidden_from``)."""
    return hidden_from(session, caller, course, _now())


def visibility(session: Any, caller: authz.Caller, course: str) -> tuple[set[int], set[int]]:
    """(the versions of ``course`` that ``caller`` may not see now, those the course's students do
    not see yet): the staff see the second kind, marked ``students_see: false``."""
    return store_visibility(session, caller, course, _now())


class TemplatesBase(APIHandler):
    """Store access in a thread. Who may do what is declared on each method (``@needs`` with
    hub_ext.core.authz's template actions); a template name in the path is checked by
    hub_ext.core.templates.require_name, whose TemplateError ``@refuses`` answers with a 400."""

    @property
    def templates(self) -> ClasshubTemplates:
        return settings_of(self.settings)

    async def db(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    def _course(self, session, course: str) -> Course:
        row = session.scalars(select(Course).where(Course.name == course)).one_or_none()
        if row is None:
            raise web.HTTPError(404, "No course %s; GET /api/courses lists the courses.", course)
        return row

    def caller_token(self) -> str:
        """The caller's own credentials (the token the request came with, or the OAuth token of
        their browser login), with which classhub reads their server: never the service's."""
        token = self.hub_auth.get_token(self)
        if not token:
            raise web.HTTPError(401, "Log in again: classhub needs your own credentials to read your server.")
        return token

    async def server_url(self, not_running: str) -> str:
        """Where the caller's default server listens, from the hub's proxy table; a 409 with
        ``not_running`` when it does not run."""
        server = await self.hub.server(self.caller.name)
        if not server or not server.get("ready"):
            raise web.HTTPError(409, not_running)
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
