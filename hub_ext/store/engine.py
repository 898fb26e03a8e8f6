"""Opening the database: engines that serialize writers, and migrations applied on connect.

Why: the quota ledger is only race-free if two reservations of one course never decide on the
same snapshot. PostgreSQL gets row locks (SELECT ... FOR UPDATE, see ledger.py). sqlite has no
row locks and its default deferred transactions let two writers read the same snapshot, then
one fails to upgrade its lock; so every sqlite transaction here starts with BEGIN IMMEDIATE, which
takes the write lock up front and makes writers queue (busy timeout) instead of failing.

The schema is migrated by one command, `classhub upgrade-db` (`upgrade_database`; `classhub local`
runs it before it starts), as JupyterHub's `jupyterhub upgrade-db`: it backs up a sqlite file
first, and an upgrade is a step an admin takes, not a side effect of whichever process starts
first. Every other `connect` (the hub's spawner through `shared`, the service and its job loop,
the culler) checks the revision: at head it goes on; a database without classhub tables (a
first start) is created at head; anything else is a `SchemaError` whose message is the sentence
to show, naming the command. Creating and upgrading are serialized by the same lock (sqlite) or by
a transaction-level advisory lock (PostgreSQL), and the state is read again under the lock.

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
import contextlib
import functools
import itertools
import os
import re
import shlex
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine, create_engine, event, func, inspect, make_url, select
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

__all__ = ["VERSION_TABLE", "SchemaError", "Upgraded", "alembic_config", "connect", "ensure_schema",
           "head_revision", "in_thread", "make_engine", "read_connection", "readers", "shared", "shown_url",
           "upgrade", "upgrade_database"]

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "classhub_alembic_version"
_MIGRATION_LOCK = 0x636C617373687562  # "classhub": one advisory lock id for schema upgrades
SQLITE_BUSY_TIMEOUT_S = 60


def connect(url: str | URL, *, migrate: bool = True, **engine_kwargs: Any) -> sessionmaker[Session]:
    """A session factory for `url` (sqlite file or `postgresql+psycopg://...`), schema at head.

    With `migrate` (the default) the schema is checked first (`ensure_schema`): a database
    without classhub tables is created at head, one behind is refused with a `SchemaError` that
    names `classhub upgrade-db`. `engine_kwargs` go to `create_engine` (e.g. pool_size for many
    concurrent spawns). Sessions keep their attributes after commit, so returned rows can be read
    outside the session.
    """
    engine = make_engine(url, **engine_kwargs)
    if migrate:
        try:
            ensure_schema(engine)
        except BaseException:
            engine.dispose()
            raise
    return sessionmaker(engine, expire_on_commit=False)


@functools.cache
def shared(url: str) -> sessionmaker[Session]:
    """`connect(url)`, once per database per process: the hub's classhub code (the spawner's
    reads and reservations, the culler announcement, the culler's shortfalls, the templates'
    records) shares one engine, so one pool of ``POOL_SIZE`` connections and one schema check,
    instead of one engine per module. A refusal (`SchemaError`) is not kept: the next call checks
    again, so the hub's spawns work once an admin ran `classhub upgrade-db`."""
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

    Made once per `sessions` and kept on it (readers of readers are the same sessions); a write
    through them fails on sqlite.
    """
    reader = getattr(sessions, "_classhub_readers", None)
    if reader is None:
        engine = sessions.kw["bind"]
        url = engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            reader = sessions
        else:
            reader = sessionmaker(_read_engine(url), expire_on_commit=False)
            reader._classhub_readers = reader  # type: ignore[attr-defined]  # readers of readers
        sessions._classhub_readers = reader  # type: ignore[attr-defined]
    return reader


@contextlib.contextmanager
def read_connection(sessions: sessionmaker[Session]) -> Iterator[Connection]:
    """A Core connection of `readers(sessions)`, in one read transaction, for the hot reads of
    the hub that want rows, not ORM objects (a start's course roles).

    Why not a session: an ORM session around one small select cost about four times the CPU of
    the select on a connection (about 1 ms against 0.25 ms per start), and the hub runs one per
    start, hundreds at a class start (bench/storm.py, docs/performance.md)."""
    with readers(sessions).kw["bind"].connect() as connection:
        yield connection


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
            # commit slowed the hub's own commits on the same disk (docs/teachers/courses.md, "Courses and
            # quotas").
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


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision of the schema, the one this classhub needs ("0008")."""
    head = _scripts().get_current_head()
    assert head is not None
    return head


def _known(revision: str) -> bool:
    try:
        return _scripts().get_revision(revision) is not None
    except Exception:  # alembic's ResolutionError: a revision of a newer classhub
        return False


class SchemaError(RuntimeError):
    """The database's classhub schema is not the one this classhub needs; the message is the
    sentence to show (what to run). `current` is the database's revision (None: none recorded),
    `needed` this classhub's."""

    def __init__(self, message: str, *, current: str | None, needed: str) -> None:
        super().__init__(message)
        self.current = current
        self.needed = needed


@dataclass(frozen=True)
class Upgraded:
    """What `upgrade_database` did: the revision before (None: the database had no classhub
    tables) and after, and the backup copy of a sqlite file."""

    url: str  #: as shown (`shown_url`)
    before: str | None
    after: str
    backup: Path | None = None

    @property
    def upgraded(self) -> bool:
        """Whether an existing schema was migrated (not created, not already at head)."""
        return self.before is not None and self.before != self.after

    def sentence(self) -> str:
        if self.before == self.after:
            return f"classhub database {self.url} already at revision {self.after}"
        if self.before is None:
            return f"classhub database {self.url} created at revision {self.after}"
        where = f"backup at {self.backup}" if self.backup else "no backup made (not a sqlite file)"
        return f"classhub database {self.url} upgraded from revision {self.before} to {self.after}; {where}"


def shown_url(url: str | URL) -> str:
    """`url` for messages and logs, its password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: still never show what looks like a password
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", str(url))


def _sqlite_file(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:")


def _refusal(url: URL, current: str | None) -> SchemaError:
    needed = head_revision()
    shown = shown_url(url)
    if current is None:
        message = (f"The classhub database {shown} holds classhub tables but no revision in "
                   f"{VERSION_TABLE}, this classhub needs {needed}: its schema was not made by "
                   "classhub's migrations, so neither this classhub nor 'classhub upgrade-db' can "
                   "tell what to change; restore it from a backup")
    elif not _known(current):
        message = (f"The classhub database {shown} is at revision {current}, which this classhub "
                   f"(newest revision {needed}) does not know: a newer classhub upgraded it; run "
                   "that classhub or a newer one")
    else:
        backup = ("it backs up a sqlite file first" if _sqlite_file(url)
                  else "back up the database first, e.g. with pg_dump")
        message = (f"The classhub database {shown} is at revision {current}, this classhub needs "
                   f"{needed}: run 'classhub upgrade-db --db-url {shlex.quote(shown)}' ({backup})")
    return SchemaError(message, current=current, needed=needed)


def _schema_state(connection: Connection) -> tuple[str | None, bool]:
    """classhub's revision in the database (None: none recorded), and whether it holds any
    classhub table. JupyterHub's own tables and revision (`alembic_version`) do not count."""
    heads = MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE}).get_current_heads()
    if heads:  # a revision says there is a schema; listing the tables is for the case without
        return ",".join(sorted(heads)), True
    return None, any(name.startswith("classhub_") and name != VERSION_TABLE
                     for name in inspect(connection).get_table_names())


def _read_state(engine: Engine) -> tuple[str | None, bool] | None:
    """`_schema_state` read without the write lock, or None where it cannot be read that way
    (an in-memory database, a sqlite file not created yet): the locked path decides."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and not _sqlite_file(url):
        return None
    reader = _read_engine(url) if url.get_backend_name() == "sqlite" else engine
    try:
        with reader.connect() as connection:
            return _schema_state(connection)
    except Exception:
        return None
    finally:
        if reader is not engine:
            reader.dispose()


@contextlib.contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A transaction that holds the schema lock: sqlite's write lock (BEGIN IMMEDIATE), or a
    transaction-level advisory lock on PostgreSQL, so one process at a time creates or upgrades."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        yield connection


def _migrate(connection: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def ensure_schema(engine: Engine) -> None:
    """Go on when the schema is at head; create it at head in a database without classhub tables
    (a first start); otherwise raise `SchemaError`, whose message names `classhub upgrade-db`.

    A schema at head (or behind) is only read, without the write lock: a process that connects
    while another holds the database (the hub rendering its first page while the culler writes)
    does not wait for it. Creating takes the schema lock and reads the state again under it, so
    two processes starting on a new database create it once, and a database that another
    process created meanwhile is checked, never migrated, here."""
    needed = head_revision()
    state = _read_state(engine)
    if state is not None:
        current, tables = state
        if current == needed:
            return
        if current is not None or tables:
            raise _refusal(engine.url, current)
    with _locked(engine) as connection:
        current, tables = _schema_state(connection)
        if current is None and not tables:
            _migrate(connection, "head")
            return
    if current != needed:
        raise _refusal(engine.url, current)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` in one transaction under the schema lock, whatever it is
    now and without a backup (`upgrade_database` is the command's checked, backed-up upgrade)."""
    with _locked(engine) as connection:
        _migrate(connection, revision)


def upgrade_database(url: str | URL, *, backup: bool = True, now: datetime | None = None) -> Upgraded:
    """``classhub upgrade-db``: bring the schema to head, one process at a time.

    A sqlite file that is behind is first copied to ``<file>.<YYYY-mm-dd-HHMMSS>.bak`` beside it
    (sqlite's backup API, inside the transaction that upgrades: the copy is exactly what was
    upgraded, a live WAL database included). A database without classhub tables is created at
    head; one at a revision this classhub does not know, or with classhub tables and no revision,
    is refused (`SchemaError`). Errors opening the database propagate as they are."""
    engine = make_engine(url)
    needed = head_revision()
    try:
        with _locked(engine) as connection:
            before, tables = _schema_state(connection)
            if before == needed:
                return Upgraded(shown_url(engine.url), before, needed)
            if (before is None and tables) or (before is not None and not _known(before)):
                raise _refusal(engine.url, before)
            copy = None
            if backup and before is not None and _sqlite_file(engine.url):
                copy = _backup(Path(str(engine.url.database)), now or datetime.now())
            _migrate(connection, "head")
        return Upgraded(shown_url(engine.url), before, needed, copy)
    finally:
        engine.dispose()


def _backup(path: Path, now: datetime) -> Path:
    """Copy the sqlite database `path` to a new private file beside it.

    Called while this process holds the write lock and has written nothing: the copy is read on
    a connection of its own (sqlite's backup API refuses a source in a write transaction), which
    in WAL mode reads the last commit, the very state about to be upgraded."""
    stamp = now.strftime("%Y-%m-%d-%H%M%S")
    for n in itertools.count(1):
        target = path.with_name(f"{path.name}.{stamp}.bak" if n == 1 else f"{path.name}.{stamp}.{n}.bak")
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            break
        except FileExistsError:
            continue
    try:
        source = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S)
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target
