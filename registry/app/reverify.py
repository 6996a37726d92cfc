"""Re-verification: re-measure a promoted artifact's speed against its baseline and feed its monitor.

One re-verification of one artifact is one job (app/jobs.py runs it on the
Postgres queue; `registry reverify --now` runs the same function in-process,
which is how an embedded SQLite registry does it). It times `pairs` ABBA
pairs of the artifact's kernel entry against its operation's reference,
exactly as `evaluate` does (registry/kernels/evaluate.py), and records them
as one batch of the monitor (app/monitor.py) under the key `run`: a job
killed after appending and retried re-measures, finds its key recorded with
other pairs (IdempotencyConflict), and appends nothing, so each run counts
once. A failed evaluation is recorded as the failure it is; timings taken
by the Triton interpreter are refused, never fed to the detector (they are
not speed evidence, docs/architecture.md "What runs where").

Only the text registered is ever run: a candidate file whose text is no
longer the registered digest (swapped, or a link repointed, since
promotion) is refused before anything starts, as `evaluate` refuses it, and
nothing is appended to the promoted artifact's stream. A refusal is one
artifact's outcome (`refused`, with its line): the other artifacts of the
run are re-verified all the same.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from registry.formats.errors import UserError, first_line
from registry.formats.names import check_name
from registry.formats.text import quoted_text

from .context import Registry

MAX_REVERIFY_PAIRS = 1000


@dataclass(frozen=True)
class Reverified:
    artifact: str
    outcome: str  # recorded, already_recorded, failed, refused
    detail: str
    monitor: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "outcome": self.outcome, "detail": self.detail, "monitor": self.monitor}


def monitored_artifacts(registry: Registry, workload: str) -> list[str]:
    """The workload's promoted artifacts whose contract declares a monitor (sorted), from the read models."""
    with registry.view() as view:
        declared, states = view.workload_artifacts(workload)
    if declared is None:
        raise UserError(f"unknown workload {workload!r}")
    if declared["contract"].get("monitor") is None:
        raise UserError(f"workload {workload} declares no monitor block: nothing to re-verify")
    return sorted(s["artifact"] for s in states if s["decision"] == "promoted")


def check_pairs(pairs: int) -> int:
    if isinstance(pairs, bool) or not isinstance(pairs, int) or not 2 <= pairs <= MAX_REVERIFY_PAIRS or pairs % 2:
        raise UserError(f"pairs: {pairs!r} is not an even count from 2 to {MAX_REVERIFY_PAIRS} (ABBA pairs)")
    return pairs


def software_profile() -> dict[str, str]:
    """The software the pairs are timed under, as the libraries report it."""
    import torch
    import triton

    found = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__}
    if torch.version.cuda:
        found["cuda"] = torch.version.cuda
    return found


def not_timed_here(artifact: str, kind: str) -> str:
    """Why the registry cannot time this artifact itself, and how its re-measurements are recorded instead."""
    what = (f"{artifact} was registered without --op and --entry, so the registry has no kernel entry to time"
            if kind == "fused_kernel" else
            f"{artifact} is a {kind}, which the registry cannot time in-process (it times kernel entries registered "
            "with --op and --entry)")
    return (f"{what}; time it in your own harness and record the pairs with `registry monitor record {artifact} "
            "--batch KEY --baseline T1,T2,... --candidate T1,T2,... --device D --software NAME=VERSION`")


def reverify_artifact(registry: Registry, artifact: str, *, pairs: int, run: str, warmup: int = 2) -> Reverified:
    """Time `pairs` pairs of a promoted fused-kernel artifact and record them as one monitor batch keyed `run`.

    Anything refused about this artifact (unknown, no kernel entry, an entry
    file unreadable or no longer the text registered, a monitor the contract
    no longer declares) is its outcome `refused`, nothing written.
    """
    check_pairs(pairs)
    check_name(run, "run id")
    try:
        return _reverify(registry, artifact, pairs=pairs, run=run, warmup=warmup)
    except UserError as refusal:
        return Reverified(artifact, "refused", first_line(refusal), None)


def _reverify(registry: Registry, artifact: str, *, pairs: int, run: str, warmup: int) -> Reverified:
    from registry.events.errors import IdempotencyConflict

    from .evidence import capture_subject, record_evidence
    from .kernels import declared_tolerances, triton_runtime
    from .monitor import monitor_status, record_remeasurement
    from .workloads import current_contract

    subject = capture_subject(registry, artifact)
    registered = subject.registration
    if registered["kind"] != "fused_kernel" or not registered.get("entry"):
        return Reverified(artifact, "refused", not_timed_here(artifact, registered["kind"]), None)
    canonical = current_contract(registry, registered["workload"]).contract.canonical()
    with triton_runtime() as device:
        from registry.kernels.evaluate import evaluate_kernel

        # The registered digest: a candidate file whose text changed since is refused here, never run.
        items = evaluate_kernel(registered["op"], registered["entry"], corpus=device, runs=pairs, warmup=warmup,
                                policy=canonical["parity"]["policy"],
                                tolerances_by_dtype=declared_tolerances(canonical["parity"]["tolerances"]),
                                entry_sha256=registered.get("payload_sha256"))
        software = software_profile()
    failures = [item for item in items if item["kind"] == "failure"]
    if failures:
        from registry.formats.evidence.document import parse_document
        from registry.kernels.evaluate import evidence_document

        parsed = parse_document(evidence_document(artifact, failures, run=run))
        record_evidence(registry, subject, parsed.items, run)
        return Reverified(artifact, "failed", f"{failures[0]['stage']}: {quoted_text(failures[0]['error'])}", None)
    benchmark = next(item for item in items if item["kind"] == "benchmark")
    if benchmark["timer"] == "interpreter":
        return Reverified(artifact, "refused", "timed by the Triton interpreter: not speed evidence; nothing "
                                               "recorded", None)
    try:
        appended, summary = record_remeasurement(
            registry, artifact, benchmark["baseline_s"], benchmark["candidate_s"], batch=run,
            device=benchmark["device"], software=software, baseline_waited=benchmark["baseline_waited_s"])
    except IdempotencyConflict:
        return Reverified(artifact, "already_recorded", f"run {run} was recorded by an earlier attempt",
                          monitor_status(registry, artifact))
    return Reverified(artifact, "recorded" if appended else "already_recorded", f"{pairs} pairs", summary)


def run_keys(run: str, artifacts: list[str]) -> dict[str, str]:
    """Each artifact's batch key of the run `run` (`<run>-<artifact>`), every one checked by the naming rule
    before anything is measured: a run id that would make any key too long is refused for the whole run, never
    cut short (two cut keys could be one)."""
    check_name(run, "--run")
    return {artifact: check_name(f"{run}-{artifact}", f"--run {run!r} with artifact {artifact}: the batch key")
            for artifact in artifacts}


def reverify_now(registry: Registry, workload: str, *, pairs: int, run: str) -> list[Reverified]:
    """Every monitored promoted artifact of the workload, one after another, in this process (no queue); one
    artifact refused or failed leaves the others re-verified."""
    check_pairs(pairs)
    keys = run_keys(run, monitored_artifacts(registry, workload))
    return [reverify_artifact(registry, artifact, pairs=pairs, run=key) for artifact, key in keys.items()]
