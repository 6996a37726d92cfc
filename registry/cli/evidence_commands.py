"""Commands that measure or import evidence: evidence import, evaluate, kernels."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .session import Session, pass_session
from .output import emit_json, say, table
from .progress import progress_bar

EXIT_EVALUATION_FAILED = 4


@click.group()
def evidence() -> None:
    """Evidence about artifacts."""


@evidence.command("import")
@click.argument("document", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def evidence_import(session: Session, document: str, as_json: bool) -> None:
    """Record a registry.evidence/1 DOCUMENT (all of it, or nothing)."""
    from registry.app.evidence import import_document
    from registry.evidence.document import read_document_file

    artifact, positions = import_document(session.open(), read_document_file(document))
    if as_json:
        emit_json({"artifact": artifact, "positions": positions})
    else:
        say(f"recorded {len(positions)} evidence events for {artifact} (positions {positions[0]}-{positions[-1]})")


@evidence.command("frames")
@click.argument("artifact_id")
@click.option("--reference", "frame_set", required=True, help="Registered frame set to compare against.")
@click.option("--candidate", "candidate_path", required=True, type=click.Path(exists=True),
              help="The candidate's frames (.npy, .npz or a directory of PNGs).")
@click.option("--reference-path", type=click.Path(exists=True),
              help="Where the reference pixels are (default: where they were registered from).")
@click.option("--seed", type=int, help="Seed the candidate frames were generated with (must match the frame set's).")
@click.option("--vbench", type=float, help="A VBench score measured by an isolated stage, in [0, 1].")
@click.option("--lpips-backbone", type=click.Path(exists=True, dir_okay=False), envvar="REGISTRY_LPIPS_BACKBONE",
              help="AlexNet backbone weights for LPIPS (else LPIPS is reported absent).")
@click.option("--lpips-sha256", help="Declared sha256 of a backbone that is not torchvision's published file.")
@click.option("--run", "run_id", help="Run id (idempotency key).")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence item as JSON.")
@pass_session
def evidence_frames(session: Session, artifact_id: str, frame_set: str, candidate_path: str, reference_path: str | None,
                    seed: int | None, vbench: float | None, lpips_backbone: str | None, lpips_sha256: str | None,
                    run_id: str | None, as_json: bool) -> None:
    """Measure ARTIFACT_ID's frames against a registered frame set and record perceptual evidence."""
    from registry.app.frames import load_reference, measure_against_reference, record_frames_evidence, registered_frames
    from registry.app.workloads import registration
    from registry.evidence.frames import load_frames

    registry = session.open()
    registration(registry, artifact_id)
    registered = registered_frames(registry, frame_set)
    source = reference_path or registered["source"]
    if not source:
        raise ValueError(f"frame set {frame_set} records no source path; give --reference-path")
    registered, reference = load_reference(registry, frame_set, source)
    candidate = load_frames(candidate_path)
    with progress_bar(f"measuring {artifact_id}") as update:
        item = measure_against_reference(registered, reference, candidate,
                                         seed=registered["seed"] if seed is None else seed, vbench=vbench,
                                         lpips_backbone=lpips_backbone, lpips_sha256=lpips_sha256, progress=update)
    positions = record_frames_evidence(registry, artifact_id, item, run_id)
    if as_json:
        emit_json({"artifact": artifact_id, "position": positions[0], "evidence": item})
        return
    worst = min(item["ssim"])
    say(f"recorded perceptual evidence for {artifact_id} at position {positions[0]}: worst SSIM {worst:.4f} "
        f"(frame {item['ssim'].index(worst)}) over {item['frames']} frames")
    for metric, why in (item.get("absent") or {}).items():
        say(f"  {metric} absent: {why}")


@click.command()
@click.argument("artifact_id")
@click.option("--runs", type=click.IntRange(min=2), help="Timed runs per arm (default: the contract's speed.runs_per_arm).")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True, help="Untimed warm-up calls per arm.")
@click.option("--corpus", type=click.Choice(["cpu", "gpu"]), help="Shape corpus (default: gpu with CUDA, else cpu).")
@click.option("--emit", type=click.Path(dir_okay=False), help="Write an evidence-import file instead of appending.")
@click.option("--run", "run_id", help="Run id (idempotency key for the appended evidence).")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence items as JSON.")
@pass_session
def evaluate(session: Session, artifact_id: str, runs: int | None, warmup: int, corpus: str | None,
             emit: str | None, run_id: str | None, as_json: bool) -> None:
    """Run ARTIFACT_ID's kernel against its reference and record parity, timing and execution.

    Any stage that fails is recorded as an EvaluationFailed event naming the
    stage and the error, and the command exits 4.
    """
    from registry.app.evidence import record_evidence
    from registry.app.kernels import evaluate_artifact
    from registry.evidence.document import parse_document

    registry = session.open()
    with progress_bar(f"evaluating {artifact_id}") as update:
        items = evaluate_artifact(registry, artifact_id, corpus=corpus, runs=runs, warmup=warmup, progress=update)
    from registry.kernels.evaluate import evidence_document

    document = evidence_document(artifact_id, items, run=run_id)
    parsed = parse_document(document)
    if emit:
        Path(emit).write_text(json.dumps(document, indent=2, sort_keys=True, allow_nan=False), encoding="utf-8")
        say(f"evidence for {artifact_id} written to {emit} (import it with `registry evidence import`)")
    else:
        positions = record_evidence(registry, artifact_id, parsed.items, run_id)
        if as_json:
            emit_json({"artifact": artifact_id, "positions": positions, "evidence": parsed.items})
        else:
            say(f"recorded {len(positions)} events for {artifact_id}")
    failures = [item for item in parsed.items if item["kind"] == "failure"]
    for failure in failures:
        click.echo(f"evaluation failed at {failure['stage']}: {failure['error']}", err=True)
    if not as_json and not failures:
        for item in parsed.items:
            if item["kind"] == "benchmark":
                d = item["derived"]
                say(f"  {item['timer']} on {item['device']}: speedup {d['speedup']:.3f}x over {d['runs_per_arm']} pairs")
            if item["kind"] == "parity":
                say(f"  parity ({item.get('policy')}): all byte-equal {item['derived']['all_byte_equal']}")
    if failures:
        sys.exit(EXIT_EVALUATION_FAILED)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the operations as JSON.")
def kernels(as_json: bool) -> None:
    """List the built-in operations, their references, cost models and kernel entries."""
    from registry.app.kernels import prepare_triton

    prepare_triton()
    from registry.kernels.ops import list_operations

    ops = [{"name": op.name, "reference": op.reference, "kernels": list(op.kernels), "outputs": list(op.outputs),
            "cost_model": op.cost_model} for op in list_operations()]
    if as_json:
        emit_json(ops)
        return
    table("operations", ["name", "reference", "kernel entries", "cost model"],
          ((op["name"], op["reference"], "\n".join(op["kernels"]), op["cost_model"]) for op in ops))


COMMANDS = [evidence, evaluate, kernels]
