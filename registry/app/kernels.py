"""Evaluating a registered fused-kernel artifact against its operation's reference, and recording it.

Measuring and recording are one use case: the registration is captured once,
before the kernel runs, and the evidence is recorded for exactly that
registration (see app/evidence.py), or not at all.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from .context import Registry
from .evidence import capture_subject, record_evidence
from .workloads import current_contract


def prepare_triton() -> str:
    """Use Triton's interpreter when there is no GPU; must run before kernel modules import."""
    import torch

    if torch.cuda.is_available():
        return "gpu"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: its evidence document (naming the payload measured), parsed items, where they were recorded."""

    artifact: str
    document: dict[str, Any]
    items: list[dict[str, Any]]
    positions: list[int] | None  # None when the evidence was not recorded (written to a file instead)

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [item for item in self.items if item["kind"] == "failure"]


def evaluate_artifact(
    registry: Registry,
    artifact: str,
    *,
    corpus: str | None,
    runs: int | None,
    warmup: int,
    run: str | None = None,
    record: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Run the artifact's kernel entry on the corpus and record the evidence items (or the one failure item).

    With record=False nothing is appended: the document, which names the
    payload it measured, is for `registry evidence import` later.
    """
    from registry.evidence.document import parse_document

    subject = capture_subject(registry, artifact)
    registered = subject.registration
    if registered["kind"] != "fused_kernel" or not registered["entry"]:
        raise ValueError(f"artifact {artifact} has no kernel entry to evaluate (register it with --op and --entry)")
    contract = current_contract(registry, registered["workload"]).contract
    canonical = contract.canonical()
    if runs is None:
        if contract.speed is None:
            raise ValueError(f"no --runs given and workload {registered['workload']} declares no speed.runs_per_arm")
        runs = canonical["speed"]["runs_per_arm"]
    device = prepare_triton()
    from registry.kernels.evaluate import evaluate_kernel, evidence_document

    items = evaluate_kernel(
        registered["op"], registered["entry"], corpus=corpus or device, runs=runs, warmup=warmup,
        policy=canonical["parity"]["policy"], tolerances_by_dtype=canonical["parity"]["tolerances"] or None,
        progress=progress,
    )
    document = evidence_document(artifact, items, run=run)
    if subject.payload_sha256 is not None:
        document["payload_sha256"] = subject.payload_sha256
    parsed = parse_document(document)
    positions = record_evidence(registry, subject, parsed.items, run) if record else None
    return Evaluation(artifact, document, parsed.items, positions)
