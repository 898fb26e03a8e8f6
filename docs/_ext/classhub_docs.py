"""Reference pages generated from the code at build time (docs/reference/).

Why generated: a table written by hand drifts from the code it describes. What this writes, into
``docs/reference/_generated/`` (not committed) before Sphinx reads the sources:

- ``configuration.md``: one ``autoconfigurable`` (autodoc_traits) per configurable class of
  classhub, listing the ``config=True`` traits classhub itself defines. Traits a class inherits from
  JupyterHub, KubeSpawner or traitlets are documented by those projects and left out.
- ``openapi.json``: the OpenAPI document the service serves (hub_ext.service.openapi), which
  sphinxcontrib-openapi renders.
- ``metrics.md``: every Prometheus metric the service exports, read from the collectors' source
  (their metric families are created at scrape time, from the store, so the source is where the
  names, help strings and labels are written once).

tests/test_docs.py compares the built configuration reference with the classes.
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path
from typing import Any

from traitlets import HasTraits

#: Every class of classhub that a deployer configures as ``c.<Class>.<trait>``.
CONFIG_CLASSES = (
    "hub_ext.service.app.ClasshubService",
    "hub_ext.service.jobs.settings.ClasshubJobs",
    "hub_ext.backends.templates.ClasshubTemplates",
    "hub_ext.backends.submissions.ClasshubAssignments",
    "hub_ext.backends.coursedata.ClasshubCourseData",
    "culler.app.ClasshubCuller",
    "hub_ext.backends.gpu_use.ClasshubPrometheus",
    "spawner.local.ClasshubLocalSpawner",
    "spawner.kube.ClasshubKubeSpawner",
    "hub_ext.singleuser.authorizer.ClasshubAuthorizer",
    "hub_ext.singleuser.activity.ClasshubActivity",
    "hub_ext.backends.kubernetes.capacity.KubernetesBackend",
    "hub_ext.demo.DemoAuthenticator",
)

#: The packages whose classes are classhub's own (their traits are documented here).
OWN_PACKAGES = ("hub_ext", "spawner", "culler")

#: Source files with the service's metric families.
METRIC_SOURCES = ("hub_ext/service/metrics.py", "hub_ext/service/jobs/metrics.py",
                  "hub_ext/service/assignments/metrics.py", "hub_ext/service/competitions/metrics.py")

_FAMILY_KINDS = {"GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter",
                 "HistogramMetricFamily": "histogram", "SummaryMetricFamily": "summary"}


def load(dotted: str) -> type[HasTraits]:
    """The class named by its dotted path."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def own_config_traits(cls: type[HasTraits]) -> list[str]:
    """Names of the ``config=True`` traits of ``cls`` that a classhub class defines (mixins too)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in OWN_PACKAGES and issubclass(klass, HasTraits):
            names |= set(klass.class_own_traits(config=True))
    return sorted(names)


def configuration_page() -> str:
    """MyST text of the configuration reference: one autoconfigurable per class."""
    parts = []
    for dotted in CONFIG_CLASSES:
        cls = load(dotted)
        # the members named, so that only classhub's own traits are listed (not the methods,
        # nor the traits of JupyterHub's, KubeSpawner's or traitlets' classes)
        # (autodoc_traits adds every config trait, inherited ones too, unless excluded)
        own = own_config_traits(cls)
        inherited = sorted(set(cls.class_traits(config=True)) - set(own))
        options = [f":members: {', '.join(own)}"]
        if inherited:
            options.append(f":exclude-members: {', '.join(inherited)}")
        body = "".join(f"   {option}\n" for option in options)
        parts.append(f"## {cls.__name__}\n\n```{{eval-rst}}\n.. autoconfigurable:: {dotted}\n"
                     f"{body}```\n")
    return "\n".join(parts)


def metrics(root: Path) -> list[dict[str, Any]]:
    """The metric families created in METRIC_SOURCES: name, kind, help and labels."""
    found = []
    for source in METRIC_SOURCES:
        tree = ast.parse((root / source).read_text(), source)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in _FAMILY_KINDS):
                continue
            name, doc = (ast.literal_eval(arg) for arg in node.args[:2])
            labels = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "labels"), [])
            kind = _FAMILY_KINDS[node.func.id]
            # prometheus_client exposes a counter family <name> as <name>_total
            exposed = f"{name}_total" if kind == "counter" else name
            found.append({"name": exposed, "kind": kind, "help": doc, "labels": labels,
                          "source": source})
    return sorted(found, key=lambda m: m["name"])


def metrics_page(root: Path) -> str:
    """MyST table of the service's metrics."""
    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for m in metrics(root):
        labels = ", ".join(f"`{label}`" for label in m["labels"]) or "(none)"
        rows.append(f"| `{m['name']}` | {m['kind']} | {labels} | {m['help']} |")
    return "\n".join(rows) + "\n"


def write_generated(docs: Path) -> None:
    """Write the generated reference files under docs/reference/_generated/."""
    from hub_ext.service.openapi import document

    out = docs / "reference" / "_generated"
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "configuration.md", configuration_page())
    _write(out / "openapi.json", json.dumps(document(), indent=1, sort_keys=True) + "\n")
    import hub_ext

    _write(out / "metrics.md", metrics_page(Path(hub_ext.__file__).resolve().parent.parent))


def _write(path: Path, text: str) -> None:
    """Write only on change, so Sphinx rebuilds only what changed."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)



def setup(app: Any) -> dict[str, Any]:
    """Sphinx entry point: generate before the sources are read."""
    write_generated(Path(app.srcdir))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
