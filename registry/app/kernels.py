"""Evaluating a registered fused-kernel artifact against its operation's reference, and recording it.

Measuring and recording are one use case: the registration is captured once,
before the kernel runs, and the evidence is recorded for exactly that
registration (see app/evidence.py), or not at all.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from registry.formats.errors import UserError
from .context import Registry
from .evidence import Recorded, capture_subject, record_evidence
from .workloads import current_contract


@contextmanager
def triton_runtime() -> Iterator[str]:
    """Yield "gpu" or "cpu"; on a machine without a GPU, Triton's interpreter is on inside the block.

    Kernel modules must first be imported inside the block (Triton decides at
    decoration time) and timed inside it too (the timing harness reads the
    variable to mark interpreter timings). The variable is restored on exit,
    so a caller's process is left as it was found.
    """
    import torch

    if torch.cuda.is_available():
        yield "gpu"
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        yield "cpu"
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def declared_tolerances(tolerances: dict[str, dict[str, float | None]] | None) -> dict[str, dict[str, float]] | None:
    """The contract's tolerances as the comparator takes them: an undeclared ``max_abs`` (null) left out."""
    if not tolerances:
        return None
    return {dtype: {key: value for key, value in tol.items() if value is not None} for dtype, tol in tolerances.items()}


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: its evidence document (naming the payload measured), parsed items, where they were recorded."""

    artifact: str
    document: dict[str, Any]
    items: list[dict[str, Any]]
    recorded: Recorded | None  # None when the evidence was not recorded (written to a file instead)
    session: dict[str, Any] | None = None  # the benchmark session the pairs went to (confident contracts)

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
    insecure_no_sandbox: bool = False,
    bundle: str | os.PathLike | None = None,
) -> Evaluation:
    """Run the artifact's kernel entry on the corpus and record the evidence items (or the one failure item).

    With record=False nothing is appended: the document, which names the
    payload it measured, is for `registry evidence import` later.

    Under a contract that declares `speed.decision: confident`, a recorded
    evaluation times in a benchmark session (app/bench.py): batches of
    BATCH_PAIRS pairs, each recorded as it is timed, until the record is
    decided or reaches speed.max_pairs (or `runs` pairs, when given, end this
    session). Under `point`, and for a document (record=False), it times
    `runs` pairs (default speed.runs_per_arm) as one benchmark item.

    The candidate runs only in the sandbox (registry/kernels/sandbox.py); on a machine that cannot
    build one this refuses before anything runs or is written, unless ``insecure_no_sandbox``, whose
    evidence says so and is held by the gate.

    A triton_kernel artifact is evaluated through the trusted launcher from ``bundle`` (the directory of
    the bundle it was registered from, checked against the registered manifest): its cubins are
    launched by the registry, nothing of its Python runs (registry/kernels/launch_evaluate.py). That
    needs a CUDA device: without one this refuses in one line and runs or records nothing.
    """
    from registry.kernels.sandbox import require_sandbox

    subject = capture_subject(registry, artifact)
    registered = subject.registration
    check_evaluable(artifact, registered, bundle)
    if not insecure_no_sandbox:
        require_sandbox()
    contract = current_contract(registry, registered["workload"]).contract
    canonical = contract.canonical()
    batched = record and contract.speed is not None and contract.speed.decision == "confident"
    sessions: list[Any] = []
    open_batches = None
    if batched:
        runs, open_batches = _session_budget(registry, artifact, runs, sessions)
    elif runs is None:
        if contract.speed is None:
            raise UserError(f"no --runs given and workload {registered['workload']} declares no speed.runs_per_arm")
        runs = canonical["speed"]["runs_per_arm"]
    document, parsed = measure_kernel(artifact, registered, canonical, corpus=corpus, runs=runs, warmup=warmup,
                                      run=run, progress=progress, open_batches=open_batches,
                                      insecure_no_sandbox=insecure_no_sandbox, bundle=bundle)
    recorded = record_evidence(registry, subject, parsed.items, run) if record else None
    return Evaluation(artifact, document, parsed.items, recorded, sessions[0].to_dict() if sessions else None)


def check_evaluable(artifact: str, registered: dict[str, Any], bundle: str | os.PathLike | None) -> None:
    """Refuse, in one line and before anything runs, an artifact `evaluate` cannot measure here: one with no
    kernel entry, or a triton_kernel on a machine without a CUDA device or without its bundle."""
    if registered["kind"] == "triton_kernel":
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"artifact {artifact} is a triton_kernel: evaluating it launches its cubins, which needs "
                            "a CUDA device, and this machine has none; nothing was run or recorded")
        if bundle is None:
            raise UserError(f"artifact {artifact} is a triton_kernel: give --bundle DIR, the bundle it was "
                            "registered from (its cubins are launched from there, checked against the registration)")
        return
    if registered["kind"] != "fused_kernel" or not registered["entry"]:
        raise UserError(f"artifact {artifact} has no kernel entry to evaluate (register it with --op and --entry)")


def measure_kernel(artifact: str, registered: dict[str, Any], canonical: dict[str, Any], *, corpus: str | None,
                   runs: int, warmup: int, run: str | None, progress: Callable[[int, int], None] | None,
                   open_batches: Callable[[str, str], Any] | None, insecure_no_sandbox: bool = False,
                   bundle: str | os.PathLike | None = None):
    """(evidence document, its parsed form): the kernel measured against its reference under a contract.

    What an evaluation measures needs no registry: the registration and the
    contract come in, a document naming the payload comes out. Recording it
    is the caller's (evaluate_artifact here, or a client of `registry serve`).
    A triton_kernel's cubins are launched by the trusted launcher
    (measure_compiled); a kernel entry runs in its sandboxed worker.
    """
    from registry.formats.evidence.document import parse_document

    if registered["kind"] == "triton_kernel":
        return measure_compiled(artifact, registered, canonical, bundle, corpus=corpus, runs=runs, warmup=warmup,
                                run=run, progress=progress, open_batches=open_batches,
                                insecure_no_sandbox=insecure_no_sandbox)
    with triton_runtime() as device:
        from registry.kernels.evaluate import evaluate_kernel, evidence_document
        from registry.kernels.sandbox import PROFILE, UNSANDBOXED

        observed: dict[str, Any] = {}
        items = evaluate_kernel(
            registered["op"], registered["entry"], corpus=corpus or device, runs=runs, warmup=warmup,
            policy=canonical["parity"]["policy"], tolerances_by_dtype=declared_tolerances(canonical["parity"]["tolerances"]),
            progress=progress, open_batches=open_batches, sandboxed=not insecure_no_sandbox,
            entry_sha256=registered.get("payload_sha256"), observed=observed,
        )
    document = evidence_document(artifact, items, run=run, sandbox=UNSANDBOXED if insecure_no_sandbox else PROFILE,
                                 confinement=observed.get("confinement"))
    if registered.get("payload_sha256") is not None:
        document["payload_sha256"] = registered["payload_sha256"]
    return document, parse_document(document)


def measure_compiled(artifact: str, registered: dict[str, Any], canonical: dict[str, Any],
                     bundle: str | os.PathLike, *, corpus: str | None, runs: int, warmup: int, run: str | None,
                     progress: Callable[[int, int], None] | None, open_batches: Callable[..., Any] | None,
                     insecure_no_sandbox: bool = False):
    """(evidence document, its parsed form) of a triton_kernel: the bundle read from ``bundle`` (every file
    checked against the registered manifest), its cubins launched by the trusted launcher on this CUDA
    device, against the op's reference in the baseline's worker (registry/kernels/launch_evaluate.py)."""
    import torch

    from registry.formats.evidence.document import parse_document
    from registry.kernels.evaluate import evidence_document
    from registry.kernels.launch_evaluate import evaluate_compiled
    from registry.kernels.launcher_process import HarnessLauncher
    from registry.kernels.sandbox import PROFILE, UNSANDBOXED

    from .compiled import registered_kernel

    device = torch.device("cuda", torch.cuda.current_device())
    capability = tuple(torch.cuda.get_device_capability(device))
    op, kernel = registered_kernel(artifact, registered, bundle, capability)
    sandboxed = not insecure_no_sandbox
    observed: dict[str, Any] = {}
    items = evaluate_compiled(
        op, kernel, lambda cubins: HarnessLauncher(device, cubins, sandboxed=sandboxed),
        device=device, capability=capability, corpus=corpus or "gpu",
        runs=runs, warmup=warmup, policy=canonical["parity"]["policy"],
        tolerances_by_dtype=declared_tolerances(canonical["parity"]["tolerances"]), progress=progress,
        open_batches=open_batches, sandboxed=sandboxed, observed=observed)
    document = evidence_document(artifact, items, run=run, sandbox=PROFILE if sandboxed else UNSANDBOXED,
                                 confinement=observed.get("confinement"))
    document["payload_sha256"] = registered["payload_sha256"]
    return document, parse_document(document)


def _session_budget(registry: Registry, artifact: str, limit: int | None, opened: list[Any]):
    """(most pairs this evaluation may time, how to open its session): refused up front when the
    identity's record is already closed, so nothing is run for a session that could not be opened."""
    from .bench import BatchedSession, benchmark_record

    record = benchmark_record(registry, artifact)
    if record.closed:
        raise UserError(f"the benchmark record of {artifact} is closed ({record.to_dict()['stop']} after "
                        f"{record.pairs} pairs): nothing to measure")
    room = record.max_pairs - record.pairs
    budget = room if limit is None else min(room, limit)

    def open_batches(timer: str, device: str, arch: str | None = None) -> BatchedSession:
        from registry.gate.record import not_speed_evidence

        # An interpreter's pairs are never read: without --runs its session times one batch (BatchedSession).
        cap = None if limit is None and not_speed_evidence(timer, device) is not None else budget
        opened.append(BatchedSession(registry, artifact, device=device, timer=timer, limit=cap, arch=arch))
        return opened[-1]

    return budget, open_batches
