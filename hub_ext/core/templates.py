"""Course templates around the seeding engine: names, who may do what, which version to seed.

Why pure: "a student cannot name another course's template", "only the course's teachers
publish", and "on_start re-seeds the newest version of the template the home came from" are
promises that hold the same way in the service (REST), the local spawner and the Kubernetes
spawner. Each is a function of plain data, unit-tested without a hub.

A template is identified by ``<course>/<name>``; that key is what the seeding marker
(``.classhub/template.json``) records as its template, so a re-seed knows where the home came
from. Versions are integers 1, 2, ... (shown as ``v1``, ``v2``).

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hub_ext.core import authz
from hub_ext.core.authz import Caller, Verdict

__all__ = [
    "MANUAL",
    "ON_START",
    "RESEED_MODES",
    "TemplateChoice",
    "TemplateError",
    "TemplateOptionError",
    "may_publish",
    "may_read",
    "may_use",
    "name_problem",
    "parse_version",
    "require_name",
    "template_key",
    "version_on_start",
]

MANUAL = "manual"
ON_START = "on_start"
RESEED_MODES = (MANUAL, ON_START)

#: Template names: lower-case letters, digits, ``-`` and ``_``; they appear in URLs, file names
#: of the storage and the marker, so they are kept plain.
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MAX_VERSION = 1_000_000


def name_problem(name: Any) -> str | None:
    """Why ``name`` is not a template name (a sentence), or None when it is one."""
    if not isinstance(name, str) or not _NAME.match(name):
        shown = repr(name)[:70]
        return (f"{shown} is not a template name: use 1-63 lower-case letters, digits, '-' or '_', "
                "starting with a letter or digit (e.g. 'lab1')")
    return None


def template_key(course: str, name: str) -> str:
    """The template's identity in the seeding marker: ``<course>/<name>``."""
    return f"{course}/{name}"


def may_read(caller: Caller, course: str) -> Verdict:
    """Members of the course (any role) and hub admins see its templates (the rule is
    hub_ext.core.authz's READ_TEMPLATES, which the service's handlers declare)."""
    return authz.decide(caller, authz.READ_TEMPLATES, course=course)


def may_use(caller: Caller, course: str) -> Verdict:
    """Starting a server from a template, re-seeding one's home: the same as reading (the
    spawner asks this; the service's start also needs the hub scope to restart the server,
    authz.USE_TEMPLATE)."""
    return may_read(caller, course)


def may_publish(caller: Caller, course: str) -> Verdict:
    """The course's teachers and hub admins publish templates and change template settings
    (authz.PUBLISH_TEMPLATE)."""
    return authz.decide(caller, authz.PUBLISH_TEMPLATE, course=course)


class TemplateError(ValueError):
    """What the caller asked of templates cannot be done as asked; the message is the sentence
    that says what to change (the service answers it with a 400)."""


def require_name(name: Any) -> str:
    """``name`` when it is a template name; TemplateError with the sentence otherwise."""
    problem = name_problem(name)
    if problem:
        raise TemplateError(problem[:1].upper() + problem[1:] + ".")
    return name


class TemplateOptionError(TemplateError):
    """A ``template`` spawn option that cannot be used; the message says what to send instead."""


@dataclass(frozen=True)
class TemplateChoice:
    """The ``template`` entry of a server's ``user_options``: which template (and version) to seed.

    Accepted forms: ``{"course": "cs101", "name": "lab1"}`` with an optional ``"version": 2``
    (default: the newest), or the string ``"cs101/lab1"``. Whether the user may use it is
    decided by the spawner against the store (:func:`may_use`), never trusted from the options.
    """

    course: str
    name: str
    version: int | None = None
    restore_deleted: bool = False  # bring back template files the student deleted

    @property
    def key(self) -> str:
        return template_key(self.course, self.name)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"course": self.course, "name": self.name}
        if self.version is not None:
            data["version"] = self.version
        if self.restore_deleted:
            data["restore_deleted"] = True
        return data

    @classmethod
    def parse(cls, value: Any) -> TemplateChoice:
        """Validate a ``template`` option; :class:`TemplateOptionError` with the reason."""
        example = 'e.g. {"course": "cs101", "name": "lab1", "version": 2}'
        if isinstance(value, str):
            course, sep, name = value.partition("/")
            value = {"course": course, "name": name} if sep else None
        if not isinstance(value, Mapping):
            raise TemplateOptionError(f"option 'template' must name a course and a template, {example}")
        unknown = sorted(set(map(str, value)) - {"course", "name", "version", "restore_deleted"})
        if unknown:
            raise TemplateOptionError(
                f"option 'template' has unknown field(s) {', '.join(unknown)}; {example}")
        course, name, version = value.get("course"), value.get("name"), value.get("version")
        if not isinstance(course, str) or not course or len(course) > 255 or "/" in course:
            raise TemplateOptionError(f"option 'template' needs a course name, {example}")
        problem = name_problem(name)
        if problem:
            raise TemplateOptionError(f"option 'template': {problem}")
        try:
            version = parse_version(version)
        except TemplateError as e:
            raise TemplateOptionError(f"option 'template': {e}") from None
        restore = value.get("restore_deleted", False)
        if not isinstance(restore, bool):
            raise TemplateOptionError("option 'template': restore_deleted must be true or false")
        return cls(course, name, version, restore)


def parse_version(value: Any) -> int | None:
    """A version number as a request gives it (``2``, ``"2"`` or ``"v2"``; None: the newest);
    TemplateError with the sentence otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"v?[0-9]{1,7}", value):
        value = int(value.lstrip("v"))
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        raise TemplateError("version must be a number like 2 (or 'v2')")
    return value


def version_on_start(
    chosen: TemplateChoice | None,
    marker: tuple[str, str] | None,
    latest: Mapping[str, int],
    reseed: Mapping[str, str],
) -> tuple[str, int] | None:
    """Which (template key, version) a server start seeds, or None for nothing.

    - A template chosen in the spawn options is seeded at the chosen version, else its newest.
    - Without a choice, a home seeded before (``marker`` = (template key, version tag)) is
      re-seeded with the newest version of that template when its course says ``on_start``
      (``reseed``: course -> mode) and a newer version exists; otherwise nothing happens.

    ``latest`` maps template keys to their newest version (templates that no longer exist are
    absent: nothing to seed).
    """
    if chosen is not None:
        newest = latest.get(chosen.key)
        if newest is None:
            return None
        return chosen.key, chosen.version or newest
    if marker is None:
        return None
    key, tag = marker
    course = key.split("/", 1)[0]
    newest = latest.get(key)
    if newest is None or reseed.get(course, MANUAL) != ON_START:
        return None
    seeded = int(tag) if tag.isdigit() else 0
    return (key, newest) if newest > seeded else None
