"""Opening the database: engines that serialize writers, and migrations applied on connect.

Why: the quota ledger is only race-free if two reservations of one course never decide on the
same snapshot. PostgreSQL gets row locks (SELECT ... FOR UPDATE, see ledger.py). sqlite has no
row locks and its default deferred transactions let two writers read the same snapshot, then
one fails to upgrade its lock; so every sqlite transaction here starts with BEGIN IMMEDIATE, which
takes the write lock up front and makes writers queue (busy timeout) instead of failing.

Migrations run on every `connect`: a hub, a service and a culler can start in any order, and each
sees the schema it expects. Concurrent upgrades are serialized by the same lock (sqlite) or by a
transaction-level advisory lock (PostgreSQL).

Within one process, sqlite writers also queue on a Python lock per database file, handed over
right after COMMIT: sqlite's busy handler polls with growing sleeps, which turns fifty threads
waiting for the write lock into a second of idling; the in-process queue keeps the cross-process
guarantee (BEGIN IMMEDIATE) and removes the polling.

Reads must not queue behind writers: a hub page that shows a culler warning, a spawn form that
counts free GPUs, a metrics scrape only read. `readers(sessions)` gives sessions for that: on
sqlite an engine of its own whose transactions begin DEFERRED (in WAL mode a reader sees the
last committed snapshot while a writer holds the lock) and which refuses writes
(``PRAGMA query_only``); on PostgreSQL the same sessions (MVCC readers never wait on writers).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine, create_engine, event, func, make_url, select
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

__all__ = ["VERSION_TABLE", "alembic_config", "connect", "in_thread", "make_engine", "readers", "shared",
           "upgrade"]

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "classhub_alembic_version"
_MIGRATION_LOCK = 0x636C617373687562  # "classhub": one advisory lock id for schema upgrades
SQLITE_BUSY_TIMEOUT_S = 60


def connect(url: str | URL, *, migrate: bool = True, **engine_kwargs: Any) -> sessionmaker[Session]:
    """A session factory for `url` (sqlite file or `postgresql+psycopg://...`), schema at head.

    `engine_kwargs` go to `create_engine` (e.g. pool_size for many concurrent spawns). Sessions
    keep their attributes after commit, so returned rows can be read outside the session.
    """
    engine = make_engine(url, **engine_kwargs)
    if migrate:
        upgrade(engine)
    return sessionmaker(engine, expire_on_commit=False)


@functools.cache
def shared(url: str) -> sessionmaker[Session]:
    """`connect(url)`, once per database per process: the hub's classhub code (the spawner's
    reads and reservations, the culler announcement, the culler's shortfalls, the templates'
    records) shares one engine, so one pool of ``POOL_SIZE`` connections and one migration
    check, instead of one engine per module."""
    return connect(url)


#: Connections an engine keeps open (PostgreSQL): the store threads below and the readers on a
#: loop, with room for the service's handlers.
POOL_SIZE = 10

#: Threads for classhub's transactions in a process with an event loop (the hub: reservations,
#: releases, template records, shortfalls). Why not the loop's default executor: a transaction
#: may wait for another's lock (a course's row, or sqlite's one writer) and holds its thread while
#: it waits; in the default executor those were the threads that kubernetes_asyncio's requests
#: also use (aiohttp's proxy and netrc lookups), so at a class start every pod and PVC call of the
#: hub queued behind reservations waiting for a lock. Transactions on one course are serialized
#: by its lock anyway: four threads keep the database busy and stay within the pool.
STORE_THREADS = 4
_store_threads = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="classhub-store")


def in_thread(func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run ``func(*args)`` (a classhub transaction) on the store's threads; await the result, or
    leave it running (the future is held until it ends)."""
    return asyncio.get_running_loop().run_in_executor(_store_threads, func, *args)


T = TypeVar("T")


def make_engine(url: str | URL, **engine_kwargs: Any) -> Engine:
    """`create_engine` plus classhub's sqlite settings (IMMEDIATE transactions, WAL, FKs)."""
    url = make_url(url)
    if url.get_backend_name() != "sqlite":
        # Connections above the pool's size are closed when given back: a burst of more
        # transactions than that at once (a class start's reservations in the hub's ledger
        # threads plus its readers) then paid a new PostgreSQL connection, a forked server
        # process, for most transactions. The pool keeps what a process uses at once.
        engine_kwargs.setdefault("pool_size", POOL_SIZE)
        return create_engine(url, **engine_kwargs)
    connect_args = engine_kwargs.setdefault("connect_args", {})
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_S)
    connect_args.setdefault("check_same_thread", False)
    in_memory = url.database in (None, "", ":memory:")
    if in_memory:
        engine_kwargs.setdefault("poolclass", StaticPool)  # one shared in-memory database
    else:
        connect_args.setdefault("factory", _QueuedWriterConnection)
    engine = create_engine(url, **engine_kwargs)
    _serialize_sqlite_writers(engine, in_memory=in_memory)
    return engine


def readers(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """Sessions for reading only that never wait on a writer (see the module docstring).

    Made once per `sessions` and kept on it; a write through them fails on sqlite.
    """
    reader = getattr(sessions, "_classhub_readers", None)
    if reader is None:
        engine = sessions.kw["bind"]
        url = engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            reader = sessions
        else:
            reader = sessionmaker(_read_engine(url), expire_on_commit=False)
        sessions._classhub_readers = reader  # type: ignore[attr-defined]
    return reader


def _read_engine(url: URL) -> Engine:
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S,
                                              "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" event emits the BEGIN
        dbapi_connection.execute("PRAGMA query_only = ON")

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN DEFERRED")  # one snapshot, no write lock

    return engine


_writer_locks: dict[str, threading.Lock] = {}
_writer_locks_guard = threading.Lock()


class _QueuedWriterConnection(sqlite3.Connection):
    """A sqlite3 connection whose write transactions queue on a per-file, in-process lock.

    The lock is taken before BEGIN IMMEDIATE and released after COMMIT/ROLLBACK/close, so the next
    thread's BEGIN IMMEDIATE finds the database free instead of sleeping in the busy handler.
    Waiting is bounded by the busy timeout; past it, sqlite's own locking still decides.
    """

    _lock: threading.Lock | None = None
    _holding = False

    def acquire_writer(self, database: str) -> None:
        if self._lock is None:
            with _writer_locks_guard:
                self._lock = _writer_locks.setdefault(str(Path(database).resolve()), threading.Lock())
        if not self._holding:
            self._holding = self._lock.acquire(timeout=SQLITE_BUSY_TIMEOUT_S)

    def release_writer(self) -> None:
        if self._holding and self._lock is not None:
            self._holding = False
            self._lock.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.release_writer()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.release_writer()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.release_writer()


def _use_wal(cursor: sqlite3.Cursor) -> None:
    """Switch the database file to WAL, retrying while another connection holds it.

    Why a loop: changing the journal mode answers "database is locked" at once, without sqlite's
    busy handler, while another process or thread is creating or migrating the same new file.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    delay = 0.01
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _serialize_sqlite_writers(engine: Engine, *, in_memory: bool) -> None:
    """Take over transaction control from pysqlite and begin every transaction IMMEDIATE.

    pysqlite's own implicit BEGIN is deferred (and skipped before DDL), so it is switched off
    (isolation_level=None) and SQLAlchemy's "begin" event emits the BEGIN instead; this is the
    documented SQLAlchemy recipe for sqlite transactions, with IMMEDIATE for the write lock.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        if not in_memory:
            _use_wal(cursor)
            # In WAL mode, NORMAL syncs the log at checkpoints instead of at every commit: a
            # commit survives any crash of the process (a killed hub or service) and the file
            # never corrupts; only a power loss or an OS crash may roll back the last commits,
            # which `Ledger.reconcile` then finds as servers running without a reservation.
            # Why: a class start commits a reservation per student, and a sync of the disk per
            # commit slowed the hub's own commits on the same disk (README, "Courses and quotas").
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        queued = isinstance(dbapi_connection, _QueuedWriterConnection)
        if queued:
            dbapi_connection.acquire_writer(str(engine.url.database))
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            if queued:
                dbapi_connection.release_writer()
            raise


def alembic_config() -> Config:
    """Alembic configuration without an alembic.ini: the migrations ship inside the package."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("version_table", VERSION_TABLE)
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` in one transaction, one process at a time.

    A schema already at head is only read, without the write lock: a process that connects
    while another holds the database (the hub rendering its first page while the culler writes)
    does not wait for it."""
    config = alembic_config()
    if revision == "head" and _at_head(engine, config):
        return
    with engine.begin() as connection:  # sqlite: BEGIN IMMEDIATE already serializes
        if connection.dialect.name == "postgresql":
            connection.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _at_head(engine: Engine, config: Config) -> bool:
    """Whether the database's schema is at the newest revision (read without the write lock)."""
    url = engine.url
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    if in_memory:
        return False
    reader = _read_engine(url) if url.get_backend_name() == "sqlite" else engine
    try:
        with reader.connect() as connection:
            current = MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE}).get_current_heads()
    except Exception:  # no database file yet, no version table: upgrade decides
        return False
    finally:
        if reader is not engine:
            reader.dispose()
    return set(current) == set(ScriptDirectory.from_config(config).get_heads())
