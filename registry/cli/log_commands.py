"""Commands over the log itself: init, history, verify, db."""
from __future__ import annotations

import json
from typing import Iterable

import click

from registry.app import Registry
from registry.formats.errors import UserError
from registry.events.database import current_revision, head_revision
from registry.formats.digests import is_sha256
from registry.formats.text import one_line, quoted_text

from .session import Session, closes_with_the_command, pass_session
from .output import EXIT_NO, emit_json, exit_status_ahead, json_text, say, short, table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def init(session: Session, as_json: bool) -> None:
    """Create the registry database, or upgrade it to this version's schema.

    Example:

    \b
      registry --db sqlite:///registry.db init
    """
    registry = session.open(create=True)
    revision = current_revision(registry.engine)
    where = registry.engine.url.render_as_string(hide_password=True)
    if as_json:
        emit_json({"database": where, "revision": revision})
    else:
        say(f"registry ready at {where} (schema {revision})")


def open_for_reading(session: Session) -> Registry:
    """The registry for a command that only reads the log: a SQLite file is opened read-only (mode=ro)."""
    return session.open(read_only=True)


def _contract_why(event, changes: list) -> str:
    """A redeclared contract as what changed, old -> new per field (`history --json` prints it whole)."""
    listed = "; ".join(f"{c.path} {_value(c.old)} -> {_value(c.new)}" for c in changes) or "no field changed"
    return f"contract v{event.payload['contract_version']}: {listed}"


def _value(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _why(event) -> str:
    """What a reviewer needs from one event: the decision and reasons, or the payload in short."""
    payload = event.payload
    if event.type == "WorkloadDeclared":
        return f"contract v{payload['contract_version']} declared ({payload['contract_hash'][:12]})"
    if event.type == "VerdictRendered":
        verdict = payload["verdict"]
        return f"{verdict['decision']} ({verdict['rule']}): " + " | ".join(map(one_line, verdict["reasons"]))
    if event.type == "HumanDecision":
        return f"{payload['action']} by {payload['person']}: {one_line(payload['reason'])}"
    if event.type == "EvaluationFailed":
        return f"{one_line(payload['stage'])} failed: {quoted_text(payload['error'])}"
    from registry.app.history import event_summary

    return event_summary(event) or short(payload.get("item", payload))


@click.command()
@click.argument("stream")
@click.option("--as-of", "as_of", help="Only events up to this position or ISO-8601 time (UTC when no zone).")
@click.option("--json", "as_json", is_flag=True, help="Print the full event records as JSON.")
@pass_session
def history(session: Session, stream: str, as_of: str | None, as_json: bool) -> None:
    """Show every event of STREAM in order: who, when, why, and what each verdict rested on.

    STREAM is an artifact id, or any stream name such as `workload:ID`.
    Events are read and printed a page at a time, so a stream of any length
    prints in bounded memory (the table is drawn once per page of events).

    Example:

    \b
      registry history my-kernel
      registry history workload:wan-t2v --json
    """
    from registry.app.history import contract_changes, history_pages

    registry = open_for_reading(session)
    name, pages = history_pages(registry, stream, as_of)
    if as_json:
        _emit_json_array(event.to_dict() for page in pages for event in page)
        return
    for page, changes in contract_changes(pages):
        _history_page(registry, name, page, changes)


def _emit_json_array(items: Iterable[dict]) -> None:
    """A JSON array written one element at a time: the same text `emit_json` gives for the whole list."""
    click.echo("[")
    previous = None
    for item in items:
        if previous is not None:
            click.echo(previous + ",")
        # JSON text holds a newline only between tokens (inside strings it is escaped), so indenting lines is exact.
        previous = "\n".join("  " + line for line in json_text(item).split("\n"))
    if previous is not None:
        click.echo(previous)
    click.echo("]")


def _history_page(registry: Registry, name: str, events: list, changes: dict[int, list]) -> None:
    """One page of the history table, then what each verdict on it rested on."""
    from registry.app.history import cited_record, other_streams, verdict_bases

    table(
        name,
        ["pos", "ver", "type", "time (UTC)", "actor", "why / what"],
        (
            (e.position, e.version, e.type, e.recorded_at.strftime("%Y-%m-%d %H:%M:%S"), e.actor,
             _contract_why(e, changes[e.position]) if e.position in changes else _why(e))
            for e in events
        ),
    )
    for basis in verdict_bases(registry, events):
        event = basis.verdict
        listed = ", ".join(f"{e.type}@{e.position}" if e else "missing!" for e in basis.rested_on) or "no evidence"
        say(f"verdict at {event.position} rested on: {listed} "
            f"(contract v{event.payload['contract_version']}, {event.payload['gate_version']})")
        for other in other_streams(basis, name):
            say(f"  {other.text()}")
        record = cited_record(registry, basis)
        for line in record.lines() if record is not None else []:
            say(f"  {line}")


def parse_head(text: str) -> tuple[int, str]:
    """--expect-head POSITION:HASH, as `verify` prints a head."""
    position, _, digest = text.strip().partition(":")
    if not (position.isascii() and position.isdigit()) or not is_sha256(digest):
        raise UserError(f"--expect-head {text!r} is not POSITION:HASH (a log position, a colon and the 64 lowercase "
                         "hex digits of its chain hash, as `registry verify` prints the head)")
    return int(position), digest


@click.command()
@click.option("--expect-head", "expect_head", metavar="POSITION:HASH",
              help="A head noted before (from `verify`, a lock file): the log must still hold that hash at that "
                   "position. The chain alone cannot see events cut off its end.")
@click.option("--install", "check_install_files", is_flag=True,
              help="Check the installed registry package (.pyc files included) and the interpreter's start-up "
                   "hooks against the digest manifest written at install time, instead of the log.")
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False), metavar="PATH",
              help="With --install: the manifest to compare with (default: registry-install-manifest.json at the "
                   "environment's root).")
@click.option("--expect-manifest", "expect_manifest", metavar="SHA256",
              help="With --install: the manifest's own digest, as `install-manifest` printed it; a manifest "
                   "rewritten since does not pass.")
@click.option("--json", "as_json", is_flag=True, help="Print the result, with the head seen, as JSON.")
@pass_session
def verify(session: Session, expect_head: str | None, check_install_files: bool, manifest: str | None,
           expect_manifest: str | None, as_json: bool) -> None:
    """Walk the hash chain and the order of times; print the head; exit 3 at the first break.

    Checks every link, that positions run 1..N, that no event is recorded
    earlier than the one before it, and (with --expect-head) that the log
    still holds a head noted before. With --install it checks the installed
    code instead and says in one line what differs (exit 3).
    """
    if check_install_files:
        _verify_install(manifest, expect_manifest, expect_head, as_json)
        return
    if manifest is not None or expect_manifest is not None:
        raise UserError("--manifest and --expect-manifest go with --install")
    expected = None if expect_head is None else parse_head(expect_head)
    registry = open_for_reading(session)
    report = registry.store.verify(expect_head=expected)
    exit_status_ahead(0 if report.intact else EXIT_NO)
    head = f"{report.head_position}:{report.head_hash}"
    if as_json:
        emit_json(
            {"intact": report.intact, "count": report.count, "head": {"position": report.head_position,
                                                                      "hash": report.head_hash},
             "head_hash": report.head_hash, "expected_head": None if expected is None else
             {"position": expected[0], "hash": expected[1]}, "broken_at": report.broken_at, "problem": report.problem}
        )
    elif report.intact:
        holds = f"; it holds the expected head {expected[0]}:{expected[1]}" if expected is not None else ""
        say(f"chain intact: {report.count} events, head {head}{holds}")
    else:
        click.echo(f"chain broken at position {report.broken_at}: {report.problem}", err=True)
    if not report.intact:
        raise SystemExit(EXIT_NO)


def _verify_install(manifest: str | None, expect_manifest: str | None, expect_head: str | None,
                    as_json: bool) -> None:
    from pathlib import Path

    from registry.app.install import check_install

    if expect_head is not None:
        raise UserError("--expect-head checks the log; --install checks the installed code: give one")
    if expect_manifest is not None and not is_sha256(expect_manifest):
        raise UserError(f"--expect-manifest {expect_manifest!r} is not the 64 lowercase hex digits of a SHA-256")
    report = check_install(None if manifest is None else Path(manifest), expect_sha256=expect_manifest)
    exit_status_ahead(0 if report.intact else EXIT_NO)
    if as_json:
        emit_json({"intact": report.intact, "manifest": str(report.path), "manifest_sha256": report.sha256,
                   "files": report.files, "differences": report.differences})
    elif report.intact:
        say(report.summary())
    else:
        click.echo(report.summary(), err=True)
    if not report.intact:
        raise SystemExit(EXIT_NO)


@click.command("install-manifest")
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False), metavar="PATH",
              help="Where to write it (default: registry-install-manifest.json at the environment's root).")
def install_manifest(manifest: str | None) -> None:
    """Compile the installed registry package and write its digest manifest; print the manifest's digest.

    The install step (`make install`) runs it after pip. Note the digest it
    prints: `verify --install --expect-manifest` then refuses a manifest
    rewritten since, by anyone who could write the environment.
    """
    from pathlib import Path

    from registry.app.install import write_manifest

    written = write_manifest(None if manifest is None else Path(manifest))
    say(f"install manifest {written.path}: {written.files} files, sha256 {written.sha256}")


@click.group()
def db() -> None:
    """Schema management (Alembic)."""


@db.command("upgrade")
@pass_session
def db_upgrade(session: Session) -> None:
    """Upgrade an existing registry's schema to this version's head (`init` creates one)."""
    registry = session.open(upgrading=True)
    say(f"schema at {current_revision(registry.engine)}")


@db.command("current")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def db_current(session: Session, as_json: bool) -> None:
    """Print the database's schema revision and this code's head; reads only, creates nothing."""
    from registry.events.database import make_engine, resolve_url

    engine = make_engine(resolve_url(session.url), read_only=True)
    closes_with_the_command(engine.dispose)
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


COMMANDS = [init, history, verify, install_manifest, db]
