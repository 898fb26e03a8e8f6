"""The packages import each other in one direction only (docs/architecture.md, rule 2).

A circle of imports (a route module importing the document that imports the route modules) works
only in some import orders and hides which piece depends on which. This reads every module's
imports, at the top and inside functions, and checks that classhub's own modules form no circle
and that each one imports only the layers it stands on (`LAYERS`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.sources import parse_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hub_ext", "spawner", "culler")


def _modules(*, migrations: bool = False) -> dict[str, Path]:
    """Every .py file of the packages by module name; Alembic's migrations only when asked."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts and not migrations:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _import_lines(path: Path, name: str, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) for each classhub module `name` imports, at the top or inside a function.

    ``from a import b`` names a.b when that is a module, else a.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(parse_module(path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        out.extend((node.lineno, t) for t in dict.fromkeys(targets) if t in modules and t != name)
    return sorted(out)


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The classhub modules `name` imports."""
    return {target for _, target in _import_lines(path, name, modules)}


def test_no_module_imports_itself_through_others():
    modules = _modules()
    graph = {name: _imports(path, name, modules) for name, path in modules.items()}
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt):], node, nxt]) if nxt in path
                               else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not circles, "import circles:\n" + "\n".join(circles)


#: Where each module stands: a package (all modules below it) or a single module; the longest
#: name that matches wins. A module of the ``hub_ext`` package itself is named one by one, so a new
#: one has to be placed here (the test says so) rather than land in a layer by default.
PLACES = {
    "hub_ext.core": "core",
    "hub_ext": "helpers",  # the package's __init__: __version__
    "hub_ext.envtraits": "helpers",
    "hub_ext.logs": "helpers",
    "hub_ext.heap": "helpers",
    "hub_ext.ports": "helpers",
    "hub_ext.hubapi": "helpers",
    "hub_ext.jobclient": "helpers",
    "hub_ext.store": "store",
    "hub_ext.backends": "backends",
    "hub_ext.backends.kubernetes": "kubernetes backend",
    "hub_ext.backends.local": "local backend",
    "hub_ext.service": "service",
    "culler": "culler",
    "spawner": "spawner",
    "spawner.kube": "kubernetes spawner",
    "spawner.local": "local spawner",
    "hub_ext.hubside": "hub plugins",
    "hub_ext.demo": "hub plugins",
    "hub_ext.singleuser": "single-user server",
    "hub_ext.config": "entry points",
    "hub_ext.cli": "entry points",
    "hub_ext.__main__": "entry points",
    "hub_ext.jobcli": "entry points",
}

_BASE = {"core", "helpers"}
_BACKENDS = _BASE | {"store", "backends"}
_EVERY_BACKEND = _BACKENDS | {"kubernetes backend", "local backend"}

#: The layers each layer may import besides its own (why: the test's docstring).
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "helpers": set(),
    "store": _BASE,
    "backends": _BASE | {"store"},
    "kubernetes backend": _BACKENDS,
    "local backend": _BACKENDS,
    "service": _EVERY_BACKEND,
    "culler": _EVERY_BACKEND,
    "spawner": _BACKENDS,
    "kubernetes spawner": _BACKENDS | {"spawner", "kubernetes backend"},
    "local spawner": _BACKENDS | {"spawner", "local backend"},
    "hub plugins": _BACKENDS,
    "single-user server": _BASE,
    "entry points": set(),  # filled in below: every layer
}
LAYERS["entry points"] = set(LAYERS)


def _layer(name: str) -> str | None:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in PLACES and (n == len(parts) or key != "hub_ext"):
            return PLACES[key]
    return None


def test_every_layer_imports_only_the_layers_below_it():
    """docs/architecture.md, rule 2: core <- store <- backends <- service, spawner, culler.

    Each layer imports only the layers to its left, and the siblings of one row never import each
    other. Every .py file counts (migrations too), and every import in it, at the top or in a
    function. Where each layer stands (`PLACES`, `LAYERS`), and why:

    - ``core`` is pure (rule 1). ``helpers`` are leaves: the package's ``__version__``, traits read
      from the environment (``envtraits``), log routing (``logs``), the hub's heap freeze
      (``heap``), ports outside the kernel's ephemeral range (``ports``), the hub REST client of
      the service and the culler (``hubapi``), the job API client (``jobclient``). They import
      no classhub code, so any layer but core may use them without tying two layers together.
    - ``backends`` (the modules of hub_ext/backends outside kubernetes/ and local/) is what both
      run modes share: the job backend interface, template storage and its settings, seeding a
      home, what a spawner does with templates. The Kubernetes and the local backend each stand
      on it and never import each other.
    - The service and the culler are processes of their own that serve either mode: they may use
      either backend, and neither imports the other.
    - The spawner's shared part (form, profiles, quota, capacity pressure) serves both spawners:
      it uses only the shared backends; each spawner adds its own backend, never the other's.
      The spawner does not import the culler: a refused start tells the culler through the store.
    - ``hub plugins`` (``hubside``: course roles and the culler's warnings inside the hub;
      ``demo``: the demo login) run in the hub for either mode, as the spawner's shared part does.
    - The single-user server extension runs in the user's server, where neither the database nor
      the cluster is at hand: core and helpers only.
    - ``entry points`` wire everything together (``config.configure(c)``, ``__main__``, the
      ``classhub`` command and its ``job`` subcommand): they may import any layer, and no other
      layer imports them.
    """
    modules = _modules(migrations=True)
    unplaced = sorted(str(path.relative_to(ROOT)) for name, path in modules.items() if _layer(name) is None)
    assert not unplaced, f"place these modules in a layer (PLACES): {', '.join(unplaced)}"
    assert set(PLACES.values()) == set(LAYERS)
    offending = []
    for name, path in sorted(modules.items()):
        layer = _layer(name)
        for line, target in _import_lines(path, name, modules):
            below = _layer(target)
            if below != layer and below not in LAYERS[layer]:
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {target} "
                                 f"(layer {layer} may not import layer {below})")
    assert not offending, ("imports against the layers' direction (docs/architecture.md, rule 2): "
                           + "; ".join(offending))
