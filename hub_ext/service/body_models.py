"""Request bodies as pydantic models, and the one sentence a wrong body gets.

Why: validation is declared once per body (the way JupyterHub's own share API does it), so a
handler method says ``@takes(Model)`` (hub_ext.service.declare) and finds the parsed body in
``self.body``. A model names its ``example``; a body that is not an object or has unknown fields
gets "The body must be like <example>."; a wrong field gets the field's own sentence (a
validator's ``ValueError``), else "<field>: <what pydantic says>". The meaning checks (a quota's
resources are known, a username is one the hub takes) stay plain functions of hub_ext.core that
the models' validators call, so the sentence is the same wherever the check runs.

A `BodyError` raised anywhere in a handler method (by a model, or by a meaning check the service
makes later, e.g. a quota above the course ceiling) is answered 400 with its sentence by
hub_ext.service.handlers.APIHandler: no handler writes its own 400 for a body.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from hub_ext.core import roles, roster, sharing
from hub_ext.core.quota import Limits, parse_limits
from hub_ext.core.resources import is_known_resource

#: The longest timeout a setting may hold: 100 years (instants past the year 9999 do not exist).
MAX_SECONDS = 100 * 365 * 86400


class Body(BaseModel):
    """A request body: unknown fields are refused (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    example: ClassVar[str] = "{}"
    #: Whether the model's own ``mode="before"`` validator answers a body that is not an object
    #: (with its sentence, or by reading it as something else); otherwise `parse` answers it.
    any_json: ClassVar[bool] = False
    #: Whether an empty request body (no bytes at all) means ``{}``; a JSON ``null`` never does.
    empty_is_object: ClassVar[bool] = False


B = TypeVar("B", bound=Body)


class BodyError(ValueError):
    """The body does not fit its model; ``str()`` is the sentence for the 400 answer."""


def parse(model: type[B], data: Any, context: Mapping[str, Any] | None = None) -> B:
    """``data`` (parsed JSON) as ``model``; BodyError with the sentence when it does not fit.

    ``context`` reaches the model's validators (pydantic's ``ValidationInfo.context``): what a
    check needs from the running service, e.g. ``normalize`` (the hub's username normalizer)."""
    if not isinstance(data, dict) and not getattr(model, "any_json", False):
        raise BodyError(f"The body must be like {model.example}.")
    try:
        return model.model_validate(data, context=dict(context or {}))
    except ValidationError as e:
        raise BodyError(_sentence(model, e)) from None


def _sentence(model: type[Body], error: ValidationError) -> str:
    errors = error.errors(include_url=False)
    if any(e["type"] == "extra_forbidden" for e in errors):  # a typo in a field name
        return f"The body must be like {model.example}."
    first = errors[0]
    if first["type"] == "value_error":  # our own sentence, from a validator
        return str(first["ctx"]["error"])
    if not first["loc"]:
        return f"The body must be like {model.example}."
    field = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return f"{field} is required: the body must be like {model.example}."
    return f"{field}: {first['msg']} (the body must be like {model.example})."


# ---- field checks shared by bodies ---------------------------------------------------------------

def name(value: Any, field: str, example: str) -> str:
    """A hub user (or server) name: a non-empty string of at most 255 characters."""
    if not isinstance(value, str) or not value or len(value) > 255:
        raise ValueError(f"{field} must be a hub user name, e.g. {example}.")
    return value


def short_text(value: Any, field: str, empty_ok: bool = True) -> str:
    if not isinstance(value, str) or len(value) > 255 or (not empty_ok and not value):
        raise ValueError(f"{field} must be a string of at most 255 characters.")
    return value


def flag(value: Any, field: str, null_ok: bool = False) -> bool | None:
    if value is None and null_ok:
        return None
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be true or false{', or null' if null_ok else ''}.")
    return value


def seconds(value: Any, field: str) -> float | None:
    """A duration in seconds (int or float, finite, 0..100 years), or None for the default."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not 0 <= value <= MAX_SECONDS):
        raise ValueError(f"{field} must be a number of seconds >= 0 (or null for the site default), "
                         f"at most {MAX_SECONDS} (100 years).")
    return float(value)


def instant(value: Any, field: str) -> datetime:
    """An ISO 8601 time with a zone, as UTC, between the years 1970 and 9998."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"{field} must be an ISO 8601 time with a zone, e.g. "
                         "\"2026-12-14T09:00:00+01:00\".")
    try:  # the year 9999 with a negative offset is past the last datetime in UTC
        utc = parsed.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or not 1970 <= utc.year <= 9998:
        raise ValueError(f"{field} must be a time between the years 1970 and 9998.")
    return utc


#: Course names: usable as a JupyterHub group name, in a ``!group=`` scope filter, as a Kubernetes
#: label value and as a Prometheus label (letters, digits, '.', '_', '-'; at most 63 characters).
COURSE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?\Z")


def course_name_problem(name: object) -> str | None:
    """Why `name` cannot be a course (a hub group) name, or None when it can."""
    if not isinstance(name, str) or not name:
        return "give the course a 'name', e.g. \"cs101\""
    if not COURSE_NAME.match(name):
        return (
            f"course name {name!r} is not allowed: use 1-63 letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit (it becomes a JupyterHub group name)"
        )
    return None


def unknown_resources(names: Iterable[str]) -> list[str]:
    """Resource names a quota should not name: typos of Kubernetes or NVIDIA resources.

    The grammar is ``hub_ext.core.resources.is_known_resource``: Kubernetes' own names, every GPU
    resource (MIG slices with attributes such as ``nvidia.com/mig-1g.10gb.me`` included), other
    vendors' extended resources as written. Why: a ceiling on "gpus" would cap nothing and the
    admin would believe the course is limited.
    """
    return sorted(name for name in names if not is_known_resource(name))


def _schema(schema: dict[str, Any]) -> WithJsonSchema:
    """The JSON schema a field documents when its validator takes any JSON and says what is wrong."""
    return WithJsonSchema(schema)


#: The sentence for a quota resource name that is neither Kubernetes' nor a GPU's nor a vendor's.
UNKNOWN_RESOURCE = (
    "Invalid quota: unknown resource {names}; use cpu, memory, ephemeral-storage, nvidia.com/gpu, "
    "nvidia.com/gpu.shared, nvidia.com/mig-<g>g.<mem>gb (e.g. nvidia.com/mig-1g.18gb, "
    "nvidia.com/mig-1g.10gb.me) or a vendor's extended resource such as amd.com/gpu."
)


# ---- the bodies of hub_ext.service.handlers, courses, sharing and panel ---------------------------

class ProfileOptionsBody(Body):
    """``PUT /api/users/<name>/server/profile``: the new ``user_options`` (an empty body: the
    defaults). Which profile, image and sizes a user may choose is the hub's decision (the
    spawner's catalog, hub_ext.core.profiles); this model only refuses what no spawner reads."""

    example: ClassVar[str] = '{"profile": "h200-mig-1g"}'
    empty_is_object: ClassVar[bool] = True
    profile: StrictStr | None = None
    image: StrictStr | None = None
    cpu: StrictStr | StrictInt | StrictFloat | None = None
    memory: StrictStr | StrictInt | StrictFloat | None = None
    template: dict[str, Any] | None = None

    def user_options(self) -> dict[str, Any]:
        """The options as sent (fields left out stay out: the spawner's defaults apply)."""
        return self.model_dump(exclude_unset=True)


class NewCourseBody(Body):
    """``POST /api/courses``: a course's name (a hub group name) and how pages show it."""

    example: ClassVar[str] = '{"name": "cs101", "display_name": "..."}'
    name: str
    display_name: str = ""

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, v: Any) -> str:
        problem = course_name_problem(v)
        if problem:
            raise ValueError(problem[0].upper() + problem[1:] + ".")
        return v

    @field_validator("display_name", mode="before")
    @classmethod
    def _display(cls, v: Any) -> str:
        if v is None:
            return ""
        if not isinstance(v, str):
            raise ValueError("display_name must be a string.")
        return v


_MEMBER_SCHEMA = {"type": "array", "items": {"anyOf": [
    {"type": "string", "description": "a username (added as a student)"},
    {"type": "object", "required": ["username"], "additionalProperties": False, "properties": {
        "username": {"type": "string"},
        "role": {"type": "string", "enum": [roles.STUDENT, roles.TA, roles.TEACHER]}}}]}}


class MemberChangeBody(Body):
    """``PUT /api/courses/<course>/members``: people to add (with a role) and to remove, applied
    all or nothing. Usernames are normalized as the hub's authenticator does (the ``normalize``
    of the parse context) and checked by hub_ext.core.roster.username_problem."""

    example: ClassVar[str] = '{"add": [{"username": ..., "role": "student"}], "remove": ["username", ...]}'
    add: Annotated[dict[str, str], _schema(_MEMBER_SCHEMA)] = {}
    remove: Annotated[tuple[str, ...], _schema({"type": "array", "items": {"anyOf": [
        {"type": "string"}, {"type": "object", "properties": {"username": {"type": "string"}}}]}})] = ()

    @model_validator(mode="before")
    @classmethod
    def _members(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping) or not set(data) <= {"add", "remove"}:
            return data  # pydantic refuses it: "The body must be like ..."
        normalize: Callable[[str], str] = (info.context or {}).get("normalize", roster.default_normalize)
        for key in ("add", "remove"):
            if not isinstance(data.get(key) or [], list):
                raise ValueError(f'"{key}" must be a list, e.g. {{"{key}": ["kim"]}}.')
        adds: dict[str, str] = {}
        for i, entry in enumerate(data.get("add") or []):
            if isinstance(entry, str):
                entry = {"username": entry}
            if (not isinstance(entry, Mapping) or not isinstance(entry.get("username"), str)
                    or not set(entry) <= {"username", "role"}):
                raise ValueError(f'add[{i}]: write {{"username": "...", "role": "student"}}.')
            username = _username(normalize, entry["username"], f"add[{i}]")
            role = entry.get("role", roles.STUDENT)
            if role not in (roles.STUDENT, roles.TA, roles.TEACHER):
                raise ValueError(f"add[{i}]: role {role!r} is not one of student, ta, teacher.")
            if adds.get(username, role) != role:
                raise ValueError(f"add[{i}]: {username} is listed twice with different roles.")
            adds[username] = role
        removes: list[str] = []
        for i, entry in enumerate(data.get("remove") or []):
            raw = entry.get("username") if isinstance(entry, Mapping) else entry
            if not isinstance(raw, str):
                raise ValueError(f"remove[{i}]: give a username.")
            username = _username(normalize, raw, f"remove[{i}]")
            if username in adds:
                raise ValueError(f"{username} is both added and removed; keep one.")
            removes.append(username)
        return {"add": adds, "remove": tuple(removes)}


def _username(normalize: Callable[[str], str], raw: str, where: str) -> str:
    username = normalize(raw)
    problem = roster.username_problem(username)
    if problem:
        raise ValueError(f"{where}: {problem}.")
    return username


class QuotaBody(Body):
    """``PUT /api/courses/<course>/quota`` and ``.../quota/users/<user>``: limits; missing or
    null fields mean "no limit". Checked by hub_ext.core.quota.parse_limits (the sentences) and
    the one resource grammar (hub_ext.core.resources.is_known_resource)."""

    example: ClassVar[str] = ('{"resources": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "256Gi"}, '
                              '"servers": 30, "gpu_hours_per_week": 40}')
    any_json: ClassVar[bool] = True
    resources: Annotated[Any, _schema({"type": ["object", "null"], "additionalProperties": {
        "type": ["string", "number", "null"]}, "description": "resource name -> Kubernetes quantity",
        "example": {"nvidia.com/mig-1g.10gb.me": 2}})] = None
    servers: Annotated[Any, _schema({"type": ["integer", "null"], "minimum": 0})] = None
    gpu_hours_per_week: Annotated[Any, _schema({"type": ["number", "string", "null"]})] = None
    _limits: Limits = PrivateAttr()

    @model_validator(mode="wrap")
    @classmethod
    def _parse(cls, data: Any, handler: Callable[[Any], QuotaBody]) -> QuotaBody:
        try:
            limits = parse_limits(data)
        except ValueError as e:
            raise ValueError(f"Invalid quota: {e}.") from None
        unknown = unknown_resources(limits.limited)
        if unknown:
            raise ValueError(UNKNOWN_RESOURCE.format(names=", ".join(map(repr, unknown))))
        body = handler(data)
        body._limits = limits
        return body

    @property
    def limits(self) -> Limits:
        return self._limits


_SHARE_FIELDS = ("kind", "user", "group", "link", "path", "minutes", "expires_in", "auto_start",
                 "owner", "server")


class ShareBody(Body):
    """``POST /api/shares``: share a server with a user, a group or as an expiring link.

    Checked by hub_ext.core.sharing.parse_share_request (its sentences); `spec` adds the caller
    (the owner when none is named)."""

    example: ClassVar[str] = '{"kind": "read-only", "group": "cs101", "minutes": 90}'
    any_json: ClassVar[bool] = True
    kind: Annotated[Any, _schema({"type": "string", "enum": list(sharing.KINDS)})] = sharing.READ_ONLY
    user: Annotated[Any, _schema({"type": "string"})] = None
    group: Annotated[Any, _schema({"type": "string"})] = None
    link: Annotated[Any, _schema({"type": "boolean"})] = None
    path: Annotated[Any, _schema({"type": "string", "description": "one file, relative to the "
                                  "server's root"})] = None
    minutes: Annotated[Any, _schema({"type": "integer", "minimum": 1,
                                     "maximum": sharing.MAX_MINUTES})] = None
    expires_in: Annotated[Any, _schema({"type": "integer", "description": "seconds"})] = None
    auto_start: Annotated[Any, _schema({"type": "boolean"})] = False
    owner: Annotated[Any, _schema({"type": "string", "description": "default: the caller"})] = None
    server: Annotated[Any, _schema({"type": "string", "description": "default: the default "
                                    "server"})] = ""

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        # Checked with a stand-in for the caller (no JSON text holds a NUL: hub_ext.core.bodies);
        # `spec` checks again with the caller, for "you cannot share with the owner".
        sharing.parse_share_request(data, "\x00")
        return data

    def spec(self, caller: str) -> sharing.ShareSpec:
        """The share the caller asks for; BodyError when it names the owner as the recipient."""
        sent = self.model_dump(include=self.model_fields_set)
        try:
            return sharing.parse_share_request(sent, caller)
        except ValueError as e:
            raise BodyError(str(e)) from None


def _server_name(v: Any, field: str = "server") -> str:
    if not isinstance(v, str) or len(v) > 255:
        raise ValueError(f"{field} must be a server's name (\"\" for the default server), at most "
                         "255 characters.")
    return v


class ShareAccessBody(Body):
    """``POST /api/shares/accessed``: a server reports that someone else used it."""

    example: ClassVar[str] = '{"viewer_token": "<the viewer\'s token>", "server": "<server name>"}'
    viewer_token: str
    server: str = ""

    @field_validator("viewer_token", mode="before")
    @classmethod
    def _token(cls, v: Any) -> str:
        if not isinstance(v, str) or not v:
            raise ValueError("viewer_token must be the viewer's token for this server (a string).")
        return v

    @field_validator("server", mode="before")
    @classmethod
    def _server(cls, v: Any) -> str:
        return _server_name(v)


class PanelCopyBody(ShareAccessBody):
    """``POST /api/panel/copy``: the viewer's own copy of a file of the server they look at."""

    example: ClassVar[str] = ('{"viewer_token": "<the viewer\'s token for this server>", "server": "", '
                              '"path": "week1.ipynb"}')
    path: str

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, v: Any) -> str:
        path = v.strip("/") if isinstance(v, str) else ""
        if not path or any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError("path must name a file inside the shared server, without '..'.")
        return path


class CourseSharingBody(Body):
    """``PUT /api/courses/<course>/sharing``: whether the course's TAs open its students' servers
    without a share."""

    example: ClassVar[str] = '{"ta_server_access": true}'
    ta_server_access: bool

    @field_validator("ta_server_access", mode="before")
    @classmethod
    def _flag(cls, v: Any) -> bool:
        if not isinstance(v, bool):
            raise ValueError('Send {"ta_server_access": true} or {"ta_server_access": false}.')
        return v
