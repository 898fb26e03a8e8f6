"""``Status`` bodies and the :class:`ApiError` exception that carries them.

Shapes follow ``k8s.io/apimachinery/pkg/api/errors``: NotFound/AlreadyExists/Conflict put the
plural resource in ``details.kind``; Invalid puts the Kind there plus ``details.causes``.
"""

from __future__ import annotations

from typing import Any


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    status: str = "Failure",
) -> dict[str, Any]:
    """Build a ``meta/v1 Status`` dict."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": status,
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    if status == "Success":
        body.pop("message")
        body.pop("reason")
    return body


class ApiError(Exception):
    """An API failure; the server answers with ``code`` and :attr:`body`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.body = status_body(code, reason, message, details)
        self.headers = headers or {}


def _details(group: str, plural: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    """404 NotFound: ``pods "x" not found``."""
    return ApiError(
        404, "NotFound", f'{_qualified(group, plural)} "{name}" not found', _details(group, plural, name)
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    """409 AlreadyExists: ``pods "x" already exists``."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        _details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str, why: str | None = None) -> ApiError:
    """409 Conflict for a stale resourceVersion."""
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        _details(group, plural, name),
    )


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid with field causes (each ``{"reason", "message", "field"}``)."""
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message, {})


def gone(message: str) -> ApiError:
    """410 Expired (used for too-old resourceVersions)."""
    return ApiError(410, "Expired", message)
