"""The JupyterLab panel ships prebuilt: installing classhub needs no Node.js (issue 15).

A wheel is built from the source tree (with the prebuilt extension that ``make`` builds) and
installed into a fresh venv; JupyterLab, run from that venv with no Node.js on the PATH, lists
the extension as enabled and OK. The jest tests of the panel's state logic run here too, so
``make test`` runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

#: Builds a wheel, makes a venv and runs node: too slow for the quick (unit) tier, so it runs with
#: the integration tiers of ``make test``.
pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parent.parent
LABEXT = ROOT / "labextension"
PREBUILT = LABEXT / "prebuilt"
NAME = "classhub-jupyterlab"
#: What a wheel is built from (the rest of the checkout plays no part in it).
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "hub_ext", "spawner", "culler",
           "labextension/prebuilt", "labextension/install.json")


def _prebuilt() -> Path:
    if not (PREBUILT / "package.json").exists():
        pytest.fail("labextension/prebuilt is missing: run 'make install' (it builds the JupyterLab "
                    "extension with jlpm; Node.js 18+ is needed to build it, not to install it)")
    return PREBUILT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _prebuilt()
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(out), str(src)], check=True, cwd=src, timeout=300)
    (found,) = out.glob("classhub-*.whl")
    return found


def test_pip_install_without_node_lists_the_extension_enabled(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=300)
    # JupyterLab itself (a dependency) comes from the test venv's site-packages; the extension
    # only from what the wheel installed into the fresh prefix.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "_classhub_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = venv / "share" / "jupyter" / "labextensions" / NAME
    assert json.loads((installed / "package.json").read_text())["name"] == NAME
    assert list((installed / "static").glob("remoteEntry.*.js"))

    path = str(venv / "bin")  # no Node.js here
    assert shutil.which("node", path=path) is None
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": path, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data"), "LANG": "C.UTF-8"}
    listed = subprocess.run([str(python), "-m", "jupyterlab.labextensions", "list"], env=env,
                            capture_output=True, text=True, timeout=120)
    out = listed.stdout + listed.stderr
    assert listed.returncode == 0, out
    line = next((x for x in out.splitlines() if NAME in x), "")
    assert "enabled" in line and "OK" in line and "(python, classhub)" in line, out
    assert str(venv / "share" / "jupyter" / "labextensions") in out, out


def test_panel_state_logic_jest() -> None:
    """The TypeScript unit tests (jest, ts-jest) of the panel's state logic."""
    _prebuilt()
    jlpm = Path(sys.prefix) / "bin" / "jlpm"
    if not (LABEXT / "node_modules" / ".bin" / "jest").exists() or not jlpm.exists():
        pytest.fail("the extension's node_modules are missing: run 'make install'")
    env = {**os.environ, "PATH": f"{jlpm.parent}{os.pathsep}{os.environ.get('PATH', '')}", "CI": "true"}
    done = subprocess.run([str(jlpm), "test", "--silent"], cwd=LABEXT, env=env, capture_output=True,
                          text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "Tests:" in out and "failed" not in out.split("Tests:")[1].splitlines()[0], out[-2000:]
