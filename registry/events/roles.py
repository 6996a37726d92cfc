"""Least-privilege Postgres roles for a registry database.

Two group roles, NOLOGIN, that login users join (docs/architecture.md, "Events": on
Postgres the log's immutability is kept by privileges as well as triggers):

- `registry_writer` appends: SELECT and INSERT on the log (`events`,
  `idempotency_keys`), never UPDATE, DELETE or TRUNCATE there; full DML on the
  derived, rebuildable read models (tables named `projection_*`) and their
  sequences; SELECT on `alembic_version` so it can check the schema.
- `registry_reader` only reads: SELECT on every registry table.

Neither may create objects or run migrations; the database owner does that.
Appends take `pg_advisory_xact_lock`, which every role may call. Roles are
cluster-wide, grants are per database: apply the SQL in each registry
database, and again after a `registry db upgrade` that adds projection tables.
The SQL finds those tables itself, so it can be printed without a database.
"""
from __future__ import annotations

from sqlalchemy import Engine

from registry.formats.errors import UserError

WRITER = "registry_writer"
READER = "registry_reader"
ROLES = (WRITER, READER)
LOG_TABLES = ("events", "idempotency_keys")

_CREATE_ROLE = """DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
        CREATE ROLE {role} NOLOGIN;
    END IF;
END
$$"""

_CONNECT = """DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO {writer}, {reader}', current_database());
END
$$"""

_PROJECTIONS = """DO $$
DECLARE
    found record;
BEGIN
    FOR found IN
        SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relname LIKE 'projection\\_%' AND c.relkind IN ('r', 'p', 'S')
    LOOP
        IF found.relkind = 'S' THEN
            EXECUTE format('GRANT USAGE, SELECT, UPDATE ON SEQUENCE %I TO {writer}', found.relname);
            EXECUTE format('GRANT SELECT ON SEQUENCE %I TO {reader}', found.relname);
        ELSE
            EXECUTE format('REVOKE ALL ON TABLE %I FROM {writer}, {reader}', found.relname);
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I TO {writer}', found.relname);
            EXECUTE format('GRANT SELECT ON TABLE %I TO {reader}', found.relname);
        END IF;
    END LOOP;
END
$$"""


def role_statements() -> list[str]:
    """The SQL, one statement per item, in order; safe to run again (it resets the grants)."""
    roles = {"writer": WRITER, "reader": READER}
    log = ", ".join(LOG_TABLES)
    return [
        *(_CREATE_ROLE.format(role=role) for role in ROLES),
        _CONNECT.format(**roles),
        f"GRANT USAGE ON SCHEMA public TO {WRITER}, {READER}",
        f"REVOKE ALL ON TABLE {log}, alembic_version FROM {WRITER}, {READER}",
        f"GRANT SELECT, INSERT ON TABLE {log} TO {WRITER}",
        f"GRANT SELECT ON TABLE {log}, alembic_version TO {READER}",
        f"GRANT SELECT ON TABLE alembic_version TO {WRITER}",
        _PROJECTIONS.format(**roles),
    ]


def role_script() -> str:
    """The statements as one script for psql, in a single transaction."""
    return "BEGIN;\n" + "".join(f"{statement};\n" for statement in role_statements()) + "COMMIT;\n"


def apply_roles(engine: Engine) -> list[tuple[str, str, str]]:
    """Run the statements in one transaction; return the resulting (role, table, privileges) grants."""
    if engine.dialect.name != "postgresql":
        raise UserError("roles are a Postgres feature; an SQLite registry is protected by its file's permissions")
    with engine.begin() as conn:
        for statement in role_statements():
            conn.exec_driver_sql(statement.replace("%", "%%"))
    return granted(engine)


def granted(engine: Engine) -> list[tuple[str, str, str]]:
    """Each role's table privileges in schema public, as the catalog reports them."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT grantee, table_name, string_agg(privilege_type, ',' ORDER BY privilege_type)"
            " FROM information_schema.role_table_grants"
            " WHERE grantee IN (%(writer)s, %(reader)s) AND table_schema = 'public'"
            " GROUP BY grantee, table_name ORDER BY grantee DESC, table_name",
            {"writer": WRITER, "reader": READER},
        ).all()
    return [(row[0], row[1], row[2]) for row in rows]
