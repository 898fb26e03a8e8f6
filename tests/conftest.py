"""Shared fixtures. The hub fixtures start real ``classhub local`` processes (see hubproc.py)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import kubernetes
import pytest
from hypothesis import HealthCheck, settings

from tests.hubproc import HubSession, LocalHub, hub_with_config, proxy_available
from tests.scheduling import SlowestModulesFirst

# Property tests run beside hub processes on 2 shared cores: how fast examples are generated says
# nothing about the code under test, so neither a deadline nor the "too slow" health check applies.
settings.register_profile("classhub", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("classhub")

IN_CI = bool(os.environ.get("CI"))


#: The suite's tiers (``pytest -m unit`` is the quick one; ``make test`` runs them all), marked on
#: the tests themselves (``pytestmark`` in a module, a decorator where a module mixes tiers):
#: unit: no process of ours (the classhub service's app in the test's own event loop counts as
#: unit: tests/inproc.py); hub: a real JupyterHub process, or other classhub processes of the
#: test's (the job loop killed and restarted); cluster: the fake Kubernetes API server (with or
#: without a hub); browser: Chromium driven by Playwright.
TIERS = ("unit", "hub", "cluster", "browser")
#: Fixtures that start a hub, a fake cluster or a browser: a test asking for one is not a unit test.
_PROCESS_FIXTURES = frozenset({"hub_root", "demo_hub", "login", "hub", "shared_hubs", "cluster",
                               "page", "browser"})


def _tier_problems(items: list[pytest.Item]) -> list[str]:
    """What is wrong with the tests' tier marks, a sentence per module saying what to change."""
    untiered: dict[str, int] = {}
    problems = []
    for item in items:
        marked = [t for t in TIERS if item.get_closest_marker(t)]
        needs = sorted(_PROCESS_FIXTURES & set(item.fixturenames))
        if not marked:
            path = item.nodeid.split("::", 1)[0]
            untiered[path] = untiered.get(path, 0) + 1
        elif marked == ["unit"] and needs:
            problems.append(f"{item.nodeid} is marked unit but uses {', '.join(needs)}, which start "
                            f"processes: mark it hub, cluster or browser")
    return [f"{path}: {count} test(s) without a tier: add `pytestmark = pytest.mark.unit` (or hub, "
            f"cluster, browser: see TIERS in tests/conftest.py) to the module, or mark each test"
            for path, count in untiered.items()] + problems


#: The slowest modules, longest first (seconds on 2 cores, from a full run's junit report). `make
#: test` runs modules on several workers (pytest-xdist, ``--dist loadfile``), each module on one
#: worker, handed out in collection order (tests/scheduling.py): starting the longest first keeps
#: one long module from running alone at the end (longest-processing-time-first). Update it when a
#: module grows.
SLOWEST_FIRST = (  # seconds: the larger of two CI runs' reports (--durations, junit)
    "test_quota_spawns",  # ~285 (estimate): 368 before one hub per database and stand-in servers
    "test_helm_chart_hub",  # ~250 since it restarts the hub mid-job for both job kinds (estimate)
    "test_labextension_install",  # ~200 (estimate): the panel, an sdist and a wheel of a clean clone;
    # 36-59 alone on 2 cores at load 4 with node_modules linked, 41-70 copied (2026-12-04)
    "test_local_gpu_profiles",  # 162
    "test_browser_lab",  # ~150: one hub (was two); the read-only journey watches the owner's log 10 s
    "test_kube_spawner",  # 137
    "test_service_fuzz",  # ~120 expected: 205 before issue 29 moved 75 s of CPU out, 130 at 6 examples
    "test_browser_pages",  # 108
    "test_culler_local",  # 92
    "test_autograde_hub",  # 87 alone: three gradings, then competition notebooks and scoring scripts
    "test_browser_course_data",  # 85: both run modes' journeys (local 31, Kubernetes 50), 200 MB each
    "test_jobs_restart",  # 92
    "test_hub_versions",  # ~90: installs JupyterHub 5 beside the venv and starts a hub (estimate)
    "test_preemption_kube_hub",  # estimate
    "test_preemption_hub",  # estimate
    "test_culler_kube",  # 86
    "test_bench_storm",  # 70
    "test_sharing_hub",  # 65
    "test_templates_e2e",  # 63
    "test_templates_kube",  # 60
    "test_browser_competitions",  # 54 alone, with a notebook's job
    "test_assignments_hub",  # ~55 on a loaded machine (estimate)
    "test_hubapi_pagination",  # 52
    "test_browser_jobs",  # ~50 with the waiting job's page (estimate: 32 s on a quiet machine)
    "test_browser_cluster_kube",  # ~50 with the picker and the fake Prometheus (estimate)
    "test_browser_cluster",  # ~40 with the home's live job count and the picker (estimate)
    "test_assignments_kube",  # ~50 (estimate)
    "test_browser_assignments",  # ~30 alone with its two gradings, more beside other workers (estimate)
    "test_service_courses",  # 42
    "test_coursedata_hub",  # ~30 (estimate)
    "test_autograde_units",  # 15 alone: eight notebooks run by real kernels (estimate ~25 loaded)
    "test_jobs_hub",  # 35
    "test_shutdown",  # 35
    "test_kubefake_spawner_paths",  # 34
)
_TIER_ORDER = {"browser": 0, "hub": 1, "cluster": 2, "unit": 3}


def _rank(item: pytest.Item) -> tuple[int, int]:
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
    if module in SLOWEST_FIRST:
        return (0, SLOWEST_FIRST.index(module))
    return (1, min(_TIER_ORDER[t] for t in TIERS if item.get_closest_marker(t)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every test's tier (see TIERS); order modules slowest first (SLOWEST_FIRST, then the
    tiers that start processes), each module's tests as written."""
    problems = _tier_problems(items)
    if problems:
        raise pytest.UsageError("\n".join(problems))
    rank: dict = {}
    for item in items:  # a module's rank is its heaviest test's: one hub test makes it a hub module
        rank[item.module] = min(rank.get(item.module, (2, 0)), _rank(item))
    items.sort(key=lambda item: rank[item.module])  # stable: a module keeps its tests' order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` hands modules out in collection order (see tests/scheduling.py)."""
    if config.getvalue("dist") == "loadfile":
        return SlowestModulesFirst(config, log)
    return None


@pytest.fixture(autouse=True)
def _pieces_a_tier_needs(request: pytest.FixtureRequest) -> None:
    """A test that starts a hub fails (never skips) with what to install when the proxy or
    Node.js is missing; the unit tier runs without them."""
    if request.node.get_closest_marker("unit") is None and not proxy_available():
        pytest.fail("configurable-http-proxy or Node.js is missing: run 'make test' (it installs the "
                    "proxy into .venv/chp) on a machine with Node.js 18+")


@pytest.fixture(scope="session")
def hub_root() -> Path:
    """A world-traversable scratch folder, so --system-users accounts can reach their homes."""
    root = Path(tempfile.mkdtemp(prefix="classhub-test-"))
    root.chmod(0o755)
    return root


class SharedHubs:
    """Started hubs by configuration, for the whole session.

    Why: a hub start costs 5-20 s on two busy cores, and many modules need a hub with the same
    settings (the demo hub, or one extra config). Modules whose tests only touch their own users
    and clean up after themselves share one hub per configuration instead of starting their own;
    a module that stops, restarts or breaks its hub keeps a fixture of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hubs: dict[tuple[str, tuple[tuple[str, str], ...]], LocalHub] = {}

    def get(self, config: str = "", env: Mapping[str, str] | None = None) -> LocalHub:
        """The session's hub whose data-dir ``jupyterhub_config.py`` is ``config`` and whose
        environment adds ``env``; started on first use (again if a test stopped it)."""
        key = (config, tuple(sorted((env or {}).items())))
        hub = self.hubs.get(key)
        if hub is None or hub.proc is None or hub.proc.poll() is not None:
            hub = hub_with_config(self.root, f"shared-{len(self.hubs)}-{os.urandom(3).hex()}", config,
                                  env=dict(env or {}))
            self.hubs[key] = hub
        return hub

    def stop(self) -> None:
        for hub in self.hubs.values():
            hub.stop()


@pytest.fixture(scope="session")
def shared_hubs(hub_root: Path) -> Iterator[SharedHubs]:
    """``shared_hubs.get(config, env)`` -> the session's hub of that configuration."""
    hubs = SharedHubs(hub_root)
    yield hubs
    hubs.stop()


@pytest.fixture(scope="session")
def demo_hub(shared_hubs: SharedHubs) -> LocalHub:
    """One demo hub for the tests that only read or start servers of their own users."""
    return shared_hubs.get()


@pytest.fixture
def login(demo_hub: LocalHub):
    """``login("student1")`` -> a logged-in browser-like session on the demo hub."""

    def _login(username: str) -> HubSession:
        return HubSession(demo_hub, username)

    return _login


@pytest.fixture
def v1(cluster):
    """The official sync client on the module's fake cluster (each kubefake test module defines
    its own ``cluster`` fixture)."""
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


# The browser tier's fixtures (Chromium via Playwright) and the hook that closes the worker's
# Chromium after its last browser module of a run: tests/browser.py.
from tests.browser import (  # noqa: E402,F401
    _chromium_closed_at_the_end,
    browser,
    page,
    pytest_runtest_teardown,
)

# The classhub service's app in the test's event loop (``service``): tests/inproc.py.
from tests.inproc import service, service_sections  # noqa: E402,F401
