"""Commands that adopt another system's history: import motionkernel."""
from __future__ import annotations

import sys

import click

from .session import Session, pass_session
from .output import EXIT_NO, emit_json, exit_status_ahead, say, table



@click.group("import")
def import_group() -> None:
    """Import evidence and outcomes recorded by other systems (docs/import.md)."""


@import_group.command("motionkernel")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--check", "check_only", is_flag=True,
              help="Read and validate only; write nothing; exit 3 if a MotionKernel document cannot be read.")
@click.option("--workload", help="Workload for documents that name none (fidelity verdicts).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_session
def import_motionkernel(session: Session, paths: tuple[str, ...], check_only: bool, workload: str | None,
                        as_json: bool) -> None:
    """Import every MotionKernel JSON document in PATHS (files, or folders walked recursively).

    Raw measurements become evidence the gate judges; summaries become outcome
    records that reports show and the gate never reads. Each document is
    all-or-nothing and keyed by its SHA-256, so importing again appends nothing.
    """
    from registry.app.imports import STATUSES
    from registry.app.imports import import_motionkernel as run_import

    registry = None if check_only else session.open()
    summary = run_import(registry, paths, workload=workload, check_only=check_only, progress=_progress(as_json))
    exit_status_ahead(EXIT_NO if check_only and summary.unreadable_claims else 0)
    if as_json:
        emit_json(summary.to_dict())
    else:
        counts = summary.counts
        say(f"scanned {counts['scanned']} documents: "
            + ", ".join(f"{counts[status]} {status.replace('_', ' ')}" for status in STATUSES if counts[status])
            + (" (nothing written: --check)" if check_only else ""))
        shown = [status for status in STATUSES if counts[status]]
        table("per kind", ["kind", *shown],
              [(kind, *(found.get(status, 0) for status in shown)) for kind, found in summary.per_kind.items()])
        for result in summary.unreadable_claims:
            say(f"  unreadable: {result.path}: {result.reason}")
        for result in summary.documents:
            if result.status == "unrecognized":
                say(f"  not read: {result.path}: {result.reason}")
    if check_only and summary.unreadable_claims:
        sys.exit(EXIT_NO)


def _progress(quiet: bool):
    """One line per document on stderr while an import runs, when stderr is a terminal and not --json."""
    if quiet or not sys.stderr.isatty():
        return None

    def report(result) -> None:
        click.echo(f"{result.status}: {result.path}", err=True)

    return report


COMMANDS = [import_group]
