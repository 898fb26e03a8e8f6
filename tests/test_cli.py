"""`classhub local` refuses bad input with one clear line and starts nothing.

The refusals before anything starts run ``hub_ext.cli.main`` in the test's process
(tests/cli_inproc.py: a ``classhub`` process costs 1.3 s of CPU in imports); the runs up to the
hub's start, the refusal of a newer database and ``--version`` run the command as a process, as
an admin does.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from hub_ext import store
from hub_ext.core.profiles import Catalog
from tests.cli_inproc import call_cli
from tests.hubproc import CLASSHUB
from tests.ports import free_port

pytestmark = pytest.mark.unit


def run_cli(*args: str, env: dict | None = None, in_process: bool = False):
    """Run ``classhub`` (as a process, or ``in_process``: tests/cli_inproc.py) and find what it
    left running: processes that inherited this run's marker variable (the proxy) or name its
    data folder in their environment (the services, which get only their own variables), so
    hubs of other tests running meanwhile never count."""
    marker = uuid.uuid4().hex
    env = {**(env if env is not None else os.environ), "CLASSHUB_TEST_RUN": marker}
    needles = [marker]
    if "--data-dir" in args:
        needles.append(str(Path(args[args.index("--data-dir") + 1]).resolve()))
    if in_process:
        result = call_cli(*args, env=env)
    else:
        result = subprocess.run([*CLASSHUB, *args], capture_output=True, text=True, timeout=60,
                                env=env)
    leftovers = []
    for p in psutil.process_iter():
        try:
            values = p.environ().values()
        except (psutil.Error, OSError):
            continue
        if p.pid != os.getpid() and any(n in v for n in needles for v in values):
            leftovers.append(p)
    return result, leftovers


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {stderr!r}"
    return lines[0]


def test_unknown_flag(tmp_path):
    result, leftovers = run_cli("local", "--gpus-please", "--data-dir", str(tmp_path), in_process=True)
    assert result.returncode != 0
    line = one_line(result.stderr)
    assert "unrecognized arguments: --gpus-please" in line
    assert "--help" in line
    assert not leftovers


def test_port_in_use(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result, leftovers = run_cli("local", "--port", str(port), "--data-dir", str(tmp_path),
                                     in_process=True)
    assert result.returncode != 0
    line = one_line(result.stderr)
    assert f"port {port} on 127.0.0.1 is in use" in line
    assert "--port" in line
    assert not leftovers
    assert not (tmp_path / "jupyterhub.sqlite").exists()


def test_unwritable_data_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result, leftovers = run_cli("local", "--data-dir", str(blocker / "var"), in_process=True)
    assert result.returncode != 0
    line = one_line(result.stderr)
    assert "cannot write to the data dir" in line
    assert "--data-dir" in line
    assert not leftovers


def test_missing_node(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CLASSHUB_PROXY_CMD"}
    env["PATH"] = str(tmp_path)  # no node, no configurable-http-proxy on PATH
    result, leftovers = run_cli("local", "--data-dir", str(tmp_path / "var"), env=env, in_process=True)
    assert result.returncode != 0
    line = one_line(result.stderr)
    assert "Node.js is not installed" in line
    assert "make run" in line
    assert not leftovers


def test_out_of_range_port(tmp_path):
    result, _ = run_cli("local", "--port", "70000", "--data-dir", str(tmp_path), in_process=True)
    assert result.returncode != 0
    assert "is not a TCP port" in one_line(result.stderr)


def test_create_system_users_needs_system_users(tmp_path):
    result, _ = run_cli("local", "--create-system-users", "--data-dir", str(tmp_path),
                        in_process=True)
    assert result.returncode != 0
    assert "--create-system-users needs --system-users" in one_line(result.stderr)


def test_missing_extra_config(tmp_path):
    result, _ = run_cli("local", "--config", str(tmp_path / "nope.py"), "--data-dir",
                        str(tmp_path), in_process=True)
    assert result.returncode != 0
    assert "no such file" in one_line(result.stderr)


def run_local_until_the_hub(data_dir: Path, *extra: str):
    """`classhub local` through every check and the database step, stopped by an extra config
    file as JupyterHub loads it: before the hub, the proxy or a service starts."""
    stop = data_dir.parent / "stop.py"
    stop.write_text('raise SystemExit("stopped by the test before the hub")\n')
    env = {**os.environ, "CLASSHUB_PROXY_CMD": "true"}
    result, leftovers = run_cli("local", "--port", str(free_port()), "--data-dir", str(data_dir),
                                "--no-demo", "--config", str(stop), *extra, env=env)
    assert not leftovers
    return result


def test_local_upgrades_an_old_database_before_it_starts(tmp_path):
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'classhub.sqlite'}"
    engine = store.make_engine(url)
    store.upgrade(engine, "0007")  # what an older classhub local left
    engine.dispose()
    head = store.head_revision()
    result = run_local_until_the_hub(data_dir)
    assert "stopped by the test before the hub" in result.stderr, result.stderr
    [backup] = data_dir.glob("classhub.sqlite.*.bak")
    assert f"classhub database {url} upgraded from revision 0007 to {head}; backup at {backup}\n" \
        in result.stdout
    store.connect(url).kw["bind"].dispose()  # at head: no refusal
    # the next start has nothing to upgrade and says nothing about it
    again = run_local_until_the_hub(data_dir)
    assert "stopped by the test before the hub" in again.stderr, again.stderr
    assert "classhub database" not in again.stdout
    assert list(data_dir.glob("*.bak")) == [backup]


def test_local_on_a_new_data_dir_creates_the_database_quietly(tmp_path):
    result = run_local_until_the_hub(tmp_path / "var")
    assert "stopped by the test before the hub" in result.stderr, result.stderr
    assert "classhub database" not in result.stdout
    assert not list((tmp_path / "var").glob("*.bak"))


def test_local_refuses_a_database_of_a_newer_classhub(tmp_path):
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'classhub.sqlite'}"
    store.connect(url).kw["bind"].dispose()
    with sqlite3.connect(data_dir / "classhub.sqlite") as db:
        db.execute("UPDATE classhub_alembic_version SET version_num = '0999'")
    result = run_local_until_the_hub(data_dir)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith(f"classhub: The classhub database {url} is at revision 0999, which")
    assert "does not know" in line

def test_version():
    result = subprocess.run([*CLASSHUB, "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("classhub ")


def test_propose_profiles_from_the_local_gpus():
    fixture = Path(__file__).parent / "data" / "nvidia-smi" / "h200-2gpu-7x1g.txt"
    result = call_cli("propose-profiles", "--nvidia-smi", f"cat {fixture}")
    assert result.returncode == 0, result.stderr
    catalog = Catalog.from_config(json.loads(result.stdout))
    assert [p.slug for p in catalog.profiles] == ["cpu", "nvidia-h200-gpu", "mig-1g-18gb"]
    assert catalog.profiles[2].gpu_resource == "nvidia.com/mig-1g.18gb"


def test_propose_profiles_without_gpus_is_cpu_only(tmp_path):
    result = call_cli("propose-profiles", "--nvidia-smi", str(tmp_path / "none"))
    assert result.returncode == 0, result.stderr
    assert '"slug": "cpu"' in result.stdout and '"kind": "gpu"' not in result.stdout


def test_a_retired_variable_stops_classhub_local_with_the_trait_to_set(tmp_path):
    """`classhub local` used to read the CLASSHUB_* variables of its environment as traits; now
    the data dir's jupyterhub_config.py is the one place (docs/configuration.md), and a variable
    still set stops it in one line naming the trait, before anything starts."""
    env = {**os.environ, "CLASSHUB_JOB_INTERVAL": "0.5"}
    result, leftovers = run_cli("local", "--data-dir", str(tmp_path / "var"), env=env,
                                in_process=True)
    assert result.returncode == 1
    assert one_line(result.stderr) == (
        "classhub: CLASSHUB_JOB_INTERVAL is set, but classhub no longer reads it: set "
        "c.ClasshubJobs.interval in the data dir's jupyterhub_config.py (hub.config.ClasshubJobs."
        "interval on Zero to JupyterHub) and unset CLASSHUB_JOB_INTERVAL.")
    assert not (tmp_path / "var").exists() and not leftovers
