"""Alembic environment: the registry's table metadata is the target.

Run through `registry db upgrade` (which passes a live connection) or plain
`alembic` with alembic.ini at the repository root (which reads the URL the
same way the CLI does: REGISTRY_DATABASE_URL, else registry.db).
"""
from alembic import context

import registry.projections.read_models  # noqa: F401  (adds the read models' tables to the metadata)
from registry.events.schema import complete_metadata
from registry.events.database import make_engine, resolve_url, use_wal

config = context.config
target_metadata = complete_metadata()


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or resolve_url(None))
    try:
        if engine.dialect.name == "sqlite":
            use_wal(engine)
        with engine.connect() as conn:
            run_migrations(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: the triggers differ per backend")
run_migrations_online()
