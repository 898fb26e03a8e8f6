"""Starting (or re-seeding) my server from a template: the version's profile and image, my home
seeded by the spawner before JupyterLab opens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from tornado import web

from hub_ext.core import authz
from hub_ext.core import templates as rules
from hub_ext.hubapi import HubAPIError
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.templates.base import TemplatesBase, _now, hidden_versions
from hub_ext.service.templates.bodies import StartBody
from hub_ext.store.models import AuditLog
from hub_ext.store.template_models import (
    find_version,
    version_json,
)


class StartHandler(TemplatesBase):
    """``POST /api/courses/<course>/templates/<name>/start``: (re)start my server from the template.

    Body (optional): ``{"version": 2, "restore_deleted": false}``. A running server is stopped
    first (its kernels end); the server starts with the version's profile (and image on
    Kubernetes), and the spawner seeds the home before JupyterLab opens (a re-seed: the
    three-way merge keeps the student's edits). Members of the course and admins, for their
    own server (with a token that may restart it: authz.USE_TEMPLATE).
    """

    @refuses(rules.TemplateError)
    @needs(authz.USE_TEMPLATE, course="course")
    @takes(StartBody)
    async def post(self, course: str, name: str) -> None:
        choice = rules.TemplateChoice(course, rules.require_name(name), self.body.version,
                                      self.body.restore_deleted)
        version = await self.db(self._version, choice)
        self.write_json(await start_seeded(self, version, choice.restore_deleted))

    def _version(self, choice: rules.TemplateChoice) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            self._course(session, choice.course)
            v = find_version(session, choice.course, choice.name, choice.version,
                             hidden_versions(session, self.caller, choice.course))
            if v is None:
                which = f"version {choice.version} of " if choice.version else ""
                raise web.HTTPError(404, f"No {which}template {choice.name} in {choice.course}; GET "
                                         f"/api/courses/{choice.course}/templates lists them.")
            return version_json(choice.course, choice.name, v)


async def start_seeded(handler: TemplatesBase, version: dict[str, Any], restore_deleted: bool = False,
                       ) -> dict[str, Any]:
    """Restart the caller's server from template ``version`` (a `version_json`): its profile and
    image, the home seeded by the spawner before JupyterLab opens. The one way a home is seeded
    from the service: starting from a template and starting an assignment
    (hub_ext.service.assignments) both come here."""
    caller = handler.caller
    course, name = version["course"], version["template"]
    options: dict[str, Any] = {"template": rules.TemplateChoice(
        course, name, version["version"], restore_deleted).to_json()}
    if version["profile"]:
        options["profile"] = version["profile"]
    if version["image"] and handler.settings.get("mode") == "kubernetes":
        options["image"] = version["image"]
    started = _now()
    try:
        if await handler.hub.server(caller.name):
            await handler.hub.stop_server(caller.name)
        server = await handler.hub.start_server(caller.name, options)
    except HubAPIError as e:
        if e.status in (400, 403, 409) and e.hub_message:
            raise web.HTTPError(e.status, e.hub_message) from None
        if e.status == 500:
            raise web.HTTPError(500, f"Your server did not start: {e.hub_message}") from None
        raise
    seeded = await handler.db(_seeded, handler.settings["sessions"], caller.name, started)
    shown = {k: server.get(k) for k in ("url", "ready", "user_options")}
    return {"template": version, "server": shown, "seeded": seeded}


def _seeded(sessions: Any, user: str, since: datetime) -> dict[str, Any] | None:
    """What the spawner's seeding did for this start (its audit entry), if it seeded."""
    with sessions() as session:
        entry = session.scalars(
            select(AuditLog).where(AuditLog.actor == user, AuditLog.action == "template_seeded",
                                   AuditLog.at >= since).order_by(AuditLog.id.desc()).limit(1)
        ).first()
        return dict(entry.details) if entry is not None else None
