"""The OpenAPI document describes exactly the service's routes and methods, and is well formed.

What a user notices when this fails: the JupyterLab extension or a script built from the spec
calls an endpoint that does not exist, or an endpoint exists that nobody can discover.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tornado import web

from hub_ext.service import openapi
from hub_ext.service.app import ROUTES

METHODS = ("get", "post", "put", "patch", "delete")


def implemented(handler: type) -> set[str]:
    """HTTP methods a handler class implements itself (not tornado's 405 stubs)."""
    return {m for m in METHODS if getattr(handler, m) is not getattr(web.RequestHandler, m)}


def spec_path_regex(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "X", path)


def route_for(path: str) -> type | None:
    """The handler of the first route that matches a spec path (as tornado would pick it)."""
    concrete = spec_path_regex(path).lstrip("/")
    for pattern, handler in ROUTES:
        if re.fullmatch(pattern, concrete):
            return handler
    return None


def test_every_route_is_in_the_spec_with_the_methods_it_implements():
    doc = openapi.document()
    described = {}
    for path, ops in doc["paths"].items():
        regex = spec_path_regex(path)
        described[regex] = set(ops)
    for pattern, handler in ROUTES:
        # the spec path whose template matches this route (placeholders fill the groups)
        matches = [p for p in doc["paths"] if re.fullmatch(pattern, spec_path_regex(p).lstrip("/"))]
        assert matches, f"route {pattern} ({handler.__name__}) is missing from the OpenAPI document"
        exact = [p for p in matches if route_for(p) is handler]
        assert len(exact) == 1, f"route {pattern} matches {matches}"
        assert set(doc["paths"][exact[0]]) == implemented(handler), (
            f"{exact[0]}: spec says {sorted(doc['paths'][exact[0]])}, "
            f"{handler.__name__} implements {sorted(implemented(handler))}"
        )


def test_every_spec_path_is_served_by_a_route():
    for path, ops in openapi.document()["paths"].items():
        handler = route_for(path)
        assert handler is not None, f"{path} is in the OpenAPI document but no route serves it"
        assert set(ops) == implemented(handler), path


def test_the_documented_extras_are_there():
    paths = openapi.document()["paths"]
    for path in ("/api/health", "/api/me", "/api/users/{user}/server/profile", "/api/openapi.json",
                 "/metrics"):
        assert path in paths
    # the two public endpoints say so
    assert paths["/api/health"]["get"]["security"] == []
    assert paths["/api/openapi.json"]["get"]["security"] == []


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_document_is_json_openapi_3_with_resolvable_refs_and_who_may_call():
    doc = json.loads(json.dumps(openapi.document()))
    assert doc["openapi"].startswith("3.")
    assert doc["info"]["version"]
    for ref in _refs(doc):
        assert ref.startswith("#/"), ref
        node = doc
        for part in ref[2:].split("/"):
            assert part in node, f"unresolvable $ref {ref}"
            node = node[part]
    path_params = re.compile(r"\{([^}]+)\}")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["description"].startswith("Who may call it:"), (path, method)
            assert op["responses"], (path, method)
            declared = {p["$ref"].rsplit("/", 1)[1] for p in op.get("parameters", [])}
            assert set(path_params.findall(path)) <= declared, (path, method)
