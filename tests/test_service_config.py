"""The service's settings: traits from a config file, the command line or the environment, and a
sentence at start for a value it cannot use (never a traceback at first use)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hub_ext.envtraits import ConfigError, apply_env
from hub_ext.service.app import ClasshubService


def service(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLASSHUB_", "JUPYTERHUB_"))}
    return subprocess.run([sys.executable, "-m", "hub_ext.service", *args], env={**base, **env},
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


@pytest.mark.parametrize(("var", "value", "says"), [
    ("CLASSHUB_RECONCILE_INTERVAL", "soon", "ClasshubService.reconcile_interval"),
    ("CLASSHUB_RECONCILE_GRACE", "-5", "must be a number of seconds > 0"),
    ("CLASSHUB_METRICS_AUTH", "maybe", "ClasshubService.authenticate_metrics"),
    ("CLASSHUB_MODE", "cloud", "ClasshubService.mode"),
])
def test_a_value_the_service_cannot_use_stops_it_at_start_with_a_sentence(tmp_path, var, value, says):
    done = service(tmp_path, {"CLASSHUB_DB_URL": f"sqlite:///{tmp_path / 'c.sqlite'}", var: value})
    assert done.returncode != 0
    assert f"{var}={value!r}" in done.stderr and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_without_a_database_the_service_says_how_to_start_it(tmp_path):
    done = service(tmp_path, {})
    assert done.returncode != 0 and "CLASSHUB_DB_URL is not set" in done.stderr
    assert "Traceback" not in done.stderr


def test_config_file_and_command_line_win_over_the_environment(tmp_path):
    config = tmp_path / "classhub_service_config.py"
    config.write_text("c.ClasshubService.reconcile_interval = 7\nc.ClasshubService.share_interval = 2\n")
    env = {"CLASSHUB_DB_URL": "sqlite:///x.sqlite", "CLASSHUB_SERVICE_CONFIG": str(config),
           "CLASSHUB_RECONCILE_INTERVAL": "30", "CLASSHUB_SHARE_INTERVAL": "9",
           "CLASSHUB_RECONCILE_GRACE": "45"}
    app = ClasshubService()
    old = dict(os.environ)
    try:
        os.environ.update(env)
        app.initialize(["--ClasshubService.share_interval=3"])
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert app.reconcile_interval == 7  # the file
    assert app.share_interval == 3  # the command line
    assert app.reconcile_grace == 45  # the environment, where nothing else says


def test_apply_env_names_the_variable():
    app = ClasshubService()
    with pytest.raises(ConfigError, match="CLASSHUB_SHARE_INTERVAL='x'"):
        apply_env(app, {"CLASSHUB_SHARE_INTERVAL": "x"})


def test_a_template_limit_that_is_not_a_number_is_refused_not_replaced(tmp_path):
    """Before, CLASSHUB_TEMPLATE_MAX_BYTES=4G silently meant the 4 GiB default."""
    done = service(tmp_path, {"CLASSHUB_DB_URL": f"sqlite:///{tmp_path / 'c.sqlite'}",
                              "CLASSHUB_TEMPLATE_MAX_BYTES": "4G"})
    assert done.returncode != 0
    assert "CLASSHUB_TEMPLATE_MAX_BYTES='4G'" in done.stderr and "max_bytes" in done.stderr
