"""Commands that read projections: show, report, replay."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .main import Session, pass_session
from .output import emit_json, say, table

AS_OF_HELP = "Answer from the log up to this position or ISO-8601 time (UTC when no zone)."


def _state_summary(state: dict, note: str | None) -> dict:
    """The show --json document: the projected state with the decision on top."""
    return {"artifact": state["artifact"], "decision": state["decision"], "contract_note": note, **state}


@click.command()
@click.argument("artifact_id")
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the artifact's state as JSON.")
@pass_session
def show(session: Session, artifact_id: str, as_of: str | None, as_json: bool) -> None:
    """Show ARTIFACT_ID's state, latest verdict, margins, speedup and evidence."""
    from registry.projections import Projections, resolve_as_of
    from registry.projections.state import contract_note

    registry = session.open()
    position = resolve_as_of(registry.store, as_of)
    projections = Projections(registry.store)
    state = projections.artifact(artifact_id, as_of=position)
    if state is None:
        raise ValueError(f"unknown artifact {artifact_id!r}" + (f" as of position {position}" if position else ""))
    note = contract_note(state, projections.workload(state["workload"], as_of=position))
    if as_json:
        emit_json(_state_summary(state, note))
        return
    say(f"{artifact_id}: {state['decision'].upper()}  ({state['kind']} for workload {state['workload']}, "
        f"tier {state['tier'] or '-'}, payload {str(state['payload_sha256'])[:12]})")
    say(f"  identity {state['identity'][:12]}: {state['benchmark_attempts']} benchmark attempt(s)"
        + (f", verdict under contract v{state['contract_version']}" if state["contract_version"] else ""))
    changed = state["identity_changed"]
    if changed:
        fields = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed["changes"].items())
        say(f"  identity changed at position {changed['position']} ({fields}): "
            "earlier evidence and verdicts stay in history and no longer count")
    if note:
        say(f"  {note} (see `registry what-if`)")
    if state["decided_by"] == "human" and state["human"]:
        human = state["human"]
        say(f"  {human['action']} by {human['person']}: {human['reason']}")
    for reason in state["reasons"] or []:
        say(f"  - {reason}")
    if state["margins"]:
        table("margins", ["metric", "value", "threshold", "margin", "passed"],
              ((m["metric"], f"{m['value']:.6g}", f"{m['threshold']:.6g}", f"{m['margin']:+.6g}", m["passed"])
               for m in state["margins"]))
    if state["speedup"] is not None:
        ci = state["speedup_ci"]
        say(f"  speedup {state['speedup']:.3f}x" + (f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci else ""))
    if state["evidence"]:
        table("evidence (latest of each kind, current payload)", ["kind", "event", "position"],
              ((kind, found["event_id"], found["position"]) for kind, found in sorted(state["evidence"].items())))
    for failure in state["open_failures"]:
        say(f"  open failure at {failure['stage']}: {failure['error']}")


@click.command()
@click.option("--workload", "workload_id", help="Only this workload.")
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "html"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), help="Write to this file instead of standard output.")
@pass_session
def report(session: Session, workload_id: str | None, as_of: str | None, fmt: str, out: str | None) -> None:
    """Leaderboard, what the gate caught, near misses, and what waits for a person."""
    from registry.projections import Projections, resolve_as_of
    from registry.projections.report import build_report, report_csv, report_html, report_json, report_tables

    registry = session.open()
    position = resolve_as_of(registry.store, as_of)
    state = Projections(registry.store).state(as_of=position)
    built = build_report(state, workload=workload_id)
    if fmt == "table":
        for title, columns, rows in report_tables(built):
            table(title, columns, rows)
        return
    text = {"json": report_json, "csv": report_csv}.get(fmt, lambda r: report_html(r, state))(built)
    if out:
        Path(out).write_text(text, encoding="utf-8")
        say(f"report written to {out}")
    else:
        sys.stdout.write(text)


@click.command()
@click.option("--verify", "check", is_flag=True, help="Rebuild into scratch and compare with the live projections.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def replay(session: Session, check: bool, as_json: bool) -> None:
    """Rebuild every projection from the log; with --verify, exit 1 on any difference."""
    from registry.projections import Projections, rebuild, verify_projections

    registry = session.open()
    if not check:
        state = rebuild(registry.store)
        Projections(registry.store).catch_up()
        result = {"events": state.position, "artifacts": len(state.artifacts)}
        emit_json(result) if as_json else say(f"rebuilt from {result['events']} events: {result['artifacts']} artifacts")
        return
    outcome = verify_projections(registry.store)
    if as_json:
        emit_json(outcome.to_dict())
    elif outcome.ok:
        say(f"projections verified: {outcome.summary()}")
    else:
        click.echo(f"projections differ from a rebuild: {outcome.summary()}", err=True)
    if not outcome.ok:
        sys.exit(1)


COMMANDS = [show, report, replay]
