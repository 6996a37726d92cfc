"""Opening a registry database: URL resolution, engine set-up, schema checks.

Two backends, one driver each: SQLite (Python's sqlite3) and Postgres
through psycopg 3. Any other URL is refused in one line naming those.

SQLite files are opened through SQLite URIs that say what may happen to the
file: `mode=rw` (an existing file; only `init` may create one, with `rwc`)
or `mode=ro` for a registry this process may not write, so a read never needs
write access and a file that is not a registry is never changed by looking at
it. WAL mode is set once, when `init` creates the schema (it is a property of
the file), not on every connection. The driver's own transaction handling is
switched off so the store can begin appends with `BEGIN IMMEDIATE` (taking
the writer lock up front) and plain reads with `BEGIN`. Postgres appends
bound how long they wait for the log's lock and how long a dead worker can
hold a transaction open.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError

from registry.formats.errors import first_line

from .errors import NotARegistry, StoreError

DEFAULT_URL = "sqlite:///registry.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_LOCK_TIMEOUT_MS = 30_000
PG_IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000
# A pooled Postgres connection idle longer than this is pinged when checked out (and replaced if the server has
# dropped it); one given back more recently is used as it is, since a busy server checks out a connection for every
# read and a ping each time was a sixth of a pair batch's round trips.
PG_PING_AFTER_IDLE_S = 1.0
SUPPORTED = "sqlite:///PATH or postgresql+psycopg://USER@HOST/DBNAME (postgresql:// means the latter)"
# The URL options a SQLite registry URL may carry (SQLite's URI form: `sqlite:///file:PATH?mode=ro&uri=true`).
_SQLITE_OPTIONS = {"uri": {"true"}, "mode": {"ro", "rw", "rwc"}, "immutable": {"0", "1"}}


def configured_url(explicit: str | None) -> str | None:
    """--db, else REGISTRY_DATABASE_URL, else None (no database was named); an empty one is refused.

    The one precedence every command reads a database URL by: a command that
    works without a database (`lock verify` offline) asks this, the others
    `resolve_url`.
    """
    if explicit is not None:
        source, url = "--db", explicit
    elif "REGISTRY_DATABASE_URL" in os.environ:
        source, url = "REGISTRY_DATABASE_URL", os.environ["REGISTRY_DATABASE_URL"]
    else:
        return None
    if not url.strip():
        raise StoreError(f"{source} is empty: give a database URL, {SUPPORTED}")
    return _with_driver(url)


def resolve_url(explicit: str | None) -> str:
    """The configured URL (configured_url), else registry.db in the current directory."""
    configured = configured_url(explicit)
    return DEFAULT_URL if configured is None else configured


def _with_driver(url: str) -> str:
    """postgresql:// and postgres:// name the one Postgres driver the registry runs on."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _parse(url: str) -> URL:
    """The URL, refused in one line unless it is a backend and driver the registry runs on."""
    try:
        parsed = make_url(_with_driver(url))
    except ArgumentError:
        raise StoreError(f"not a database URL: {url!r}; use {SUPPORTED}") from None
    shown = parsed.render_as_string(hide_password=True)
    if (parsed.get_backend_name(), parsed.get_driver_name()) not in {("sqlite", "pysqlite"), ("postgresql", "psycopg")}:
        raise StoreError(f"unsupported database URL {shown}: the registry runs on {SUPPORTED}")
    return parsed


@dataclass(frozen=True)
class SqliteFile:
    """The file a SQLite URL names, and whether the URL itself asks to open it read-only."""

    path: Path
    read_only: bool
    immutable: bool

    @property
    def writable(self) -> bool:
        """Whether this process may write the file and create its WAL files beside it."""
        return not self.read_only and os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)

    def uri(self, mode: str) -> str:
        """SQLite's URI for the file in `mode` (ro, rw or rwc).

        Read-only in a folder this process may not write, with no WAL index
        beside the file, SQLite can only read the file as immutable: a WAL
        reader needs that index, and no writer can be at work without one.
        """
        immutable = self.immutable or (
            mode == "ro" and not os.access(self.path.parent, os.W_OK) and not Path(f"{self.path}-shm").exists()
        )
        return f"file:{quote(str(self.path.absolute()))}?mode={mode}" + ("&immutable=1" if immutable else "")


def sqlite_file(parsed: URL) -> SqliteFile:
    """The file behind a SQLite URL; an in-memory database or an unknown option is refused."""
    database = parsed.database or ""
    options = dict(parsed.query)
    for name, value in options.items():
        if value not in _SQLITE_OPTIONS.get(name, ()):
            raise StoreError(f"unsupported SQLite URL option {name}={value} (the registry takes mode=ro, "
                             "immutable=1 and uri=true)")
    if options.get("uri") == "true" and database.startswith("file:"):
        database = database[len("file:"):]
    if database in ("", ":memory:") or database.startswith(":memory:"):
        raise StoreError("an in-memory SQLite database vanishes when the command ends; give a file, "
                         "such as sqlite:///registry.db")
    immutable = options.get("immutable") == "1"
    return SqliteFile(Path(database), options.get("mode") == "ro" or immutable, immutable)


def _sqlite_connect(uri: str) -> sqlite3.Connection:
    """A driver connection to SQLite's URI, in autocommit (BEGIN is issued by the engine or the caller)."""
    connection = sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    connection.isolation_level = None  # we issue BEGIN ourselves
    connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    return connection


def _sqlite_engine(url: URL, uri: str) -> Engine:
    # The URL names the file in messages (and picks the pool); connections come from SQLite's URI.
    engine = create_engine(url, creator=lambda: _sqlite_connect(uri))

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        immediate = conn.get_execution_options().get("registry_append", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _postgres_engine(url: URL) -> Engine:
    options = f"-c lock_timeout={PG_LOCK_TIMEOUT_MS} -c idle_in_transaction_session_timeout={PG_IDLE_IN_TRANSACTION_TIMEOUT_MS}"
    engine = create_engine(url, connect_args={"options": options})

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection, record, _proxy):
        # A connection idle in the pool for a while may have been dropped by the server: ping it, and let the
        # pool replace it (SQLAlchemy retries a checkout that raises DisconnectionError with a fresh connection).
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since < PG_PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(first_line(exc)) from exc

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection, record):
        # An append connection runs in autocommit and sends its own BEGIN
        # (registry/events/postgres.py), as do statement reads (statement_reads
        # below); whoever checks it out next gets the driver's ordinary
        # transactions back.
        if dbapi_connection is not None and not dbapi_connection.closed and dbapi_connection.autocommit:
            dbapi_connection.autocommit = False
        record.info["idle_since"] = time.monotonic()

    return engine


@contextmanager
def statement_reads(engine: Engine) -> Iterator[Connection]:
    """A connection whose every statement is its own read: on Postgres in autocommit, without BEGIN and ROLLBACK.

    For reads that need no snapshot across statements. A READ COMMITTED
    transaction re-snapshots at every statement anyway, so its reads see
    what these see; the transaction only cost two round trips. A read that
    must see one state across statements takes `projections.snapshot`.
    SQLite keeps its BEGIN (the engine issues it itself, and it costs no
    round trip).
    """
    with engine.connect() as conn:
        yield conn.execution_options(isolation_level="AUTOCOMMIT") if engine.dialect.name == "postgresql" else conn


IDLE_ENGINES_KEPT = 16
"""How many closed engines (`release_engine`) a process keeps for the next open of the same database."""

_IDLE: OrderedDict[tuple[int, str], Engine] = OrderedDict()
_IDLE_KEYS: weakref.WeakKeyDictionary[Engine, tuple[int, str]] = weakref.WeakKeyDictionary()
_IDLE_GUARD = threading.Lock()


def _engine_for(key: str, make: Callable[[], Engine]) -> Engine:
    """An idle engine this process made for `key` (a database and how it is opened) and was given back by
    its owner, else a new one from `make()`.

    An engine compiles each statement once (its statement cache) and asks
    the database about itself once (the dialect's first connect); a process
    that opens the same registry again (each command of a test run in
    process, a script, a job worker) then pays neither again. An engine is
    only ever handed to one owner at a time: it is kept here only between a
    close (`release_engine`, after its pool was disposed of) and the next
    open, and never across a fork (the key holds the process id).
    """
    held = (os.getpid(), key)
    with _IDLE_GUARD:
        engine = _IDLE.pop(held, None)
    if engine is None:
        engine = make()
        _IDLE_KEYS[engine] = held
    return engine


def release_engine(engine: Engine) -> None:
    """Dispose of `engine` (every connection of its pool closed) and keep it for the next open of its database
    (`_engine_for`); its owner must not use it again. The oldest idle engine beyond IDLE_ENGINES_KEPT goes."""
    engine.dispose()
    held = _IDLE_KEYS.get(engine)
    if held is None or held[0] != os.getpid():
        return
    with _IDLE_GUARD:
        _IDLE[held] = engine
        while len(_IDLE) > IDLE_ENGINES_KEPT:
            _IDLE.popitem(last=False)


def forget_idle_engines() -> None:
    """Keep no idle engine: the next open of any database makes a new one."""
    with _IDLE_GUARD:
        _IDLE.clear()


def make_engine(url: str, *, must_exist: bool = False, read_only: bool = False) -> Engine:
    """An engine for `url` (one given back by an earlier owner in this process when there is one:
    `release_engine`).

    SQLite: a missing file is created unless `must_exist` or `read_only`
    (then it is refused, naming `registry init`); `read_only` opens it so that
    nothing can be written, as does a URL with mode=ro. Postgres: permissions
    are the server's (a read-only role is refused where it writes).
    """
    parsed = _parse(url)
    if parsed.get_backend_name() == "postgresql":
        return _engine_for(parsed.render_as_string(hide_password=False), lambda: _postgres_engine(parsed))
    target = sqlite_file(parsed)
    if not target.path.parent.exists():
        raise StoreError(f"directory for database {str(target.path)!r} does not exist")
    if (must_exist or read_only or target.read_only) and not target.path.exists():
        how = "run `registry init` with a URL that may write" if target.read_only else "run `registry init`"
        raise NotARegistry(f"no registry database at {target.path} ({how})")
    mode = "ro" if read_only or target.read_only else "rw" if must_exist else "rwc"
    uri = target.uri(mode)
    return _engine_for(uri, lambda: _sqlite_engine(parsed.set(database=str(target.path), query={}), uri))


def open_existing(url: str, *, upgrading: bool = False, read_only: bool = False) -> Engine:
    """An engine on an existing registry, refusing anything else without writing to it.

    The schema is checked through a read-only connection, so a SQLite file
    that is not a registry (or not a database) is left byte for byte as it
    was. A registry this process may not write (a read-only file or folder, a
    mode=ro URL) stays open read-only: reading never needs write access, and
    the read models answer from the log when they cannot be caught up.
    `read_only` keeps a SQLite registry read-only even where it could be
    written (commands that only read the log). `upgrading` accepts a schema
    behind this code's head (`db upgrade`).
    """
    parsed = _parse(url)
    if parsed.get_backend_name() == "postgresql":
        engine = make_engine(url)
        try:
            check_schema(engine, upgrading=upgrading)
        except BaseException:
            release_engine(engine)
            raise
        return engine
    target = sqlite_file(parsed)
    if read_only or not target.writable or _sqlite_stamp(target) != SCHEMA_HEAD:
        # The engine that stays read-only, or a schema that is not this code's head: the whole check, through an
        # engine of read-only connections (Alembic's reading of the revision, and the messages that name it).
        reader = make_engine(url, read_only=True)
        try:
            check_schema(reader, upgrading=upgrading)
        except BaseException:
            release_engine(reader)
            raise
        if read_only or not target.writable:
            return reader
        release_engine(reader)
    engine = make_engine(url, must_exist=True)
    # The read-only check left SQLite's -wal and -shm files where there were none (a read-only connection never
    # removes them): one connection of this engine that has read (so it has the write-ahead log open), pooled
    # until the engine is disposed of, closes last and removes them, even for a command refused before it reads.
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA schema_version")
    return engine


# The newest migration this code ships. Opening a registry compares the
# database's revision with it directly, so ordinary commands need not import
# Alembic; tests/migrations/test_migrations.py checks it against the script directory.
SCHEMA_HEAD = "0012"


def alembic_config(url: str | None = None):
    """An Alembic configuration that finds the migrations inside the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "registry:migrations")
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@lru_cache(maxsize=1)
def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


@lru_cache(maxsize=1)
def known_revisions() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    return frozenset(rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions())


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except DBAPIError as exc:
        raise NotARegistry(f"{engine.url.render_as_string(hide_password=True)} is not a usable database: {exc.orig}") from None


def _stamped_revision(engine: Engine) -> str | None:
    """The alembic_version row read with plain SQL, or None when it cannot be read."""
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except DBAPIError:
        return None


def _sqlite_stamp(target: SqliteFile) -> str | None:
    """The revision a SQLite file is stamped with, read through one read-only driver connection, closed at once;
    None when the file is missing, not a database or holds no stamp.

    A writable registry at this code's head (every ordinary command's) is
    checked by this one read, where an engine of read-only connections,
    made, used once and disposed of, cost a command as much CPU again.
    """
    if not target.path.is_file():
        return None
    try:
        connection = _sqlite_connect(target.uri("ro"))
    except sqlite3.Error:
        return None
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return None if row is None else row[0]


def check_schema(engine: Engine, *, upgrading: bool = False) -> None:
    """Refuse a database that is not a registry, or whose schema this code does not match.

    `upgrading` lets a known revision behind the head through, for `db upgrade`.
    """
    where = engine.url.render_as_string(hide_password=True)
    if _stamped_revision(engine) == SCHEMA_HEAD:
        return
    revision = current_revision(engine)
    if revision is None:
        raise NotARegistry(f"{where} is not a registry database (run `registry init`)")
    if revision not in known_revisions():
        raise NotARegistry(
            f"{where} has schema revision {revision}, newer than this registry knows (head {head_revision()}); upgrade the registry package"
        )
    if revision != head_revision() and not upgrading:
        raise NotARegistry(f"{where} is at schema revision {revision}, behind {head_revision()}; run `registry db upgrade`")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Create or upgrade the schema, refusing a foreign or newer database; a SQLite file is put in WAL mode."""
    from alembic import command

    revision_now = current_revision(engine)
    if revision_now is not None and revision_now not in known_revisions():
        raise NotARegistry(
            f"database has schema revision {revision_now}, newer than this registry knows (head {head_revision()})"
        )
    if revision_now is None:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
        if tables - {"alembic_version"}:
            raise NotARegistry(
                f"database already holds tables that are not a registry's ({', '.join(sorted(tables)[:5])}); refusing to initialise it"
            )
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    try:
        if engine.dialect.name == "sqlite":
            use_wal(engine)
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except DBAPIError as exc:
        raise StoreError(f"could not create or upgrade the schema of {engine.url.render_as_string(hide_password=True)}: "
                         f"{first_line(exc.orig)}") from None


def use_wal(engine: Engine) -> None:
    """Put a SQLite file in WAL mode (readers never block the writer); it stays so for every later connection."""
    connection = engine.raw_connection()
    try:
        connection.driver_connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()
