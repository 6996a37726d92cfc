"""Least-privilege roles on Postgres: connect as members of each role and see what is refused.

The log's immutability has two independent layers there (docs/architecture.md, "Events"):
privileges keep a writer from UPDATE, DELETE or TRUNCATE on the log, and the
triggers refuse those even to the owner. Each is shown to hold on its own.
"""
from __future__ import annotations

import json

import uuid

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from registry.cli.main import main
from registry.events.database import make_engine
from registry.events.errors import StoreError
from registry.events.roles import READER, WRITER, granted, role_script
from registry.events.store import EventStore
from read_side import Reads

from store_helpers import frame_event

pytestmark = pytest.mark.postgres

LOG_TABLES = ("events", "idempotency_keys")


def cli(url: str, *args: str):
    return CliRunner().invoke(main, ["--db", url, "--actor", "tester", *args])


def libpq(url: str, user: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    return (parsed.set(username=user) if user else parsed).render_as_string(hide_password=False)


def as_user(url: str, user: str) -> str:
    return make_url(url).set(username=user).render_as_string(hide_password=False)


def refusal(url: str, user: str, sql: str) -> str:
    """Run `sql` as `user`; it must be refused for lack of privilege. Returns the server's message."""
    with psycopg.connect(libpq(url, user), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
            conn.execute(sql)
    return str(caught.value)


def run_sql(url: str, user: str | None, sql: str) -> list[tuple]:
    with psycopg.connect(libpq(url, user), autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def registry_with_roles(migrated_postgres_url):
    """A registry (a copy of the worker's migrated template, what `init` makes) with roles applied (twice: the SQL
    is re-runnable) and one login member of each role."""
    for _ in range(2):
        applied = cli(migrated_postgres_url, "db", "roles", "--apply")
        assert applied.exit_code == 0, applied.output
    users = {role: f"t_{role.split('_')[1]}_{uuid.uuid4().hex[:8]}" for role in (WRITER, READER)}
    for role, user in users.items():
        run_sql(migrated_postgres_url, None, f'CREATE ROLE "{user}" LOGIN IN ROLE {role}')
    engines = []
    yield migrated_postgres_url, users[WRITER], users[READER], engines
    for engine in engines:
        engine.dispose()
    for user in users.values():
        run_sql(migrated_postgres_url, None, f'DROP ROLE "{user}"')


def store_as(url: str, user: str, engines: list) -> EventStore:
    engine = make_engine(as_user(url, user))
    engines.append(engine)
    return EventStore(engine)


def test_printed_script_grants_exactly_what_apply_grants(migrated_postgres_url):
    printed = CliRunner().invoke(main, ["db", "roles"])  # no database needed to print
    assert printed.exit_code == 0 and printed.output == role_script()
    assert "CREATE ROLE registry_writer NOLOGIN" in printed.output
    run_sql(migrated_postgres_url, None, printed.output)
    engine = make_engine(migrated_postgres_url)
    try:
        by_script = granted(engine)
        assert cli(migrated_postgres_url, "db", "roles", "--apply").exit_code == 0
        assert granted(engine) == by_script
    finally:
        engine.dispose()
    grants = {(role, table): set(privileges.split(",")) for role, table, privileges in by_script}
    for table in LOG_TABLES:
        assert grants[(WRITER, table)] == {"SELECT", "INSERT"}
        assert grants[(READER, table)] == {"SELECT"}
    projection_tables = [table for _, table in grants if table.startswith("projection_")]
    assert projection_tables, "the schema at head has projection tables"
    for table in projection_tables:
        assert grants[(WRITER, table)] == {"SELECT", "INSERT", "UPDATE", "DELETE"}
        assert grants[(READER, table)] == {"SELECT"}
    assert grants[(WRITER, "alembic_version")] == grants[(READER, "alembic_version")] == {"SELECT"}


def test_group_roles_cannot_log_in(registry_with_roles):
    url, _, _, _ = registry_with_roles
    for role in (WRITER, READER):
        with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
            psycopg.connect(libpq(url, role)).close()


def test_writer_appends_through_the_store_and_keeps_read_models(registry_with_roles):
    url, writer, _, engines = registry_with_roles
    store = store_as(url, writer, engines)
    batch = [frame_event("a", seed=1), frame_event("a", seed=2)]
    first = store.append("frameset:a", batch, expected_version=0, idempotency_key="run-1", actor="worker")
    assert first == [1, 2]
    assert store.append("frameset:a", batch, idempotency_key="run-1", actor="worker") == first
    assert [e.payload["seed"] for e in store.read_all()] == [1, 2]
    assert store.verify().intact
    assert Reads(store).catch_up() == 2  # the derived tables are the writer's to maintain
    assert cli(as_user(url, writer), "verify").exit_code == 0


def test_writer_cannot_update_delete_or_truncate_the_log(registry_with_roles):
    url, writer, _, engines = registry_with_roles
    store_as(url, writer, engines).append("frameset:a", [frame_event("a")], actor="worker")
    for table in LOG_TABLES:
        for sql in (f"UPDATE {table} SET stream = 'forged'", f"DELETE FROM {table}", f"TRUNCATE {table}"):
            assert f"permission denied for table {table}" in refusal(url, writer, sql)
    assert "must be owner" in refusal(url, writer, "ALTER TABLE events DISABLE TRIGGER events_immutable")
    assert "permission denied for schema public" in refusal(url, writer, "CREATE TABLE shadow (x int)")
    assert "permission denied" in refusal(url, writer, "UPDATE alembic_version SET version_num = '9999'")
    assert run_sql(url, None, "SELECT count(*), min(stream) FROM events") == [(1, "frameset:a")]


def test_privileges_and_triggers_each_refuse_on_their_own(registry_with_roles):
    url, writer, _, engines = registry_with_roles
    store_as(url, writer, engines).append("frameset:a", [frame_event("a")], actor="worker")
    # The owner holds every privilege: only the trigger stands in its way.
    with psycopg.connect(libpq(url), autocommit=True) as owner:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="events are immutable: UPDATE on events"):
            owner.execute("UPDATE events SET stream = 'forged'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="events are immutable: TRUNCATE on events"):
            owner.execute("TRUNCATE events")
        owner.execute("DROP TRIGGER events_immutable ON events")
        owner.execute("DROP TRIGGER events_no_truncate ON events")
    # With the triggers gone, the writer is still refused by its privileges alone.
    for sql in ("UPDATE events SET stream = 'forged'", "DELETE FROM events", "TRUNCATE events"):
        assert "permission denied for table events" in refusal(url, writer, sql)
    assert run_sql(url, None, "SELECT stream FROM events") == [("frameset:a",)]


def test_reader_only_reads(registry_with_roles, tmp_path):
    url, writer, reader, engines = registry_with_roles
    store_as(url, writer, engines).append("frameset:a", [frame_event("a")], actor="worker")
    reading = store_as(url, reader, engines)
    assert [e.payload["name"] for e in reading.read_all()] == ["a"] and reading.verify().intact
    assert cli(as_user(url, reader), "verify").exit_code == 0
    with pytest.raises(StoreError, match="permission denied for table events"):
        reading.append("frameset:a", [frame_event("b")], actor="reader")
    manifest = tmp_path / "w.yaml"
    manifest.write_text("workload: w\n", encoding="utf-8")
    declared = cli(as_user(url, reader), "workload", "declare", str(manifest))
    assert declared.exit_code == 1 and isinstance(declared.exception, SystemExit)
    assert declared.stderr.count("\n") == 1 and "permission denied for table events" in declared.stderr
    for sql in ("INSERT INTO events SELECT * FROM events", "INSERT INTO idempotency_keys VALUES ('k', 's', 1, 1, 'd')",
                "UPDATE events SET actor = 'x'", "DELETE FROM projection_artifacts", "TRUNCATE projection_checkpoint"):
        assert "permission denied" in refusal(url, reader, sql)
    assert run_sql(url, None, "SELECT count(*) FROM events") == [(1,)]


def test_reader_shows_and_reports_from_the_log_when_it_may_not_catch_up(registry_with_roles, tmp_path):
    """A reader cannot write the read models, so its reads fold the log instead: never stale, never a traceback."""
    url, writer, reader, engines = registry_with_roles
    manifest = tmp_path / "w.yaml"
    manifest.write_text("workload: w\n", encoding="utf-8")
    assert cli(as_user(url, writer), "workload", "declare", str(manifest)).exit_code == 0
    registered = cli(as_user(url, writer), "artifact", "register", "k1", "--workload", "w", "--kind", "module")
    assert registered.exit_code == 0
    shown = cli(as_user(url, reader), "show", "k1", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["decision"] == "registered"
    assert cli(as_user(url, reader), "report", "--format", "json").exit_code == 0


def test_apply_on_sqlite_is_refused_in_one_line(migrated_sqlite_url):
    result = cli(migrated_sqlite_url, "db", "roles", "--apply")
    assert result.exit_code == 1 and result.stderr == (
        "error: roles are a Postgres feature; an SQLite registry is protected by its file's permissions\n"
    )
