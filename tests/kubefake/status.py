"""``Status`` bodies and the :class:`ApiError` exception that carries them.

Shapes follow ``k8s.io/apimachinery/pkg/api/errors``: NotFound/AlreadyExists/Conflict put the
plural resource in ``details.kind``; Invalid puts the Kind there plus ``details.causes``.

Layout follows ``meta/v1`` ``Status`` as kube-apiserver's JSON serializer (Go's
``encoding/json``) writes it: struct fields in declaration order, empty ``omitempty`` fields left
out. ``Status``: kind, apiVersion, metadata, status, message, reason, details, code;
``StatusDetails``: name, group, kind, uid, causes, retryAfterSeconds; ``StatusCause``: reason,
message, field (``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go``). So
``{"kind":"Status",...,"details":{...},"code":409}``: ``code`` comes last, and a Success Status
from a DELETE carries no ``code`` (the generic registry's ``finalizeDelete`` leaves it 0).
"""

from __future__ import annotations

from typing import Any

DETAIL_FIELDS = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
CAUSE_FIELDS = ("reason", "message", "field")


def _ordered(fields: tuple[str, ...], given: dict[str, Any], what: str) -> dict[str, Any]:
    """``given`` in Go struct order without empty (``omitempty``) fields; an unknown key is a bug
    in the fake (the Go struct could not carry it), so it fails loudly."""
    unknown = set(given) - set(fields)
    if unknown:
        raise ValueError(f"{what} has no field(s) {sorted(unknown)}; it has {list(fields)}")
    return {k: given[k] for k in fields if given.get(k) not in (None, "", 0, [])}


def status_details(details: dict[str, Any]) -> dict[str, Any]:
    """``StatusDetails`` in kube-apiserver's field order (causes too)."""
    out = _ordered(DETAIL_FIELDS, details, "StatusDetails")
    if "causes" in out:
        out["causes"] = [_ordered(CAUSE_FIELDS, c, "StatusCause") for c in out["causes"]]
    return out


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    status: str = "Failure",
) -> dict[str, Any]:
    """Build a ``meta/v1 Status`` dict laid out as kube-apiserver sends it (see module docstring).

    Empty ``message``/``reason`` and a zero ``code`` are left out, as ``omitempty`` does;
    ``details`` is kept even when empty (a non-nil pointer: go-restful's 404/405 send ``{}``).
    """
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status}
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = status_details(details)
    if code:
        body["code"] = code
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
        self.plain: str | None = None  # a text/plain answer instead of a Status (page_not_found)


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
    """405 MethodNotAllowed: go-restful's answer when a route serves the path but not the HTTP
    method (``NewGenericServerResponse(405, ...)``, empty details)."""
    return ApiError(405, "MethodNotAllowed", message, {})


def not_served() -> ApiError:
    """404 from go-restful for a path under a built-in API group (``/api/...``, e.g.
    ``/api/v1/namespaces/ns/widgets``) that no route serves, whatever the verb: the server's
    ``serviceErrorHandler`` answers ``NewGenericServerResponse(404, ...)`` with empty details
    (``staging/src/k8s.io/apiserver/pkg/server/handler.go``)."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def page_not_found() -> ApiError:
    """404 for a path no handler claims (an unknown API group, a resource of a CRD group that no
    CRD defines): the delegation chain ends in ``notfoundhandler``, which calls ``http.NotFound``
    -- ``404 page not found`` and a newline as text/plain, not a Status -- in the releases before
    kubernetes/kubernetes PR #138219 (v1.32, what this fake reports, is one); after it, a JSON
    Status without details."""
    err = ApiError(404, "NotFound", "the server could not find the requested resource")
    err.plain = "404 page not found\n"
    return err


def method_not_supported(group: str, plural: str, verb: str) -> ApiError:
    """405 from a CRD's handler for a verb its (sub)resource has no handler for
    (``apierrors.NewMethodNotSupported``)."""
    return ApiError(
        405,
        "MethodNotAllowed",
        f'{verb} is not supported on resources of kind "{_qualified(group, plural)}"',
        {"group": group, "kind": plural},
    )


def gone(message: str) -> ApiError:
    """410 Expired (used for too-old resourceVersions)."""
    return ApiError(410, "Expired", message)
