"""A throwaway PostgreSQL server for the store tests.

Why a real server: the ledger's race-freedom on PostgreSQL rests on row locks, which no sqlite
test and no mock can show. `postgres_server` (session scope) runs initdb into a temporary folder,
starts the server on a free port of 127.0.0.1 (unix socket inside that folder), and removes all of
it at the end; `postgres_url` gives each test a fresh, empty database on it.

Register the fixtures with ``pytest_plugins = ("tests.pg",)`` in conftest.py, or import them into
a test module. `database_url` runs a test once on a sqlite file and once on PostgreSQL. One server
serves the whole session either way (it is shared by reference count, so importing the fixtures
into several modules does not start several servers).

Missing binaries: in CI (environment variable CI set) the fixture fails and says to install
Debian's ``postgresql`` package; elsewhere the PostgreSQL tests are skipped.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port as _free_port

__all__ = [
    "PostgresCluster",
    "database_url",
    "find_postgres_bin",
    "postgres_server",
    "postgres_url",
]

_DB_USER = "postgres"


def find_postgres_bin() -> Path | None:
    """The bin folder of the newest installed PostgreSQL server (Debian layout, then PATH)."""
    env = os.environ.get("CLASSHUB_PG_BIN")
    if env:
        return Path(env)
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None




class PostgresCluster:
    """initdb + pg_ctl start/stop in a temp folder; runs as the `postgres` user when we are root
    (the server refuses to run as root)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="classhub-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as: list[str] = []
        self._names = itertools.count()
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root needs a 'postgres' system user") from None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=120, cwd=self.root
        )
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}{tail}"
            )

    def start(self) -> PostgresCluster:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", _DB_USER, "--auth=trust",
            "--no-sync", "-E", "UTF8", "--locale=C",
        )
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.root}",
                "-c max_connections=300",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
            ]
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )
        return self

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                          "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{_DB_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"classhub_test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=_DB_USER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=_DB_USER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_shared: dict[str, object] = {"cluster": None, "users": 0}


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresCluster]:
    """One PostgreSQL server for the session (fails in CI, skips elsewhere, when not installed)."""
    if _shared["cluster"] is None:
        bindir = find_postgres_bin()
        if bindir is None or not (bindir / "pg_ctl").exists():
            message = (
                "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's "
                "`postgresql` package (apt-get install postgresql)"
            )
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        _shared["cluster"] = PostgresCluster(bindir).start()
    cluster = _shared["cluster"]
    assert isinstance(cluster, PostgresCluster)
    _shared["users"] = int(_shared["users"]) + 1  # type: ignore[call-overload]
    try:
        yield cluster
    finally:
        _shared["users"] = int(_shared["users"]) - 1  # type: ignore[call-overload]
        if _shared["users"] == 0:
            _shared["cluster"] = None
            cluster.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresCluster) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on both supported databases: a sqlite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    return request.getfixturevalue("postgres_url")
