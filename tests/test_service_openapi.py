"""The OpenAPI document describes exactly the service's routes and methods, is well formed, takes
its request bodies from the handlers' models, and the lab extension's types follow it.

What a user notices when this fails: the JupyterLab extension or a script built from the spec
calls an endpoint that does not exist, an endpoint exists that nobody can discover, or a client
built from the document sends a body the service refuses with a 400.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tornado import web

from hub_ext.service import culling, openapi
from hub_ext.service.app import ROUTES
from hub_ext.service.declare import needs, takes
from hub_ext.service.handlers import APIHandler

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "labextension"
TYPES = LAB / "src" / "api-types.ts"
STALE = "labextension/src/api-types.ts is stale: run `make types` (and commit it)"

pytestmark = pytest.mark.unit

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


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    node = doc
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_every_declared_body_model_is_the_request_schema_of_its_operation():
    """What the service checks (the model of ``@takes``) is what the served document says."""
    doc = json.loads(json.dumps(openapi.document()))
    for (path, method), model in openapi.body_models().items():
        schema = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        generated = _resolve(doc, schema["$ref"])
        expected = model.model_json_schema(ref_template="#/components/schemas/{model}")
        expected.pop("$defs", None)
        assert generated == expected, f"{method.upper()} {path}: the document's body is not {model.__name__}"


class _MarkServer(APIHandler):
    """Mark one server of a course persistent."""

    @needs("set_persistent", course="course")
    @takes(culling.PersistentBody)
    async def put(self, course: str) -> None:
        """Mark a server of the course persistent."""


class _Persistent(APIHandler):
    @takes(culling.PersistentBody)
    async def put(self) -> None:
        """Described by hand in culling.OPENAPI_PATHS, body included."""

    async def get(self) -> None:
        """Described by hand."""


def test_a_handler_that_declares_its_body_gets_the_models_schema_and_its_path_parameters():
    """A new handler method with ``@takes`` is documented with no hand-written line: its body is
    the model's schema (unknown fields refused, required fields required), its path parameters
    come from the route pattern; a declared model wins over a hand-written body."""
    routes = [(r"api/courses/([^/]+)/marks", _MarkServer), ("api/culling/persistent", _Persistent)]
    doc = json.loads(json.dumps(openapi.document(routes)))
    assert set(doc["paths"]) == {"/api/courses/{course}/marks", "/api/culling/persistent"}

    new = doc["paths"]["/api/courses/{course}/marks"]["put"]
    assert new["summary"] == "Mark a server of the course persistent"
    assert new["description"].startswith("Who may call it:") and "set_persistent" in new["description"]
    assert new["parameters"] == [{"$ref": "#/components/parameters/course"}]
    body = new["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/PersistentBody"}
    schema = doc["components"]["schemas"]["PersistentBody"]
    assert set(schema["properties"]) == {"user", "server_name", "persistent", "note"}
    assert schema["required"] == ["user"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["persistent"]["type"] == "boolean"

    hand = doc["paths"]["/api/culling/persistent"]
    assert hand["put"]["summary"].startswith("Mark or unmark a server persistent")  # kept by hand
    assert hand["put"]["requestBody"]["content"]["application/json"]["schema"] == body
    assert "requestBody" not in hand["get"]


def test_path_parameters_come_from_the_route_patterns():
    doc = openapi.document()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            in_path = [p for p in op.get("parameters", [])
                       if p.get("in") == "path" or doc["components"]["parameters"].get(
                           p.get("$ref", "/").rsplit("/", 1)[1], {}).get("in") == "path"]
            assert len(in_path) == path.count("{"), (path, method)


def _digest_of(text: str) -> str | None:
    found = re.search(r"digest ([0-9a-f]{64})", text.split("export", 1)[0])
    return found.group(1) if found else None


def test_lab_extension_types_are_those_of_the_current_document():
    """The panel's request and answer types (labextension/src/service.ts) come from api-types.ts;
    a model or document changed without `make types` leaves the panel sending old bodies."""
    assert TYPES.exists(), f"{TYPES.relative_to(ROOT)} is missing: run `make types`"
    assert _digest_of(TYPES.read_text()) == openapi.types_digest(), STALE


def test_lab_extension_types_are_what_the_generator_writes(tmp_path: Path):
    """Regenerated into a temporary file, the types are the committed file, byte for byte.

    Needs Node.js and labextension/node_modules: in CI (where `make test` builds the panel first)
    their absence fails the test; elsewhere the unit tier may run without Node, and the digest
    test above still catches stale types."""
    if not (LAB / "node_modules" / "openapi-typescript").is_dir() or not shutil.which("node"):
        message = "needs Node.js and labextension/node_modules (make labextension installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    out = tmp_path / "api-types.ts"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["node", str(LAB / "scripts" / "gen-types.js"), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == TYPES.read_text(), STALE
