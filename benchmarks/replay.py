"""Projection speed: full replay, live catch-up, `show` latency (API and CLI), an as-of report.

Builds a registry of N events (default 1,000,000: 10,000 artifacts of about
100 events each: registration, rounds of execution, benchmark and parity or
perceptual evidence, failures, verdicts and a few revocations), appended in
one batch per artifact, then measures:
- rebuild: `rebuild(store)` from nothing, events/s (median of --repeat runs);
- rebuild with the collector running: the same fold without pausing Python's
  cyclic garbage collector (registry/projections/collector.py), so the two
  figures of one run show what the pause is worth;
- live rebuild: `ReadModels.reset()`, the same fold plus writing every read-model
  row in one transaction (what a first catch-up onto empty tables does), events/s;
- show (API): median of --calls `View.artifact(id, history=True)` on random ids, each
  its own unit of work (a catch-up check and a snapshot);
- show as-of (API): the same with `as_of` at mid-log (folds one stream);
- show (CLI): median of --cli-calls `registry --db URL show ID --json` processes;
- as-of report: `build_report(View(store, as_of=mid).state())`;
- verify: `verify_projections(store)` (catch-up check, replay, row comparison).

    .venv/bin/python benchmarks/replay.py [--events N] [--db URL] [--calls 100] [--cli-calls 100] [--json]

With --db pointing at a database that already holds events, the build is
skipped and that log is measured.
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from registry.events.database import make_engine, upgrade
from registry.events.store import EventStore, NewEvent
from registry.formats.evidence.items import parse_item
from registry.projections import ReadModels, RegistryState, View, fold, rebuild, verify_projections
from registry.projections.log import read_log
from registry.projections.report import build_report

from figures import print_figures

EVENTS_PER_ARTIFACT = 100
ROUND = ("execution", "benchmark", "fidelity")
WORKLOADS = {
    "wan-t2v": {"workload": "wan-t2v", "fidelity": {"tier": "perceptual", "min_ssim": 0.97, "max_lpips": 0.05,
                                                    "frame_set": "wan-fs8", "seed": 1024, "frames": 8},
                "speed": {"min_speedup": 1.3, "runs_per_arm": 16, "protocol": "paired", "max_cv": 0.05}},
    "ltx-video": {"workload": "ltx-video", "fidelity": {"tier": "exact"},
                  "speed": {"ceiling_share": 0.2717, "runs_per_arm": 16, "protocol": "paired", "max_cv": 0.05}},
}
DECISIONS = ("promoted", "rejected", "held", "quarantined")


def item_pool(rng: random.Random) -> dict[str, list[dict]]:
    """Realistic evidence items (the registry derives statistics into each), reused across artifacts."""
    benchmarks = []
    for index in range(24):
        base = [0.010 * (1 + 0.01 * rng.random()) for _ in range(16)]
        factor = 1.0 + 0.03 * index
        benchmarks.append(parse_item({
            "kind": "benchmark", "protocol": "paired", "device": "NVIDIA H100 80GB HBM3", "timer": "cuda_event",
            "baseline_s": base, "candidate_s": [b / factor * (1 + 0.01 * rng.random()) for b in base],
            "schedule": ["BC", "CB"] * 8, "warmup": 3}))
    perceptual = [parse_item({
        "kind": "perceptual", "frame_set": "wan-fs8", "seed": 1024, "frames": 8,
        "ssim": [0.96 + 0.035 * rng.random() for _ in range(8)], "lpips": [0.05 * rng.random() for _ in range(8)],
        "vbench": None, "stage_status": "ok", "backends": {"ssim": "registry-numpy 1", "lpips": "lpips 0.1.4"}})
        for _ in range(12)]
    parity = [parse_item({"kind": "parity", "policy": "byte_equal", "leaves": [
        {"name": f"out{leaf}", "dtype": "bfloat16", "shape": [2, 49, 3072], "byte_equal": True, "strides_equal": True,
         "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False} for leaf in range(n)]})
        for n in (1, 2, 3)]
    execution = [parse_item({"kind": "execution", "candidate_calls": calls, "fallbacks": 0,
                             "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"})
                 for calls in (60, 120, 6143)]
    return {"benchmark": benchmarks, "perceptual": perceptual, "parity": parity, "execution": execution}


def verdict_for(index: int, round_index: int, perceptual: bool, evidence_ids: list[str]) -> dict:
    decision = DECISIONS[(index + round_index) % len(DECISIONS)]
    speedup = 1.0 + 0.03 * ((index * 7 + round_index) % 24)
    margins = [{"metric": "speedup", "value": speedup, "threshold": 1.3, "margin": speedup - 1.3,
                "passed": speedup >= 1.3}]
    if perceptual:
        ssim = 0.96 + 0.001 * (index % 30)
        margins.append({"metric": "ssim", "value": ssim, "threshold": 0.97, "margin": ssim - 0.97, "passed": ssim >= 0.97})
    return {"decision": decision, "tier": "perceptual" if perceptual else "exact",
            "reasons": [f"scripted {decision} for the benchmark"], "margins": margins, "speedup": speedup,
            "speedup_ci": [speedup * 0.98, speedup * 1.02], "rule": f"bench.{decision}",
            "evidence_ids": evidence_ids, "gate_version": "gate/1"}


def artifact_events(index: int, count: int, pool: dict[str, list[dict]]) -> list[NewEvent]:
    """Candidate `index`'s stream of `count` events: its registration, then `count - 1` steps."""
    return [registration_event(index), *step_events(index, range(1, count), pool)]


def artifact_name(index: int) -> str:
    return f"cand-{index:06d}"


def _facts(index: int) -> tuple[str, str, bool, str]:
    """(artifact, workload, perceptual tier, payload digest) of candidate `index`."""
    workload = "wan-t2v" if index % 2 == 0 else "ltx-video"
    return artifact_name(index), workload, workload == "wan-t2v", f"{index:064x}"


def registration_event(index: int) -> NewEvent:
    artifact, workload, perceptual, sha = _facts(index)
    return NewEvent("ArtifactRegistered", {
        "artifact": artifact, "kind": "attention_backend" if perceptual else "fused_kernel", "workload": workload,
        "payload_sha256": sha, "backend": "SAGE_ATTN" if perceptual else None, "op": "attention",
        "entry": f"kernels.{artifact}:run"})


def step_events(index: int, steps: range, pool: dict[str, list[dict]]) -> list[NewEvent]:
    """One event per step: rounds of execution, benchmark and fidelity evidence, a verdict every tenth step,
    failures, and revocations on every tenth candidate."""
    artifact, workload, perceptual, sha = _facts(index)
    events = []
    for step in steps:
        kind = ROUND[step % 3]
        if step % 10 == 0:
            payload = {"artifact": artifact, "payload_sha256": sha, "workload": workload, "contract_version": 1,
                       "contract_hash": "c" * 64, "gate_version": "gate/1",
                       "verdict": verdict_for(index, step, perceptual, [])}
            events.append(NewEvent("VerdictRendered", payload))
        elif step % 37 == 0:
            events.append(NewEvent("EvaluationFailed", {"artifact": artifact, "payload_sha256": sha, "run": f"r{step}",
                                                        "stage": "benchmark", "error": "CUDA error: out of memory"}))
        elif step % 61 == 0 and index % 10 == 0:
            events.append(NewEvent("HumanDecision", {"artifact": artifact, "payload_sha256": sha, "action": "revoke",
                                                     "reason": "re-measure on the new driver", "person": "bench"}))
        else:
            if kind == "fidelity":
                kind = "perceptual" if perceptual else "parity"
            event_type = {"execution": "ExecutionObserved", "benchmark": "BenchmarkMeasured",
                          "perceptual": "PerceptualMeasured", "parity": "ParityMeasured"}[kind]
            items = pool[kind]
            events.append(NewEvent(event_type, {"artifact": artifact, "payload_sha256": sha, "run": f"r{step}",
                                                "item": items[(index + step) % len(items)]}))
    return events


def build(store: EventStore, total: int) -> float:
    rng = random.Random(20240611)
    pool = item_pool(rng)
    started = time.perf_counter()
    store.append("frameset:wan-fs8", [NewEvent("FrameSetRegistered", {
        "name": "wan-fs8", "seed": 1024, "frames": 8, "height": 480, "width": 832, "channels": 3, "dtype": "uint8",
        "sha256": "f" * 64})], actor="bench")
    for name, contract in WORKLOADS.items():
        store.append(f"workload:{name}", [NewEvent("WorkloadDeclared", {
            "workload": name, "contract_version": 1, "contract_hash": "c" * 64, "contract": contract})], actor="bench")
    remaining, index = total - 3, 0
    while remaining > 0:
        count = min(EVENTS_PER_ARTIFACT, remaining)
        store.append(f"artifact:cand-{index:06d}", artifact_events(index, count, pool), actor="bench")
        remaining -= count
        index += 1
        if index % 1000 == 0:
            print(f"  built {total - remaining:,} events", file=sys.stderr, flush=True)
    return time.perf_counter() - started


def fold_with_collector_running(store: EventStore) -> RegistryState:
    """`rebuild(store)` as it was before folds paused the cyclic collector."""
    gc.enable()
    return fold(RegistryState(), read_log(store.engine, after=0, up_to=store.head_position()))


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def measure(url: str, store: EventStore, args) -> dict:
    head = store.head_position()
    figures: dict = {"events": head}
    rebuilds = [timed(rebuild, store)[1] for _ in range(args.repeat)]
    figures["rebuild_s"] = statistics.median(rebuilds)
    figures["rebuild_events_per_s"] = head / figures["rebuild_s"]
    running = [timed(fold_with_collector_running, store)[1] for _ in range(args.repeat)]
    figures["rebuild_collector_running_s"] = statistics.median(running)
    figures["rebuild_collector_running_events_per_s"] = head / figures["rebuild_collector_running_s"]
    _, seconds = timed(ReadModels(store).reset)
    figures["live_rebuild_s"] = seconds
    figures["live_rebuild_events_per_s"] = head / seconds
    ids = sorted(store.streams("artifact:"))
    rng = random.Random(7)
    picks = [rng.choice(ids).removeprefix("artifact:") for _ in range(args.calls)]
    samples = [timed(shown, store, artifact)[1] for artifact in picks]
    figures["show_api_median_ms"] = median_ms(samples)
    figures["show_api_p95_ms"] = sorted(samples)[int(0.95 * (len(samples) - 1))] * 1000
    mid = head // 2
    figures["as_of"] = mid
    samples = [timed(shown, store, artifact, mid)[1] for artifact in picks]
    figures["show_as_of_api_median_ms"] = median_ms(samples)
    figures["show_cli_median_ms"], figures["cli_command"] = cli_latency(url, picks[: args.cli_calls])
    state, fold_s = timed(whole, store, mid)
    _, report_s = timed(build_report, state)
    figures["as_of_state_s"] = fold_s
    figures["as_of_report_s"] = report_s
    verified, verify_s = timed(verify_projections, store)
    figures["verify_s"] = verify_s
    figures["verify_ok"] = verified.ok
    return figures


def shown(store: EventStore, artifact: str, as_of: int | None = None) -> dict | None:
    """`show` through the API: one unit of work, the artifact with its verdict history."""
    with View(store, as_of=as_of) as view:
        return view.artifact(artifact, history=True)


def whole(store: EventStore, as_of: int) -> RegistryState:
    with View(store, as_of=as_of) as view:
        return view.state()


def cli_latency(url: str, picks: list[str]) -> tuple[float | None, str]:
    if not picks:
        return None, "skipped"
    executable = Path(sys.executable).parent / "registry"
    probe = subprocess.run([str(executable), "show", "--help"], capture_output=True, text=True)
    command = "show" if probe.returncode == 0 else "history"
    samples = []
    for artifact in picks:
        started = time.perf_counter()
        done = subprocess.run([str(executable), "--db", url, command, artifact, "--json"], capture_output=True, text=True)
        samples.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"registry {command} {artifact} failed: {done.stderr.strip()}")
    return median_ms(samples), f"registry --db URL {command} ID --json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file in a temporary directory)")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--cli-calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="rebuild runs (the median is reported)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'replay.db'}"
        engine = make_engine(url)
        upgrade(engine)
        store = EventStore(engine)
        built_s = None
        if store.head_position() == 0:
            built_s = build(store, args.events)
        figures = {"built_s": built_s, **measure(url, store, args)}
        engine.dispose()
    print_figures(figures, as_json=args.json, width=32)


if __name__ == "__main__":
    main()
