"""The monitor's figures: false-alarm run length, detection delay, and what heavy tails and preemption do.

Streams of re-measured pairs are simulated as in tests/sequential_sim.py
(`ratio_streams`: log-normal, Student t3 and the 20%-per-run preemption
mixture) and read by the e-Shiryaev-Roberts sign detector of
registry/formats/monitor.py, vectorised (tests/monitor_sim.py). Printed:

- ARL at the worst case (median exactly at the threshold, P(below) = 1/2)
  and at in-control medians above it: the mean pairs to a false alarm,
  truncated at --arl-pairs (a lower bound where some streams never alarm);
- after 200 pairs at the promoted speed (1.2x a gate of 1.1), a drop to
  0.9 x the gate: the share of streams alarmed before the change, and the
  mean and 90th-percentile delay after it, per timing distribution and CV;
- the worst-case share alarmed within 200 pairs, and the share of fair-coin
  sign streams holding a run of 12 pairs below (the limit any sign detector
  meets if it alarms within 12 pairs of a total drop).

    .venv/bin/python benchmarks/monitor.py [--streams N] [--arl-pairs N] [--alpha A] [--markdown]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from monitor_sim import alarm_times, run_lengths  # noqa: E402
from sequential_sim import ratio_streams  # noqa: E402

GATE = 1.1
PROMOTED = 1.2
IN_CONTROL = 200


def preempted(rng: np.random.Generator, ratios: np.ndarray, share: float) -> np.ndarray:
    """`share` of pairs with one arm (either, at random) preempted to 1.6x its time."""
    hit = rng.random(ratios.shape) < share
    return np.where(hit, ratios * np.where(rng.random(ratios.shape) < 0.5, 1.6, 1 / 1.6), ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20000)
    parser.add_argument("--arl-pairs", type=int, default=20000)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    rows = []
    arl_streams = max(200, args.streams // 10)
    for p in (0.5, 0.4, 0.3):
        alarms = run_lengths(rng, p, arl_streams, args.arl_pairs, args.alpha)
        never = float(np.mean(alarms == 0))
        rows.append((f"no change, P(below) = {p}", f"ARL >= {np.where(alarms > 0, alarms, args.arl_pairs).mean():.0f}",
                     f"never alarmed in {args.arl_pairs}: {never:.1%}", ""))
    early = run_lengths(rng, 0.5, args.streams, IN_CONTROL, args.alpha)
    rows.append((f"no change, P(below) = 0.5, first {IN_CONTROL} pairs", f"alarmed {np.mean(early > 0):.2%}", "", ""))
    flips = rng.random((args.streams, IN_CONTROL)) < 0.5
    run = np.zeros(args.streams, dtype=int)
    longest = np.zeros(args.streams, dtype=int)
    for t in range(IN_CONTROL):
        run = np.where(flips[:, t], run + 1, 0)
        longest = np.maximum(longest, run)
    rows.append((f"fair coin: a run of 12 below within {IN_CONTROL}", f"{np.mean(longest >= 12):.2%}", "", ""))
    cases = [(d, cv, 0.0) for d in ("lognormal", "student_t3", "preemption") for cv in (0.02, 0.03, 0.05)]
    cases += [("lognormal", 0.03, 0.05), ("lognormal", 0.03, 0.10)]
    for distribution, cv, share in cases:
        before = ratio_streams(rng, distribution, args.streams, IN_CONTROL, PROMOTED, cv=cv)
        after = ratio_streams(rng, distribution, args.streams, 120, 0.9 * GATE, cv=cv)
        ratios = np.concatenate([before, after], axis=1)
        if share:
            ratios = preempted(rng, ratios, share)
        alarms = alarm_times(ratios < GATE, args.alpha)
        false = float(np.mean((alarms > 0) & (alarms <= IN_CONTROL)))
        delay = alarms[alarms > IN_CONTROL] - IN_CONTROL
        missed = float(np.mean(alarms == 0))
        label = f"{distribution} cv {cv}" + (f" + {share:.0%} preempted pairs" if share else "")
        rows.append((label, f"before change {false:.2%}",
                     f"delay mean {delay.mean():.1f}, p90 {np.percentile(delay, 90):.0f}",
                     f"undetected in 120: {missed:.2%}"))
    if args.markdown:
        print("| case | run length / false alarms | detection delay (pairs) | |")
        print("|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in rows:
            print("  ".join(f"{cell:<42}" for cell in row).rstrip())


if __name__ == "__main__":
    main()
