"""images/: the Dockerfiles name only images and packages that exist, with versions pinned.

No Docker daemon and no container registry are reachable where these tests run, so the images
are not built here. What is checked instead, by parsing the Dockerfiles:

- every ``FROM`` names an exact tag (never ``latest``) listed in tests/data/images/base-images.yaml
  with where it is published; the hub image's tag is the z2jh chart version the helm values are
  validated against; where a registry answers, the tag is looked up there too;
- every ``pip install`` is constrained by images/constraints.txt, every package it names is
  pinned there (``name==version``), and each pinned version exists on PyPI (its JSON API) or,
  when PyPI cannot be reached, is the version installed in the environment the tests run in;
- classhub's own requirements (setup.cfg) are pinned to the versions this test suite runs with;
- each classhub image carries the single-user extension's config and installs the classhub wheel
  (with the JupyterLab panel), built by the same first stage in every Dockerfile.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import urllib.error
import urllib.request
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
IMAGES = REPO / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
USER_IMAGES = [p for p in DOCKERFILES if p.parent.name != "hub"]
EVIDENCE = yaml.safe_load((REPO / "tests" / "data" / "images" / "base-images.yaml").read_text())
SINGLEUSER_CONFIG = "/etc/jupyter/jupyter_server_config.d/classhub-singleuser.json"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = " ".join((pending + line).split()), ""  # whitespace-insensitive
        word, _, rest = line.partition(" ")
        result.append((word.upper(), rest.strip()))
    assert not pending, f"{path}: a continuation line ends the file"
    return result


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The build stages: each starts with its FROM."""
    found: list[list[tuple[str, str]]] = []
    for item in instructions(path):
        if item[0] == "FROM":
            found.append([])
        assert found, f"{path}: an instruction before the first FROM"
        found[-1].append(item)
    return found


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (IMAGES / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.]+)", line)
            assert match, f"not an exact pin: {line!r}"
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_installs(path: Path) -> list[list[str]]:
    """The argument lists of every ``pip install`` in the Dockerfile's RUN instructions."""
    found = []
    for word, rest in instructions(path):
        if word != "RUN":
            continue
        for command in re.split(r"&&|;", rest):
            args = shlex.split(command)
            if args[:2] == ["pip", "install"]:
                found.append(args[2:])
    return found


@cache
def pypi_releases(name: str) -> set[str] | None:
    """Versions PyPI has of ``name`` (its JSON API), or None when PyPI cannot be reached."""
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=15) as reply:
            return set(json.load(reply)["releases"])
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return set()
        return None
    except (urllib.error.URLError, TimeoutError, OSError):
        return None


def test_there_is_a_hub_image_and_the_user_images():
    names = {p.parent.name for p in DOCKERFILES}
    assert names == {"hub", "cpu", "pytorch", "tensorflow", "desktop", "vscode"}
    for path in DOCKERFILES:
        assert (path.parent / "Dockerfile.dockerignore").exists(), path


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_base_images_are_pinned_and_published(path):
    for stage in stages(path):
        image = stage[0][1].split()[0]
        assert ":" in image.rsplit("/", 1)[-1], f"{path}: {image} has no tag"
        tag = image.rsplit(":", 1)[1]
        assert "latest" not in tag and "$" not in image, f"{path}: {image} is not an exact tag"
        assert image in EVIDENCE["images"], f"{path}: {image} is not in tests/data/images/base-images.yaml"


def test_the_hub_image_is_the_charts_hub_image():
    chart_version = re.search(r"tag:\s+(\S+)", (REPO / "tests/data/z2jh/SOURCE").read_text()).group(1)
    final = stages(IMAGES / "hub" / "Dockerfile")[-1]
    assert final[0] == ("FROM", f"quay.io/jupyterhub/k8s-hub:{chart_version}")
    assert final[-1] == ("USER", "jovyan")  # the chart's hub pod runs as the image's user


def test_every_image_builds_classhub_with_the_same_wheel_stage():
    first = [stages(p)[0] for p in DOCKERFILES]
    assert all(stage == first[0] for stage in first)
    assert first[0][0] == ("FROM", "python:3.12-bookworm AS classhub-wheel")
    assert ("RUN", "cd /src/labextension && jlpm install && jlpm build:prod "
                   "&& python -m build --wheel --outdir /wheels /src") in first[0]
    for path in DOCKERFILES:
        installs = pip_installs(path)
        assert any("/tmp/wheels/classhub-*.whl" in args for args in installs), path


@pytest.mark.parametrize("path", USER_IMAGES, ids=lambda p: p.parent.name)
def test_user_images_enable_the_single_user_extension(path):
    final = stages(path)[-1]
    copies = [args for word, args in final if word == "COPY"]
    assert f"images/singleuser/classhub-singleuser.json {SINGLEUSER_CONFIG}" in copies
    config = json.loads((IMAGES / "singleuser" / "classhub-singleuser.json").read_text())
    assert config["ServerApp"]["jpserver_extensions"]["hub_ext.singleuser"] is True
    installed = {a for args in pip_installs(path) for a in args}
    assert "jupyterhub" in installed  # jupyterhub-singleuser of the hub's version
    assert final[-1][0] == "RUN" and any(word == "USER" for word, _ in final)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_pip_install_is_pinned(path):
    pins = constraints()
    for args in pip_installs(path):
        assert "-c" in args and args[args.index("-c") + 1] == "/tmp/constraints.txt", (path, args)
        named = [a for a in args if not a.startswith("-") and a != "/tmp/constraints.txt"
                 and not a.endswith(".whl")]
        for spec in named:
            name = canonical(Requirement(spec).name)
            assert name in pins, f"{path}: {spec} is not pinned in images/constraints.txt"


def test_classhubs_requirements_are_pinned_to_the_tested_versions():
    pins = constraints()
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    for line in setup["options"]["install_requires"].split("\n"):
        if not line.strip():
            continue
        req = Requirement(line.strip())
        name = canonical(req.name)
        assert name in pins, f"{req.name} (a classhub requirement) is not pinned for the images"
        tested = version(req.name)
        assert pins[name] == tested, f"{req.name}: the images pin {pins[name]}, the tests run {tested}"
        assert req.specifier.contains(pins[name]), f"{req.name}=={pins[name]} does not satisfy {req}"


@pytest.mark.parametrize("name", sorted(constraints()))
def test_each_pinned_version_exists(name):
    pinned = constraints()[name]
    releases = pypi_releases(name)
    if releases is not None:
        assert pinned in releases, f"PyPI has no {name}=={pinned}"
        return
    try:  # PyPI unreachable: the environment the tests run in is the evidence
        installed = version(name)
    except PackageNotFoundError:
        if os.environ.get("CI"):
            pytest.fail(f"PyPI unreachable and {name} is not installed: cannot check {name}=={pinned}")
        pytest.skip(f"PyPI unreachable and {name} not installed here")
    assert installed == pinned, f"PyPI unreachable; installed {name} is {installed}, pinned {pinned}"


def test_the_code_server_download_is_pinned():
    path = IMAGES / "vscode" / "Dockerfile"
    args = [a for w, a in instructions(path) if w == "ARG"]
    assert "CODE_SERVER_VERSION=4.133.0" in args
    assert "code-server 4.133.0" in EVIDENCE["downloads"]


def registry_has(image: str) -> bool | None:
    """Whether the registry has the tag (anonymous pull token), None when it cannot be reached."""
    repo, tag = image.rsplit(":", 1)
    if repo.startswith("quay.io/"):
        host, name = "quay.io", repo[len("quay.io/"):]
        auth = f"https://quay.io/v2/auth?service=quay.io&scope=repository:{name}:pull"
    else:
        host, name = "registry-1.docker.io", repo if "/" in repo else f"library/{repo}"
        auth = f"https://auth.docker.io/token?service=registry.docker.io&scope=repository:{name}:pull"
    try:
        with urllib.request.urlopen(auth, timeout=10) as reply:
            token = json.load(reply)["token"]
        request = urllib.request.Request(
            f"https://{host}/v2/{name}/manifests/{tag}", method="HEAD",
            headers={"Authorization": f"Bearer {token}", "Accept": ", ".join((
                "application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json",
                "application/vnd.docker.distribution.manifest.v2+json"))})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status == 200
    except urllib.error.HTTPError as e:
        return False if e.code == 404 else None
    except (urllib.error.URLError, TimeoutError, OSError, KeyError, ValueError):
        return None


@pytest.mark.parametrize("image", sorted(EVIDENCE["images"]))
def test_base_images_are_in_their_registries(image):
    """Only where a registry answers (not on the machines these tests were written on)."""
    found = registry_has(image)
    if found is None:
        pytest.skip(f"the registry of {image} cannot be reached from here; see base-images.yaml")
    assert found, f"{image} is not in its registry"
