"""Catch-up from an empty read side against `reset()` on the same log: events per second, alternated.

Every upgraded registry whose read models must be folded again goes through
the catch-up from an empty read side (the next read after the upgrade), and
`registry replay` through `reset()`: both fold the whole log and write every
row. This builds a SQLite registry of N events (default 100,000) of many
small benchmarked artifacts (the `many` shape of benchmarks/scale.py:
artifacts of 10 events each, a registration with a payload and nine steps of
evidence, benchmark documents feeding each payload's speed record, failures,
verdicts and revocations), then alternates for --rounds rounds:

- catch-up: every read-model row deleted (the checkpoint included; not
  timed), then one catch-up, which finds no checkpoint and folds the whole
  log;
- reset: `reset()`, which replaces every row with a fresh fold;

each side going first in every other round.

It prints each side's median wall seconds and events per second, and the
ratio of the medians (catch-up time over reset time: at most 1 means the
catch-up is at least as fast).

    .venv/bin/python benchmarks/catchup.py [--events 100000] [--rounds 3] [--db URL] [--json]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
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
from registry.projections.catchup import ReadModels  # noqa: E402
from registry.projections.read_models import READ_MODEL_TABLES  # noqa: E402

SMALL_ARTIFACT_EVENTS = 10
BATCH_ARTIFACTS = 200


def build(url: str, total: int) -> float:
    """A registry of `total` events of 10-event artifacts; the seconds it took."""
    started = time.perf_counter()
    with open_registry(url, actor="bench", create=True) as registry:
        store = registry.store
        store.append("frameset:wan-fs8", [NewEvent("FrameSetRegistered", {
            "name": "wan-fs8", "seed": 1024, "frames": 8, "height": 480, "width": 832, "channels": 3,
            "dtype": "uint8", "sha256": "f" * 64})], actor="bench")
        for contract in WORKLOADS.values():
            declare_workload(registry, Contract.from_mapping(contract))
        pool = item_pool(random.Random(20240611))
        count = (total - store.head_position()) // SMALL_ARTIFACT_EVENTS
        for index in range(count):
            events = [registration_event(index), *step_events(index, range(1, SMALL_ARTIFACT_EVENTS), pool)]
            store.append(f"artifact:cand-{index:06d}", events, actor="bench")
    return time.perf_counter() - started


def emptied(engine) -> None:
    """Every read-model row gone, the checkpoint first: the read side of a registry never read yet."""
    with engine.begin() as conn:
        for table in READ_MODEL_TABLES:
            conn.exec_driver_sql(f"DELETE FROM {table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", help="a registry that already holds the log (default: one built in a temporary folder)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="catchup-bench-") as folder:
        url = args.db or f"sqlite:///{Path(folder) / 'registry.db'}"
        build_s = None if args.db else build(url, args.events)
        with open_registry(url, actor="bench") as registry:
            models = ReadModels(registry.store)
            head = registry.store.head_position()
            times: dict[str, list[float]] = {"catch-up": [], "reset": []}
            for round_index in range(args.rounds):  # each side first in every other round
                for side in (("catch-up", "reset") if round_index % 2 == 0 else ("reset", "catch-up")):
                    if side == "catch-up":
                        emptied(registry.engine)  # not timed
                    started = time.perf_counter()
                    models.catch_up() if side == "catch-up" else models.reset()
                    times[side].append(time.perf_counter() - started)
    medians = {side: statistics.median(samples) for side, samples in times.items()}
    figures = {"events": head, "build_s": build_s, "rounds": args.rounds, "seconds": times,
               "median_s": medians, "events_per_s": {side: head / seconds for side, seconds in medians.items()},
               "ratio_catch_up_to_reset": medians["catch-up"] / medians["reset"]}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{head:,} events (built in {build_s or 0:.1f} s), {args.rounds} rounds")
    for side in times:
        print(f"  {side:9s} median {medians[side]:.2f} s, {head / medians[side]:,.0f} events/s "
              f"(runs: {', '.join(f'{s:.2f}' for s in times[side])})")
    print(f"  catch-up / reset: {figures['ratio_catch_up_to_reset']:.2f}x")


if __name__ == "__main__":
    main()
