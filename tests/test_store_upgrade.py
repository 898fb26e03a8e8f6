"""The schema is migrated by one command, `classhub upgrade-db`, not by whichever process starts.

What an admin would notice: a new classhub release whose hub, service or culler quietly migrated
the production database at start (no backup, or two versions fighting over it); an upgrade that
says nothing or leaves no copy to go back to; a first start that suddenly needs a step.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Column, MetaData, String, Table, bindparam, inspect, make_url, select, text

from hub_ext import store
from hub_ext.store import SchemaError, connect, make_engine, shared, upgrade_database
from hub_ext.store.engine import VERSION_TABLE, alembic_config, head_revision
from hub_ext.store.models import Course
from tests.cli_inproc import call_cli
from tests.hubproc import CLASSHUB
from tests.pg import database_url, postgres_server, postgres_url  # noqa: F401
from tests.test_store_migrations import at_once

pytestmark = pytest.mark.unit

HEAD = head_revision()
OLD = "0007"
NOW = datetime(2025, 3, 5, 9, 0, tzinfo=timezone.utc)
VERSION = Table(VERSION_TABLE, MetaData(), Column("version_num", String(32), primary_key=True))


def build_at(url: str, revision: str, course: str | None = "CS101") -> None:
    """A database at an older `revision`, made by Alembic as that classhub's start made it."""
    engine = make_engine(url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        if course:  # as that revision's classhub wrote it: today's model may have more columns
            connection.execute(text("INSERT INTO classhub_courses (name, display_name, created_at) "
                                    "VALUES (:name, :name, :now)").bindparams(
                bindparam("now", type_=Course.__table__.c.created_at.type)), {"name": course, "now": NOW})
    engine.dispose()


def revision_of(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(VERSION_TABLE):
                return None
            return connection.scalars(select(VERSION.c.version_num)).one_or_none()
    finally:
        engine.dispose()


def upgrade_db(*args: str, env: dict | None = None, in_process: bool = True):
    """``classhub upgrade-db *args``: its main() in this process (tests/cli_inproc.py: a process
    costs 1.3 s of CPU in imports), or as the admin runs it, a process of the console script
    (``in_process=False``: the first upgrade of a file below)."""
    if in_process:
        return call_cli("upgrade-db", *args, env=env)
    return subprocess.run([*CLASSHUB, "upgrade-db", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


# ---- every process but the command: check, create when empty, refuse when behind --------------


def test_connect_and_shared_refuse_a_schema_behind_naming_the_command(database_url: str) -> None:  # noqa: F811
    build_at(database_url, OLD)
    backup = "it backs up a sqlite file first" if is_sqlite(database_url) else "back up the database first"
    expected = (f"The classhub database {database_url} is at revision {OLD}, this classhub needs "
                f"{HEAD}: run 'classhub upgrade-db --db-url {database_url}' ({backup}")
    with pytest.raises(SchemaError) as refused:
        connect(database_url)
    assert str(refused.value).startswith(expected)
    assert (refused.value.current, refused.value.needed) == (OLD, HEAD)
    with pytest.raises(SchemaError, match="classhub upgrade-db"):
        shared(database_url)  # the hub's spawner, announcement and demo login
    assert revision_of(database_url) == OLD  # refused, not migrated
    # a refusal is not remembered: once upgraded, the same process connects
    assert upgrade_database(database_url).upgraded
    sessions = shared(database_url)
    with sessions() as session:
        assert session.scalars(text("SELECT name FROM classhub_courses")).all() == ["CS101"]
    sessions.kw["bind"].dispose()


def test_an_empty_database_is_created_at_head_without_ceremony(database_url: str) -> None:  # noqa: F811
    """A first start (`make run` on a new machine, every test's new sqlite file) needs no step;
    a database that holds only JupyterHub's tables is empty for classhub."""
    if is_sqlite(database_url):
        assert not Path(make_url(database_url).database or "").exists()
    hub_tables = Table("alembic_version", MetaData(), Column("version_num", String(32), primary_key=True))
    engine = make_engine(database_url)
    with engine.begin() as connection:
        hub_tables.create(connection)
    engine.dispose()
    sessions = connect(database_url)
    sessions.kw["bind"].dispose()
    assert revision_of(database_url) == HEAD


def test_a_password_never_appears_in_the_sentence() -> None:
    url = make_url("postgresql+psycopg://classhub:s3cret@db.example:5432/classhub")
    refusal = store.engine._refusal(url, OLD)
    assert "s3cret" not in str(refusal)
    assert "postgresql+psycopg://classhub:***@db.example:5432/classhub" in str(refusal)
    assert "pg_dump" in str(refusal)


def test_a_revision_of_a_newer_classhub_is_refused_by_both(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    build_at(url, "head")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(VERSION.update().values(version_num="0999"))
    engine.dispose()
    with pytest.raises(SchemaError, match=r"is at revision 0999, which this classhub .* does not know"):
        connect(url)
    result = upgrade_db("--db-url", url)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "does not know" in result.stderr
    assert not list(tmp_path.glob("*.bak"))


def test_classhub_tables_without_a_revision_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    build_at(url, "head")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(VERSION.delete())
    engine.dispose()
    with pytest.raises(SchemaError, match="holds classhub tables but no revision"):
        connect(url)
    with pytest.raises(SchemaError, match="holds classhub tables but no revision"):
        upgrade_database(url)


# ---- the command ------------------------------------------------------------------------------


def test_upgrade_db_backs_up_upgrades_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "classhub.sqlite"
    url = f"sqlite:///{path}"
    build_at(url, OLD)
    first = upgrade_db("--db-url", url, in_process=False)
    assert first.returncode == 0, first.stderr
    backups = sorted(tmp_path.glob("classhub.sqlite.*.bak"))
    assert len(backups) == 1
    assert first.stdout == (f"classhub database {url} upgraded from revision {OLD} to {HEAD}; "
                            f"backup at {backups[0]}\n")
    assert backups[0].stat().st_mode & 0o777 == 0o600  # the database's contents are private
    # the copy opens at the old revision with the data; the database is at head with it
    with sqlite3.connect(backups[0]) as copy:
        assert copy.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [(OLD,)]
        assert copy.execute("SELECT name FROM classhub_courses").fetchall() == [("CS101",)]
    assert revision_of(url) == HEAD
    sessions = connect(url)
    with sessions() as session:
        assert [c.name for c in session.scalars(select(store.Course))] == ["CS101"]
    sessions.kw["bind"].dispose()

    again = upgrade_db("--db-url", url)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"classhub database {url} already at revision {HEAD}\n"
    assert sorted(tmp_path.glob("*.bak")) == backups


def test_upgrade_db_copies_a_live_wal_database_consistently(tmp_path: Path) -> None:
    """A reader holds the database open and commits stay in the write-ahead log (no
    checkpoint): a file copy would miss them, sqlite's backup API does not."""
    path = tmp_path / "classhub.sqlite"
    url = f"sqlite:///{path}"
    build_at(url, OLD, course=None)
    live = sqlite3.connect(path, isolation_level=None)
    live.execute("PRAGMA wal_autocheckpoint = 0")
    live.execute("INSERT INTO classhub_courses (name, display_name, created_at) "
                 "VALUES ('LIVE', 'Live', '2025-03-05 09:00:00.000000')")
    reader = sqlite3.connect(path)
    reader.execute("SELECT count(*) FROM classhub_courses").fetchall()
    assert Path(f"{path}-wal").stat().st_size > 0
    try:
        done = upgrade_database(url)
    finally:
        reader.close()
        live.close()
    assert done.backup is not None and done.before == OLD
    with sqlite3.connect(done.backup) as copy:
        assert copy.execute("SELECT name FROM classhub_courses").fetchall() == [("LIVE",)]


def test_upgrade_db_on_postgresql_from_the_environment(postgres_url: str) -> None:  # noqa: F811
    build_at(postgres_url, OLD)
    env = {**os.environ, "CLASSHUB_DB_URL": postgres_url}
    first = upgrade_db(env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == (f"classhub database {postgres_url} upgraded from revision {OLD} to "
                            f"{HEAD}; no backup made (not a sqlite file)\n")
    again = upgrade_db(env=env)
    assert again.stdout == f"classhub database {postgres_url} already at revision {HEAD}\n"


def test_upgrade_db_finds_the_data_dirs_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    build_at(url, OLD)
    env = {k: v for k, v in os.environ.items() if k != "CLASSHUB_DB_URL"}
    result = upgrade_db("--data-dir", str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"classhub database {url} upgraded from revision {OLD}")
    missing = upgrade_db("--data-dir", str(tmp_path / "nope"), env=env)
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "--data-dir" in missing.stderr


@pytest.mark.parametrize("url, says", [
    ("nonsense", "Could not parse"),
    ("sqlite:////nonexistent-folder/classhub.sqlite", "unable to open database file"),
    ("postgresql+psycopg://classhub:s3cret@127.0.0.1:1/classhub", "classhub:***@127.0.0.1:1"),
])
def test_upgrade_db_refuses_a_bad_url_in_one_line(url: str, says: str) -> None:
    result = upgrade_db("--db-url", url)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("classhub: cannot open the classhub database ")
    assert says in result.stderr and "check --db-url" in result.stderr
    assert "s3cret" not in result.stderr


def test_concurrent_upgrades_upgrade_once(database_url: str) -> None:  # noqa: F811
    """Two admins (or an init container and an admin) at once: the schema lock lets one upgrade
    and back up; the others then find it at head."""
    build_at(database_url, OLD)
    done = at_once(lambda: upgrade_database(database_url))
    assert sorted(d.before for d in done) == [OLD] + [HEAD] * 3
    assert len([d for d in done if d.backup]) == (1 if is_sqlite(database_url) else 0)
    assert revision_of(database_url) == HEAD


@pytest.mark.parametrize("module, name", [("hub_ext.service", "service"), ("culler", "culler")])
def test_the_service_and_the_culler_stop_with_the_sentence_on_a_schema_behind(
        tmp_path: Path, module: str, name: str) -> None:
    """As the hub starts them (its managed services), with the database it hands them: one last
    line naming the command, not a traceback, and a non-zero exit (the hub logs it)."""
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    build_at(url, OLD)
    # the database as configure(c) hands it: the service's section (CLASSHUB_CONFIG), the
    # culler's URL (CLASSHUB_DB_URL, docs/configuration.md)
    handed = ({"CLASSHUB_CONFIG": json.dumps({"ClasshubService": {"db_url": url}})}
              if name == "service" else {"CLASSHUB_DB_URL": url})
    env = {**handed, "PATH": os.environ["PATH"], "JUPYTERHUB_API_TOKEN": "t" * 32,
           "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api", "JUPYTERHUB_SERVICE_NAME": "classhub",
           "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:9", "JUPYTERHUB_SERVICE_PREFIX": "/services/x/",
           "JUPYTERHUB_CLIENT_ID": "service-classhub", "JUPYTERHUB_HOST": "",
           "JUPYTERHUB_OAUTH_CALLBACK_URL": "/services/x/oauth_callback"}
    python = Path(CLASSHUB[0]).parent / "python"
    result = subprocess.run([str(python), "-m", module], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"classhub {name}: The classhub database") and "classhub upgrade-db" in last, (
        result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert revision_of(url) == OLD
