"""Template storage and the seeding command (hub_ext.backends.templates, templates_cli).

What a user notices: a published version that changes under the students' feet, a folder over the
limits that fills the disk, a stored manifest someone edited on the volume, the Kubernetes seeding
container that does something else than the local spawner (it is run here for real, as a process,
on a local folder).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from traitlets.config import Config

from hub_ext.backends.templates import ClasshubTemplates, Stager, TemplateStorage
from hub_ext.core.seeding import SeedLimits, TemplateRefused
from hub_ext.envtraits import ConfigError

pytestmark = pytest.mark.unit


def publish(storage: TemplateStorage, files: dict[str, str], location: str) -> str:
    staged = storage.staging()
    stager = Stager(staged, SeedLimits())
    for path, text in files.items():
        parent = path.rpartition("/")[0]
        if parent and not (staged / "files" / parent).exists():
            stager.folder(parent)
        stager.file(path, text.encode())
    _, digest = storage.seal(staged, SeedLimits())
    storage.commit(staged, location)
    return digest


def seed(root: Path, location: str, digest: str, home: Path, version: int,
         *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hub_ext.backends.templates_cli", "seed", "--root", str(root),
         "--location", location, "--manifest-sha256", digest, "--home", str(home), "--course", "cs101",
         "--name", "lab", "--version", str(version), *extra],
        capture_output=True, text=True, timeout=60)


def test_the_seeding_command_seeds_reseeds_and_refuses_a_tampered_version(tmp_path: Path):
    storage = TemplateStorage(tmp_path / "templates")
    v1 = publish(storage, {"README.md": "v1\n", "data/x.csv": "1\n", "ñandú.txt": "ñ\n"}, "c1/t1/v1")
    home = tmp_path / "home"
    home.mkdir()
    done = seed(storage.root, "c1/t1/v1", v1, home, 1)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["summary"] == {"added": 4}
    assert (home / "ñandú.txt").read_text() == "ñ\n"
    assert json.loads((home / ".classhub" / "template.json").read_text())["version"] == "1"

    (home / "README.md").write_text("mine\n")
    v2 = publish(storage, {"README.md": "v2\n", "data/x.csv": "1\n", "ñandú.txt": "ñ\n", "new.py": ""},
                 "c1/t1/v2")
    done = seed(storage.root, "c1/t1/v2", v2, home, 2)
    assert done.returncode == 0, done.stderr
    assert (home / "README.md").read_text() == "mine\n"
    assert (home / "README.template-v2.md").read_text() == "v2\n"
    assert (home / "new.py").exists()

    # on_start for another template: nothing happens
    done = seed(storage.root, "c1/t1/v2", v2, home, 2, "--only-if-from", "cs101/other")
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["skipped"] is True

    # someone edits the stored manifest on the volume: refused, the home untouched
    before = sorted(p.name for p in home.iterdir())
    manifest = storage.root / "c1/t1/v2/manifest.json"
    manifest.write_text(manifest.read_text().replace("new.py", "evil.py"))
    done = seed(storage.root, "c1/t1/v2", v2, home, 2)
    assert done.returncode == 2 and "not the manifest that was published" in done.stderr
    assert sorted(p.name for p in home.iterdir()) == before


def test_versions_are_never_replaced(tmp_path: Path):
    storage = TemplateStorage(tmp_path)
    publish(storage, {"a.txt": "1"}, "c1/t1/v1")
    with pytest.raises(FileExistsError):
        publish(storage, {"a.txt": "2"}, "c1/t1/v1")
    assert (tmp_path / "c1/t1/v1/files/a.txt").read_text() == "1"


def test_stager_limits_and_names(tmp_path: Path):
    storage = TemplateStorage(tmp_path)
    stager = Stager(storage.staging(), SeedLimits(max_files=3, max_bytes=10, max_depth=3))
    stager.file("a.txt", b"12345")
    with pytest.raises(TemplateRefused, match="larger than 10 bytes"):
        stager.file("b.txt", b"123456")
    for bad in ("../x", "/etc/passwd", "a//b", "a/./b"):
        with pytest.raises(TemplateRefused):
            stager.file(bad, b"")
    with pytest.raises(TemplateRefused, match="deeper"):
        stager.file("a/b/c/d", b"")
    stager.file("c.txt", b"")
    stager.file("d.txt", b"")  # refused ones were not counted: this is the third
    with pytest.raises(TemplateRefused, match="more than 3"):
        stager.file("e.txt", b"")


def test_limits_come_from_traits_and_a_retired_variable_is_refused(monkeypatch):
    """Traits only (docs/configuration.md): the old variable, still set, stops with the trait to
    set instead rather than being read or silently ignored."""
    config = Config()
    config.ClasshubTemplates.max_files = 123
    config.ClasshubTemplates.max_bytes = 4567
    settings = ClasshubTemplates(config=config)
    assert (settings.limits.max_files, settings.limits.max_bytes) == (123, 4567)
    assert ClasshubTemplates(max_files=5).limits.max_files == 5
    monkeypatch.setenv("CLASSHUB_TEMPLATE_MAX_FILES", "123")
    with pytest.raises(ConfigError, match=r"CLASSHUB_TEMPLATE_MAX_FILES is set, but classhub no "
                       r"longer reads it: set c\.ClasshubTemplates\.max_files in jupyterhub_config"):
        ClasshubTemplates(config=config)
    assert "refuses larger" in ClasshubTemplates.class_traits()["max_bytes"].help
