"""Request bodies as pydantic models, and the one sentence a wrong body gets.

Why: validation is declared once per body (the way JupyterHub's own share API does it), so a
handler reads ``body = self.body_as(Model)`` and stays a few lines. A model names its
``example``; a body that is not an object or has unknown fields gets "The body must be like
<example>."; a wrong field gets the field's own sentence (a validator's ``ValueError``), else
"<field>: <what pydantic says>".
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

#: The longest timeout a setting may hold: 100 years (instants past the year 9999 do not exist).
MAX_SECONDS = 100 * 365 * 86400


class Body(BaseModel):
    """A request body: unknown fields are refused (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    example: ClassVar[str] = "{}"


B = TypeVar("B", bound=Body)


class BodyError(ValueError):
    """The body does not fit its model; ``str()`` is the sentence for the 400 answer."""


def parse(model: type[B], data: Any) -> B:
    """``data`` (parsed JSON) as ``model``; BodyError with the sentence when it does not fit."""
    if not isinstance(data, dict):
        raise BodyError(f"The body must be like {model.example}.")
    try:
        return model.model_validate(data)
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
