"""Read-command start-up: `show ID --json` and `promote ID --json` against the floor of importing two libraries.

A read command has to start Python, import SQLAlchemy and click, open the
database and print; everything else it imports is start-up cost a person pays
on every call. `promote` of an artifact whose verdict stands (promoted and
rejected are final) is such a read: it returns the standing verdict. This
times whole processes, in alternation (floor, show, promote, floor, show,
promote, ... for --rounds rounds, after one untimed run of each), so drift on
a shared machine falls on all alike:

- floor:   `python -c "import sqlalchemy, click"`;
- show:    `python -m registry --db URL show ID --json`, run from this checkout;
- promote: `python -m registry --db URL promote ID --json` (ID's verdict stands);
- promote_deciding: the same of an artifact held on its evidence, which
  promote decides again (the gate runs, a verdict is appended) every time.

Prints the medians, each command's ratio of the medians to the floor and the
median of per-round ratios, for wall time and for the processes' CPU time
(user + system, which other jobs on a shared machine disturb less). With
--compare DIR the same two commands run from another checkout (DIR, say the
code before a change) join each round, as show_compared and
promote_compared, so a before-and-after comparison shares every round's
load. Without --db it builds a demo-like registry in a temporary directory
through the app layer (the demo's two workloads and five candidates, their
evidence and the gate's verdicts, 27 events) instead of running the demo's
measurements.

    .venv/bin/python benchmarks/cli.py [--rounds 20] [--db URL --artifact ID] [--compare DIR] [--json]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from registry.app import open_registry
from registry.app.decisions import promote
from registry.app.evidence import import_document
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract

from figures import print_figures

ROOT = Path(__file__).resolve().parents[1]
VIDEO = {"workload": "tiny-video-dit", "sampling": {"height": 128, "width": 128, "frames": 8, "steps": 10,
                                                    "seed": 1729, "dtype": "float32"},
         "fidelity": {"tier": "perceptual", "min_ssim": 0.98, "frame_set": "tiny-dit-8", "seed": 1729, "frames": 8},
         "speed": {"min_speedup": 1.2, "runs_per_arm": 10, "protocol": "paired"}}
KERNEL = {"workload": "modln-op", "parity": {"policy": "byte_equal"},
          "speed": {"min_speedup": 1.1, "runs_per_arm": 10, "protocol": "paired"}}
# artifact: (workload, kind, claimed backend, backend that ran, speedup, worst-frame SSIM or None for parity);
# the decisions come out as the demo's on a CPU: promoted, promoted, quarantined, quarantined, held.
CANDIDATES = {
    "sdpa-attention": ("tiny-video-dit", "attention_backend", "TORCH_SDPA", "TORCH_SDPA", 1.5, 0.99998),
    "step-cache": ("tiny-video-dit", "step_cache", None, None, 1.63, 0.9993),
    "lossy-skip": ("tiny-video-dit", "step_cache", None, None, 4.76, 0.7436),
    "flash-claimed-fallback": ("tiny-video-dit", "attention_backend", "FLASH_ATTN", "MATH_REFERENCE", 0.99, 0.99999),
    "modln-triton": ("modln-op", "fused_kernel", None, None, 1.3, None),
}
SHOWN = "step-cache"
# Held on interpreter timings: not final, so every promote of it runs the gate and appends a verdict.
DECIDING = "modln-triton"


def evidence_document(artifact: str, ran: str | None, speedup: float, worst_ssim: float | None) -> dict:
    baseline = [0.050 + 0.0005 * k for k in range(10)]
    execution = {"kind": "execution", "candidate_calls": 40, "fallbacks": 0 if ran != "MATH_REFERENCE" else 40}
    if ran:
        execution |= {"requested_backend": CANDIDATES[artifact][2], "effective_backend": ran}
    timer = "perf_counter" if worst_ssim is not None else "interpreter"  # the kernel runs under Triton's interpreter
    items = [execution, {"kind": "benchmark", "protocol": "paired", "device": "cpu", "timer": timer,
                         "baseline_s": baseline, "candidate_s": [b / speedup for b in baseline],
                         "schedule": ["BC", "CB"] * 5, "warmup": 2}]
    if worst_ssim is None:
        items.append({"kind": "parity", "policy": "byte_equal", "leaves": [
            {"name": "out", "dtype": "float32", "shape": [2, 64, 256], "byte_equal": True, "strides_equal": True,
             "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}]})
    else:
        items.append({"kind": "perceptual", "frame_set": "tiny-dit-8", "seed": 1729, "frames": 8,
                      "ssim": [0.9999] * 7 + [worst_ssim], "lpips": None, "vbench": None, "stage_status": "ok"})
    return {"format": "registry.evidence/1", "artifact": artifact, "run": f"bench-{artifact}", "evidence": items}


def build(url: str) -> None:
    with open_registry(url, actor="bench", create=True) as registry:
        for contract in (VIDEO, KERNEL):
            declare_workload(registry, Contract.from_mapping(contract))
        for artifact, (workload, kind, claimed, ran, speedup, worst_ssim) in CANDIDATES.items():
            register_artifact(registry, artifact, workload=workload, kind=kind, backend=claimed,
                              payload_sha256=f"{len(artifact):064x}")
            import_document(registry, json.dumps(evidence_document(artifact, ran, speedup, worst_ssim)))
            promote(registry, artifact)


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(command: list[str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process, run in `cwd` (whose `registry` package `-m` imports); a promote
    that records a verdict other than promoted exits 3, its answer."""
    cpu, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - started, children_cpu_s() - cpu
    if done.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed, cpu


def compared(name: str, floor: list[float], runs: list[float], unit: str) -> dict:
    floor_ms, runs_ms = statistics.median(floor) * 1000, statistics.median(runs) * 1000
    return {f"{name}_{unit}_median_ms": runs_ms, f"{name}_{unit}_ratio": runs_ms / floor_ms,
            f"{name}_{unit}_median_round_ratio": statistics.median(r / f for r, f in zip(runs, floor))}


def measure(url: str, artifact: str, rounds: int, compare: Path | None = None) -> dict:
    reads = {name: [sys.executable, "-m", "registry", "--db", url, name, artifact, "--json"]
             for name in ("show", "promote")}
    reads["promote_deciding"] = [sys.executable, "-m", "registry", "--db", url, "promote", DECIDING, "--json"]
    commands = {"floor": ([sys.executable, "-c", "import sqlalchemy, click"], ROOT),
                **{name: (command, ROOT) for name, command in reads.items()},
                **({f"{name}_compared": (command, compare) for name, command in reads.items()} if compare else {})}
    for command, cwd in commands.values():
        run_once(command, cwd)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, (command, cwd) in commands.items():
            runs[name].append(run_once(command, cwd))
    figures: dict = {"rounds": rounds}
    for unit, index in (("wall", 0), ("cpu", 1)):
        floor = [run[index] for run in runs["floor"]]
        figures[f"floor_{unit}_median_ms"] = statistics.median(floor) * 1000
        for name in list(commands)[1:]:
            figures.update(compared(name, floor, [run[index] for run in runs[name]], unit))
    return {**figures, "floor_command": 'python -c "import sqlalchemy, click"',
            "show_command": f"python -m registry --db URL show {artifact} --json",
            "promote_command": f"python -m registry --db URL promote {artifact} --json (a standing verdict)",
            "promote_deciding_command": f"python -m registry --db URL promote {DECIDING} --json (decided and "
                                        "appended every time)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--db", help="an existing registry to read (default: a demo-like one built in a temporary directory)")
    parser.add_argument("--artifact", default=SHOWN, help="the artifact to show and promote (its verdict must stand)")
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="another checkout whose show and promote join each round (the code before a change)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db
        if url is None:
            url = f"sqlite:///{Path(tmp) / 'cli.db'}"
            build(url)
        figures = measure(url, args.artifact, args.rounds, args.compare)
    print_figures(figures, as_json=args.json, width=42)


if __name__ == "__main__":
    main()
