"""`registry demo`: the whole campaign on a fresh embedded registry."""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import click

from registry.formats.errors import UserError

from .session import Session, pass_session
from .output import EXIT_NO, emit_json, exit_status_ahead, say, table
from .params import Integer
from .progress import progress_bar
from .ship_commands import print_resolution


@click.command()
@click.option("--fresh", is_flag=True, help="Delete the demo's database (only one the demo created) and start over.")
@click.option("--runs", type=Integer(min=2), default=10, show_default=True,
              help="Most timed ABBA pairs per candidate: its benchmark session stops as soon as the confident "
                   "speed rule decides, or here held (the contracts' max_pairs and runs_per_arm; even).")
@click.option("--warmup", type=Integer(min=0), default=2, show_default=True, help="Untimed warm-up pairs.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="demo-out", show_default=True,
              help="Where the HTML report and frame strips go.")
@click.option("--lpips-backbone", type=click.Path(exists=True, dir_okay=False),
              envvar="REGISTRY_LPIPS_BACKBONE", help="AlexNet backbone weights; LPIPS is gated only with one.")
@click.option("--check", is_flag=True,
              help="Exit 3 if any verdict is not decided as the demo promises on this kind of machine "
                   "(CPU: the Triton kernel held on interpreter timings; CUDA GPU: judged on real timings).")
@click.option("--server", "server_url", metavar="URL",
              help="Carry the demo's campaign, all five candidates, through this `registry serve` instead (with "
                   "--token holding read, ingest, decide and admin): declared, registered, measured here, judged there.")
@click.option("--token", envvar="REGISTRY_TOKEN", help="The token for --server (else $REGISTRY_TOKEN).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@pass_session
def demo(session: Session, fresh: bool, runs: int, warmup: int, out_dir: str, lpips_backbone: str | None,
         check: bool, server_url: str | None, token: str | None, as_json: bool) -> None:
    """Run a real campaign: a tiny video DiT, five candidates, every kind of verdict.

    The demo uses its own SQLite file: demo.db in the current directory, or
    the file --db names (--db sqlite:///PATH). It never reads
    REGISTRY_DATABASE_URL. It creates that file and marks it as a demo
    registry, and writes only to (and with --fresh deletes only) a file that
    carries the mark: any other database is refused and left untouched.
    """
    from registry.app.demo import check_demo_runs, run_demo

    check_demo_runs(runs)
    if server_url is not None:
        _demo_through(server_url, token, runs, warmup, out_dir, lpips_backbone, check, as_json)
        return
    from registry.runtime import RuntimeProfile

    profile = RuntimeProfile.detect()
    log = (lambda _text: None) if as_json else say
    outcome = run_demo(session.url, actor=session.actor, fresh=fresh, runs=runs, warmup=warmup, out_dir=out_dir,
                       lpips_backbone=lpips_backbone, profile=profile, progress_factory=progress_bar, log=log)
    url, rows, problems, notes, pairs = outcome.url, outcome.rows, outcome.problems, outcome.near_gate, outcome.pairs
    out, shipping, signed = Path(out_dir), outcome.shipping, outcome.signed
    if signed is not None:
        signed.update(_load_from_signed_lock(signed, profile))
    if signed is not None and signed["loaded"] is None:
        problems.append(f"signed lock {signed['lock']}: the runtime loaded nothing from it")
    exit_status_ahead(EXIT_NO if check and problems else 0)
    if as_json:
        emit_json({"database": url, "rows": [row.to_dict() for row in rows], "problems": problems,
                   "near_gate": notes, "pairs": pairs, "report": str(outcome.report),
                   "resolve": [found.to_dict() for found in shipping], "signed_lock": signed})
    else:
        _say_campaign(rows, notes, pairs, runs)
        say(f"\nreport: {out / 'report.html'}; frame strips: {out}/*.png")
        say("look further:")
        command = f"{runnable_command()} --db {shlex.quote(url)}"
        say(f"  {command} show step-cache")
        say(f"  {command} history lossy-skip")
        say(f"  {command} report --format table")
        say(f"  {command} replay --verify")
        say(f"\nwhat would ship on this machine (bundles in {out / 'bundles'}):")
        for found in shipping:
            print_resolution(found)
        if signed is None:
            say("\nno signed lock: nothing ships on this machine")
        else:
            say(f"\nsigned lock {signed['lock']} (key {signed['key_id']}, public key {signed['public_key']}, "
                f"expires {signed['expires_at']}): the runtime loaded {signed['loaded']} from it through the "
                "trusted loader")
    _exit_on_problems(check, problems)


def _exit_on_problems(check: bool, problems: list[str]) -> None:
    if check and problems:
        for problem in problems:
            click.echo(f"unexpected: {problem}", err=True)
        sys.exit(EXIT_NO)


def _say_campaign(rows: list, notes: list[str], pairs: dict, runs: int) -> None:
    """The campaign's verdicts, the candidates near the gate, and the pairs each session timed."""
    table("demo campaign", ["artifact", "kind", "decision", "speedup (bounds)", "worst SSIM (margin)", "deciding reason"],
          (_cells(row) for row in rows))
    for note in notes:
        say(f"near the gate: {note}")
    for row in rows:
        if row.pairs == 0:
            say(f"{row.artifact}: its benchmark record was already closed ({row.stop}): nothing timed")
        elif row.pairs is not None:
            how = "decided" if row.stop == "decided" else f"stopped ({row.stop})"
            say(f"{row.artifact}: session {how} after {row.pairs} of at most {runs} pairs "
                f"({row.pairs_saved} saved)")
    say(f"pairs timed: {pairs['spent']}, where the fixed design times {pairs['fixed_design']} "
        f"({runs} per candidate): {pairs['saved']} saved")


def _cells(row) -> tuple:
    verdict = row.verdict
    speed = "-"
    if verdict["speedup"] is not None:
        ci = verdict["speedup_ci"]
        speed = f"{verdict['speedup']:.3g}x" + (f" ({ci[0]:.3g}-{ci[1]:.3g})" if ci else "")
    ssim = "-" if row.worst_ssim is None else f"{row.worst_ssim:.4f} ({row.ssim_margin:+.4f})"
    return (row.artifact, row.kind, verdict["decision"], speed, ssim, row.reason)


def _demo_through(server_url: str, token: str | None, runs: int, warmup: int, out_dir: str,
                  lpips_backbone: str | None, check: bool, as_json: bool) -> None:
    """`demo --server`: the demo's campaign, all five candidates, through a server (registry/serve/demo.py)."""
    import torch

    from registry.app.campaign import check_expectations, near_gate_notes, pairs_spent
    from registry.serve.client import RegistryClient
    from registry.serve.demo import demo_through

    if not token:
        raise UserError("--server needs --token (or $REGISTRY_TOKEN): read, ingest, decide and admin scopes")
    with RegistryClient(server_url, token) as client:
        rows = demo_through(client, runs=runs, warmup=warmup, out_dir=out_dir, lpips_backbone=lpips_backbone,
                            progress_factory=progress_bar, log=(lambda _text: None) if as_json else say)
    problems = check_expectations(rows, on_gpu=torch.cuda.is_available())
    notes, pairs = near_gate_notes(rows), pairs_spent(rows, runs)
    exit_status_ahead(EXIT_NO if check and problems else 0)
    if as_json:
        emit_json({"server": server_url, "rows": [row.to_dict() for row in rows], "problems": problems,
                   "near_gate": notes, "pairs": pairs})
    else:
        say(f"through {server_url}:")
        _say_campaign(rows, notes, pairs, runs)
        say(f"\nbundles and frame strips: {out_dir}; the verdicts and their events are on the server "
            f"(`registry history artifact:ID` against its database, or GET /api/history/artifact:ID)")
    _exit_on_problems(check, problems)


def runnable_command() -> str:
    """How to run `registry` as a printed line runs it: `registry` when that name on PATH is this installation's
    entry point, else this interpreter with `-m registry` (a venv's `registry` is often not on PATH)."""
    found = shutil.which("registry")
    beside = Path(sys.executable).with_name("registry")
    if found is not None and beside.exists() and Path(found).resolve() == beside.resolve():
        return "registry"
    return f"{shlex.quote(sys.executable)} -m registry"


COMMANDS = [demo]


def _load_from_signed_lock(signed: dict, profile) -> dict:
    """What a serving process does with the demo's signed lock: resolve from it trusting only the demo's
    public key, then import the chosen bundle through the trusted loader (docs/runtime.md)."""
    from registry.runtime import load, resolve

    answer = resolve(signed["workload"], profile, lock=signed["lock"], trusted_keys=[signed["public_key"]],
                     model=signed["model"], revision=signed["revision"], fingerprint=signed["fingerprint"])
    loaded = None
    if answer.match is not None:
        load(answer.match, trusted_root=signed["trusted_root"])()  # imports the verified entry, builds the candidate
        loaded = answer.match.artifact
    return {"loaded": loaded, "others": answer.reason_codes()}
