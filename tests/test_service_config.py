"""The services' settings: traits set in the hub's jupyterhub_config.py and handed to each service
by configure() (docs/configuration.md, "Configuration: one channel, traits"), the service's own
config file and command line; a sentence at start for a value a service cannot use (never a
traceback at first use), and for a retired CLASSHUB_* variable still set (never silently
ignored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from traitlets.config import Config

from culler.app import ClasshubCuller
from hub_ext.config import CULLER_NAME, SERVICE_NAME, SERVICE_SECTIONS, configure
from hub_ext.envtraits import CONFIG_ENV, ConfigError, apply_env
from hub_ext.service.app import ClasshubService
from hub_ext.service.app import main as service_main
from tests.cli_inproc import Ran, call_main

pytestmark = pytest.mark.unit


def service(tmp_path: Path, env: dict[str, str], *args: str,
            module: str = "hub_ext.service") -> subprocess.CompletedProcess:
    """``python -m module`` as the hub starts it, with only ``env`` of the classhub and hub
    variables."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLASSHUB_", "JUPYTERHUB_"))}
    return subprocess.run([sys.executable, "-m", module, *args], env={**base, **env},
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def service_refusal(env: dict[str, str]) -> Ran:
    """The service's start with only ``env`` of the classhub and hub variables, its main() in this
    process (tests/cli_inproc.py: a service process costs 1.3 s of CPU in imports; the tests
    above and below run it as a process, with the same main()). Settings are refused before it
    would serve: a start that gets that far fails the test rather than serving."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLASSHUB_", "JUPYTERHUB_"))}
    served = AssertionError("the service started instead of refusing its settings")
    ClasshubService.clear_instance()  # main() makes the process's one instance: a fresh one
    try:
        with mock.patch.object(ClasshubService, "start", side_effect=served):
            return call_main(service_main, [], {**base, **env})
    finally:
        ClasshubService.clear_instance()


def hub_config(tmp_path: Path, mode: str = "kubernetes") -> Config:
    c = Config()
    configure(c, mode=mode, db_url=f"sqlite:///{tmp_path / 'c.sqlite'}", freeze_heap=False)
    return c


def handed_env(c: Config, name: str = SERVICE_NAME) -> dict[str, str]:
    """The environment the hub starts service `name` with (what configure() wrote in its
    definition), once the rest of the configuration is set, as the hub hands it over at start."""
    from hub_ext.config import hand_over_sections

    hand_over_sections(c, c.JupyterHub.services)
    spec = next(s for s in c.JupyterHub.services if s["name"] == name)
    return dict(spec["environment"])


def db_config(tmp_path: Path, **service: object) -> dict[str, str]:
    """The environment of a service the hub handed only its store (and ``service`` settings)."""
    section = {"db_url": f"sqlite:///{tmp_path / 'c.sqlite'}", **service}
    return {CONFIG_ENV: json.dumps({"ClasshubService": section})}


@pytest.mark.parametrize(("var", "setting"), [
    ("CLASSHUB_RECONCILE_INTERVAL", "ClasshubService.reconcile_interval"),
    ("CLASSHUB_METRICS_AUTH", "ClasshubService.authenticate_metrics"),
    ("CLASSHUB_DB_URL", "ClasshubService.db_url"),
    ("CLASSHUB_SERVICE_CONFIG", "ClasshubService.config_file"),
    ("CLASSHUB_TEMPLATE_MAX_BYTES", "ClasshubTemplates.max_bytes"),
    ("CLASSHUB_JOB_INTERVAL", "ClasshubJobs.interval"),
])
def test_a_retired_variable_stops_the_service_with_the_trait_to_set(tmp_path, var, setting):
    """The variables the service used to read are not silently ignored: it stops at start with
    one line naming the trait that replaces each (docs/configuration.md)."""
    done = service_refusal({**db_config(tmp_path), var: "1"})
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    section, name = setting.split(".")
    assert line == (f"classhub service: {var} is set, but classhub no longer reads it: set "
                    f"c.{setting} in jupyterhub_config.py (hub.config.{section}.{name} on Zero to "
                    f"JupyterHub) and unset {var}."), done.stderr
    assert "Traceback" not in done.stderr


def test_the_hub_stops_at_start_on_a_retired_variable(monkeypatch, tmp_path):
    """configure(c), in the hub's jupyterhub_config.py, refuses the hub's old variables (it used
    to pass them on), all in one sentence; CLASSHUB_DB_URL, the database URL from a Secret that
    `classhub upgrade-db` and the deployer's own config read, is kept."""
    monkeypatch.setenv("CLASSHUB_DB_URL", f"sqlite:///{tmp_path / 'c.sqlite'}")
    hub_config(tmp_path)  # kept: no refusal
    monkeypatch.setenv("CLASSHUB_JOB_IMAGE", "registry.example.org/jobs:7")
    monkeypatch.setenv("CLASSHUB_CULLER_CONFIG", "{}")
    with pytest.raises(ConfigError) as refused:
        hub_config(tmp_path)
    message = str(refused.value)
    assert "CLASSHUB_JOB_IMAGE is set, but classhub no longer reads it: set c.ClasshubJobs.image" in message
    assert "CLASSHUB_CULLER_CONFIG is set" in message and "c.ClasshubCuller.<name>" in message
    assert "CLASSHUB_DB_URL" not in message


def test_without_a_database_the_service_says_how_to_start_it(tmp_path):
    done = service(tmp_path, {})
    assert done.returncode != 0 and "ClasshubService.db_url is not set" in done.stderr
    assert "configure(c)" in done.stderr
    assert "Traceback" not in done.stderr


def test_config_file_and_command_line_win_over_the_hubs_sections(tmp_path):
    config = tmp_path / "classhub_service_config.py"
    config.write_text("c.ClasshubService.reconcile_interval = 7\nc.ClasshubService.share_interval = 2\n")
    env = db_config(tmp_path, config_file=str(config), reconcile_interval=30, share_interval=9,
                    reconcile_grace=45)
    env["JUPYTERHUB_SERVICE_PREFIX"] = "/services/elsewhere/"
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
    assert app.reconcile_grace == 45  # the hub's section, where nothing else says
    assert app.prefix == "/services/elsewhere/"  # JupyterHub's managed-service variables are read


def test_apply_env_names_the_trait_of_a_retired_variable():
    app = ClasshubService()
    with pytest.raises(ConfigError, match=r"CLASSHUB_SHARE_INTERVAL is set, but classhub no longer "
                       r"reads it: set c\.ClasshubService\.share_interval"):
        apply_env(app, {"CLASSHUB_SHARE_INTERVAL": "x"})
    apply_env(app, {"JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:9999"})
    assert app.service_url == "http://127.0.0.1:9999"


def test_every_section_a_service_loads_is_handed_to_it():
    """configure() hands each process the sections of the configurables it makes, whole."""
    assert SERVICE_SECTIONS[SERVICE_NAME] == tuple(
        cls.__name__ for cls in (ClasshubService, *ClasshubService.classes))
    assert SERVICE_SECTIONS[CULLER_NAME] == tuple(
        cls.__name__ for cls in (ClasshubCuller, *ClasshubCuller.classes))


def test_job_and_template_settings_of_the_hub_config_reach_the_service(tmp_path):
    """Set after configure(c), as a z2jh hub.config or a site's own lines would be."""
    c = hub_config(tmp_path)
    c.ClasshubJobs.image = "registry.example.org/jobs:7"
    c.ClasshubJobs.kueue_queue = "{course}-queue"
    c.ClasshubJobs.reservation_depth = 2
    c.ClasshubTemplates.max_files = 99
    c.ClasshubService.share_interval = 2.5
    env = handed_env(c)
    assert set(env) <= {CONFIG_ENV, "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
                        "POD_NAMESPACE"}  # no CLASSHUB_* variable per setting
    app = ClasshubService()
    old = dict(os.environ)
    try:
        os.environ.update(env)
        app.initialize([])
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert app.job_settings.image == "registry.example.org/jobs:7"
    assert app.job_settings.kueue_queue == "{course}-queue"
    assert app.job_settings.reservation_depth == 2
    assert app.templates.max_files == 99
    assert app.share_interval == 2.5 and app.mode == "kubernetes" and app.bind_ip == "0.0.0.0"


@pytest.mark.parametrize(("section", "name", "value", "says"), [
    ("ClasshubJobs", "interval", "soon", "expected a float"),
    ("ClasshubJobs", "job_kind", "mpijob", "pytorchjob"),
    ("ClasshubJobs", "reservation_depth", 0, "must be 1 or more (1: EASY backfilling"),
    ("ClasshubJobs", "starving_reservations", -1, "must be 0 (none) or more"),
    ("ClasshubService", "reconcile_grace", -5, "must be a number of seconds > 0"),
    ("ClasshubTemplates", "max_bytes", "4G", "expected an int"),
    ("ClasshubJobs", "imag", "x", "is not a setting of ClasshubJobs: remove it or use one of"),
])
def test_a_hub_setting_the_service_cannot_use_stops_it_with_a_sentence(tmp_path, section, name, value,
                                                                         says):
    c = hub_config(tmp_path)
    c[section][name] = value
    done = service_refusal(handed_env(c))
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"classhub service: c.{section}.{name}") and says in line, done.stderr
    if "is not a setting" not in line:
        assert f"Change c.{section}.{name} in jupyterhub_config.py" in line
    assert "Traceback" not in done.stderr


def test_a_culler_setting_it_cannot_use_stops_it_with_a_sentence(tmp_path):
    c = hub_config(tmp_path)
    c.ClasshubCuller.ask_servers = "sometimes"
    done = service(tmp_path, handed_env(c, CULLER_NAME), module="culler")
    assert done.returncode != 0
    assert "classhub culler: c.ClasshubCuller.ask_servers = 'sometimes'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_value_that_cannot_leave_the_hub_is_refused_when_configured(tmp_path):
    c = hub_config(tmp_path)
    c.ClasshubJobs.image = lambda: "x"
    with pytest.raises(ConfigError, match=r"c\.ClasshubJobs\.image = .* set it to a plain value"):
        handed_env(c)


def test_one_prometheus_setting_reaches_the_culler_and_the_service(tmp_path):
    """GPU use per pod is one fact with one setting: ``c.ClasshubPrometheus.url`` reaches both
    processes that use it; an old per-process setting stops the hub with the one to set."""
    c = hub_config(tmp_path)
    c.ClasshubPrometheus.url = "http://prometheus.monitoring"
    for name in (SERVICE_NAME, CULLER_NAME):
        handed = json.loads(handed_env(c, name)[CONFIG_ENV])
        assert handed["ClasshubPrometheus"] == {"url": "http://prometheus.monitoring"}
    culler = ClasshubCuller(config=Config(json.loads(handed_env(c, CULLER_NAME)[CONFIG_ENV])),
                            db_url=f"sqlite:///{tmp_path / 'c.sqlite'}")
    culler.initialize([])
    assert culler.prometheus.url == "http://prometheus.monitoring"
    for old in ("ClasshubCuller", "ClasshubService"):
        c = hub_config(tmp_path)
        c[old].prometheus_url = "http://prometheus.monitoring"
        with pytest.raises(ConfigError, match=rf"c\.{old}\.prometheus_url has moved: set "
                                              r"c\.ClasshubPrometheus\.url in jupyterhub_config\.py"):
            handed_env(c, CULLER_NAME if old == "ClasshubCuller" else SERVICE_NAME)


def test_the_migration_table_names_every_retired_variable_and_its_trait():
    """docs/configuration.md tells a deployer, for each variable a process now refuses, the trait
    to set instead: the same pair the refusal names (`apply_env`)."""
    from hub_ext.backends.templates import ClasshubTemplates
    from hub_ext.service.jobs.settings import ClasshubJobs

    table = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    retired = table[table.index("| Retired variable |"):]
    retired = retired[:retired.index("\n\n")]
    rows = {line.split("|")[1].strip().split("`")[1]: line.split("|")[2]
            for line in retired.splitlines() if line.startswith("| `CLASSHUB_")}
    for cls in (ClasshubService, ClasshubJobs, ClasshubTemplates):
        for name, trait in cls.class_traits(env=lambda v: v is not None).items():
            var = trait.metadata["env"]
            if var.startswith("CLASSHUB_"):
                assert f"`c.{cls.__name__}.{name}`" in rows.get(var, ""), (var, rows.get(var))
    from hub_ext.singleuser.activity import OLD_VARIABLES, ClasshubActivity

    for var, name in OLD_VARIABLES.items():  # the server's own: a warning at its start
        assert name in ClasshubActivity.class_trait_names(config=True)
        assert f"`c.ClasshubActivity.{name}`" in rows.get(var, ""), (var, rows.get(var))
