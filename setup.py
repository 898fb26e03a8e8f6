"""Build steps setup.cfg cannot declare: the JupyterLab panel, built and shipped prebuilt.

The metadata is in setup.cfg. What this adds, as the JupyterLab extension template does with
hatch-jupyter-builder: building a wheel or an sdist first builds the panel (``labextension/``, with
``jlpm build:prod`` into ``labextension/prebuilt``) when it is not built yet, and both carry the
build, installed to ``share/jupyter/labextensions/classhub-jupyterlab``, so ``pip install`` of a
wheel or an sdist needs no Node.js. Without Node.js and without a prebuilt panel the build stops
with a sentence saying so. ``make`` builds the panel itself and links it into the venv.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_backend import PREBUILT, ROOT, panel_built

LABEXT = ROOT / "labextension"
#: Where JupyterLab looks for prebuilt extensions, under the installation's prefix.
TARGET = "share/jupyter/labextensions/classhub-jupyterlab"
#: JupyterLab's default settings that classhub changes, one file among any other package's in
#: ``overrides.d`` (jupyterlab_server reads every file there, before the site's own
#: ``overrides.json``, which still wins): students are not asked on their first JupyterLab whether
#: to fetch Jupyter's news, nor told of newer JupyterLab releases they cannot install.
OVERRIDES = ("share/jupyter/lab/settings/overrides.d", ["labextension/overrides.d/classhub.json"])
NO_NODE = ("classhub: the JupyterLab panel (labextension/) is not built and Node.js is not on the "
           "PATH: install Node.js 18+ and npm (e.g. apt-get install nodejs npm) and build again, "
           "or install classhub from its sdist or wheel, which carry the panel prebuilt.")


def build_panel() -> None:
    """Build labextension/prebuilt unless it is complete; stop with a sentence without Node.js."""
    if panel_built():
        return
    if not (LABEXT / "package.json").exists():
        raise SystemExit("classhub: labextension/prebuilt is missing and so are the panel's sources "
                         "(labextension/package.json): build from a checkout or a release sdist.")
    if shutil.which("node") is None:
        raise SystemExit(NO_NODE)
    from hatch_jupyter_builder import npm_builder

    # scripts/build-labextension.js compiles against the core packages of the JupyterLab this
    # Python has (the build environment's), named by $PYTHON
    os.environ["PYTHON"] = sys.executable
    npm_builder("wheel", "standard", path=str(LABEXT), build_cmd="build:prod", npm=["jlpm"], force=True)
    if not panel_built():
        raise SystemExit(f"classhub: building the JupyterLab panel left no entry point in {PREBUILT}/static")


def data_files() -> list[tuple[str, list[str]]]:
    """The prebuilt panel (once built) and classhub's JupyterLab settings as data files (paths
    relative to this folder, as setuptools wants)."""
    files: dict[str, list[str]] = {}
    for path in sorted(PREBUILT.rglob("*")) if panel_built() else ():
        if path.is_file():
            folder = Path(TARGET, path.parent.relative_to(PREBUILT)).as_posix()
            files.setdefault(folder, []).append(path.relative_to(ROOT).as_posix())
    return [*sorted(files.items()), OVERRIDES]


class BuildPyWithPanel(build_py):
    """Build the panel before the package, and install it with the package's data."""

    def run(self) -> None:
        build_panel()
        self.distribution.data_files = data_files()
        super().run()


class SdistWithPanel(sdist):
    """Build the panel before an sdist, which carries it prebuilt (MANIFEST.in)."""

    def run(self) -> None:
        build_panel()
        super().run()


setup(
    cmdclass={"build_py": BuildPyWithPanel, "sdist": SdistWithPanel},
    data_files=data_files(),
)
