"""Opening a registry database: URL resolution, engine set-up, schema checks.

SQLite runs in WAL mode with a busy timeout; the driver's own transaction
handling is switched off so the store can begin appends with
`BEGIN IMMEDIATE` (taking the writer lock up front) and plain reads with
`BEGIN`. Postgres appends bound how long they wait for the log's lock and how
long a dead worker can hold a transaction open.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from .errors import NotARegistry, StoreError

DEFAULT_URL = "sqlite:///registry.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_LOCK_TIMEOUT_MS = 30_000
PG_IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000


def resolve_url(explicit: str | None) -> str:
    """--db, else REGISTRY_DATABASE_URL, else registry.db in the current directory."""
    url = explicit or os.environ.get("REGISTRY_DATABASE_URL") or DEFAULT_URL
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        immediate = conn.get_execution_options().get("registry_append", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _postgres_engine(url: str) -> Engine:
    options = f"-c lock_timeout={PG_LOCK_TIMEOUT_MS} -c idle_in_transaction_session_timeout={PG_IDLE_IN_TRANSACTION_TIMEOUT_MS}"
    engine = create_engine(url, connect_args={"options": options}, pool_pre_ping=True)

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection, _record):
        # An append connection runs in autocommit and sends its own BEGIN
        # (registry/events/store.py); whoever checks it out next gets the
        # driver's ordinary transactions back.
        if dbapi_connection is not None and not dbapi_connection.closed and dbapi_connection.autocommit:
            dbapi_connection.autocommit = False

    return engine


def make_engine(url: str, *, must_exist: bool = False) -> Engine:
    """An engine for `url`; with must_exist, a missing SQLite file is refused, not created."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"not a database URL: {url!r}") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not Path(database).parent.exists():
            raise StoreError(f"directory for database {database!r} does not exist")
        if must_exist and database and database != ":memory:" and not Path(database).exists():
            raise NotARegistry(f"no registry database at {database} (run `registry init`)")
        return _sqlite_engine(url)
    if parsed.get_backend_name() == "postgresql":
        return _postgres_engine(url)
    raise StoreError(f"unsupported database backend {parsed.get_backend_name()!r} (use sqlite or postgresql)")


# The newest migration this code ships. Opening a registry compares the
# database's revision with it directly, so ordinary commands need not import
# Alembic; tests/test_migrations.py checks it against the script directory.
SCHEMA_HEAD = "0004"


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


def check_schema(engine: Engine) -> None:
    """Refuse a database that is not a registry, or whose schema this code does not match."""
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
    if revision != head_revision():
        raise NotARegistry(f"{where} is at schema revision {revision}, behind {head_revision()}; run `registry db upgrade`")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Create or upgrade the schema, refusing a foreign or newer database."""
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
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
