"""Commands that measure or import evidence: evidence import, evaluate, kernels."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .session import Session, pass_session
from .output import EXIT_FAILURE_RECORDED, emit_json, exit_status_ahead, output_path, say, table, write_output
from .params import Integer, Real, name_value, seed_value
from .progress import progress_bar

if TYPE_CHECKING:
    from registry.app.evidence import Recorded



@click.group()
def evidence() -> None:
    """Evidence about artifacts."""


@evidence.command("import")
@click.argument("document", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def evidence_import(session: Session, document: str, as_json: bool) -> None:
    """Record a registry.evidence/1 DOCUMENT (all of it, or nothing).

    Example:

    \b
      registry evidence import run-42.json
    """
    from registry.app.evidence import import_document
    from registry.formats.evidence.document import read_document_file

    artifact, recorded = import_document(session.open(), read_document_file(document))
    if as_json:
        emit_json({"artifact": artifact, "positions": recorded.positions, "appended": recorded.appended})
    else:
        say(recorded_text(recorded, artifact))


def recorded_text(recorded: Recorded, artifact: str) -> str:
    """What an evidence append did: the events it recorded, or that the run was already there."""
    positions = recorded.positions
    where = f"position {positions[0]}" if len(positions) == 1 else f"positions {positions[0]}-{positions[-1]}"
    if recorded.appended:
        return f"recorded {len(positions)} evidence event{'s' if len(positions) > 1 else ''} for {artifact} ({where})"
    return f"nothing new recorded: this run of {artifact} is already in the log ({where})"


@evidence.command("frames")
@click.argument("artifact_id")
@click.option("--reference", "frame_set", required=True, help="Registered frame set to compare against.")
@click.option("--candidate", "candidate_path", required=True, type=click.Path(exists=True),
              help="The candidate's frames (.npy, .npz or a directory of PNGs).")
@click.option("--reference-path", type=click.Path(exists=True),
              help="Where the reference pixels are (default: where they were registered from).")
@click.option("--seed", type=Integer(), callback=seed_value,
              help="Seed the candidate frames were generated with (must match the frame set's).")
@click.option("--vbench", type=Real(), help="A VBench score measured by an isolated stage, in [0, 1].")
@click.option("--lpips-backbone", type=click.Path(exists=True, dir_okay=False), envvar="REGISTRY_LPIPS_BACKBONE",
              help="AlexNet backbone weights for LPIPS (else LPIPS is reported absent).")
@click.option("--lpips-sha256", help="Declared sha256 of a backbone that is not torchvision's published file.")
@click.option("--run", "run_id", callback=name_value,
              help="Run id (idempotency key; a name as in docs/names.md). The same run twice records it once.")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence item as JSON.")
@pass_session
def evidence_frames(session: Session, artifact_id: str, frame_set: str, candidate_path: str, reference_path: str | None,
                    seed: int | None, vbench: float | None, lpips_backbone: str | None, lpips_sha256: str | None,
                    run_id: str | None, as_json: bool) -> None:
    """Measure ARTIFACT_ID's frames against a registered frame set and record perceptual evidence.

    The evidence is recorded for the registration the artifact had when the
    measurement started; if it was re-registered meanwhile, nothing is recorded.
    """
    from registry.app.frames import measure_frames

    with progress_bar(f"measuring {artifact_id}") as update:
        measured = measure_frames(session.open(), artifact_id, frame_set=frame_set, candidate_path=candidate_path,
                                  reference_path=reference_path, seed=seed, vbench=vbench,
                                  lpips_backbone=lpips_backbone, lpips_sha256=lpips_sha256, run=run_id,
                                  progress=update)
    item, recorded = measured.item, measured.recorded
    if as_json:
        emit_json({"artifact": artifact_id, "position": recorded.positions[0], "appended": recorded.appended,
                   "evidence": item})
        return
    worst = min(item["ssim"])
    say(recorded_text(recorded, artifact_id))
    say(f"  worst SSIM {worst:.4f} (frame {item['ssim'].index(worst)}) over {item['frames']} frames")
    for metric, why in (item.get("absent") or {}).items():
        say(f"  {metric} absent: {why}")


@click.command()
@click.argument("artifact_id")
@click.option("--runs", type=Integer(min=2),
              help="Timed runs per arm (default: the contract's speed.runs_per_arm); under a confident contract, "
                   "the most pairs this benchmark session times (default: until decided or speed.max_pairs).")
@click.option("--warmup", type=Integer(min=0), default=2, show_default=True, help="Untimed warm-up calls per arm.")
@click.option("--corpus", type=click.Choice(["cpu", "gpu"]), help="Shape corpus (default: gpu with CUDA, else cpu).")
@click.option("--emit", type=click.Path(dir_okay=False), help="Write an evidence-import file instead of appending.")
@click.option("--force", is_flag=True, help="Replace an existing --emit file (never a registry).")
@click.option("--run", "run_id", callback=name_value,
              help="Run id (idempotency key for the appended evidence; a name as in docs/names.md).")
@click.option("--server", "server_url", metavar="URL",
              help="Record through this `registry serve` (with --token): this host needs no database access.")
@click.option("--token", envvar="REGISTRY_TOKEN", help="The token for --server (else $REGISTRY_TOKEN): ingest scope "
                                                      "for the artifact's workload.")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence items as JSON.")
@click.option("--insecure-no-sandbox", is_flag=True,
              help="Run the candidate as this user, outside the sandbox, where the machine has none; "
                   "the evidence says so and the gate holds it.")
@click.option("--bundle", type=click.Path(file_okay=False), help="A triton_kernel's bundle directory (the one it "
              "was registered from): its cubins are launched by the registry's launcher on a CUDA device.")
@pass_session
def evaluate(session: Session, artifact_id: str, runs: int | None, warmup: int, corpus: str | None,
             emit: str | None, force: bool, run_id: str | None, server_url: str | None, token: str | None,
             as_json: bool, insecure_no_sandbox: bool, bundle: str | None) -> None:
    """Run ARTIFACT_ID's kernel against its reference and record parity, timing and execution.

    The evidence is recorded for the registration captured before the kernel
    ran (with --emit, the file names that payload); if the artifact was
    re-registered meanwhile, nothing is recorded. The kernel runs in a
    sandboxed worker process (its own namespaces, uid, limits and syscall
    filter) that never sees the expected outputs, the clock, the database or
    the keys; the baseline runs in a second one. A machine that cannot build
    the sandbox is refused in one line unless --insecure-no-sandbox is given. Under a
    contract with speed.decision confident the pairs go to a benchmark session
    two at a time, and timing stops as soon as the record is decided (or at
    speed.max_pairs); the pairs saved are printed. Any stage that
    fails, and any check that catches the candidate cheating (the error names
    the technique class; docs/kernels.md, "Threat model"), is recorded as an
    EvaluationFailed event naming the stage and the error, and the command
    exits 4.
    """
    from registry.app.kernels import evaluate_artifact

    if server_url is not None:
        _evaluate_through(server_url, token, artifact_id, runs, warmup, corpus, emit, run_id, as_json,
                          insecure_no_sandbox, bundle)
        return
    if emit:
        output_path(emit, force, "--emit")
    with progress_bar(f"evaluating {artifact_id}") as update:
        evaluation = evaluate_artifact(session.open(), artifact_id, corpus=corpus, runs=runs, warmup=warmup,
                                       run=run_id, record=emit is None, progress=update,
                                       insecure_no_sandbox=insecure_no_sandbox, bundle=bundle)
    failures = evaluation.failures
    exit_status_ahead(EXIT_FAILURE_RECORDED if failures else 0)
    if emit:
        write_output(emit, json.dumps(evaluation.document, indent=2, sort_keys=True, allow_nan=False),
                     force=force, option="--emit")
        say(f"evidence for {artifact_id} written to {emit} (import it with `registry evidence import`)")
    elif as_json:
        recorded = evaluation.recorded
        emit_json({"artifact": artifact_id, "positions": recorded.positions, "appended": recorded.appended,
                   "evidence": evaluation.items, "session": evaluation.session})
    else:
        say(recorded_text(evaluation.recorded, artifact_id))
    for failure in failures:
        click.echo(failure_line(failure), err=True)
    if not as_json and not failures:
        for item in evaluation.items:
            if item["kind"] == "benchmark":
                d = item["derived"]
                say(f"  {item['timer']} on {item['device']}: speedup {d['speedup']:.3f}x over {d['runs_per_arm']} pairs")
            if item["kind"] == "parity":
                say(f"  parity ({item.get('policy')}): all byte-equal {item['derived']['all_byte_equal']}")
        if evaluation.session is not None:
            say(session_text(evaluation.session))
    if failures:
        sys.exit(EXIT_FAILURE_RECORDED)


def _evaluate_through(server_url: str, token: str | None, artifact_id: str, runs: int | None, warmup: int,
                      corpus: str | None, emit: str | None, run_id: str | None, as_json: bool,
                      insecure_no_sandbox: bool, bundle: str | None) -> None:
    """`evaluate --server`: measured here, every read and append through the server (registry/serve/client.py)."""
    from registry.formats.errors import UserError
    from registry.serve.client import RegistryClient, evaluate_through

    if emit or not token:
        raise UserError("--server records through the server: give --token (or $REGISTRY_TOKEN), and no --emit")
    with RegistryClient(server_url, token) as client, progress_bar(f"evaluating {artifact_id}") as update:
        result = evaluate_through(client, artifact_id, corpus=corpus, runs=runs, warmup=warmup, run=run_id,
                                  progress=update, insecure_no_sandbox=insecure_no_sandbox, bundle=bundle)
    failures = [item for item in result["evidence"] if item["kind"] == "failure"]
    exit_status_ahead(EXIT_FAILURE_RECORDED if failures else 0)
    if as_json:
        emit_json({"artifact": artifact_id, **result})
    else:
        where = result["positions"]
        say(f"recorded {len(where)} evidence event(s) for {artifact_id} through {server_url} "
            f"(positions {where[0]}-{where[-1]})" if result["appended"] else
            f"nothing new recorded: this run of {artifact_id} is already in the log")
        if result["session"] is not None:
            say(session_text(result["session"]))
    for failure in failures:
        click.echo(failure_line(failure), err=True)
    if failures:
        sys.exit(EXIT_FAILURE_RECORDED)


def failure_line(failure: dict) -> str:
    """An evaluation's failure as one line: the candidate's error quoted, so its text cannot add lines of its own."""
    from registry.formats.text import one_line, quoted_text

    return f"evaluation failed at {one_line(failure['stage'])}: {quoted_text(failure['error'])}"


def session_text(session: dict) -> str:
    """One line on an evaluation's benchmark session: pairs, batches, why it stopped, pairs saved."""
    from registry.app.record_summary import PHRASES

    stop = {"decided": f"the record is {PHRASES[session['reading']]}",
            "max_pairs": "the record ends undecided at speed.max_pairs",
            "limit": "--runs reached; the record stays open"}.get(session["stop"], session["stop"])
    return (f"  benchmark session {session['session']}: {session['pairs']} pairs in {session['batches']} batches, "
            f"stopped because {stop} ({session['record_pairs']} of at most {session['max_pairs']} pairs in the record, "
            f"{session['pairs_saved']} saved)")


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the operations as JSON.")
@click.pass_context
def kernels(ctx: click.Context, as_json: bool) -> None:
    """List the built-in operations, their references, cost models and kernel entries.

    `registry kernels build OUT` compiles their kernels into compiled kernel bundles.
    """
    if ctx.invoked_subcommand is not None:
        return
    from registry.app.kernels import triton_runtime

    with triton_runtime():
        from registry.kernels.ops import list_operations

        ops = [{"name": op.name, "reference": op.reference, "kernels": list(op.kernels), "outputs": list(op.outputs),
                "cost_model": op.cost_model} for op in list_operations()]
    if as_json:
        emit_json(ops)
        return
    table("operations", ["name", "reference", "kernel entries", "cost model"],
          ((op["name"], op["reference"], "\n".join(op["kernels"]), op["cost_model"]) for op in ops))


@kernels.command("build")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--op", "ops", multiple=True, help="A built-in operation to build (repeat it; default: every one).")
@click.option("--arch", "arches", multiple=True,
              help="A target to compile for, sm_90a or sm_100a (repeat it; default: both).")
@click.option("--json", "as_json", is_flag=True, help="Print each bundle's directory and digest as JSON.")
def kernels_build(out: str, ops: tuple[str, ...], arches: tuple[str, ...], as_json: bool) -> None:
    """Compile the built-in kernels into one registry.triton-kernel/1 bundle per operation under OUT.

    Triton's compiler and its bundled ptxas build every corpus case for each
    target without a GPU; OUT/<op> must not exist yet. Register a bundle with
    `registry artifact register ID --kind triton_kernel --bundle OUT/<op>`.
    """
    from registry.app.kernel_bundles import build_builtin_bundles

    built = build_builtin_bundles(out, list(ops) or None, list(arches) or None)
    rows = [{"op": op, "bundle": str(Path(out) / op), "digest": manifest.digest, "kernels": len(manifest.spec.kernels),
             "targets": list(manifest.spec.arches)} for op, manifest in built.items()]
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        say(f"{row['op']}: {row['bundle']} ({row['kernels']} kernels for {', '.join(row['targets'])}; "
            f"digest {row['digest'][:12]})")


COMMANDS = [evidence, evaluate, kernels]
