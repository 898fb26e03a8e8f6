"""classhub's pages: Home, Course, Templates, Sharing and Jobs, inside the hub's own page template.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS`
are merged into the OpenAPI document with the rest of the service's paths.

Pages read through the same domain classes and authorization decisions as the API; every action
a page offers is JavaScript calling the REST API (one code path, one authorization). The hub's
own pages link here through `HUB_TEMPLATES` (a ``page.html`` that adds classhub to the hub's nav
bar), which ``configure()`` puts into ``JupyterHub.template_paths``.
"""

from __future__ import annotations

from typing import Any

from hub_ext.service.apidoc import ok, op
from hub_ext.service.pages import api
from hub_ext.service.pages.render import HUB_TEMPLATES
from hub_ext.service.pages.views import (
    CoursePage,
    HomePage,
    JobsPage,
    NotFoundPage,
    SharingPage,
    StaticHandler,
    TemplatesPage,
    TemplateStartPage,
)

__all__ = ["HUB_TEMPLATES", "NOT_FOUND_ROUTE", "OPENAPI_PATHS", "ROUTES", "STATIC_ROUTE",
           "hub_templates_path"]

ROUTES: list[tuple[str, type]] = [
    ("", HomePage),
    (r"courses/([^/]+)", CoursePage),
    ("templates", TemplatesPage),
    (r"templates/([^/]+)/([^/]+)/start", TemplateStartPage),
    ("shares", SharingPage),
    ("jobs", JobsPage),
    ("api/files", api.FilesHandler),
    (r"api/courses/([^/]+)/roster/preview", api.RosterPreviewHandler),
    (r"api/courses/([^/]+)/audit", api.AuditHandler),
    (r"api/users/([^/]+)/server", api.StopServerHandler),
    ("api/my-server/progress", api.ProgressHandler),
    ("api/job-counts", api.JobCountsHandler),
]

#: The pages' CSS and JavaScript (not part of the API, so not in `ROUTES` and its document).
STATIC_ROUTE: tuple[str, type] = (r"static/(.*)", StaticHandler)
#: Mounted last: any other path is a 404 page with the hub's nav bar.
NOT_FOUND_ROUTE: tuple[str, type] = (r".*", NotFoundPage)


def hub_templates_path() -> str:
    """The folder ``configure()`` adds to ``JupyterHub.template_paths`` (classhub in the hub's nav)."""
    return str(HUB_TEMPLATES)


def _html(what: str) -> dict[str, Any]:
    return {"200": {"description": what, "content": {"text/html": {}}}}


_USER = "any logged-in user"
_STAFF = "teachers and TAs of the course, and hub admins"
_PREVIEW = {"type": "object", "properties": {
    "add": {"type": "array", "items": {"type": "object"}},
    "change": {"type": "array", "items": {"type": "object"}},
    "remove": {"type": "array", "items": {"type": "object"}},
    "unchanged": {"type": "array", "items": {"type": "string"}},
    "protected": {"type": "array", "items": {"type": "string"}},
    "errors": {"type": "array", "items": {"type": "object"}},
    "encoding": {"type": "string"}}}
_FILES = {"type": "object", "properties": {
    "path": {"type": "string"}, "folders": {"type": "array", "items": {"type": "string"}},
    "files": {"type": "array", "items": {"type": "object"}}}}
_AUDIT = {"type": "object", "properties": {
    "course": {"type": "string"}, "total": {"type": "integer"}, "offset": {"type": "integer"},
    "limit": {"type": "integer"}, "entries": {"type": "array", "items": {"type": "object"}}}}
_CSV = {"required": True, "content": {
    "text/csv": {"schema": {"type": "string"}},
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "file": {"type": "string", "format": "binary"}}}}}}

_COUNTS = {"type": "object", "required": ["running", "waiting"],
           "properties": {"running": {"type": "integer"}, "waiting": {"type": "integer"}}}
OPENAPI_PATHS: dict[str, Any] = {
    "/": {"get": op("The classhub home page: my courses, server, usage, templates, shares, "
                     "invitations (HTML)", _USER, _html("HTML page"))},
    "/courses/{course}": {"get": op(
        "The course page: members, roster, limits, usage, servers, culling, audit log (HTML)",
        "members of the course (students: a summary) and hub admins", _html("HTML page"),
        errors=("401", "403", "404"), params=("course",))},
    "/templates": {"get": op("The templates page: start, publish, versions (HTML)", _USER,
                              _html("HTML page"))},
    "/templates/{course}/{template}/start": {"get": op(
        "Starting a template: asks first when my server runs, starts it from the template, "
        "follows the start and opens JupyterLab at the template's folder (HTML)",
        "members of the course and hub admins (their own server)", _html("HTML page"),
        errors=("400", "401", "403", "404"), params=("course", "template"))},
    "/api/my-server/progress": {"get": op(
        "The start progress of my default server: the hub's event stream, relayed with my own "
        "login; one event {\"starting\": false} when it is not starting", _USER,
        {"200": {"description": "Server-sent events", "content": {"text/event-stream": {}}}},
        errors=("401", "403", "502"))},
    "/api/job-counts": {"get": op(
        "How many of my jobs run and wait, and for each course I teach or assist how many of its "
        "jobs do (the home page's live counts)", _USER, ok("Counts", {
            "type": "object", "required": ["mine", "courses"], "properties": {
                "mine": _COUNTS, "courses": {"type": "object", "additionalProperties": _COUNTS}}}),
        errors=("401", "403", "404"))},
    "/shares": {"get": op("The sharing page: share, revoke, shared with me (HTML)", _USER,
                           _html("HTML page"))},
    "/jobs": {"get": op("The jobs page: my jobs (state, place in the queue, why they wait, logs, "
                         "cancel), a submit form, and the queues of the courses I teach or assist "
                         "(HTML)", _USER, _html("HTML page"))},
    "/api/files": {"get": op(
        "The folders and files of a folder of my running server (query argument path, relative "
        "to the server's root; hidden files left out)", _USER,
        ok("Folder", _FILES), errors=("400", "401", "403", "404", "409"))},
    "/api/courses/{course}/roster/preview": {"post": op(
        "What importing this roster CSV would change, and each bad line; changes nothing",
        "teachers of the course and hub admins", ok("The preview", _PREVIEW),
        errors=("400", "401", "403", "404"), params=("course", "remove_missing"), body=_CSV)},
    "/api/courses/{course}/audit": {"get": op(
        "The course's audit log, newest first (query arguments offset, default 0, and limit, "
        "1 to 200, default 50)", _STAFF, ok("Entries", _AUDIT),
        errors=("400", "401", "403", "404"), params=("course",))},
    "/api/users/{user}/server": {"delete": op(
        "Stop the user's server (the owner, hub admins, the teachers of the owner's course), "
        "with the caller's own hub credentials", "the owner, teachers of the owner's course, "
        "hub admins", ok("Stopped", {"type": "object"}), errors=("401", "403", "404", "409"),
        params=("user",))},
}
