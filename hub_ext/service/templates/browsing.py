"""Reading templates and their versions, and a course's re-seed setting (the templates page is
hub_ext.service.pages)."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from tornado import web

from hub_ext import store
from hub_ext.backends.templates import ClasshubTemplates
from hub_ext.core import authz
from hub_ext.core import templates as rules
from hub_ext.core.seeding import DIR, TemplateRefused
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.templates.base import TemplatesBase, _now, visibility
from hub_ext.service.templates.bodies import TemplateSettingsBody
from hub_ext.store.template_models import (
    Template,
    TemplateSettings,
    find_template,
    find_version,
    reseed_mode,
    version_json,
)


class TemplateListHandler(TemplatesBase):
    """``GET /api/courses/<course>/templates``: the course's templates and their versions."""

    @needs(authz.READ_TEMPLATES, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.db(self._list, course))

    def _list(self, course: str) -> list[dict[str, Any]]:
        with self.settings["sessions"]() as session:
            row = self._course(session, course)
            found = session.scalars(select(Template).where(Template.course_id == row.id)
                                    .order_by(Template.name)).all()
            hidden, held = visibility(session, self.caller, course)
            return [t for t in (_template_json(course, t, hidden, held) for t in found) if t is not None]


def _template_json(course: str, template: Template, hidden: set[int], held: set[int]
                   ) -> dict[str, Any] | None:
    """A template with the versions the caller may see (``hidden``: those they may not; ``held``:
    those the students do not see yet); None when they may see none of them (then it is no
    template of theirs)."""
    kept = [v for v in template.versions if v.id not in hidden]
    if template.versions and not kept:
        return None
    versions = [version_json(course, template.name, v, held) for v in kept]
    return {"course": course, "name": template.name, "latest": versions[-1] if versions else None,
            "versions": versions}


class TemplateHandler(TemplatesBase):
    """``GET /api/courses/<course>/templates/<name>``: one template with all its versions."""

    @refuses(rules.TemplateError)
    @needs(authz.READ_TEMPLATES, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._get, course, rules.require_name(name)))

    def _get(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            self._course(session, course)
            template = find_template(session, course, name)
            shown = _template_json(course, template, *visibility(session, self.caller, course)
                                   ) if template is not None else None
            if shown is None:
                raise web.HTTPError(404, f"No template {name} in {course}; GET "
                                         f"/api/courses/{course}/templates lists them.")
            return shown


class VersionHandler(TemplatesBase):
    """``GET /api/courses/<course>/templates/<name>/versions/<n>``: one version."""

    @refuses(rules.TemplateError)
    @needs(authz.READ_TEMPLATES, course="course")
    async def get(self, course: str, name: str, version: str) -> None:
        name = rules.require_name(name)
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
            hidden, held = visibility(session, self.caller, course)
            v = find_version(session, course, name, number, hidden)
            return version_json(course, name, v, held) if v is not None else None


class SettingsHandler(TemplatesBase):
    """``/api/courses/<course>/template-settings``: ``{"reseed": "manual" | "on_start"}``.

    Members read it; teachers and admins set it. ``on_start``: each server start re-seeds a
    home with the newest version of the template it was seeded from.
    """

    @needs(authz.READ_TEMPLATES, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.db(self._get, course))

    def _get(self, course: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            self._course(session, course)
            return {"course": course, "reseed": reseed_mode(session, course)}

    @needs(authz.PUBLISH_TEMPLATE, course="course")
    @takes(TemplateSettingsBody)
    async def put(self, course: str) -> None:
        self.write_json(await self.db(self._put, self.caller.name, course, self.body.reseed))

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


#: Most file names a version lists on the templates page (the count says how many there are).
FILES_LISTED = 200


def version_files(settings: ClasshubTemplates, location: str, digest: str) -> dict[str, Any] | None:
    """What a stored version holds, for people: its files (paths as they land in a home, sorted,
    at most `FILES_LISTED`) and the folder they land in ("" when they land at the top of the
    home, or spread over several folders). None where the service cannot read the template
    storage (Kubernetes with publisher pods: the volume is not mounted in the hub) or the
    stored manifest is not the one published. Runs in a worker thread (a file read)."""
    if settings.writes_through_pods or not settings.storage_dir:
        return None
    try:
        manifest = settings.storage().manifest(location, digest)
    except (OSError, ValueError, TemplateRefused):
        return None
    files = sorted(p for p, e in manifest.items() if e.is_file)
    tops = {p.split("/", 1)[0] for p in manifest}
    folder = next(iter(tops)) if len(tops) == 1 and manifest[next(iter(tops))].kind == DIR else ""
    return {"files": files[:FILES_LISTED], "more": max(0, len(files) - FILES_LISTED), "folder": folder}
