"""A GPU worker's own benchmark loop, recording pairs in batches and stopping as soon as speed is decided.

Run it as `python examples/bench_session.py [DATABASE_URL] [WORK_DIR]` (an SQLite file by default; a
postgresql+psycopg:// URL works the same). The "measurement" here is a stand-in that returns a candidate
twice as fast as its baseline; a real harness times both arms with CUDA events, interleaved BC/CB
(registry/evidence/timing.py). docs/evidence-format.md, "Benchmark sessions", walks through it; the
test suite runs it.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from registry.app import open_registry
from registry.app.bench import open_session, record_pairs
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract

MANIFEST = """\
workload: wan-t2v-1.3b-480p
speed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, decision: confident, alpha: 0.05, max_pairs: 64}
"""
BATCH = 2  # pairs measured between two questions to the registry


def measure_pair(index: int) -> tuple[float, float]:
    """Stand-in for one timed ABBA pair: (baseline seconds, candidate seconds)."""
    baseline = 2.0 + 0.01 * (index % 3)
    return baseline, baseline / 2.0


def main(url: str, work_dir: str) -> dict:
    with open_registry(url, actor="gpu-worker-1", create=True) as registry:  # closed when the example ends
        return measure(registry, work_dir)


def measure(registry, work_dir: str) -> dict:
    declare_workload(registry, Contract.from_yaml(MANIFEST))
    payload = Path(work_dir) / "step_cache.py"
    payload.write_text("# the candidate's code\n")
    register_artifact(registry, "step-cache-v1", workload="wan-t2v-1.3b-480p", kind="step_cache",
                      payload=str(payload))

    session, record = open_session(registry, "step-cache-v1", device="NVIDIA H200", timer="cuda_event")
    measured = 0
    while not record.closed:
        pairs = [measure_pair(measured + i) for i in range(BATCH)]
        measured += len(pairs)
        # The batch key makes a retry after a timeout harmless: it is appended once.
        _, record = record_pairs(registry, "step-cache-v1", session, [b for b, _ in pairs], [c for _, c in pairs],
                                 batch=f"batch-{measured}")
    summary = record.to_dict()
    print(f"{summary['shows']} at pair {summary['decided_at']}, {summary['pairs']} in the record ({summary['pairs_saved']} of "
          f"{summary['max_pairs']} saved); bounds {summary['lower']:.3f}x to {summary['upper']:.3f}x, "
          f"gate {summary['gate']}x, alpha {summary['alpha']}")
    return summary


if __name__ == "__main__":
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
    main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(work) / 'bench-example.db'}", work)
