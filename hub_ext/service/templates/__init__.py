"""The classhub service's templates API: publish, list, start from, re-seed, course settings.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().

Thin handlers (docs/architecture.md, rule 3): who may do what is decided by hub_ext.core.templates, files are
checked and stored by hub_ext.backends.templates (the seeding engine's limits), versions
and the audit log are in the store. Seeding itself happens in the spawner, when the server
starts with a ``template`` option: starting from a template and re-seeding are both "start my
server with this template", so one code path seeds in both run modes.

Publishing from a folder reads the teacher's running server through its contents API with the
caller's own credentials: the token the request came with (a personal API token, or the OAuth
token the service holds for a browser session, which may access the caller's own servers
because the service's ``oauth_client_allowed_scopes`` include ``access:servers!user``). The
service's own token is used only to find where the server listens (the hub's proxy table).
"""


from __future__ import annotations

from typing import Any

from hub_ext.service.apidoc import JSON, model_schema, ok, op
from hub_ext.service.templates.base import _COURSE, _TEMPLATE
from hub_ext.service.templates.bodies import PublishFromServer
from hub_ext.service.templates.browsing import (
    SettingsHandler,
    TemplateHandler,
    TemplateListHandler,
    VersionHandler,
)
from hub_ext.service.templates.publishing import PublishHandler, UploadHandler
from hub_ext.service.templates.starting import StartHandler

ROUTES: list[tuple[str, type]] = [
    (f"api/{_COURSE}/templates", TemplateListHandler),
    (f"api/{_COURSE}/template-settings", SettingsHandler),
    (f"api/{_TEMPLATE}", TemplateHandler),
    (f"api/{_TEMPLATE}/versions", PublishHandler),
    (rf"api/{_TEMPLATE}/versions/([^/]+)", VersionHandler),
    (f"api/{_TEMPLATE}/start", StartHandler),
    (r"api/template-uploads/([^/]+)", UploadHandler),
]


def _openapi_paths() -> dict[str, Any]:

    member, teacher = "members of the course and hub admins", "teachers of the course and hub admins"
    errs = ("401", "403", "404")
    template_schema = {"type": "object", "properties": {
        "course": {"type": "string"}, "name": {"type": "string"},
        "latest": {"type": ["object", "null"]}, "versions": {"type": "array", "items": {"type": "object"}}}}
    version_schema = {"type": "object", "properties": {
        "course": {"type": "string"}, "template": {"type": "string"}, "version": {"type": "integer"},
        "tag": {"type": "string"}, "description": {"type": "string"}, "image": {"type": ["string", "null"]},
        "profile": {"type": ["string", "null"]}, "files": {"type": "integer"}, "bytes": {"type": "integer"},
        "source": {"type": "string"}, "created_by": {"type": "string"}, "created_at": {"type": "string"},
        "staff_only": {"type": "boolean", "description": "only the course's staff see it until an "
                       "assignment released from it opens"},
        "students_see": {"type": "boolean", "description": "false: the course's students do not see "
                         "it yet (published staff_only, or released by an assignment not open yet); "
                         "only its staff are shown such a version"}}}
    params = ("course", "template")
    publish_body = {"required": True, "content": {
        JSON: {"schema": model_schema(PublishFromServer)},
        "application/zip": {"schema": {"type": "string", "format": "binary"}},
        "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
    }}
    return {
        "/api/courses/{course}/templates": {"get": op(
            "The course's templates and their versions", member,
            ok("Templates", {"type": "array", "items": template_schema}), errors=errs, params=("course",))},
        "/api/courses/{course}/template-settings": {
            "get": op("The course's template settings", member,
                       ok("Settings", {"type": "object"}), errors=errs, params=("course",)),
            "put": op("Set when homes are re-seeded: manual or on_start", teacher,
                       ok("Settings", {"type": "object"}), errors=("400", *errs), params=("course",)),
        },
        "/api/courses/{course}/templates/{template}": {"get": op(
            "One template with all its versions", member, ok("Template", template_schema),
            errors=("400", *errs), params=params)},
        "/api/courses/{course}/templates/{template}/versions": {"post": op(
            "Publish the next version from a folder of your running server (JSON) or an archive "
            "(zip/tar body; image, profile, description, start_command as query arguments)", teacher,
            {**ok("The version published", version_schema, "201"),
             "415": {"description": "A multipart form: send the archive itself as the body"}},
            errors=("400", *errs, "409", "502"), params=params, body=publish_body)},
        "/api/courses/{course}/templates/{template}/versions/{version}": {"get": op(
            "One version", member, ok("Version", version_schema), errors=("400", *errs),
            params=(*params, "version"))},
        "/api/template-uploads/{upload}": {"get": op(
            "Internal: the Kubernetes publisher pod fetches a checked upload (a tar) once",
            "the publisher pod of a publish in progress, with its one-time token", {"200": {
                "description": "the tar", "content": {"application/x-tar": {"schema": {
                    "type": "string", "format": "binary"}}}}}, errors=("404",), public=True,
            params=("upload",))},
        "/api/courses/{course}/templates/{template}/start": {"post": op(
            "(Re)start your server from the template: its profile and image, your home seeded "
            "(a re-seed keeps your edits)", member + " (their own server)",
            ok("The server and what seeding did", {"type": "object"}), errors=("400", *errs, "409"),
            params=params)},
    }


OPENAPI_PATHS: dict[str, Any] = _openapi_paths()
