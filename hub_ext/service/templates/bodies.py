"""The JSON bodies of the templates API, declared once (docs/architecture.md, rule 8).

Each is a pydantic model on hub_ext.service.body_models.Body (unknown fields refused, an
``example``); its OpenAPI schema is generated from it (hub_ext.service.templates.OPENAPI_PATHS).
A field's check raises the sentence that says what to send; what a value means (a version that
exists, a profile the spawner offers) is decided later, by the store and the spawner.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from hub_ext.core import templates as rules
from hub_ext.service import body_models
from hub_ext.service.body_models import Body

__all__ = ["PublishFromServer", "PublishMetadata", "ServerFolder", "StartBody", "TemplateSettingsBody"]

#: A container image reference: registry/name[:tag][@sha256:digest], lower-case path.
IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
                   r"(@sha256:[0-9a-f]{64})?$")
#: A profile's slug, as the spawn form names it.
PROFILE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_DESCRIPTION = 4000
MAX_START_ARGS = 64
MAX_HOME_FOLDER = 255


class TemplateSettingsBody(Body):
    """``PUT /api/courses/<course>/template-settings``: when homes are re-seeded."""

    example: ClassVar[str] = '{"reseed": "on_start"}'

    reseed: Annotated[Literal["manual", "on_start"], Field(
        description="manual: a home is re-seeded when its student asks; on_start: each server start "
                    "re-seeds it with the newest version of its template")]

    @field_validator("reseed", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        if value not in rules.RESEED_MODES or not isinstance(value, str):
            raise ValueError('reseed must be "manual" or "on_start": the body must be {"reseed": '
                             '"manual"} or {"reseed": "on_start"}.')
        return value


class StartBody(Body):
    """``POST /api/courses/<course>/templates/<name>/start`` (the body is optional: none is the
    newest version, deleted files stay deleted)."""

    example: ClassVar[str] = '{"version": 2, "restore_deleted": false}'
    empty_is_object: ClassVar[bool] = True

    version: Annotated[Annotated[int, Field(ge=1, le=rules.MAX_VERSION)] | None,
                       BeforeValidator(lambda v: _sentence(rules.parse_version, v)),
                       Field(description='the version to seed (2 or "v2"; default: the newest)')] = None
    restore_deleted: Annotated[bool, BeforeValidator(lambda v: body_models.flag(v, "restore_deleted")),
                               Field(description="bring back template files you deleted")] = False


def _sentence(check: Any, value: Any) -> Any:
    """``check(value)``, its refusal ending with a full stop."""
    try:
        return check(value)
    except rules.TemplateError as e:
        raise ValueError(str(e).rstrip(".") + ".") from None


def _text_or_none(value: Any) -> Any:
    """An empty value means "not given" (as a form with an empty field sends it)."""
    return None if value in ("", [], None) else value


class PublishMetadata(Body):
    """What a published version says about itself (JSON fields, or query arguments of an archive)."""

    example: ClassVar[str] = ('{"image": "quay.io/jupyter/scipy-notebook:2024-10-07", "profile": "cpu", '
                              '"description": "Lab 1"}')
    _fields_sentence: ClassVar[str] = ("send image, profile, start_command, description, home_folder, "
                                       "staff_only and source")

    image: Annotated[str | None, Field(max_length=255, description="the container image of servers "
                                                                    "started from it (Kubernetes)")] = None
    profile: Annotated[str | None, Field(pattern=PROFILE.pattern,
                                         description="the profile of servers started from it")] = None
    start_command: Annotated[list[str] | None, Field(
        min_length=1, max_length=MAX_START_ARGS, description="the command servers started from it "
                                                             "run, e.g. [\"jupyterhub-singleuser\"]")] = None
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION)] = ""
    home_folder: Annotated[str, Field(
        max_length=MAX_HOME_FOLDER,
        description='where the files land in each home: a folder such as "lab1" (the publish form '
                    'offers the picked folder\'s name), or "" for the top of the home (the default)')] = ""
    staff_only: Annotated[bool, Field(
        description="true: only the course's teachers, TAs and admins see, list and start this "
                    "version until an assignment released from it opens (an exam prepared ahead); "
                    "false (the default): the course's students see it as soon as it is published")] = False

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(str(k) for k in set(data) - set(cls.model_fields))
            if unknown:
                raise ValueError(f"Unknown field(s) {', '.join(unknown)}; {cls._fields_sentence}.")
        cls._whole(data)
        return data

    @classmethod
    def _whole(cls, data: Any) -> None:
        """Checks of the body as a whole, after its fields are known (none here)."""

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, value: Any) -> Any:
        value = _text_or_none(value)
        if value is not None and (not isinstance(value, str) or len(value) > 255 or not IMAGE.match(value)):
            raise ValueError("image must be a container image reference, e.g. "
                             "'quay.io/jupyter/scipy-notebook:2024-10-07'.")
        return value

    @field_validator("profile", mode="before")
    @classmethod
    def _profile(cls, value: Any) -> Any:
        value = _text_or_none(value)
        if value is not None and (not isinstance(value, str) or not PROFILE.match(value)):
            raise ValueError("profile must be the slug of a profile of the spawn form, e.g. 'cpu'.")
        return value

    @field_validator("start_command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> Any:
        value = _text_or_none(value)
        if value is not None and (
            not isinstance(value, list) or len(value) > MAX_START_ARGS
            or not all(isinstance(a, str) and 0 < len(a) <= 1024 for a in value)
        ):
            raise ValueError('start_command must be a list of strings, e.g. ["jupyterhub-singleuser"].')
        return value

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, value: Any) -> Any:
        value = "" if value is None else value
        if not isinstance(value, str) or len(value) > MAX_DESCRIPTION:
            raise ValueError(f"description must be a text of at most {MAX_DESCRIPTION} characters.")
        return value

    @field_validator("staff_only", mode="before")
    @classmethod
    def _staff_only(cls, value: Any) -> Any:
        # a JSON boolean, or "true"/"false" as a query argument of an archive
        value = {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value
        if not isinstance(value, bool):
            raise ValueError("staff_only must be true or false.")
        return value

    @field_validator("home_folder", mode="before")
    @classmethod
    def _home_folder(cls, value: Any) -> Any:
        value = "" if value is None else value
        if not isinstance(value, str) or len(value) > MAX_HOME_FOLDER:
            raise ValueError(f'home_folder must be a folder name of at most {MAX_HOME_FOLDER} characters, '
                             'e.g. "lab1", or "" for the top of the home.')
        path = value.strip("/")
        if path and (any(part in ("", ".", "..") for part in path.split("/"))
                     or "\\" in path or "\x00" in path):
            raise ValueError(f'home_folder must be a folder inside the home, without "..", "." or '
                             f'backslashes (not {value!r}), e.g. "lab1", or "" for the top of the home.')
        return path

    def columns(self) -> dict[str, Any]:
        """The version's columns (image, profile, start_command, description, staff_only)."""
        return self.model_dump(include={"image", "profile", "start_command", "description", "staff_only"})


class ServerFolder(Body):
    """A folder of the teacher's running server ('' = its root)."""

    example: ClassVar[str] = '{"server_path": "lab1"}'

    server_path: Annotated[str, Field(description="a folder of your server, relative to its root")]

    @field_validator("server_path", mode="after")
    @classmethod
    def _inside(cls, value: str) -> str:
        path = value.strip("/")
        if path and any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError("server_path must be a folder inside your server, without '..'.")
        return path


_SOURCE = ('source must be {"server_path": "<folder in your server>"}; to upload an archive, send it as '
           "the body (application/zip or application/x-tar).")


class PublishFromServer(PublishMetadata):
    """``POST .../versions`` with JSON: publish a folder of the caller's running server."""

    example: ClassVar[str] = ('{"source": {"server_path": "lab1"}, "profile": "cpu", '
                              '"description": "Lab 1"}')

    source: ServerFolder

    @classmethod
    def _whole(cls, data: Any) -> None:
        source = data.get("source") if isinstance(data, dict) else None
        if not isinstance(source, dict) or set(source) != {"server_path"} or not isinstance(
                source["server_path"], str):
            raise ValueError(_SOURCE)
