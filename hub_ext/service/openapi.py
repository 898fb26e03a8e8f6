"""The OpenAPI 3 description of the classhub service, served at ``/api/openapi.json``.

Why written out by hand and not generated: the document is the contract for the JupyterLab
extension, scripts and the Grafana setup, and it says *who* may call each endpoint, which no
handler signature shows. tests/test_service_openapi.py checks that every route of the app is
described here with exactly the methods its handler implements, and that nothing here is missing
from the app, so the two cannot drift apart.

Paths are relative to the server URL ``/services/classhub`` (the service prefix behind the proxy).
"""

from __future__ import annotations

from typing import Any

from hub_ext import __version__

_JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _ok(description: str, schema: dict[str, Any] | None = None, status: str = "200") -> dict[str, Any]:
    body: dict[str, Any] = {"description": description}
    if schema is not None:
        body["content"] = {_JSON: {"schema": schema}}
    return {status: body}


_ERRORS = {
    code: {"$ref": f"#/components/responses/{name}"}
    for code, name in (("400", "BadRequest"), ("401", "Unauthorized"), ("403", "Forbidden"),
                       ("404", "NotFound"), ("409", "Conflict"), ("413", "TooLarge"),
                       ("502", "BadGateway"))
}
#: Every operation that takes a body (and every POST, PUT, PATCH, DELETE: the service reads any
#: body it is sent) may answer these: a body that is not JSON, too deep, or holds numbers no column
#: stores (400), and one over the endpoint's size limit (413). `document` adds them.
_BODY_ERRORS = ("400", "413")


def _op(summary: str, who: str, responses: dict[str, Any], *, errors: tuple[str, ...] = ("401", "403"),
        body: dict[str, Any] | None = None, params: tuple[str, ...] = (), public: bool = False,
        extra: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "description": f"Who may call it: {who}.",
        "responses": {**responses, **{code: _ERRORS[code] for code in errors}},
    }
    if public:
        op["security"] = []
    if params:
        op["parameters"] = [{"$ref": f"#/components/parameters/{p}"} for p in params]
    if body is not None:
        op["requestBody"] = body
    return op


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {_JSON: {"schema": schema}}}


_ADMIN = "hub admins"
_MEMBERS = "members of the course (student, TA, teacher) and hub admins"
_STAFF = "teachers and TAs of the course, and hub admins"
_TEACHERS = "teachers of the course and hub admins"

PATHS: dict[str, dict[str, Any]] = {
    "/api/health": {
        "get": _op("Liveness", "anyone, no login", _ok("The service runs", _ref("Health")),
                   errors=(), public=True),
    },
    "/api/openapi.json": {
        "get": _op("This document", "anyone, no login", _ok("The OpenAPI document", {"type": "object"}),
                   errors=(), public=True),
    },
    "/api/me": {
        "get": _op("Who am I", "any hub user or service with access to classhub",
                   _ok("The caller, their hub groups and their classhub course roles", _ref("Me"))),
    },
    "/api/users/{user}/server/profile": {
        "put": _op(
            "Restart a server with other user_options", "the server's owner and hub admins",
            {**_ok("The restarted server", {"type": "object"}),
             "409": {"description": "The server is busy, or the hub has nothing free for these options"}},
            errors=("400", "401", "403"), params=("user",),
            body=_json_body({"type": "object", "example": {"profile": "h200-mig-1g"}}),
        ),
    },
    "/api/courses": {
        "get": _op("List courses", "any user: hub admins see all courses, others their own",
                   _ok("Courses", {"type": "array", "items": _ref("Course")})),
        "post": _op("Create a course (and its hub group)", _ADMIN,
                    _ok("The new course", _ref("Course"), status="201"),
                    errors=("400", "401", "403"), body=_json_body(_ref("NewCourse"))),
    },
    "/api/courses/{course}": {
        "get": _op("One course", _MEMBERS, _ok("The course", _ref("Course")),
                   errors=("401", "403", "404"), params=("course",)),
        "delete": _op("Delete a course (and its hub group)", _ADMIN,
                      {"204": {"description": "Deleted"},
                       "409": {"description": "Servers or jobs of the course still run"}},
                      errors=("401", "403", "404"), params=("course",)),
    },
    "/api/courses/{course}/members": {
        "get": _op("Members and their roles", _STAFF,
                   _ok("Members", {"type": "array", "items": _ref("Member")}),
                   errors=("401", "403", "404"), params=("course",)),
        "put": _op("Add, re-role and remove members (all or nothing)",
                   "teachers of the course (students and TAs only) and hub admins (teachers too)",
                   _ok("What changed", _ref("MemberChanges")), errors=("400", "401", "403", "404"),
                   params=("course",), body=_json_body(_ref("MemberChange"))),
    },
    "/api/courses/{course}/roster": {
        "post": _op(
            "Import a roster CSV", _TEACHERS,
            _ok("What was imported, and each bad line", _ref("RosterResult")),
            errors=("400", "401", "403", "404"), params=("course", "remove_missing"),
            body={"required": True, "content": {
                "text/csv": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {"schema": {"type": "object", "properties": {
                    "file": {"type": "string", "format": "binary"}}, "required": ["file"]}},
            }},
        ),
    },
    "/api/courses/{course}/quota": {
        "get": _op("The course ceiling", _MEMBERS, _ok("Limits", _ref("Limits")),
                   errors=("401", "403", "404"), params=("course",)),
        "put": _op("Set the course ceiling", _ADMIN, _ok("The stored limits", _ref("Limits")),
                   errors=("400", "401", "403", "404"), params=("course",), body=_json_body(_ref("Limits"))),
    },
    "/api/courses/{course}/quota/users/{user}": {
        "get": _op("A member's own limits in the course", f"{_TEACHERS}; the member themselves",
                   _ok("Limits (unset: only the course ceiling applies)", _ref("Limits")),
                   errors=("401", "403", "404"), params=("course", "user")),
        "put": _op("Set a member's limits (within the course ceiling)", _TEACHERS,
                   _ok("The stored limits", _ref("Limits")), errors=("400", "401", "403", "404"),
                   params=("course", "user"), body=_json_body(_ref("Limits"))),
    },
    "/api/courses/{course}/usage": {
        "get": _op("What the course and its users hold now, GPU hours this week", _STAFF,
                   _ok("Usage", _ref("CourseUsage")), errors=("401", "403", "404"), params=("course",)),
    },
    "/api/usage/me": {
        "get": _op("My usage and limits per course", "any hub user (not services)",
                   _ok("Usage", _ref("MyUsage"))),
    },
    "/api/usage": {
        "get": _op("Usage of every course and user", _ADMIN, _ok("Usage", _ref("AllUsage"))),
    },
    "/metrics": {
        "get": _op(
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
        "course": {"type": "string"}, "limits": _ref("Limits"), "usage": _ref("Usage"),
        "users": {"type": "object", "additionalProperties": _ref("Usage")}}},
    "MyUsage": {"type": "object", "properties": {
        "name": {"type": "string"}, "usage": _ref("Usage"),
        "courses": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "role": _ROLE, "usage": _ref("Usage"), "limits": _ref("Limits"),
            "course_limits": _ref("Limits")}}}}},
    "AllUsage": {"type": "object", "properties": {
        "courses": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "limits": _ref("Limits"), "usage": _ref("Usage")}}},
        "users": {"type": "object", "additionalProperties": _ref("Usage")}}},
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


def _with_common_errors(path: str, method: str, op: dict[str, Any]) -> dict[str, Any]:
    """``op`` with the answers every operation of its kind may give: a path naming nothing (404),
    a bad or too large body (`_BODY_ERRORS`), the hub failing (502, `_ASKS_HUB`)."""
    codes = []
    if "{" in path and op.get("security") != []:
        codes.append("404")
    if method in ("post", "put", "patch", "delete") or "requestBody" in op:
        codes.extend(_BODY_ERRORS)
    if (method, path) in _ASKS_HUB:
        codes.append("502")
    responses = {**op["responses"], **{code: _ERRORS[code] for code in codes if code not in op["responses"]}}
    return {**op, "responses": dict(sorted(responses.items()))}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": _ref("Error")}}}


def document() -> dict[str, Any]:
    """The OpenAPI document (a fresh dict each call)."""
    from hub_ext.service import culling, invitations, sharing, templates  # they use this module

    paths = {**PATHS, **templates.OPENAPI_PATHS, **sharing.OPENAPI_PATHS, **culling.OPENAPI_PATHS,
             **invitations.OPENAPI_PATHS}
    paths = {path: {method: _with_common_errors(path, method, op) for method, op in ops.items()}
             for path, ops in paths.items()}
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
            "parameters": {
                "course": {"name": "course", "in": "path", "required": True, "schema": {"type": "string"}},
                "user": {"name": "user", "in": "path", "required": True, "schema": {"type": "string"}},
                "template": {"name": "template", "in": "path", "required": True,
                             "schema": {"type": "string"}},
                "version": {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}},
                "upload": {"name": "upload", "in": "path", "required": True, "schema": {"type": "string"}},
                "share": {"name": "share", "in": "path", "required": True, "schema": {"type": "integer"},
                          "description": "a share's id (from POST /api/shares)"},
                "viewer": {"name": "viewer", "in": "query", "required": True, "schema": {"type": "string"},
                           "description": "the hub user who opens the server"},
                "server": {"name": "server", "in": "query", "required": False,
                           "schema": {"type": "string", "default": ""},
                           "description": "the server's name (empty: the default server)"},
                "remove_missing": {"name": "remove_missing", "in": "query", "required": False,
                                   "schema": {"type": "boolean", "default": False},
                                   "description": "remove students and TAs not in the file"},
            },
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
            "schemas": SCHEMAS,
        },
    }
