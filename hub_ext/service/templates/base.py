"""What every templates handler shares: the settings, the course lookup, the store calls
(in worker threads) and the sentences of refusals."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from tornado import web

from hub_ext.backends.templates import (
    ClasshubTemplates,
)
from hub_ext.core import templates as rules
from hub_ext.service.handlers import APIHandler
from hub_ext.store.models import Course

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
