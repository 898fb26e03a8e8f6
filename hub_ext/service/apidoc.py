"""Helpers that write the OpenAPI description of classhub's operations.

Each route module describes its own operations with these (its ``OPENAPI_PATHS``): what no
signature shows (a summary, who may call it, the answers, query parameters). hub_ext.service.openapi
assembles the document and generates the rest: the paths, their path parameters and every JSON body
a method declares with ``@takes`` (the model wins over a ``body`` written here). The helpers import
nothing of the service, so the route modules and the document never import each other in a circle.
"""

from __future__ import annotations

import json
from typing import Any

JSON = "application/json"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def ok(description: str, schema: dict[str, Any] | None = None, status: str = "200") -> dict[str, Any]:
    body: dict[str, Any] = {"description": description}
    if schema is not None:
        body["content"] = {JSON: {"schema": schema}}
    return {status: body}


ERRORS = {
    code: {"$ref": f"#/components/responses/{name}"}
    for code, name in (("400", "BadRequest"), ("401", "Unauthorized"), ("403", "Forbidden"),
                       ("404", "NotFound"), ("409", "Conflict"), ("413", "TooLarge"),
                       ("502", "BadGateway"))
}
#: Every operation that takes a body (and every POST, PUT, PATCH, DELETE: the service reads any
#: body it is sent) may answer these: a body that is not JSON, too deep, or holds numbers no column
#: stores (400), and one over the endpoint's size limit (413). `document` adds them.
BODY_ERRORS = ("400", "413")


def op(summary: str, who: str, responses: dict[str, Any], *, errors: tuple[str, ...] = ("401", "403"),
        body: dict[str, Any] | None = None, params: tuple[str, ...] = (), public: bool = False,
        extra: dict[str, Any] | None = None) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "description": f"Who may call it: {who}.",
        "responses": {**responses, **{code: ERRORS[code] for code in errors}},
    }
    if public:
        operation["security"] = []
    if params:
        operation["parameters"] = [{"$ref": f"#/components/parameters/{p}"} for p in params]
    if body is not None:
        operation["requestBody"] = body
    return operation


def json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {JSON: {"schema": schema}}}


def model_schema(model: Any) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` inlined, and its ``example``: for a hand-written
    body a method cannot declare with ``@takes`` (one of several content types, say), so that it is
    still the model's description (hub_ext.service.openapi generates the ``@takes`` ones)."""

    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return inline({**defs[ref.rsplit("/", 1)[1]], **rest})
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    schema = inline(schema)
    example = getattr(model, "example", None)
    if isinstance(example, str):
        schema["example"] = json.loads(example)
    return schema
