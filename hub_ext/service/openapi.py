"""The OpenAPI 3 description of the classhub service, served at ``/api/openapi.json``.

Generated from the code where the code says it, written by hand where it cannot:

- **Generated**: which paths and methods exist (the app's `ROUTES` and the methods each handler
  class implements), the path parameters (the groups of each route pattern), and every JSON request
  body a handler method declares with ``@takes(Model)`` (hub_ext.service.declare): its schema is
  the pydantic model's own JSON schema, under ``components/schemas/<Model name>``. A model changed
  is a document changed, and the JupyterLab extension's TypeScript types follow it (``make types``;
  tests/test_service_openapi.py fails while they are stale).
- **Hand-written** (`PATHS` here and each route module's ``OPENAPI_PATHS``): what no signature
  shows: a summary, *who* may call it, the answers and their schemas, query parameters, and the
  bodies that are not JSON models yet (a roster CSV). A method's declared model always wins over a
  hand-written body; a method with no hand-written entry gets its docstring's first line and its
  declared authz action.

Paths are relative to the server URL ``/services/classhub`` (the service prefix behind the proxy).
``python -m hub_ext.service.openapi`` prints the document (what ``jlpm gen:types`` reads).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from tornado import web

from hub_ext import __version__
from hub_ext.service import (
    assignments,
    cluster,
    competitions,
    coursedata,
    culling,
    handlers,
    invitations,
    jobs,
    panel,
    routes,
    sharing,
    templates,
)
from hub_ext.service.apidoc import BODY_ERRORS, ERRORS, JSON, json_body, ok, op, ref
from hub_ext.service.declare import PUBLIC, action_of, body_of, needs

_ADMIN = "hub admins"
_MEMBERS = "members of the course (student, TA, teacher) and hub admins"
_STAFF = "teachers and TAs of the course, and hub admins"
_TEACHERS = "teachers of the course and hub admins"

PATHS: dict[str, dict[str, Any]] = {
    "/api/health": {
        "get": op("Liveness", "anyone, no login", ok("The service runs", ref("Health")),
                   errors=(), public=True),
    },
    "/api/openapi.json": {
        "get": op("This document", "anyone, no login", ok("The OpenAPI document", {"type": "object"}),
                   errors=(), public=True),
    },
    "/api/me": {
        "get": op("Who am I", "any hub user or service with access to classhub",
                   ok("The caller, their hub groups and their classhub course roles", ref("Me"))),
    },
    "/api/users/{user}/server/profile": {
        "put": op(
            "Restart a server with other user_options", "the server's owner and hub admins",
            {**ok("The restarted server", {"type": "object"}),
             "409": {"description": "The server is busy, or the hub has nothing free for these options"}},
            errors=("400", "401", "403"), params=("user",),
            body=json_body({"type": "object", "example": {"profile": "h200-mig-1g"}}),
        ),
    },
    "/api/courses": {
        "get": op("List courses", "any user: hub admins see all courses, others their own",
                   ok("Courses", {"type": "array", "items": ref("Course")})),
        "post": op("Create a course (and its hub group)", _ADMIN,
                    ok("The new course", ref("Course"), status="201"),
                    errors=("400", "401", "403"), body=json_body(ref("NewCourse"))),
    },
    "/api/courses/{course}": {
        "get": op("One course", _MEMBERS, ok("The course", ref("Course")),
                   errors=("401", "403", "404"), params=("course",)),
        "delete": op("Delete a course (and its hub group)", _ADMIN,
                      {"204": {"description": "Deleted"},
                       "409": {"description": "Servers or jobs of the course still run"}},
                      errors=("401", "403", "404"), params=("course",)),
    },
    "/api/courses/{course}/members": {
        "get": op("Members and their roles", _STAFF,
                   ok("Members", {"type": "array", "items": ref("Member")}),
                   errors=("401", "403", "404"), params=("course",)),
        "put": op("Add, re-role and remove members (all or nothing)",
                   "teachers of the course (students and TAs only) and hub admins (teachers too)",
                   ok("What changed", ref("MemberChanges")), errors=("400", "401", "403", "404"),
                   params=("course",), body=json_body(ref("MemberChange"))),
    },
    "/api/courses/{course}/roster": {
        "post": op(
            "Import a roster CSV", _TEACHERS,
            ok("What was imported, and each bad line", ref("RosterResult")),
            errors=("400", "401", "403", "404"), params=("course", "remove_missing"),
            body={"required": True, "content": {
                "text/csv": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {"schema": {"type": "object", "properties": {
                    "file": {"type": "string", "format": "binary"}}, "required": ["file"]}},
            }},
        ),
    },
    "/api/courses/{course}/quota": {
        "get": op("The course ceiling", _MEMBERS, ok("Limits", ref("Limits")),
                   errors=("401", "403", "404"), params=("course",)),
        "put": op("Set the course ceiling", _ADMIN, ok("The stored limits", ref("Limits")),
                   errors=("400", "401", "403", "404"), params=("course",), body=json_body(ref("Limits"))),
    },
    "/api/courses/{course}/quota/users/{user}": {
        "get": op("A member's own limits in the course", f"{_TEACHERS}; the member themselves",
                   ok("Limits (unset: only the course ceiling applies)", ref("Limits")),
                   errors=("401", "403", "404"), params=("course", "user")),
        "put": op("Set a member's limits (within the course ceiling)", _TEACHERS,
                   ok("The stored limits", ref("Limits")), errors=("400", "401", "403", "404"),
                   params=("course", "user"), body=json_body(ref("Limits"))),
    },
    "/api/courses/{course}/usage": {
        "get": op("What the course and its users hold now, GPU hours this week", _STAFF,
                   ok("Usage", ref("CourseUsage")), errors=("401", "403", "404"), params=("course",)),
    },
    "/api/usage/me": {
        "get": op("My usage and limits per course", "any hub user (not services)",
                   ok("Usage", ref("MyUsage"))),
    },
    "/api/usage": {
        "get": op("Usage of every course and user", _ADMIN, ok("Usage", ref("AllUsage"))),
    },
    "/metrics": {
        "get": op(
            "Prometheus metrics", "hub admins and tokens with the scope read:metrics; anyone when the "
            "service runs with authenticate_metrics=False ($CLASSHUB_METRICS_AUTH=0)",
            {"200": {"description": "classhub_quota, classhub_usage, classhub_spawns_denied_total",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}},
        ),
    },
}

_LIMITS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "resources": {
            "type": "object",
            "description": "Kubernetes resource name -> quantity; a resource not named is not limited",
            "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "number", "minimum": 0}]},
            "example": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 4, "nvidia.com/mig-1g.18gb": 14},
        },
        "servers": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**31 - 1},
        "gpu_hours_per_week": {"oneOf": [{"type": "number", "minimum": 0, "maximum": 10**9},
                                         {"type": "string", "maxLength": 64,
                                          "description": "a decimal or a fraction such as 21/2"},
                                         {"type": "null"}]},
    },
}
_USAGE = {
    "type": "object",
    "properties": {
        "resources": {"type": "object", "additionalProperties": {"type": "string"}},
        "servers": {"type": "integer"},
        "gpu_hours_week": {"type": "number"},
    },
}
_ROLE = {"type": "string", "enum": ["student", "ta", "teacher"]}

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["status", "message"],
              "properties": {"status": {"type": "integer"}, "message": {"type": "string"}}},
    "Health": {"type": "object", "properties": {"status": {"type": "string"}, "version": {"type": "string"}}},
    "Me": {"type": "object", "properties": {
        "name": {"type": "string"}, "kind": {"type": "string", "enum": ["user", "service"]},
        "admin": {"type": "boolean"}, "groups": {"type": "array", "items": {"type": "string"}},
        "role": {"type": ["string", "null"], "enum": ["student", "ta", "teacher", "admin", None]},
        "courses": {"type": "object", "additionalProperties": _ROLE}}},
    "NewCourse": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"},
        "display_name": {"type": "string"}}},
    "Course": {"type": "object", "properties": {
        "name": {"type": "string"}, "display_name": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "members": {"type": "object", "additionalProperties": {"type": "integer"}},
        "adopted": {"type": "array", "items": {"type": "string"},
                    "description": "on creation: members of an existing hub group that joined"}}},
    "Member": {"type": "object", "properties": {"username": {"type": "string"}, "role": _ROLE}},
    "MemberChange": {"type": "object", "additionalProperties": False, "properties": {
        "add": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["username"], "properties": {
                "username": {"type": "string"}, "role": _ROLE}},
            {"type": "string", "description": "a username, added as a student"}]}},
        "remove": {"type": "array", "items": {"type": "string"}}}},
    "MemberChanges": {"type": "object", "properties": {
        k: {"type": "array", "items": {"type": "string"}}
        for k in ("added", "invited", "changed", "unchanged", "removed", "withdrawn")}},
    "RosterResult": {"type": "object", "properties": {
        "imported": {"type": "integer", "description": "added plus re-roled"},
        "added": {"type": "integer"}, "changed": {"type": "integer"}, "unchanged": {"type": "integer"},
        "removed": {"type": "integer"}, "protected": {"type": "array", "items": {"type": "string"}},
        "invited": {"type": "array", "items": {"type": "string"},
                    "description": "people of other courses, invited instead of added"},
        "encoding": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object", "properties": {
            "line": {"type": "integer", "description": "1-based; 0 for the file as a whole"},
            "value": {"type": "string"}, "message": {"type": "string"}, "code": {"type": "string"}}}}}},
    "Limits": _LIMITS,
    "Usage": _USAGE,
    "CourseUsage": {"type": "object", "properties": {
        "course": {"type": "string"}, "limits": ref("Limits"), "usage": ref("Usage"),
        "users": {"type": "object", "additionalProperties": ref("Usage")}}},
    "MyUsage": {"type": "object", "properties": {
        "name": {"type": "string"}, "usage": ref("Usage"),
        "courses": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "role": _ROLE, "usage": ref("Usage"), "limits": ref("Limits"),
            "course_limits": ref("Limits")}}}}},
    "AllUsage": {"type": "object", "properties": {
        "courses": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "limits": ref("Limits"), "usage": ref("Usage")}}},
        "users": {"type": "object", "additionalProperties": ref("Usage")}}},
}


#: Operations that ask the hub (users, groups, servers, shares) on the caller's behalf: the hub
#: failing is a 502 (its 400/404/409 are passed on as they are, see handlers.HUB_PASSED).
_ASKS_HUB = {
    ("get", "/api/me"), ("put", "/api/users/{user}/server/profile"), ("post", "/api/courses"),
    ("delete", "/api/courses/{course}"), ("put", "/api/courses/{course}/members"),
    ("post", "/api/courses/{course}/roster"), ("get", "/api/shares"), ("post", "/api/shares"),
    ("get", "/api/shares/with-me"), ("get", "/api/shares/paths"), ("get", "/api/shares/{share}"),
    ("delete", "/api/shares/{share}"), ("get", "/shares/{share}/open"), ("get", "/shares"),
    ("post", "/api/courses/{course}/templates/{template}/versions"),
    ("post", "/api/courses/{course}/templates/{template}/start"),
}


def _with_common_errors(path: str, method: str, operation: dict[str, Any]) -> dict[str, Any]:
    """``operation`` with the answers every operation of its kind may give: a path naming nothing (404),
    a bad or too large body (`BODY_ERRORS`), the hub failing (502, `_ASKS_HUB`)."""
    codes = []
    if "{" in path and operation.get("security") != []:
        codes.append("404")
    if method in ("post", "put", "patch", "delete") or "requestBody" in operation:
        codes.extend(BODY_ERRORS)
    if (method, path) in _ASKS_HUB:
        codes.append("502")
    responses = {**operation["responses"],
                 **{code: ERRORS[code] for code in codes if code not in operation["responses"]}}
    return {**operation, "responses": dict(sorted(responses.items()))}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": ref("Error")}}}


METHODS = ("get", "post", "put", "patch", "delete")
_GROUP = re.compile(r"\((?!\?)(?:[^()\\]|\\.)*\)")
_PLACEHOLDER = re.compile(r"\{([^}]+)\}")


def implemented(handler: type) -> list[str]:
    """The HTTP methods (lower case) a handler class implements itself, not tornado's 405 stubs."""
    return [m for m in METHODS if getattr(handler, m) is not getattr(web.RequestHandler, m)]


def _hand_written() -> dict[str, dict[str, Any]]:
    """Every hand-written path entry: `PATHS` and each route module's ``OPENAPI_PATHS`` (a module
    whose operations are all generated may have none)."""
    paths = dict(PATHS)
    for module in (templates, assignments, competitions, sharing, culling, invitations, panel, jobs, cluster,
                   coursedata):
        paths.update(getattr(module, "OPENAPI_PATHS", {}))
    return paths


def _template(pattern: str, handler: type, hand: dict[str, Any]) -> str:
    """The OpenAPI path of a route: the hand-written path it matches (its placeholder names are the
    public ones), else the pattern with each group named after the handler's argument."""
    shape = "/" + _GROUP.sub("{}", pattern)
    for path in hand:
        if _PLACEHOLDER.sub("{}", path) == shape:
            return path
    method = getattr(handler, implemented(handler)[0])
    names = iter(list(inspect.signature(inspect.unwrap(method)).parameters)[1:])
    return "/" + _GROUP.sub(lambda _: "{" + next(names, "value") + "}", pattern)


Routes = list[tuple[str, type]]


def _app_routes() -> Routes:
    return [OPENAPI_ROUTE, *routes.ROUTES]


def operations(routes: Routes | None = None) -> Iterator[tuple[str, str, Callable[..., Any]]]:
    """(OpenAPI path, method, handler method) of every operation of ``routes`` (default: those the
    service's app serves), in the order of the routes."""
    hand = _hand_written()
    for pattern, handler in _app_routes() if routes is None else routes:
        path = _template(pattern, handler, hand)
        for method in implemented(handler):
            yield path, method, getattr(handler, method)


def _first_line(function: Callable[..., Any]) -> str:
    doc = inspect.getdoc(inspect.unwrap(function)) or ""
    return doc.strip().splitlines()[0].rstrip(".") if doc.strip() else ""


def _generated_operation(function: Callable[..., Any]) -> dict[str, Any]:
    """An operation nobody described by hand: its docstring and its declared action."""
    action = action_of(function)
    who = ("anyone, no login" if action == PUBLIC else
           f"whoever hub_ext.core.authz allows the action {action!r}" if action else
           "see the handler")
    operation = op(_first_line(function) or function.__qualname__, who,
                   {"200": {"description": "Done"}}, public=action == PUBLIC)
    return operation


def _path_parameters(path: str, parameters: dict[str, Any]) -> list[dict[str, Any]]:
    """One parameter per placeholder of ``path``: the component of that name when there is one."""
    out = []
    for name in _PLACEHOLDER.findall(path):
        if parameters.get(name, {}).get("in") == "path":
            out.append({"$ref": f"#/components/parameters/{name}"})
        else:
            out.append({"name": name, "in": "path", "required": True, "schema": {"type": "string"}})
    return out


def _other_parameters(operation: dict[str, Any], parameters: dict[str, Any]) -> list[dict[str, Any]]:
    """The hand-written parameters of ``operation`` that are not in its path (a query's)."""
    def where(p: dict[str, Any]) -> str | None:
        if "$ref" in p:
            return parameters.get(p["$ref"].rsplit("/", 1)[1], {}).get("in")
        return p.get("in")
    return [p for p in operation.get("parameters", []) if where(p) != "path"]


def body_models(routes: Routes | None = None) -> dict[tuple[str, str], type[BaseModel]]:
    """(path, method) -> the pydantic model its handler method declared with ``@takes``."""
    return {(path, method): model for path, method, function in operations(routes)
            if (model := body_of(function)) is not None}


def _model_schemas(models: list[type[BaseModel]]) -> tuple[dict[type[BaseModel], Any], dict[str, Any]]:
    """The ``$ref`` of each of ``models``, and the JSON schemas of them and of every model they nest
    by name (pydantic names two models of one name apart by their module)."""
    if not models:
        return {}, {}
    refs, top = models_json_schema([(m, "validation") for m in models],
                                   ref_template="#/components/schemas/{model}")
    return {model: refs[(model, "validation")] for model in models}, top.get("$defs", {})


def _parameters() -> dict[str, Any]:
    return {
        "course": {"name": "course", "in": "path", "required": True, "schema": {"type": "string"}},
        "user": {"name": "user", "in": "path", "required": True, "schema": {"type": "string"}},
        "template": {"name": "template", "in": "path", "required": True,
                     "schema": {"type": "string"}},
        "version": {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}},
        "upload": {"name": "upload", "in": "path", "required": True, "schema": {"type": "string"}},
        "path": {"name": "path", "in": "path", "required": True, "schema": {"type": "string"},
                 "description": "a path inside the course's data folder, e.g. images/cat.png"},
        "share": {"name": "share", "in": "path", "required": True, "schema": {"type": "integer"},
                  "description": "a share's id (from POST /api/shares)"},
        "viewer": {"name": "viewer", "in": "query", "required": True, "schema": {"type": "string"},
                   "description": "the hub user who opens the server"},
        "server": {"name": "server", "in": "query", "required": False,
                   "schema": {"type": "string", "default": ""},
                   "description": "the server's name (empty: the default server)"},
        **getattr(jobs, "OPENAPI_PARAMETERS", {}),
        **assignments.OPENAPI_PARAMETERS,
        **competitions.OPENAPI_PARAMETERS,
        "remove_missing": {"name": "remove_missing", "in": "query", "required": False,
                           "schema": {"type": "boolean", "default": False},
                           "description": "remove students and TAs not in the file"},
    }


def document(routes: Routes | None = None) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` (default: the service's app), a fresh dict each call."""
    hand = _hand_written()
    parameters = _parameters()
    found = [(path, method, function, body_of(function)) for path, method, function in operations(routes)]
    models = list(dict.fromkeys(model for *_, model in found if model is not None))
    refs, generated = _model_schemas(models)
    paths: dict[str, dict[str, Any]] = {}
    for path, method, function, model in found:
        operation = dict(hand.get(path, {}).get(method) or _generated_operation(function))
        params = _path_parameters(path, parameters) + _other_parameters(operation, parameters)
        operation.pop("parameters", None)
        if params:
            operation["parameters"] = params
        if model is not None:  # the declared model wins over any hand-written body
            operation["requestBody"] = json_body(refs[model],
                                                 required=not getattr(model, "empty_is_object", False))
        paths.setdefault(path, {})[method] = _with_common_errors(path, method, operation)
    # a generated schema replaces a hand-written one of the same name: the model is the truth
    schemas = {**SCHEMAS, **generated}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "classhub",
            "version": __version__,
            "description": "The classhub service of a JupyterHub: courses, members, rosters, quotas, "
            "usage and metrics. Log in through the hub (browser) or send 'Authorization: token "
            "<hub API token>' with the scope access:services!service=classhub. Errors are JSON "
            '{"status", "message"}; the message says what to change.',
        },
        "servers": [{"url": "/services/classhub"}],
        "security": [{"hubToken": []}, {"hubOAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "hubToken": {"type": "apiKey", "in": "header", "name": "Authorization",
                             "description": "'token <hub API token>'"},
                "hubOAuth": {"type": "apiKey", "in": "cookie", "name": "service-classhub",
                             "description": "set by the hub's OAuth login (browsers)"},
            },
            "parameters": parameters,
            "responses": {
                "BadRequest": _error("Invalid input; the message says what to change"),
                "Unauthorized": _error("Not logged in, or an unknown token"),
                "Forbidden": _error("Logged in, but not allowed; the message says who is"),
                "NotFound": _error("No such course, member, user, share, template, version or window "
                                   "(or none the caller may see: the same answer)"),
                "Conflict": _error("The request conflicts with the current state; the message says "
                                   "what to do"),
                "TooLarge": _error("The body is larger than this endpoint takes (1 MiB for JSON, 8 MiB "
                                   "for a roster, the template limits for an archive)"),
                "BadGateway": _error("The hub (or the caller's server) failed or refused classhub's "
                                     "request; try again, or tell an admin"),
            },
            "schemas": dict(sorted(schemas.items())),
        },
    }


class OpenAPIHandler(handlers.APIHandler):
    """``GET /api/openapi.json``: the API description, without login (it holds no data; the hub
    serves its own REST spec the same way)."""

    @needs(PUBLIC)
    def get(self) -> None:
        self.write_json(document())


#: The document's own route (the app serves it first, then `routes.ROUTES`).
OPENAPI_ROUTE: tuple[str, type] = ("api/openapi.json", OpenAPIHandler)


def types_digest(doc: dict[str, Any] | None = None) -> str:
    """The sha256 of what the TypeScript types are made of (paths and components, not the version):
    labextension/src/api-types.ts names it in its first line, so a test sees it is stale."""
    doc = document() if doc is None else doc
    part = {"paths": doc["paths"], "components": doc["components"]}
    return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    """Print the document as JSON; ``--digest``: only its `types_digest`; ``--with-digest``:
    ``{"digest": ..., "document": ...}`` (what ``jlpm gen:types`` reads, one start for both)."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--digest"], ["--with-digest"]):
        sys.exit("usage: python -m hub_ext.service.openapi [--digest | --with-digest]")
    doc = document()
    if args == ["--digest"]:
        print(types_digest(doc))
        return
    out = {"digest": types_digest(doc), "document": doc} if args else doc
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
