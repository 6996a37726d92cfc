"""How each command's cost grows with the log: wall time and peak memory, 10^3 to 10^6 events, two shapes.

Builds a SQLite registry at each size in two shapes and runs every command
as its own process, the way a person or a serving process runs it:

- `many`: artifacts of 10 events each (a registration and nine steps of
  evidence, failures and revocations), so the log grows by artifacts;
- `one`: a few small artifacts beside one artifact that holds almost all of
  the log (a verdict every tenth event, so about 10% of its events are
  verdicts: its history grows with the log).

The log is built fast, in batches through the store (not the CLI), from the
same event generator as benchmarks/replay.py, with the workloads declared
through the application layer (real contracts, so `promote` decides). The
read models are then caught up once in this process (timed: the live fold
from empty) and the whole log is folded in memory once more (timed: the fold
rate). The measured artifact is revoked first if its standing decision is
final, so that `promote` decides and appends every time rather than
returning the standing verdict.

Each command then runs once as a child process, in this order: `show`,
`evidence import` (one execution item), `promote`, `resolve`, `lock`,
`history --json`, `report --json`, `verify`, `replay --verify`. Its wall
time is measured around the process and its peak RSS is the child's own
`ru_maxrss` from wait4(2) (so one command's peak never hides another's).
Output goes to /dev/null. The table gives each command at each size and the
growth factor from the smallest size to the largest.

    .venv/bin/python benchmarks/scale.py [--max-events 1000000] [--shapes many,one] [--json OUT]

The goals (docs/benchmarks.md, "Scale"): evidence import, promote, show,
resolve and lock of one artifact within 1.5x of their 10^3 time at 10^6
events in either shape and under 256 MiB; history under 256 MiB at any size;
report linear in artifacts; the fold at 100k events/s or more at 10^6.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import WORKLOADS, item_pool, registration_event, step_events  # noqa: E402

from registry.app import open_registry  # noqa: E402
from registry.app.workloads import declare_workload  # noqa: E402
from registry.contracts import Contract  # noqa: E402
from registry.events.store import NewEvent  # noqa: E402
from registry.projections import Projections, rebuild  # noqa: E402

SIZES = (1_000, 10_000, 100_000, 1_000_000)
SMALL_ARTIFACT_EVENTS = 10
# The `one` shape: this many small artifacts beside the large one, so report and resolve have a workload to list.
NEIGHBOURS = 20
BATCH = 2_000  # events per append while building
COMMANDS = ("show", "evidence import", "promote", "resolve", "lock", "history", "report", "verify", "replay")
# promote records a verdict other than promoted, resolve and lock find no bundle: exit 3 is their answer, not a failure.
ANSWER_CODES = {"promote": (0, 3), "resolve": (0, 3), "lock": (0, 3)}
MIB = 1024 * 1024


def build(url: str, shape: str, total: int) -> tuple[str, str, float]:
    """Build a registry of `total` events; return (the measured artifact, its workload, seconds)."""
    started = time.perf_counter()
    registry = open_registry(url, actor="bench", create=True)
    store = registry.store
    store.append("frameset:wan-fs8", [NewEvent("FrameSetRegistered", {
        "name": "wan-fs8", "seed": 1024, "frames": 8, "height": 480, "width": 832, "channels": 3, "dtype": "uint8",
        "sha256": "f" * 64})], actor="bench")
    for contract in WORKLOADS.values():
        declare_workload(registry, Contract.from_mapping(contract))
    pool = item_pool(random.Random(20240611))
    remaining = total - store.head_position()
    if shape == "many":
        count = max(1, remaining // SMALL_ARTIFACT_EVENTS)
        for index in range(count):
            size = SMALL_ARTIFACT_EVENTS if index < count - 1 else remaining - SMALL_ARTIFACT_EVENTS * (count - 1)
            store.append(f"artifact:cand-{index:06d}",
                         [registration_event(index), *step_events(index, range(1, size), pool)], actor="bench")
        target = count // 2
    else:
        for index in range(1, NEIGHBOURS + 1):
            store.append(f"artifact:cand-{index:06d}",
                         [registration_event(index), *step_events(index, range(1, SMALL_ARTIFACT_EVENTS), pool)],
                         actor="bench")
        large = total - store.head_position()
        store.append("artifact:cand-000000", [registration_event(0)], actor="bench")
        for first in range(1, large, BATCH):
            store.append("artifact:cand-000000", step_events(0, range(first, min(first + BATCH, large)), pool),
                         actor="bench")
        target = 0
    artifact = f"cand-{target:06d}"
    registry.engine.dispose()
    return artifact, "wan-t2v" if target % 2 == 0 else "ltx-video", time.perf_counter() - started


def prepare(url: str, artifact: str) -> dict:
    """Catch the read models up from empty (timed), fold the log in memory (timed), and leave the artifact
    in a decision that `promote` decides again."""
    registry = open_registry(url, actor="bench")
    projections = Projections(registry.store)
    started = time.perf_counter()
    head = projections.catch_up()
    catch_up_s = time.perf_counter() - started
    started = time.perf_counter()
    rebuild(registry.store)
    fold_s = time.perf_counter() - started
    state = projections.current_artifact(artifact)
    if state["decision"] in ("promoted", "rejected"):
        registry.store.append(f"artifact:{artifact}", [NewEvent("HumanDecision", {
            "artifact": artifact, "identity": state["identity"], "payload_sha256": state["payload_sha256"],
            "action": "revoke", "reason": "measured again by the scale benchmark", "person": "bench",
            "verdict_event_id": state["verdict_event_id"]})], actor="bench")
        projections.catch_up()
    registry.engine.dispose()
    return {"events": head, "catch_up_from_empty_s": catch_up_s, "fold_s": fold_s,
            "fold_events_per_s": head / fold_s if fold_s else None}


def evidence_document(folder: Path, artifact: str) -> Path:
    path = folder / "execution.json"
    path.write_text(json.dumps({"format": "registry.evidence/1", "artifact": artifact, "run": None,
                                "evidence": [{"kind": "execution", "candidate_calls": 64, "fallbacks": 0,
                                              "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"}]}))
    return path


def command_lines(artifact: str, workload: str, document: Path) -> dict[str, list[str]]:
    return {
        "show": ["show", artifact],
        "evidence import": ["evidence", "import", str(document)],
        "promote": ["promote", artifact],
        "resolve": ["resolve", "--workload", workload, "--arch", "sm_90", "--torch", "2.4.0"],
        "lock": ["lock", "--workload", workload, "--json"],
        "history": ["history", artifact, "--json"],
        "report": ["report", "--json"],
        "verify": ["verify"],
        "replay": ["replay", "--verify"],
    }


def run_command(url: str, name: str, arguments: list[str]) -> dict:
    """One command as a child process: wall seconds, its own peak RSS (wait4), exit code."""
    executable = Path(sys.executable).parent / "registry"
    env = {**os.environ, "REGISTRY_ACTOR": "bench"}
    started = time.perf_counter()
    child = subprocess.Popen([str(executable), "--db", url, *arguments], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    code = child.returncode
    if code not in ANSWER_CODES.get(name, (0,)):
        raise SystemExit(f"registry {' '.join(arguments)} exited {code}: {stderr.decode(errors='replace').strip()}")
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss * 1024 / MIB, "exit": code}


def measure(shape: str, total: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="registry-scale-") as folder:
        url = f"sqlite:///{folder}/registry.db"
        print(f"[{shape} {total:,}] building", file=sys.stderr, flush=True)
        artifact, workload, build_s = build(url, shape, total)
        figures = {"shape": shape, "size": total, "artifact": artifact, "build_s": build_s, **prepare(url, artifact)}
        lines = command_lines(artifact, workload, evidence_document(Path(folder), artifact))
        figures["commands"] = {}
        for name in COMMANDS:
            figures["commands"][name] = run_command(url, name, lines[name])
            done = figures["commands"][name]
            print(f"[{shape} {total:,}] {name}: {done['seconds']:.2f} s, {done['peak_rss_mib']:.0f} MiB",
                  file=sys.stderr, flush=True)
    return figures


def table(results: list[dict]) -> str:
    """Per shape: each command's seconds and MiB at each size, and the growth from the smallest size to the largest."""
    out = []
    for shape in sorted({r["shape"] for r in results}):
        rows = sorted((r for r in results if r["shape"] == shape), key=lambda r: r["size"])
        sizes = [f"{r['size']:,}" for r in rows]
        out.append(f"\nshape {shape}: seconds / peak MiB per command")
        out.append("| command | " + " | ".join(sizes) + f" | growth {sizes[0]} -> {sizes[-1]} (time, memory) |")
        out.append("|---|" + "---|" * (len(rows) + 1))
        for name in COMMANDS:
            cells = [f"{r['commands'][name]['seconds']:.2f} s / {r['commands'][name]['peak_rss_mib']:.0f}" for r in rows]
            first, last = rows[0]["commands"][name], rows[-1]["commands"][name]
            growth = (f"{last['seconds'] / first['seconds']:.2f}x, "
                      f"{last['peak_rss_mib'] / first['peak_rss_mib']:.2f}x")
            out.append(f"| {name} | " + " | ".join(cells) + f" | {growth} |")
        out.append("| fold (in memory), events/s | "
                   + " | ".join(f"{r['fold_events_per_s']:,.0f}" for r in rows) + " | |")
        out.append("| catch-up from empty, s | " + " | ".join(f"{r['catch_up_from_empty_s']:.2f}" for r in rows)
                   + " | |")
        out.append("| build, s | " + " | ".join(f"{r['build_s']:.1f}" for r in rows) + " | |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-events", type=int, default=SIZES[-1], help="largest log to build (default 10^6)")
    parser.add_argument("--shapes", default="many,one", help="comma-separated: many, one")
    parser.add_argument("--json", dest="json_out", help="also write every figure to this JSON file")
    args = parser.parse_args()
    sizes = [size for size in SIZES if size <= args.max_events]
    if not sizes:
        parser.error(f"--max-events must be at least {SIZES[0]}")
    shapes = [shape.strip() for shape in args.shapes.split(",")]
    unknown = set(shapes) - {"many", "one"}
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(sorted(unknown))}")
    results = [measure(shape, size) for shape in shapes for size in sizes]
    print(table(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
