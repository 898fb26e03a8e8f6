"""Shared fixtures. The hub fixtures start real ``classhub local`` processes (see hubproc.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import kubernetes
import pytest
from hypothesis import HealthCheck, settings

from tests.hubproc import HubSession, LocalHub, proxy_available

# Property tests run beside hub processes on 2 shared cores: how fast examples are generated says
# nothing about the code under test, so neither a deadline nor the "too slow" health check applies.
settings.register_profile("classhub", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("classhub")

IN_CI = bool(os.environ.get("CI"))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fail at once, with what to install, when a piece the suite needs is missing."""
    if not proxy_available():
        pytest.exit(
            "configurable-http-proxy or Node.js is missing: run 'make test' (it installs the "
            "proxy into .venv/chp) on a machine with Node.js 18+",
            returncode=1,
        )


@pytest.fixture(scope="session")
def hub_root() -> Path:
    """A world-traversable scratch folder, so --system-users accounts can reach their homes."""
    root = Path(tempfile.mkdtemp(prefix="classhub-test-"))
    root.chmod(0o755)
    return root


@pytest.fixture(scope="session")
def demo_hub(hub_root: Path):
    """One demo hub for the tests that only read or start servers of their own users."""
    hub = LocalHub(data_dir=hub_root / "demo").start()
    yield hub
    hub.stop()


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
