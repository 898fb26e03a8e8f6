"""The JupyterLab panel ships prebuilt: installing classhub needs no Node.js (issues 15 and 33).

As a Python user would package it, from a clean clone (the checkout's tracked files only), in
the two steps ``python -m build`` takes: an sdist built from the clone builds the panel (setup.py,
hatch-jupyter-builder's npm_builder) and carries it; the wheel built from that sdist, here with no
Node.js on the PATH, carries it too; that wheel installed into a fresh venv, with no Node.js, makes
JupyterLab list the extension as enabled and OK. A clean clone built without Node.js stops with a
sentence naming it. The jest tests of the panel's state logic run here too, so ``make test`` runs
them.

The clean clone gets the checkout's ``labextension/node_modules`` so the build runs offline;
building it with the network takes minutes more and nothing else. Its files are hard links to the
checkout's (its folders are the clone's own): a copy of its 450 MB cost 3.5 to 32 s of the
kernel's CPU on 2 cores (more the less of it the page cache held), as much as the panel's build or
more, links 1.3 to 3.5 s. What the build replaces or adds there stays in the clone; a file written
in place through a link would change the checkout's too, so the fixture checks that none was
(`written_through_links`; with the checkout's install state, ``jlpm install`` wrote none).
``.yarn``, whose install state yarn rewrites, is copied.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

#: Builds the panel, an sdist and wheels, makes a venv and runs node: too slow for the quick
#: (unit) tier, so it runs with the integration tiers of ``make test``.
pytestmark = pytest.mark.hub

#: The tests that use the clean clone's build: copying node_modules (400+ MB) and building the
#: panel take one to two minutes on 2 idle cores, several on a busy machine.
BUILD_TIMEOUT = 1200

ROOT = Path(__file__).resolve().parent.parent
LABEXT = ROOT / "labextension"
PREBUILT = LABEXT / "prebuilt"
NAME = "classhub-jupyterlab"
#: Where a wheel puts the panel, under the installation's prefix.
SHARED = f"share/jupyter/labextensions/{NAME}"


def _prebuilt() -> Path:
    if not (PREBUILT / "package.json").exists():
        pytest.fail("labextension/prebuilt is missing: run 'make install' (it builds the JupyterLab "
                    "extension with jlpm; Node.js 18+ is needed to build it, not to install it)")
    return PREBUILT


def clean_clone(dest: Path) -> Path:
    """The checkout's tracked files, as ``git clone`` would give them (no prebuilt panel)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                            capture_output=True, text=True, timeout=60).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is not in a clone of it either
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    assert not (dest / "labextension" / "prebuilt").exists()
    return dest


def build(source: Path, out: Path, *args: str, path: str) -> subprocess.CompletedProcess[str]:
    """``python -m build`` in this venv (no isolated environment: no download), PATH as given."""
    env = {**os.environ, "PATH": path}
    return subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check",
                           "--outdir", str(out), *args, str(source)], cwd=source, env=env,
                          capture_output=True, text=True, timeout=900)


def no_node(tmp: Path) -> str:
    """A PATH without Node.js (the build itself runs this venv's Python by its full path)."""
    empty = tmp / "no-node-bin"
    empty.mkdir(exist_ok=True)
    assert shutil.which("node", path=str(empty)) is None
    return str(empty)


def _names(archive: Path) -> list[str]:
    if archive.suffix == ".whl":
        return zipfile.ZipFile(archive).namelist()
    with tarfile.open(archive) as tar:
        return tar.getnames()


def link_tree(source: Path, target: Path) -> bool:
    """`target` as a copy of the folder `source` whose files are hard links to `source`'s (cp -al);
    a real copy where the two cannot share files (another filesystem). True: linked."""
    target.mkdir(parents=True)
    if subprocess.run(["cp", "-al", f"{source}/.", str(target)], capture_output=True,
                      timeout=600).returncode == 0:
        return True
    subprocess.run(["rm", "-rf", str(target)], check=True, timeout=600)
    subprocess.run(["cp", "-a", f"{source}/.", str(target)], check=True, timeout=600)
    return False


def written_through_links(source: Path, target: Path, since: float) -> list[str]:
    """Files of `target` (made by `link_tree`) still linked to `source`'s and changed after
    `since`: what was written in place in both."""
    written = []
    for folder, _, names in os.walk(target):
        for name in names:
            mine = Path(folder, name)
            theirs = source / mine.relative_to(target)
            try:
                a, b = mine.lstat(), theirs.lstat()
            except FileNotFoundError:
                continue  # added or removed by the build: not shared
            if (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev) and a.st_mtime > since:
                written.append(str(theirs))
    return written


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An sdist built from a clean clone (the panel built on the way), and the wheel built from
    that sdist with no Node.js on the PATH: the two steps of ``python -m build``, which builds its
    wheel from its sdist. One wheel build serves every test here (a second one from the same sdist
    would check nothing more)."""
    if shutil.which("node") is None or not (LABEXT / "node_modules").is_dir():
        pytest.fail("building the panel needs Node.js and labextension/node_modules: run 'make install'")
    clone = clean_clone(tmp_path_factory.mktemp("clone"))
    modules = clone / "labextension" / "node_modules"
    linked = link_tree(LABEXT / "node_modules", modules)
    if (LABEXT / ".yarn").is_dir():  # cp: three times faster than copytree
        subprocess.run(["cp", "-a", f"{LABEXT / '.yarn'}/.", str(clone / "labextension" / ".yarn")],
                       check=True, timeout=600)
    out = tmp_path_factory.mktemp("dist")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    since = time.time() - 1  # mtimes may be rounded down
    done = build(clone, out, "--sdist", path=path)
    written = written_through_links(LABEXT / "node_modules", modules, since) if linked else []
    subprocess.run(["rm", "-rf", str(modules)], check=True, timeout=600)
    assert written == [], ("the panel's build wrote these files of the clone's node_modules in "
                           f"place, and so the checkout's through their hard links: {written[:10]}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (sdist,) = out.glob("classhub-*.tar.gz")
    unpacked = tmp_path_factory.mktemp("sdist")
    with tarfile.open(sdist) as tar:
        # the "data" filter where this Python has it (3.11.4+): our own archive, but no links out
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(unpacked, **safe)
    (source,) = unpacked.iterdir()
    done = build(source, out, "--wheel", path=no_node(unpacked))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (wheel,) = out.glob("classhub-*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.mark.timeout(BUILD_TIMEOUT)
def test_the_sdist_and_the_wheel_of_a_clean_clone_carry_the_panel(dist: dict[str, Path]) -> None:
    wheel = _names(dist["wheel"])
    assert any(n.endswith(f".data/data/{SHARED}/package.json") for n in wheel), wheel
    assert any(f".data/data/{SHARED}/static/remoteEntry." in n for n in wheel), wheel
    # and classhub's JupyterLab settings (no news prompt), built from the sdist, so carried by both
    assert any(n.endswith(".data/data/share/jupyter/lab/settings/overrides.d/classhub.json")
               for n in wheel), wheel
    sdist = _names(dist["sdist"])
    top = sdist[0].split("/")[0]
    assert f"{top}/labextension/prebuilt/package.json" in sdist
    assert any(n.startswith(f"{top}/labextension/prebuilt/static/remoteEntry.") for n in sdist)
    assert not any("/node_modules/" in n for n in sdist)


@pytest.mark.timeout(BUILD_TIMEOUT)
def test_a_wheel_built_from_the_sdist_needs_no_node(dist: dict[str, Path]) -> None:
    """The fixture built the wheel from the sdist with no Node.js on the PATH (`no_node`)."""
    names = _names(dist["wheel"])
    assert any(f".data/data/{SHARED}/static/remoteEntry." in n for n in names), names


def test_a_clean_clone_without_node_stops_with_a_sentence(tmp_path: Path) -> None:
    clone = clean_clone(tmp_path / "clone")
    done = build(clone, tmp_path / "out", "--wheel", path=no_node(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Node.js is not on the PATH: install Node.js 18+ and npm" in out, out[-3000:]


@pytest.fixture(scope="module")
def wheel(dist: dict[str, Path]) -> Path:
    return dist["wheel"]


@pytest.mark.timeout(BUILD_TIMEOUT)
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
