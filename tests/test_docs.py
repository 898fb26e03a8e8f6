"""The documentation site (issue 33): it builds with warnings as errors, its configuration
reference lists every setting of classhub's classes, and the references code makes to it resolve.

- The configuration reference is generated from the traits (docs/_ext/classhub_docs.py). Here the
  built page is compared with the classes found in the code, independently of that generator's
  list: every class of hub_ext, spawner and culler with a ``config=True`` trait of its own must be
  on the page with each such trait. A new configurable class nobody added fails this.
- .ci/check_refs.py passes on the checkout and fails on a deliberately broken copy: a comment
  citing a heading that is not there, a rule that does not exist, a missing page, and a link
  between pages to a missing page or heading.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from traitlets import HasTraits

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OWN = ("hub_ext", "spawner", "culler")


def check_refs() -> ModuleType:
    """.ci/check_refs.py as a module (.ci is not a package)."""
    spec = importlib.util.spec_from_file_location("check_refs", ROOT / ".ci" / "check_refs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def configurable_classes() -> dict[str, list[str]]:
    """Every class of classhub's packages with config traits it defines: dotted name -> traits
    (its own and its classhub mixins'), found by importing every module."""
    found: dict[str, list[str]] = {}
    for package in OWN:
        root = importlib.import_module(package)
        names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")]
        for name in names:
            if name.endswith("__main__") or ".migrations" in name:  # scripts, not libraries
                continue
            module = importlib.import_module(name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ != name or not issubclass(cls, HasTraits):
                    continue
                traits = sorted({t for klass in cls.__mro__ if klass.__module__.split(".")[0] in OWN
                                 and issubclass(klass, HasTraits)
                                 for t in klass.class_own_traits(config=True)})
                if traits and not cls.__name__.endswith("Mixin"):
                    found[f"{cls.__module__}.{cls.__name__}"] = traits
    return found


@pytest.mark.hub  # builds the whole site (about a minute on 2 cores), like the packaging tests
def test_the_site_builds_and_the_configuration_reference_lists_every_trait(tmp_path: Path) -> None:
    out = tmp_path / "html"
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html",
                           "-q", "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    page = (out / "reference" / "configuration.html").read_text()
    documented = set(re.findall(r'<dt class="sig sig-object py" id="([\w.]+)">', page))
    classes = configurable_classes()
    assert "spawner.kube.ClasshubKubeSpawner" in classes and "culler.app.ClasshubCuller" in classes
    missing = [f"c.{dotted.rsplit('.', 1)[1]}.{trait}" for dotted, traits in classes.items()
               for trait in traits if f"{dotted}.{trait}" not in documented]
    assert not missing, f"not in docs/reference/configuration: {missing}"
    # only classhub's own: KubeSpawner's hundreds of traits are KubeSpawner's docs
    assert "spawner.kube.ClasshubKubeSpawner.profile_list" not in documented
    # the REST reference is rendered from the served document, the CLI from its parser
    rest = (out / "reference" / "rest-api.html").read_text()
    assert "/api/jobs/{job}/cancel" in rest and "/api/courses/{course}/roster" in rest
    assert "upgrade-db" in (out / "reference" / "cli.html").read_text()
    assert "classhub_job_queue_length" in (out / "reference" / "metrics.html").read_text()


@pytest.mark.unit
def test_every_citation_and_link_in_the_checkout_resolves() -> None:
    refs = check_refs()
    assert refs.check_citations(ROOT) == []
    assert refs.check_links(ROOT) == []


@pytest.mark.unit
def test_a_broken_copy_fails_with_each_stale_reference_named(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    shutil.copytree(DOCS, copy / "docs", ignore=shutil.ignore_patterns("_build", "_generated"))
    shutil.copy2(ROOT / "README.md", copy / "README.md")
    (copy / "hub_ext").mkdir()
    page = "docs/admins/" + "security.md"  # written in two pieces: this file is checked too
    (copy / "hub_ext" / "stale.py").write_text(
        f'"""Cites {page}, "Security\n'
        f'model", rule 4 (fine), then {page}, "Secruity model" and\n'
        f"{page}, \"Security model\", rule 42; docs/" + "gone.md too."
        + "\n\nAlso docs/" + 'architecture.md, rule 99."""\n')
    (copy / "docs" / "broken.md").write_text("# Broken\n\n[a](teachers/nothere.md) "
                                             "[b](admins/security.md#no-such-heading)\n")
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "check_refs.py"), str(copy)],
                          capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert 'hub_ext/stale.py:2: docs/admins/security.md has no heading "Secruity model"' in out, out
    assert "hub_ext/stale.py:3: docs/admins/security.md has no rule 42" in out, out
    assert "docs/" + "gone.md does not exist" in out, out
    assert "docs/architecture.md has no rule 99" in out, out
    broken = "docs/" + "broken.md:3: link to"
    assert f"{broken} teachers/nothere.md: teachers/nothere.md does not exist" in out, out
    assert f"{broken} admins/security.md#no-such-heading: no heading" in out, out
    assert not re.search(r"no rule 4\b", out)  # the right citation across two lines is not reported
    assert "fix the citation" in done.stderr


@pytest.mark.unit
def test_every_journey_of_the_tutorial_is_a_browser_tests_journey() -> None:
    """The tutorial (docs/tutorials/first-class.md) and the browser tests cannot drift apart:
    each journey it walks ends a browser test with `follows_the_tutorial` (which compares the
    clicks and the buttons), and every journey a test follows is in the tutorial."""
    from tests.tutorial import journeys

    called = set()
    for path in (ROOT / "tests").glob("test_browser_*.py"):
        called |= set(re.findall(r'follows_the_tutorial\(clicks, "(\w+)"\)', path.read_text()))
    walked = set(journeys())
    assert walked == called, (f"in the tutorial, no test: {sorted(walked - called)}; "
                              f"followed by a test, not in the tutorial: {sorted(called - walked)}")
    assert all(j.clicks > 0 for j in journeys().values())


@pytest.mark.unit
def test_a_tutorial_journey_that_states_no_count_or_never_ends_is_refused() -> None:
    from tests.tutorial import journeys

    with pytest.raises(ValueError, match="must state its clicks once"):
        journeys("% journey: A\npress **Go**\n% end journey: A\n")
    with pytest.raises(ValueError, match="must state its clicks once"):
        journeys("% journey: A\n**Go** (1 click), then 2 clicks\n% end journey: A\n")
    with pytest.raises(ValueError, match="never ends"):
        journeys("% journey: A\n**Go** (1 click)\n")
    assert journeys("% journey: A\n**Go** (1 click)\n% end journey: A\n")["A"].buttons == ("Go",)


@pytest.mark.unit
def test_a_journey_with_another_count_or_without_a_named_button_fails() -> None:
    """What a browser test's clicks look like when it drifted from the tutorial."""
    from types import SimpleNamespace

    from tests.tutorial import follows_the_tutorial

    follows_the_tutorial(SimpleNamespace(count=3, labels=["Jobs", "Submit", "Logs"]),
                         "STUDENT_SUBMITS_AND_READS_LOGS")
    with pytest.raises(AssertionError, match="clicked 4 times"):
        follows_the_tutorial(SimpleNamespace(count=4, labels=["Jobs", "Submit", "Logs", "Logs"]),
                             "STUDENT_SUBMITS_AND_READS_LOGS")
    with pytest.raises(AssertionError, match="says to press \\['Logs'\\]"):
        follows_the_tutorial(SimpleNamespace(count=3, labels=["Jobs", "Submit", "Log"]),
                             "STUDENT_SUBMITS_AND_READS_LOGS")
