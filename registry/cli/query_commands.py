"""Commands that read projections: show, report, replay."""
from __future__ import annotations

import sys

import click

from registry.formats.text import one_line, quoted_text
from .output import (EXIT_NO, emit_json, exit_status_ahead, newline_terminated, output_path, say, table, tables_text,
                     write_output)
from .params import Integer
from .session import Session, pass_session

REPORT_FORMATS = ("table", "json", "csv", "html")

AS_OF_HELP = "Answer from the log up to this position or ISO-8601 time (UTC when no zone)."
# How many of an artifact's latest verdicts `show` lists unless --verdicts says otherwise: an artifact judged
# a hundred thousand times must not make show hold or print every verdict (`history` lists them all).
SHOWN_VERDICTS = 20
# The most --verdicts may ask for: a database row limit is a signed 64-bit integer, and any count at or above
# an artifact's number of verdicts lists them all.
MOST_SHOWN_VERDICTS = 2**63 - 1


def bench_text(bench: dict) -> str:
    """One line on a benchmark record: pairs, sessions, and (under the confident rule) its reading."""
    head = f"speed record of these bytes: {bench['pairs']} pairs"
    if bench["reading"] is None:
        return f"{head}; not read ({bench['stop']})"

    def bound(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}x"

    speedup = "" if bench.get("speedup") is None else (
        f"speedup {bench['speedup']:.4g}x over the {bench['speedup_pairs']} pairs read"
        + (f" up to the {bench['speedup_source']} that decided" if bench["decided_at"] else "")
        + f" ({bench['speedup_method']}); ")
    aside = f"; {bench['set_aside_pairs']} pairs set aside (not speed evidence)" if bench.get("set_aside_pairs") else ""
    return (f"{head}; {speedup}{bench['shows']} ({bench['stop']}"
            + (f" at pair {bench['decided_at']}" if bench["decided_at"] else f", max_pairs {bench['max_pairs']}")
            + f"); running bounds{' at pair ' + str(bench['decided_at']) if bench['decided_at'] else ''} "
              f"{bound(bench['lower'])} to {bound(bench['upper'])} (two-sided "
              f"{bench['level']:.0%}) against the gate {bench['gate']:.4g}x at alpha {bench['alpha']:g} per side"
            + aside)


@click.command()
@click.argument("artifact_id")
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the artifact's state as JSON.")
@click.option("--verdicts", "shown_verdicts", type=Integer(min=0, max=MOST_SHOWN_VERDICTS), default=SHOWN_VERDICTS, show_default=True,
              help="How many of the artifact's latest verdicts to list, with the count of all of them "
                   "(`registry history artifact:ID` lists every one).")
@click.option("--documents", "every_entry", is_flag=True,
              help="List every entry (session batch or benchmark document) of its bytes' speed record, not only the "
                   "latest few.")
@pass_session
def show(session: Session, artifact_id: str, as_of: str | None, as_json: bool, shown_verdicts: int,
         every_entry: bool) -> None:
    """Show ARTIFACT_ID's state, latest verdict, margins, speedup, evidence and latest verdicts.

    Example:

    \b
      registry show my-kernel
      registry show my-kernel --as-of 120 --json
      registry show my-kernel --documents
    """
    from registry.app.show import show_artifact

    from .monitor_commands import monitor_text

    shown = show_artifact(session.open(), artifact_id, shown_verdicts, as_of, every_entry)
    if as_json:
        emit_json(shown.to_dict())
        return
    state, verdict_count, note, bench = shown.state, shown.verdict_count, shown.contract_note, shown.bench
    declared, monitor = shown.workload_declared, shown.monitor
    from registry.projections.headline import headline, margin_rows, parity_text

    shown_as = headline(state)
    say(f"{artifact_id}: {shown_as['text'].upper() if not shown_as['regressed'] else _regressed_text(shown_as)}  "
        f"({state['kind']} for workload {state['workload']}, tier {state['tier'] or '-'}, "
        f"payload {state['payload_sha256'] or 'none'})")
    if not declared:
        say(f"  held: workload {state['workload']} has no declared contract; nothing can be decided until one is")
    held = "no speed record (no payload)" if state["payload_sha256"] is None else "no speed record yet"
    record = held if bench is None else (f"its bytes' speed record holds {len(bench['sessions'])} session(s) and "
                                         f"{bench['documents']} complete document(s)")
    say(f"  identity {state['identity']}: {state['benchmark_attempts']} benchmark attempt(s); {record}"
        + (f", verdict under contract v{state['contract_version']}" if state["contract_version"] else ""))
    changed = state["identity_changed"]
    if changed:
        fields = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed["changes"].items())
        if changed.get("returned"):
            say(f"  identity changed at position {changed['position']} ({fields}): these claims were registered "
                "before, so their own evidence, failures, attempts and verdict count again")
        else:
            say(f"  identity changed at position {changed['position']} ({fields}): "
                "earlier evidence and verdicts stay in history and no longer count")
    if note:
        say(f"  {note} (see `registry what-if`)")
    if state["decided_by"] == "human" and state["human"]:
        human = state["human"]
        say(f"  {human['action']} by {human['person']}: {one_line(human['reason'])}")
    for reason in state["reasons"] or []:
        say(f"  - {one_line(reason)}")
    parity = parity_text(state)
    if parity:
        say(f"  {parity}")
    if state["margins"]:
        table("margins", ["metric", "value", "threshold", "margin", "meets the threshold"], margin_rows(state))
    if state["speedup"] is not None:
        from registry.projections.report import speedup_text

        say("  " + speedup_text({**(state["verdict"] or {}), "speedup": state["speedup"],
                                 "speedup_ci": state["speedup_ci"]}))
    if bench is not None:
        say("  " + bench_text(bench))
        _say_entries(shown.entries, bench["entries"])
    if monitor is not None:
        say("  " + monitor_text(monitor).replace("\n", "\n  "))
    if state["evidence"]:
        table("evidence (latest of each kind, current payload)", ["kind", "event", "position"],
              ((kind, found["event_id"], found["position"]) for kind, found in sorted(state["evidence"].items())))
    for failure in state["open_failures"]:
        say(f"  open failure at {one_line(failure['stage'])}: {quoted_text(failure['error'])}")
    _say_verdicts(state, verdict_count)


def _say_entries(entries: list[dict], count: int) -> None:
    """The speed record's listed entries, latest last, saying how many it holds when not all are listed."""
    if not entries:
        return
    title = ("speed record entries" if len(entries) == count else
             f"speed record entries (latest {len(entries)} of {count}; --documents lists every one)")
    table(title, ["position", "source", "event", "artifact"],
          ((entry["position"], entry["source"], entry["event_id"], entry["artifact"]) for entry in entries))


def _regressed_text(shown_as: dict) -> str:
    """`PROMOTED, REGRESSED (...)`: the state words upper-case, the monitor's detail as it is."""
    words, _, detail = shown_as["text"].partition(" (")
    return f"{words.upper()} ({detail}"


def _say_verdicts(state: dict, verdict_count: int) -> None:
    """The latest verdicts as a table, and how many there are in all."""
    from registry.app.show import history_command

    shown = state["verdicts"]
    if not verdict_count:
        return
    title = (f"verdicts ({verdict_count})" if len(shown) == verdict_count else
             f"verdicts: the latest {len(shown)} of {verdict_count} (`{history_command(state['artifact'])}` lists all)")
    if not shown:
        say(f"  {title}")
        return
    table(title, ["position", "decision", "rule", "identity", "recorded at"],
          ((v["position"], v["decision"], v["rule"], (v["identity"] or "-")[:12], v["recorded_at"]) for v in shown))


@click.command()
@click.option("--workload", "workload_id", help="Only this workload.")
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--format", "fmt", type=click.Choice(REPORT_FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the same as --format json).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write to this file (any format) instead of standard output.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (never a registry).")
@click.option("--matrix", "matrix_only", is_flag=True,
              help="Only the support matrix: workloads (by model family) against GPU architectures.")
@click.option("--stale-days", type=Integer(min=0), default=30, show_default=True,
              help="Support matrix: a cell whose latest evidence is older than this is marked stale.")
@click.option("--arch", "archs", multiple=True, help="Support matrix: always show this architecture's column.")
@pass_session
def report(session: Session, workload_id: str | None, as_of: str | None, fmt: str | None, as_json: bool,
           out: str | None, force: bool, matrix_only: bool, stale_days: int, archs: tuple[str, ...]) -> None:
    """Leaderboard, what the gate caught, near misses, what waits for a person, imported verdicts
    beside the registry's, and the support matrix (--matrix for the matrix alone).

    Example:

    \b
      registry report
      registry report --format html --out report.html
    """
    from registry.app.reports import build
    from registry.projections import resolve_as_of
    from registry.projections.report import report_csv, report_json, report_tables

    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json asks for JSON but --format asks for {fmt}; give one of them")
    fmt = "json" if as_json else fmt or "table"
    if out:
        output_path(out, force)
    registry = session.open()
    position = resolve_as_of(registry.store, as_of)
    built, state = build(registry, workload=workload_id, position=position, stale_days=stale_days, archs=archs)
    if matrix_only:
        matrix = built["matrix"]
        tables = [_matrix_table(matrix)]
        documents = {"json": lambda: report_json(matrix), "csv": lambda: _matrix_csv(matrix),
                     "html": lambda: _matrix_page(matrix)}
    else:
        tables = report_tables(built)
        documents = {"json": lambda: report_json(built), "csv": lambda: report_csv(built),
                     "html": lambda: _report_page(registry, built, state, position)}
    if fmt == "table" and not out:
        for spec in tables:
            table(*spec)
        return
    text = newline_terminated(tables_text(tables) if fmt == "table" else documents[fmt]())
    if out:
        write_output(out, text, force=force)
        say(f"report written to {out}")
    else:
        sys.stdout.write(text)


def _matrix_table(matrix: dict):
    from registry.projections.report import matrix_table

    return matrix_table(matrix)


def _matrix_csv(matrix: dict) -> str:
    from registry.projections.matrix import matrix_csv

    return matrix_csv(matrix)


def _report_page(registry, report: dict, state, position: int | None) -> str:
    from registry.app.artifact_page import report_pages
    from registry.projections.html_report import report_html  # matplotlib, only for the page that plots

    pages, more = report_pages(registry, [a["artifact"] for a in state.artifacts.values()
                                          if a["workload"] in report["workloads"]], position)
    return report_html(report, state, pages=pages, pages_left_out=more)


def _matrix_page(matrix: dict) -> str:
    from registry.projections.html_report import matrix_grid, page

    return page("Support matrix", [matrix_grid(matrix)])


@click.command()
@click.option("--verify", "check", is_flag=True, help="Rebuild into scratch and compare with the live projections.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def replay(session: Session, check: bool, as_json: bool) -> None:
    """Rebuild every projection from the log; with --verify, exit 3 on any difference."""
    from registry.app.replay import rebuild_read_models, verify_read_models

    registry = session.open()
    if not check:
        # Every row replaced by a fresh fold: a damaged or stale read model is rebuilt, not caught up.
        result = rebuild_read_models(registry)
        emit_json(result) if as_json else say(f"rebuilt from {result['events']} events: {result['artifacts']} artifacts")
        return
    outcome = verify_read_models(registry)
    exit_status_ahead(0 if outcome.ok else EXIT_NO)
    if as_json:
        emit_json(outcome.to_dict())
    elif outcome.ok:
        say(f"projections verified: {outcome.summary()}")
    else:
        click.echo(f"projections differ from a rebuild: {outcome.summary()}", err=True)
    if not outcome.ok:
        sys.exit(EXIT_NO)


COMMANDS = [show, report, replay]
