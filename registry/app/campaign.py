"""The demo campaign: a tiny video DiT, five candidates, every kind of verdict.

Everything a real campaign does happens here on a CPU in about a minute: the
workload contracts are declared, the reference generation is registered as a
named fixed-seed frame set, each candidate is measured (paired ABBA timing of
whole generations in a benchmark session that stops as soon as the confident
speed rule decides, execution signals, perceptual evidence against the frame
set, latent parity), the gate decides, and every number is an event.
"""
from __future__ import annotations

import hashlib
import inspect
import io
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from registry.contracts import Contract
from registry.formats.output_files import write_output

from .bundles import register_bundle
from .context import Registry
from .decisions import promote
from .demo_bundles import (demo_resolutions, registered_bundle, sign_video_lock, write_candidate_bundle,
                           write_compiled_kernel_bundle)
from .evidence import capture_subject, record_evidence
from .frames import register_frames
from .kernels import evaluate_artifact, triton_runtime
from .workloads import declare_workload

SEED = 1024
VIDEO_WORKLOAD = "tiny-dit-t2v"
KERNEL_WORKLOAD = "tiny-dit-modln-op"
FRAME_SET = "tiny-dit-seed1024-8f"
KERNEL_ARTIFACT = "modln-triton"
KERNEL_ENTRY = "registry.kernels.modln:modulated_layernorm_triton"  # its Python entry (the server's demo)
COMPILED_KIND = "triton_kernel"
VIDEO_MODEL = {"id": "registry/tiny-video-dit", "revision": "seed-1729"}

# What --check requires of each verdict: the rules that may decide it (each rule fixes the decision).
# Every expectation holds whatever the machine measures: the honest candidates must pass every gate
# but speed and be judged by the speed gate itself, on whichever side of it this machine's
# timings land (SDPA's gain depends on the CPU's attention kernels, and both depend on load), or
# held by the confident rule when this machine's timings cannot place them within --runs pairs
# (check_speed_reading says when that is a right reading); the controls are caught by mechanisms
# that do not involve timing.
SPEED_DECIDED = {"speed.passed": "promoted", "speed.below_gate": "rejected"}
SPEED_JUDGED = {**SPEED_DECIDED, "speed.undecided": "held"}
EXPECTED_RULES = {
    "sdpa-attention": SPEED_JUDGED,
    "step-cache": SPEED_JUDGED,
    "lossy-skip": {"fidelity.failed": "quarantined"},
    "flash-claimed-fallback": {"execution.fallback": "quarantined", "execution.backend_mismatch": "quarantined"},
}
# The Triton kernel, a triton_kernel bundle (its cubins, the registry's own rebuild): on a CUDA GPU the
# registry's launcher runs and times them, so the speed gate judges it (promoted, rejected, or held when
# this device's timings cannot place it), unless byte-equal parity with torch's own GPU kernels (which one
# ulp of a different reduction order fails) quarantines it first. Without a GPU nothing can launch its
# cubins: it is not evaluated and holds for want of execution evidence.
KERNEL_RULES_CPU = {"execution.missing": "held"}
KERNEL_RULES_GPU = {**SPEED_JUDGED, "parity.failed": "quarantined"}
# Through `registry demo --server` the kernel is registered by its digest only (the API carries no bundle, and
# a triton_kernel's files must be checked where they are), so it goes as its Python entry, a fused_kernel whose
# launches are counted inside the candidate's process: held on any device (docs/kernels.md, "Threat model").
ENTRY_RULES_CPU = {"execution.launches_unverified": "held"}
ENTRY_RULES_GPU = {"execution.launches_unverified": "held", "parity.failed": "quarantined"}
# Words the deciding reasons must contain: the backend that really ran, the metric that failed.
EXPECTED_NAMED = {"flash-claimed-fallback": "MATH_REFERENCE", "lossy-skip": "ssim"}

BACKEND_OF = {"sdpa-attention": "TORCH_SDPA", "flash-claimed-fallback": "FLASH_ATTN"}
KIND_OF = {"sdpa-attention": "attention_backend", "flash-claimed-fallback": "attention_backend",
           "step-cache": "step_cache", "lossy-skip": "step_cache"}


def video_contract(runs_per_arm: int, lpips: bool) -> Contract:
    """The demo's tier-2 contract. Thresholds are declared here, once, and recorded as an event.

    min_ssim 0.98: the honest candidates score above 0.999 and the lossy
    control about 0.74, so neither side sits near the line. min_speedup 1.2
    on the median of per-pair ratios, decided by the confident rule
    (confident_rule): the honest candidates run 1.5-2x faster on one quiet
    core, so their bounds usually clear the line within a few pairs; on a
    slow or noisy machine they may end held. LPIPS is gated only when a
    backbone file is configured (no download, no substitute number).
    """
    fidelity: dict[str, Any] = {"tier": "perceptual", "min_ssim": 0.98, "frame_set": FRAME_SET, "seed": SEED,
                                "frames": 8}
    if lpips:
        fidelity["max_lpips"] = 0.05
    return Contract.from_mapping({
        "workload": VIDEO_WORKLOAD,
        "model": VIDEO_MODEL,
        "sampling": {"height": 128, "width": 128, "frames": 8, "steps": 10, "seed": SEED, "dtype": "float32"},
        "fidelity": fidelity,
        "speed": {"min_speedup": 1.2, "runs_per_arm": runs_per_arm, "protocol": "paired",
                  **confident_rule(runs_per_arm)},
        "tags": ["demo"],
    })


DEMO_ALPHA = 0.05


def confident_rule(max_pairs: int) -> dict[str, Any]:
    """The demo's speed rule: confident at alpha 0.05 per side, at most --runs pairs per candidate."""
    return {"decision": "confident", "alpha": DEMO_ALPHA, "max_pairs": max_pairs}


def kernel_contract(runs_per_arm: int) -> Contract:
    """Tier-1 contract for the fused modulated LayerNorm at operation level (bitwise drop-in)."""
    return Contract.from_mapping({
        "workload": KERNEL_WORKLOAD,
        "parity": {"policy": "byte_equal"},
        "speed": {"min_speedup": 1.1, "runs_per_arm": runs_per_arm, "protocol": "paired",
                  **confident_rule(runs_per_arm)},
        "tags": ["demo", "operation-level"],
    })


def candidate_sha256(candidate) -> str:
    """Content of a demo candidate: its name and the source of the class that implements it."""
    return hashlib.sha256(f"{candidate.name}\n{inspect.getsource(type(candidate))}".encode()).hexdigest()


@dataclass
class Row:
    artifact: str
    kind: str
    verdict: dict[str, Any]
    worst_ssim: float | None
    ssim_margin: float | None
    worst_frame: int | None
    # Pairs timed in the candidate's benchmark session, pairs of max_pairs not needed, and why it stopped.
    pairs: int | None = None
    pairs_saved: int | None = None
    stop: str | None = None

    @property
    def reason(self) -> str:
        return self.verdict["reasons"][0] if self.verdict["reasons"] else "all gates passed"

    def to_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "kind": self.kind, "decision": self.verdict["decision"],
                "rule": self.verdict["rule"], "speedup": self.verdict["speedup"],
                "speedup_ci": self.verdict["speedup_ci"], "worst_ssim": self.worst_ssim,
                "ssim_margin": self.ssim_margin, "reason": self.reason, "pairs": self.pairs,
                "pairs_saved": self.pairs_saved, "stop": self.stop}


def _latent_parity(candidate, reference_latent) -> dict[str, Any]:
    from registry.evidence.parity import compare_outputs

    return compare_outputs((reference_latent,), (candidate.sample(SEED),), ("latent",), "byte_equal", None)


def measure_candidate(candidate, reference_frames: np.ndarray, reference_latent, registered: dict,
                      lpips_backbone: str | None) -> tuple[list[dict], np.ndarray]:
    """Execution, perceptual and parity items for one whole-generation candidate (its benchmark
    session times it: measure_in_session)."""
    from .frames import measure_against_reference

    candidate.reset_counters()
    frames = candidate.generate(SEED)
    execution = candidate.execution_evidence()
    perceptual = measure_against_reference(registered, reference_frames, frames, seed=SEED, vbench=None,
                                           lpips_backbone=lpips_backbone)
    return [execution, perceptual, _latent_parity(candidate, reference_latent)], frames


def measure_in_session(target: Campaign, candidate, warmup: int,
                       progress: Callable[[int, int], None] | None) -> dict[str, Any]:
    """Time a candidate in a benchmark session, BATCH_PAIRS pairs at a time, until its record closes.

    Returns the session's summary (BatchedSession.to_dict, or the server's
    RemoteSession). The session is opened before anything is timed; each batch
    is recorded as soon as it is timed, and the next one timed only if the
    record is still undecided. A record already closed (the demo run again on
    its registry) is not timed again: nothing is opened, and its summary says 0 pairs.
    """
    from registry.evidence.timing import time_paired, timer_names
    from registry.workloads import make_timed_callable

    closed = target.closed_summary(candidate.name)
    if closed is not None:
        return closed
    timer, device = timer_names("cpu")
    batches = target.open_batches(candidate.name, device=device, timer=timer, arch="cpu")
    baseline, timed = make_timed_callable(None, SEED), make_timed_callable(candidate, SEED)
    while size := batches.next_size():
        item = time_paired(baseline, timed, size, warmup if batches.pairs == 0 else 0, "cpu",
                           notes=f"whole generations of the tiny video DiT, seed {SEED}")
        batches.add(item["baseline_s"], item["candidate_s"])
        if progress is not None:
            progress(batches.pairs, batches.max_pairs)
    return batches.to_dict()


class Campaign:
    """Where the campaign's writes go and its verdicts come from: the demo's own registry. `registry demo
    --server` sends the same campaign through a server instead (registry/serve/demo.py `ServerCampaign`)."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def declare(self, contract: Contract) -> int:
        return declare_workload(self.registry, contract).version

    def frames(self, name: str, frames: np.ndarray, seed: int, source: str) -> dict[str, Any]:
        return register_frames(self.registry, name, frames, seed, source=source)[0]

    def register(self, artifact: str, bundle: Path, *, workload: str, kind: str, backend: str | None = None,
                 op: str | None = None, entry: str | None = None) -> None:
        register_bundle(self.registry, artifact, bundle, workload=workload, kind=kind, backend=backend, op=op,
                        entry=entry)

    def register_kernel(self, out_dir: Path) -> tuple[str, Path]:
        """The kernel artifact as a triton_kernel bundle (built here, checked and rebuilt by registration);
        its kind and bundle directory. Run again on its registry, the demo keeps the bundle it registered
        while that directory still verifies to the registered payload: compiling and rebuilding the same
        bytes again would register nothing new."""
        kept = registered_bundle(self.registry, out_dir, KERNEL_ARTIFACT, workload=KERNEL_WORKLOAD, kind=COMPILED_KIND)
        if kept is not None:
            return COMPILED_KIND, kept
        bundle = write_compiled_kernel_bundle(out_dir, KERNEL_ARTIFACT)
        self.register(KERNEL_ARTIFACT, bundle, workload=KERNEL_WORKLOAD, kind=COMPILED_KIND)
        return COMPILED_KIND, bundle

    def subject(self, artifact: str) -> Any:
        """What the evidence about to be measured is bound to (app/evidence.py), taken before measuring."""
        return capture_subject(self.registry, artifact)

    def closed_summary(self, artifact: str) -> dict[str, Any] | None:
        from .bench import closed_record_summary, benchmark_record

        record = benchmark_record(self.registry, artifact)
        return closed_record_summary(record.to_dict()) if record.closed else None

    def open_batches(self, artifact: str, *, device: str, timer: str, arch: str):
        from .bench import BatchedSession

        return BatchedSession(self.registry, artifact, device=device, timer=timer, arch=arch)

    def record(self, subject: Any, document: dict[str, Any], parsed: Any) -> None:
        record_evidence(self.registry, subject, parsed.items)

    def evaluate_kernel(self, artifact: str, warmup: int, progress: Callable[[int, int], None],
                        bundle: Path) -> dict[str, Any]:
        return evaluate_artifact(self.registry, artifact, corpus=None, runs=None, warmup=warmup,
                                 progress=progress, bundle=bundle).session

    def promote(self, artifact: str) -> dict[str, Any]:
        return promote(self.registry, artifact).verdict


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread inside the block (determinism, and a fair, quiet comparison on shared
    machines); the caller's thread count is restored on exit."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_campaign(target: Campaign, out_dir: Path, *, runs: int, warmup: int, lpips_backbone: str | None,
                 progress_factory: Callable[[str], Any], log: Callable[[str], None]) -> list[Row]:
    """Declare, register, measure, decide through `target`; return one row per candidate.

    Runs on one torch thread and, without a GPU, with Triton's interpreter (the
    kernel artifact's module is imported when it is registered); both are
    undone on return.
    """
    with one_torch_thread(), triton_runtime():
        return _campaign(target, out_dir, runs=runs, warmup=warmup, lpips_backbone=lpips_backbone,
                         progress_factory=progress_factory, log=log)


def _campaign(target: Campaign, out_dir: Path, *, runs: int, warmup: int, lpips_backbone: str | None,
              progress_factory: Callable[[str], Any], log: Callable[[str], None]) -> list[Row]:
    from registry.formats.evidence.document import parse_document
    from registry.workloads import all_candidates, reference_generate, reference_latent

    from .strips import write_strip

    out_dir.mkdir(parents=True, exist_ok=True)
    version = target.declare(video_contract(runs, lpips=lpips_backbone is not None))
    target.declare(kernel_contract(runs))
    log(f"workloads declared: {VIDEO_WORKLOAD} v{version}, {KERNEL_WORKLOAD}")

    reference = reference_generate(SEED)
    reference_path = out_dir / "reference-frames.npz"
    encoded = io.BytesIO()
    np.savez_compressed(encoded, frames=reference)
    write_output(reference_path, encoded.getvalue(), force=True, option="--out")
    registered = target.frames(FRAME_SET, reference, SEED, str(reference_path))
    log(f"frame set {FRAME_SET}: {reference.shape[0]} frames {reference.shape[1]}x{reference.shape[2]}, "
        f"sha256 {registered['sha256'][:12]}")
    latent = reference_latent(SEED)

    rows: list[Row] = []
    for candidate in all_candidates():
        bundle = write_candidate_bundle(out_dir, candidate, candidate_sha256(candidate), latent, VIDEO_MODEL)
        target.register(candidate.name, bundle, workload=VIDEO_WORKLOAD, kind=KIND_OF[candidate.name],
                        backend=BACKEND_OF.get(candidate.name))
        subject = target.subject(candidate.name)
        with progress_factory(f"{candidate.name}: ABBA pairs until decided (at most {runs})") as update:
            session = measure_in_session(target, candidate, warmup, update)
        items, frames = measure_candidate(candidate, reference, latent, registered, lpips_backbone)
        document = {"format": "registry.evidence/1", "artifact": candidate.name, "evidence": items}
        parsed = parse_document(document)
        target.record(subject, document, parsed)
        perceptual = next(item for item in parsed.items if item["kind"] == "perceptual")
        write_strip(out_dir / f"{candidate.name}.png", reference, frames, perceptual["ssim"],
                    title=f"{candidate.name}: reference (top) vs candidate (bottom)")
        rows.append(_row(target, candidate.name, KIND_OF[candidate.name], perceptual, session))

    kind, bundle = target.register_kernel(out_dir)
    session = _evaluate_kernel(target, warmup, progress_factory, kind, bundle, log)
    rows.append(_row(target, KERNEL_ARTIFACT, kind, None, session))
    return rows


def _evaluate_kernel(target: Campaign, warmup: int, progress_factory: Callable[[str], Any], kind: str, bundle: Path,
                     log: Callable[[str], None]) -> dict[str, Any] | None:
    """`registry evaluate` of the kernel artifact; its session's summary. A record already closed (the
    demo run again on its registry) is not evaluated again; a triton_kernel without a CUDA device is not
    evaluated at all (nothing here can launch its cubins), and says so."""
    import torch

    closed = target.closed_summary(KERNEL_ARTIFACT)
    if closed is not None:
        return closed
    if kind == COMPILED_KIND and not torch.cuda.is_available():
        log(f"{KERNEL_ARTIFACT}: not evaluated: its cubins need a CUDA device to launch, and this machine has none")
        return None
    with progress_factory(f"{KERNEL_ARTIFACT}: operation-level evaluation") as update:
        return target.evaluate_kernel(KERNEL_ARTIFACT, warmup, update, bundle)


def _row(target: Campaign, artifact: str, kind: str, perceptual: dict | None, session: dict | None) -> Row:
    verdict = target.promote(artifact)
    ssim = next((m for m in verdict["margins"] if m["metric"] == "ssim"), None)
    worst_frame = perceptual["derived"].get("worst_ssim_frame") if perceptual else None
    pairs, saved, stop = (None, None, None) if session is None else (
        session["pairs"], session["pairs_saved"], session["stop"])
    return Row(artifact, kind, verdict, ssim["value"] if ssim else None, ssim["margin"] if ssim else None, worst_frame,
               pairs, saved, stop)


def expected_rules(on_gpu: bool, kernel_kind: str = COMPILED_KIND) -> dict[str, dict[str, str]]:
    """For each demo artifact, the rules that may decide it on this kind of machine (and for the kernel, as the
    kind it was registered as), and their decisions."""
    if kernel_kind == COMPILED_KIND:
        kernel = KERNEL_RULES_GPU if on_gpu else KERNEL_RULES_CPU
    else:
        kernel = ENTRY_RULES_GPU if on_gpu else ENTRY_RULES_CPU
    return {**EXPECTED_RULES, KERNEL_ARTIFACT: kernel}


def check_speed_reading(row: Row) -> str | None:
    """Whether a verdict of the confident rule reads its own record rightly; the problem if not.

    Promoted needs a lower bound above the gate, rejected an upper bound
    below it. Held (`speed.undecided`) is right only when the record ran to
    max_pairs (measuring stopped for no other reason) with bounds that reach
    both sides of the gate: a clear candidate held, or one whose measuring
    stopped early, is wrong.
    """
    verdict = row.verdict
    rule, bounds = verdict["rule"], verdict["speedup_ci"]
    gate = next((m["threshold"] for m in verdict["margins"] if m["metric"] == "speedup"), None)
    if rule not in SPEED_JUDGED or gate is None:
        return None
    low, high = bounds if bounds else (None, None)
    if rule == "speed.passed" and not (low is not None and low > gate):
        return f"{row.artifact}: promoted without a lower bound above the gate {gate:g}x (bounds {bounds})"
    if rule == "speed.below_gate" and not (high is not None and high < gate):
        return f"{row.artifact}: rejected without an upper bound below the gate {gate:g}x (bounds {bounds})"
    if rule == "speed.undecided":
        if row.stop != "max_pairs":
            return f"{row.artifact}: held, but its session stopped measuring ({row.stop}) before speed.max_pairs"
        if low is not None and (low > gate or high < gate):
            return f"{row.artifact}: held, though its bounds [{low:g}, {high:g}] lie on one side of the gate {gate:g}x"
    return None


def check_expectations(rows: list[Row], on_gpu: bool) -> list[str]:
    """Every way the decisions differ from what the demo promises; empty when all hold."""
    problems = []
    kernel = next((row.kind for row in rows if row.artifact == KERNEL_ARTIFACT), COMPILED_KIND)
    expected = expected_rules(on_gpu, kernel)
    for row in rows:
        decision, rule = row.verdict["decision"], row.verdict["rule"]
        wanted = expected.get(row.artifact)
        if wanted is None:
            problems.append(f"{row.artifact}: not a demo artifact")
            continue
        if wanted.get(rule) != decision:
            allowed = " or ".join(f"{d} by {r}" for r, d in wanted.items())
            problems.append(f"{row.artifact}: {decision} by {rule}, expected {allowed}")
        elif (reading := check_speed_reading(row)) is not None:
            problems.append(reading)
        named = EXPECTED_NAMED.get(row.artifact)
        if named and not any(named in reason for reason in row.verdict["reasons"]):
            problems.append(f"{row.artifact}: no reason names {named}")
    missing = sorted(set(expected) - {row.artifact for row in rows})
    problems += [f"{artifact}: no verdict" for artifact in missing]
    return problems


def near_gate_notes(rows: list[Row]) -> list[str]:
    """One line for each candidate the confident rule held with bounds that reach across the gate:
    this machine's timings cannot place it on one side within --runs pairs, so it is held, not guessed."""
    notes = []
    for row in rows:
        verdict = row.verdict
        margin = next((m for m in verdict["margins"] if m["metric"] == "speedup"), None)
        if verdict["rule"] != "speed.undecided" or margin is None or not verdict["speedup_ci"]:
            continue
        low, high = verdict["speedup_ci"]
        notes.append(f"{row.artifact}: speedup {verdict['speedup']:.3g}x held after {row.pairs} pairs, its bounds "
                     f"{low:.3g}-{high:.3g}x reach across the gate {margin['threshold']:.3g}x: within this "
                     "machine's timing noise, so it is held, not guessed")
    return notes


def pairs_spent(rows: list[Row], runs: int) -> dict[str, int]:
    """Pairs the sessions timed, beside the `runs` pairs per candidate the fixed design times."""
    timed = [row for row in rows if row.pairs is not None]
    spent = sum(row.pairs for row in timed)
    return {"spent": spent, "fixed_design": runs * len(timed), "saved": runs * len(timed) - spent}


def what_would_ship(registry: Registry, profile) -> list:
    """How `resolve` answers for both demo workloads on the machine `profile` describes."""
    return demo_resolutions(registry, profile, VIDEO_WORKLOAD, VIDEO_MODEL, KERNEL_WORKLOAD)


def sign_demo_lock(registry: Registry, out_dir: Path, profile) -> dict[str, Any] | None:
    """The video workload's lock for this machine, signed by the demo's key (demo_bundles.py)."""
    return sign_video_lock(registry, out_dir, profile, VIDEO_WORKLOAD, VIDEO_MODEL)
