"""The quota ledger has one owner (docs/architecture.md, rule 4): `hub_ext/store/ledger.py`.

Why a test that reads the code: the ledger is only race-free and only agrees with what runs when
every reservation goes through `Ledger` (reserve under the course's lock, release, reconcile) and
every server is named by the same key. A module that selects or writes the reservation table
itself, or spells ``server:<user>/<name>`` itself, works until one of the two drifts: then a
reconcile releases running servers' reservations, or the culler weighs a server by no
reservation at all. This reads every module of hub_ext/, spawner/ and culler/ and names each line
that touches the table (`Reservation`, ``classhub_reservations``) or spells a ledger key
(``server:<user>/<name>``, ``job:<id>``) outside the ledger and the table's definition.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.sources import parse_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hub_ext", "spawner", "culler")

#: The owner, and where the table itself is defined: the model (and its re-export by the store
#: package) and the Alembic migrations that create and change it.
OWNER = "hub_ext/store/ledger.py"
DEFINITIONS = ("hub_ext/store/models.py", "hub_ext/store/__init__.py", "hub_ext/store/migrations/")

MODEL = "Reservation"
TABLE = "classhub_reservations"
STORE = "hub_ext.store"

#: A key as a template: each formatted part is "{}" (f"server:{u}/{n}" -> "server:{}/{}").
#: A template's source ``server:<user>:/<folder>`` is not a ledger key.
_KEY_TEMPLATE = re.compile(r"server:\{\}/|^job:\{\}")
#: A key as one literal or a %/format template ("server:ann/", "server:%s/%s", "job:{}").
_KEY_LITERAL = re.compile(r"^server:[^\s:/]*/|^job:(%s|\{\w*\})$")


def _module_aliases(tree: ast.Module, package: str) -> dict[str, str]:
    """Local name -> the module it stands for, from the imports of a module in `package`."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from <module> import ...`` in `package` (relative ones too)."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _template(node: ast.expr) -> str | None:
    """A string built from literals and values as a template ("{}" for each value): an f-string
    or a chain of ``+``; None when `node` is neither."""
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        sides = []
        for side in (node.left, node.right):
            if isinstance(side, ast.Constant) and isinstance(side.value, str):
                sides.append(side.value)
            else:
                sides.append(_template(side) or "{}")
        text = "".join(sides)
        return text if text.strip("{}") else None  # "{}{}": no literal, no string
    return None


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes: a docstring may describe the key format; code may not spell it."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def findings(tree: ast.Module, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, what) for each place in `tree` (the module `module`) that touches the ledger's
    table or spells a ledger key."""
    package = module if is_package else module.rpartition(".")[0]
    aliases = _module_aliases(tree, package)
    docstrings = _docstrings(tree)
    out: list[tuple[int, str]] = []
    templates_seen: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _absolute(node, package).startswith(STORE):
            if any(alias.name == MODEL for alias in node.names):
                out.append((node.lineno, f"imports the ledger's table model {MODEL}"))
        elif isinstance(node, ast.Attribute) and node.attr == MODEL:
            base = _dotted(node.value)
            if base is not None:
                head, _, rest = base.partition(".")
                resolved = ".".join(filter(None, (aliases.get(head, head), rest)))
                if resolved.startswith(STORE):
                    out.append((node.lineno, f"uses the ledger's table model {base}.{MODEL}"))
        elif isinstance(node, (ast.JoinedStr, ast.BinOp)) and id(node) not in templates_seen:
            text = _template(node)
            if text is not None:
                # the parts of a `+` chain are templates too; judge the whole chain once
                templates_seen.update(id(n) for n in ast.walk(node))
                if _KEY_TEMPLATE.search(text):
                    out.append((node.lineno, f"spells a ledger key ({text!r})"))
                elif TABLE in text:
                    out.append((node.lineno, f"names the ledger's table {TABLE}"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and id(node) not in templates_seen):
            if TABLE in node.value:
                out.append((node.lineno, f"names the ledger's table {TABLE}"))
            elif _KEY_LITERAL.search(node.value):
                out.append((node.lineno, f"spells a ledger key ({node.value!r})"))
    return sorted(set(out))


def _modules() -> dict[str, tuple[str, bool]]:
    """Every .py file of the packages: path relative to the repository -> (module, is package)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            parts = relative.with_suffix("").parts
            is_package = parts[-1] == "__init__"
            found[relative.as_posix()] = (".".join(parts[:-1] if is_package else parts), is_package)
    return found


def test_only_the_ledger_reads_writes_or_names_reservations() -> None:
    """Every other module asks `hub_ext.store.Ledger` (reserve, release, usage, holdings, keys)."""
    modules = _modules()
    assert OWNER in modules and len(modules) > 50  # it reads the real tree
    broken = []
    for path, (module, is_package) in modules.items():
        if path == OWNER or path.startswith(DEFINITIONS):
            continue
        for line, what in findings(parse_module(ROOT / path), module, is_package):
            broken.append(f"{path}:{line} {what}")
    assert not broken, (
        "Only hub_ext/store/ledger.py (class Ledger) may read or write the reservation ledger or "
        "build its keys; move these into a Ledger method, or call one "
        "(docs/architecture.md, rule 4):\n" + "\n".join(broken))


@pytest.mark.parametrize("source", [
    "from hub_ext.store import Reservation",
    "from hub_ext.store.models import Course, Reservation as R",
    "from ..store import Reservation",
    "from hub_ext import store\nrows = select(store.Reservation.key)",
    "import hub_ext.store\nrows = select(hub_ext.store.Reservation)",
    "from hub_ext.store import models as m\nq = m.Reservation",
    "text('SELECT key FROM classhub_reservations')",
    "key = f\"server:{user['name']}/{name}\"",
    "key = f'server:{user}/'",
    "key = 'server:' + user + '/' + name",
    "key = 'server:%s/%s' % (user, name)",
    "key = 'server:{}/{}'.format(user, name)",
    "held = {f'job:{j}' for j in jobs}",
    "ok = key == 'server:ann/'",
])
def test_each_way_of_touching_the_ledger_is_found(source: str) -> None:
    """The reader finds what it is meant to find (a check that finds nothing proves nothing)."""
    assert findings(ast.parse(source), "hub_ext.service.example")


@pytest.mark.parametrize("source", [
    "from hub_ext.core.admission.backfill import Reservation\nr = Reservation('a', 0, {}, 0)",
    "from hub_ext import store\nkey = store.Ledger.server_key(user, name)",
    "source = f'server:{caller}:/{folder}'",  # a template's source: a path in a server
    "def f():\n    '''Keys look like server:<user>/<name>.'''",
    "message = f'Cannot start this server: {e}'",
    "label = 'job: ' + name",
])
def test_what_is_not_the_ledger_is_left_alone(source: str) -> None:
    assert findings(ast.parse(source), "hub_ext.service.example") == []
