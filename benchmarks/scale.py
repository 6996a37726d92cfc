"""How each command's cost grows with the log: wall time and peak memory, 10^3 to 10^6 events, two shapes.

Builds a SQLite registry at each size in two shapes and runs every command
as its own process, the way a person or a serving process runs it:

- `many`: artifacts of 10 events each (a registration and nine steps of
  evidence, failures and revocations), so the log grows by artifacts;
- `one`: a few small artifacts beside one artifact that holds almost all of
  the log (a verdict every tenth event, so about 10% of its events are
  verdicts: its history grows with the log);
- `hot`: the `one` shape with the measured artifact's workload deciding speed by its speed record
  (`speed.decision: confident`), so every benchmark document of the large artifact (about 28% of the log)
  joins one record that `show` and `promote` read: a hot artifact;
- `shared`: the `many` shape with every artifact in the measured artifact's
  workload, so a workload holds a tenth as many artifacts as the log holds
  events. A one-artifact question must still cost the same: `promote` counts
  the benchmark attempts of the artifact's bytes across its workload through
  the payload index, not by reading every artifact of it (`resolve`, `lock`
  and `report` list the whole workload, and grow with it).

The measured artifact (TARGET) is the large one in `one` and a 10-event one
in `many` and `shared`; outside `shared` it is the only artifact of its
workload, so `resolve` and `lock` ask about one artifact however much else the log holds (`report` lists
every artifact, and grows with them).

The log is built fast, in batches through the store (not the CLI), from the
same event generator as benchmarks/replay.py, with the workloads declared
through the application layer (real contracts, so `promote` decides). The
read models are then caught up once in this process (timed: the live fold
from empty) and the whole log is folded in memory twice more (timed: the
fold rate, with Python's cyclic collector paused as every fold does, and
with it running, as folds ran before), and rebuilt once (timed: `rebuild`,
the fold and then every kept evidence item read from the log by position,
as `report` reads them). The measured artifact is revoked first if its standing decision is
final, so that `promote` decides and appends every time rather than
returning the standing verdict.

Each command then runs once as a child process, in this order: `show`,
`evidence import` (one execution item), `promote`, `resolve`, `lock`,
`history --json`, `report --json`, the earlier reading of the report (benchmarks/report_before.py: a
bench-stream query per artifact, its peer), `verify`, `replay --verify`. Its wall
time is measured around the process; its CPU time (user + system) and its
peak RSS are the child's own `ru_utime`, `ru_stime` and `ru_maxrss` from
wait4(2), started from a small launcher process (see LAUNCHER). On a shared
machine the wall time moves with the load; the CPU time hardly does, so the
growth factors are given for both. The one-artifact commands run three times and keep the median
time. Output goes to /dev/null. The table gives each command at each size and the
growth factor from the smallest size to the largest.

    .venv/bin/python benchmarks/scale.py [--max-events 1000000] [--shapes many,one,shared,hot] [--json OUT]

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import WORKLOADS, fold_with_collector_running, item_pool, registration_event, step_events  # noqa: E402

from registry.app import open_registry  # noqa: E402
from registry.app.workloads import declare_workload  # noqa: E402
from registry.contracts import Contract  # noqa: E402
from registry.events.canonical import canonical_json  # noqa: E402
from registry.events.store import NewEvent  # noqa: E402
from registry.projections import ReadModels, View, rebuild  # noqa: E402
from registry.projections.asof import fold_log  # noqa: E402

SIZES = (1_000, 10_000, 100_000, 1_000_000)
SMALL_ARTIFACT_EVENTS = 10
# The `one` shape: this many small artifacts beside the large one, so report and resolve have a workload to list.
NEIGHBOURS = 20
BATCH = 2_000  # events per append while building
COMMANDS = ("show", "evidence import", "promote", "resolve", "lock", "history", "report", "report, earlier reading",
            "verify", "replay")
# The peer of `report`: the same report with a bench-stream query per artifact, as it was read before speed
# records were a read model (benchmarks/report_before.py); run as a script, not through the CLI.
PEERS = {"report, earlier reading": Path(__file__).resolve().parent / "report_before.py"}
# promote records a verdict other than promoted, resolve and lock find no bundle: exit 3 is their answer, not a failure.
ANSWER_CODES = {"promote": (0, 3), "resolve": (0, 3), "lock": (0, 3)}
MIB = 1024 * 1024
# The measured artifact: 10 events in the `many` shape, most of the log in the `one` shape. It is the only
# artifact of its workload, so `resolve` and `lock` ask about one artifact whatever the log holds besides.
TARGET = "cand-000000"
SOLO = "solo"


def build(url: str, shape: str, total: int) -> float:
    """Build a registry of `total` events; return the seconds it took."""
    started = time.perf_counter()
    registry = open_registry(url, actor="bench", create=True)
    store = registry.store
    store.append("frameset:wan-fs8", [NewEvent("FrameSetRegistered", {
        "name": "wan-fs8", "seed": 1024, "frames": 8, "height": 480, "width": 832, "channels": 3, "dtype": "uint8",
        "sha256": "f" * 64})], actor="bench")
    solo_contract = {**WORKLOADS["wan-t2v"], "workload": SOLO}
    if shape == "hot":
        solo_contract["speed"] = {**solo_contract["speed"], "decision": "confident"}
    for contract in [*WORKLOADS.values(), solo_contract]:
        declare_workload(registry, Contract.from_mapping(contract))
    pool = item_pool(random.Random(20240611))
    remaining = total - store.head_position()
    if shape in ("many", "shared"):
        count = max(2, remaining // SMALL_ARTIFACT_EVENTS)
        for index in range(1, count):
            size = SMALL_ARTIFACT_EVENTS if index < count - 1 else remaining - SMALL_ARTIFACT_EVENTS * (count - 1)
            events = [registration_event(index), *step_events(index, range(1, size), pool)]
            store.append(f"artifact:cand-{index:06d}", solo(events) if shape == "shared" else events, actor="bench")
        large = SMALL_ARTIFACT_EVENTS
    else:
        for index in range(1, NEIGHBOURS + 1):
            store.append(f"artifact:cand-{index:06d}",
                         [registration_event(index), *step_events(index, range(1, SMALL_ARTIFACT_EVENTS), pool)],
                         actor="bench")
        large = total - store.head_position()
    store.append(f"artifact:{TARGET}", solo([registration_event(0)]), actor="bench")
    for first in range(1, large, BATCH):
        store.append(f"artifact:{TARGET}", solo(step_events(0, range(first, min(first + BATCH, large)), pool)),
                     actor="bench")
    registry.close()
    return time.perf_counter() - started


def solo(events: list[NewEvent]) -> list[NewEvent]:
    """The measured artifact's events, moved to its own workload (so resolve and lock ask about one artifact)."""
    for event in events:
        if "workload" in event.payload:
            event.payload["workload"] = SOLO
    return events


def prepare(url: str, artifact: str) -> dict:
    """Catch the read models up from empty (timed), fold the log in memory (timed), and leave the artifact
    in a decision that `promote` decides again."""
    registry = open_registry(url, actor="bench")
    projections = ReadModels(registry.store)
    started = time.perf_counter()
    head = projections.catch_up()
    catch_up_s = time.perf_counter() - started
    started, cpu_started = time.perf_counter(), time.process_time()
    fold_log(registry.store, head)
    fold_s, fold_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    cpu_started = time.process_time()
    rebuild(registry.store)
    rebuild_cpu_s = time.process_time() - cpu_started
    cpu_started = time.process_time()
    fold_with_collector_running(registry.store)
    running_cpu_s = time.process_time() - cpu_started
    with View(registry.store) as view:
        state = view.artifact(artifact)
    if state["decision"] in ("promoted", "rejected"):
        registry.store.append(f"artifact:{artifact}", [NewEvent("HumanDecision", {
            "artifact": artifact, "identity": state["identity"], "payload_sha256": state["payload_sha256"],
            "action": "revoke", "reason": "measured again by the scale benchmark", "person": "bench",
            "verdict_event_id": state["verdict_event_id"]})], actor="bench")
        projections.catch_up()
    registry.close()
    return {"events": head, "catch_up_from_empty_s": catch_up_s, "fold_s": fold_s,
            "fold_events_per_s": head / fold_s if fold_s else None,
            "fold_cpu_events_per_s": head / fold_cpu_s if fold_cpu_s else None,
            "rebuild_cpu_events_per_s": head / rebuild_cpu_s if rebuild_cpu_s else None,
            "fold_collector_running_cpu_events_per_s": head / running_cpu_s if running_cpu_s else None}


def evidence_document(folder: Path, artifact: str) -> Path:
    path = folder / "execution.json"
    path.write_text(json.dumps({"format": "registry.evidence/1", "artifact": artifact, "run": None,
                                "evidence": [{"kind": "execution", "candidate_calls": 64, "fallbacks": 0,
                                              "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"}]}))
    return path


def signing_key(folder: Path) -> Path:
    """A signing key for `lock`, which signs every lock file it writes (made once per log, not timed)."""
    key = folder / "signing.key"
    subprocess.run([str(Path(sys.executable).parent / "registry"), "keys", "init", str(key)], check=True,
                   stdout=subprocess.DEVNULL)
    return key


def command_lines(artifact: str, workload: str, document: Path, key: Path) -> dict[str, list[str]]:
    return {
        "show": ["show", artifact],
        "evidence import": ["evidence", "import", str(document)],
        "promote": ["promote", artifact],
        "resolve": ["resolve", "--workload", workload, "--arch", "sm90", "--torch", "2.4.0"],
        "lock": ["lock", "--workload", workload, "--key", str(key), "--out", str(document.parent / "registry.lock")],
        "history": ["history", artifact, "--json"],
        "report": ["report", "--json"],
        "report, earlier reading": [],
        "verify": ["verify"],
        "replay": ["replay", "--verify"],
    }


# Runs each command and reports its wall time and its own peak RSS. It is a separate, small process because
# Linux carries a parent's resident size into a child it forks (exec keeps the high-water mark of the memory
# it replaces), so a child forked from this process, which holds the whole build, would report at least that.
LAUNCHER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    argv = json.loads(line)
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = code = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    print(json.dumps({"seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime,
                      "maxrss_kib": usage.ru_maxrss, "exit": code,
                      "stderr": stderr.decode(errors="replace")[-2000:]}), flush=True)
"""
# The one-artifact commands run this many times (the median is kept): they take about as long as a
# process start, which the shared machine's load moves by tens of percent from one run to the next.
REPEATS = {"show": 3, "evidence import": 3, "promote": 3, "resolve": 3, "lock": 1}


class Launcher:
    """The small process that starts every measured command (see LAUNCHER)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, "REGISTRY_ACTOR": "bench"})

    def run(self, argv: list[str]) -> dict:
        self.process.stdin.write(json.dumps(argv) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def run_command(launcher: Launcher, url: str, name: str, arguments: list[str]) -> dict:
    """One command as a child process, REPEATS times: median wall seconds, largest peak RSS, exit code."""
    executable = Path(sys.executable).parent / "registry"
    argv = [sys.executable, str(PEERS[name]), url] if name in PEERS else [str(executable), "--db", url, *arguments]
    runs = []
    for _ in range(REPEATS.get(name, 1)):
        done = launcher.run(argv)
        if done["exit"] not in ANSWER_CODES.get(name, (0,)):
            raise SystemExit(f"registry {' '.join(arguments)} exited {done['exit']}: {done['stderr'].strip()}")
        runs.append(done)
    return {"seconds": statistics.median(run["seconds"] for run in runs),
            "cpu_s": statistics.median(run["cpu_s"] for run in runs),
            "peak_rss_mib": max(run["maxrss_kib"] for run in runs) * 1024 / MIB, "exit": runs[-1]["exit"],
            "runs": len(runs)}


def measure(launcher: Launcher, shape: str, total: int, commands: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="registry-scale-") as folder:
        url = f"sqlite:///{folder}/registry.db"
        print(f"[{shape} {total:,}] building", file=sys.stderr, flush=True)
        build_s = build(url, shape, total)
        figures = {"shape": shape, "size": total, "artifact": TARGET, "build_s": build_s, **prepare(url, TARGET)}
        lines = command_lines(TARGET, SOLO, evidence_document(Path(folder), TARGET), signing_key(Path(folder)))
        figures["commands"] = {}
        for name in commands:
            figures["commands"][name] = run_command(launcher, url, name, lines[name])
            done = figures["commands"][name]
            print(f"[{shape} {total:,}] {name}: {done['seconds']:.2f} s wall, {done['cpu_s']:.2f} s CPU, "
                  f"{done['peak_rss_mib']:.0f} MiB",
                  file=sys.stderr, flush=True)
        figures["verdict_bytes"] = verdict_bytes(url, TARGET)
    return figures


def verdict_bytes(url: str, artifact: str) -> int | None:
    """The size of the artifact's latest verdict event's payload as stored (canonical JSON), None without one: what
    each `promote` adds to the log."""
    registry = open_registry(url, actor="bench")
    try:
        verdicts = [event for event in registry.store.read_stream(f"artifact:{artifact}")
                    if event.type == "VerdictRendered"]
        return len(canonical_json(verdicts[-1].payload).encode()) if verdicts else None
    finally:
        registry.close()


def table(results: list[dict]) -> str:
    """Per shape: each command's seconds and MiB at each size, and the growth from the smallest size it ran at
    to the largest."""
    out = []
    for shape in sorted({r["shape"] for r in results}):
        rows = sorted((r for r in results if r["shape"] == shape), key=lambda r: r["size"])
        sizes = [f"{r['size']:,}" for r in rows]
        out.append(f"\nshape {shape}: wall seconds / CPU seconds / peak MiB per command")
        out.append("| command | " + " | ".join(sizes) + f" | growth {sizes[0]} -> {sizes[-1]} (wall, CPU, memory) |")
        out.append("|---|" + "---|" * (len(rows) + 1))
        for name in COMMANDS:
            ran = [r["commands"][name] for r in rows if name in r["commands"]]
            if not ran:
                continue
            cells = [f"{r['commands'][name]['seconds']:.2f} / {r['commands'][name]['cpu_s']:.2f} / "
                     f"{r['commands'][name]['peak_rss_mib']:.0f}" if name in r["commands"] else "not run"
                     for r in rows]
            first, last = ran[0], ran[-1]
            growth = (f"{last['seconds'] / first['seconds']:.2f}x, {last['cpu_s'] / first['cpu_s']:.2f}x, "
                      f"{last['peak_rss_mib'] / first['peak_rss_mib']:.2f}x")
            out.append(f"| {name} | " + " | ".join(cells) + f" | {growth} |")
        out.append("| fold (in memory), events per wall second / per CPU second | "
                   + " | ".join(f"{r['fold_events_per_s']:,.0f} / {r['fold_cpu_events_per_s']:,.0f}" for r in rows)
                   + " | |")
        out.append("| rebuild (the fold, then every kept evidence item read by position), events per CPU second | "
                   + " | ".join(f"{r['rebuild_cpu_events_per_s']:,.0f}" for r in rows) + " | |")
        out.append("| the same fold with the collector running, events per CPU second | "
                   + " | ".join(f"{r['fold_collector_running_cpu_events_per_s']:,.0f}" for r in rows) + " | |")
        out.append("| catch-up from empty, s | " + " | ".join(f"{r['catch_up_from_empty_s']:.2f}" for r in rows)
                   + " | |")
        out.append("| the measured artifact's latest verdict event, bytes | "
                   + " | ".join(f"{r['verdict_bytes']:,}" if r.get("verdict_bytes") else "-" for r in rows) + " | |")
        out.append("| build, s | " + " | ".join(f"{r['build_s']:.1f}" for r in rows) + " | |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-events", type=int, default=SIZES[-1], help="largest log to build (default 10^6)")
    parser.add_argument("--min-events", type=int, default=SIZES[0], help="smallest log to build (default 10^3)")
    parser.add_argument("--skip", default="", help="comma-separated commands not to run (e.g. history; report "
                                                   "skips its earlier reading too)")
    parser.add_argument("--shapes", default="many,one", help="comma-separated: many, one, shared, hot")
    parser.add_argument("--json", dest="json_out", help="also write every figure to this JSON file (after each size)")
    args = parser.parse_args()
    sizes = [size for size in SIZES if args.min_events <= size <= args.max_events]
    if not sizes:
        parser.error(f"no size between --min-events and --max-events (sizes: {', '.join(map(str, SIZES))})")
    skipped = {name.strip() for name in args.skip.split(",") if name.strip()}
    if skipped - set(COMMANDS):
        parser.error(f"unknown command(s) to skip: {', '.join(sorted(skipped - set(COMMANDS)))}")
    if "report" in skipped:  # its peer's name holds a comma, so --skip cannot name it: it goes with report
        skipped |= set(PEERS)
    shapes = [shape.strip() for shape in args.shapes.split(",")]
    unknown = set(shapes) - {"many", "one", "shared", "hot"}
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(sorted(unknown))}")
    launcher = Launcher()  # first, while this process is small
    results = []
    try:
        for size in sizes:  # every shape at one size before the next size, so a stopped run has both shapes
            for shape in shapes:
                results.append(measure(launcher, shape, size, [c for c in COMMANDS if c not in skipped]))
                if args.json_out:  # after each size, so a long run that is stopped keeps what it measured
                    Path(args.json_out).write_text(json.dumps(results, indent=2))
    finally:
        launcher.close()
    print(table(results))


if __name__ == "__main__":
    main()
