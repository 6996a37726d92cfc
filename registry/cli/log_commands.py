"""Commands over the log itself: init, history, verify, db."""
from __future__ import annotations

import click

from registry.events.database import current_revision, head_revision, upgrade

from .main import Session, pass_session
from .output import emit_json, say, short, table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def init(session: Session, as_json: bool) -> None:
    """Create the registry database, or upgrade it to this version's schema."""
    registry = session.open(create=True)
    revision = current_revision(registry.engine)
    where = registry.engine.url.render_as_string(hide_password=True)
    if as_json:
        emit_json({"database": where, "revision": revision})
    else:
        say(f"registry ready at {where} (schema {revision})")


def stream_name(name: str) -> str:
    """An artifact id, or any full stream name such as `workload:ID`."""
    return name if ":" in name else f"artifact:{name}"


@click.command()
@click.argument("stream")
@click.option("--json", "as_json", is_flag=True, help="Print the full event records as JSON.")
@pass_session
def history(session: Session, stream: str, as_json: bool) -> None:
    """Show every event of STREAM in order (an artifact id or a stream name)."""
    registry = session.open()
    events = registry.store.read_stream(stream_name(stream))
    if not events:
        raise ValueError(f"no events in stream {stream_name(stream)}")
    if as_json:
        emit_json([event.to_dict() for event in events])
        return
    table(
        stream_name(stream),
        ["pos", "ver", "type", "time (UTC)", "actor", "payload"],
        (
            (e.position, e.version, e.type, e.recorded_at.strftime("%Y-%m-%d %H:%M:%S"), e.actor, short(e.payload))
            for e in events
        ),
    )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def verify(session: Session, as_json: bool) -> None:
    """Walk the hash chain; exit 1 at the first broken link."""
    registry = session.open()
    report = registry.store.verify()
    if as_json:
        emit_json(
            {"intact": report.intact, "count": report.count, "head_hash": report.head_hash,
             "broken_at": report.broken_at, "problem": report.problem}
        )
    elif report.intact:
        say(f"chain intact: {report.count} events, head {report.head_hash}")
    else:
        click.echo(f"chain broken at position {report.broken_at}: {report.problem}", err=True)
    if not report.intact:
        raise SystemExit(1)


@click.group()
def db() -> None:
    """Schema management (Alembic)."""


@db.command("upgrade")
@pass_session
def db_upgrade(session: Session) -> None:
    """Upgrade the database schema to this version's head."""
    registry = session.open(create=True)
    say(f"schema at {current_revision(registry.engine)}")


@db.command("current")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def db_current(session: Session, as_json: bool) -> None:
    """Print the database's schema revision and this code's head."""
    from registry.events.database import make_engine, resolve_url

    engine = make_engine(resolve_url(session.url))
    revision = current_revision(engine)
    if as_json:
        emit_json({"current": revision, "head": head_revision()})
    else:
        say(f"current {revision or '(none)'}; head {head_revision()}")


@db.command("roles")
@click.option("--apply", "apply_now", is_flag=True,
              help="Run the SQL against the --db database (connect as its owner) instead of printing it.")
@pass_session
def db_roles(session: Session, apply_now: bool) -> None:
    """Print (or --apply) SQL for NOLOGIN roles registry_writer and registry_reader (Postgres).

    Workers log in as members, e.g.
    CREATE ROLE gpu_worker LOGIN PASSWORD '...' IN ROLE registry_writer;
    see docs/postgres.md.
    """
    from registry.events.roles import apply_roles, role_script

    if not apply_now:
        click.echo(role_script(), nl=False)
        return
    grants = apply_roles(session.open().engine)
    table("privileges granted", ["role", "table", "privileges"], grants)


COMMANDS = [init, history, verify, db]
