"""Reading templates and their versions, a course's re-seed setting, and the templates page."""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import select
from tornado import web
from tornado.escape import xhtml_escape

from hub_ext import store
from hub_ext.core import templates as rules
from hub_ext.service.templates.base import TemplatesBase, _now
from hub_ext.store.models import Course
from hub_ext.store.template_models import (
    Template,
    TemplateSettings,
    TemplateVersion,
    find_template,
    find_version,
    reseed_mode,
    version_json,
)


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
