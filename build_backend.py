"""classhub's build backend: setuptools, plus what building the JupyterLab panel needs, only when
it must be built.

Why: a wheel and an sdist carry the panel prebuilt (``labextension/prebuilt``, installed to
``share/jupyter/labextensions/classhub-jupyterlab``), as JupyterLab's extension template does, so
installing them needs no Node.js. Building it (setup.py, with hatch-jupyter-builder's
``npm_builder``) needs JupyterLab (its ``jlpm`` and core packages) and Node.js. A checkout where
``make`` built the panel, and an sdist, have it already: they build without downloading
JupyterLab into the isolated build environment. A clean clone asks for it here.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the rest of the PEP 517/660 hooks, unchanged)
    build_editable,
    build_sdist,
    build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

ROOT = Path(__file__).resolve().parent
PREBUILT = ROOT / "labextension" / "prebuilt"
#: What building the panel needs in the build environment (besides Node.js on the PATH).
PANEL_REQUIRES = ["jupyterlab>=4.0,<5", "hatch-jupyter-builder>=0.9"]


def panel_built() -> bool:
    """Whether labextension/prebuilt holds a complete build (its package.json and entry point)."""
    return (PREBUILT / "package.json").exists() and any((PREBUILT / "static").glob("remoteEntry.*.js"))


def _panel() -> list[str]:
    return [] if panel_built() else list(PANEL_REQUIRES)


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_wheel(config_settings) + _panel()


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_sdist(config_settings) + _panel()


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_editable(config_settings) + _panel()
