"""The monitor's figures: false-alarm run length, detection delay, and what heavy tails and preemption do.

Streams of re-measured pairs are simulated as in tests/support/sequential_sim.py
(`ratio_streams`: log-normal, Student t3 and the 20%-per-run preemption
mixture) and read by the e-Shiryaev-Roberts sign detector of
registry/formats/monitor.py, vectorised (tests/support/monitor_sim.py). Printed:

- ARL at the worst case (median exactly at the threshold, P(below) = 1/2)
  and at in-control medians above it: the mean pairs to a false alarm,
  truncated at --arl-pairs (a lower bound where some streams never alarm);
- after 200 pairs at the promoted speed (1.2x a gate of 1.1), a drop to
  0.9 x the gate: the share of streams alarmed before the change, and the
  mean and 90th-percentile delay after it, per timing distribution and CV;
- beside each delay, the fastest any detector of the median can be at that
  noise: the sign CUSUM with the least mean delay at an ARL of exactly
  1/alpha for the share of post-change pairs below the threshold, solved
  exactly (tests/support/monitor_sim.py `fastest_sign_detection`, which says why no
  detector valid for every distribution with median at the threshold does
  better);
- the same drop read with the threshold nearer the promoted speed
  (`reference: promoted`, `margin: 0.04`: 1.152), which is how a contract
  buys a faster detection of a drop below the gate;
- the same drop read by the detector with its prior moved toward the
  beliefs that noise implies (half on q = 0.97, half on 0.9: `SHIFTED`);
- the same drop with the monitor's rule for the harness's baseline waits
  (`monitor.baseline_wait_share: 0.05`, re-measured in batches of 10 pairs):
  a preempted baseline run waited 0.6/1.6 of its time for a CPU, so its pair
  is left out, through the registry's own functions (tests/support/monitor_sim.py
  `screened_alarm_times`); the limit counted in all pairs timed (the limit
  in kept pairs over the share kept, Wald's identity);
- the run length of an artifact whose clean median sits at the threshold
  when 10% or 20% of pairs are preempted (either arm, as below) and the
  baseline-preempted ones are left out: the kept pairs keep the preempted
  candidate runs, each below, so P(below) of a kept pair is 1/(2 - share),
  past the 1/2 the guarantee needs (docs/monitor.md, "The guarantee");
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # the tests' helpers
from monitor_sim import alarm_times, fastest_sign_detection, run_lengths, screened_alarm_times  # noqa: E402
from sequential_sim import ratio_streams  # noqa: E402

from registry.formats.sequential import PRIOR  # noqa: E402

GATE = 1.1
PROMOTED = 1.2
IN_CONTROL = 200
NEAR = PROMOTED * (1 - 0.04)
# A prior moved toward the beliefs a 10% drop under 5% noise implies (P(below) near 0.93), for comparison.
SHIFTED = ((0.97, 0.5), (0.9, 0.5))
PREEMPTED = 1.6  # a preempted run's time over its own
WAIT_SHARE = 0.05  # the declared monitor.baseline_wait_share of the "recognised" rows
BATCH = 10  # pairs per re-measured batch in those rows


def preempted(rng: np.random.Generator, ratios: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """`share` of pairs with one arm (either, at random) preempted to 1.6x its time; (ratios, baseline hit)."""
    hit = rng.random(ratios.shape) < share
    baseline = rng.random(ratios.shape) < 0.5
    return np.where(hit, ratios * np.where(baseline, PREEMPTED, 1 / PREEMPTED), ratios), hit & baseline


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
                     f"never alarmed in {args.arl_pairs}: {never:.1%}", "", ""))
    screened = np.random.default_rng(2027)  # its own draws: the rows after these read as they did before them
    for share in (0.10, 0.20):  # a kept pair is clean (below half the time) or had its candidate preempted (below)
        p = 1 / (2 - share)
        alarms = run_lengths(screened, p, arl_streams, args.arl_pairs, args.alpha)
        rows.append((f"no change, median at the threshold, {share:.0%} preempted pairs, baseline-preempted "
                     f"pairs left out: P(below) of a kept pair 1/(2 - {share:g}) = {p:.3f}",
                     f"ARL {np.where(alarms > 0, alarms, args.arl_pairs).mean():.0f}",
                     f"never alarmed in {args.arl_pairs}: {np.mean(alarms == 0):.1%}", "", ""))
    early = run_lengths(rng, 0.5, args.streams, IN_CONTROL, args.alpha)
    rows.append((f"no change, P(below) = 0.5, first {IN_CONTROL} pairs", f"alarmed {np.mean(early > 0):.2%}", "", "", ""))
    flips = rng.random((args.streams, IN_CONTROL)) < 0.5
    run = np.zeros(args.streams, dtype=int)
    longest = np.zeros(args.streams, dtype=int)
    for t in range(IN_CONTROL):
        run = np.where(flips[:, t], run + 1, 0)
        longest = np.maximum(longest, run)
    rows.append((f"fair coin: a run of 12 below within {IN_CONTROL}", f"{np.mean(longest >= 12):.2%}", "", "", ""))
    cases = [(d, cv, 0.0, GATE, PRIOR, False) for d in ("lognormal", "student_t3", "preemption")
             for cv in (0.02, 0.03, 0.05)]
    cases += [("lognormal", 0.03, 0.05, GATE, PRIOR, False), ("lognormal", 0.03, 0.10, GATE, PRIOR, False)]
    cases += [("lognormal", 0.05, 0.0, GATE, SHIFTED, False), ("lognormal", 0.03, 0.10, GATE, SHIFTED, False)]
    cases += [("lognormal", 0.05, 0.0, NEAR, PRIOR, False), ("student_t3", 0.05, 0.0, NEAR, PRIOR, False),
              ("lognormal", 0.03, 0.10, NEAR, PRIOR, False)]
    cases += [("lognormal", 0.03, 0.10, GATE, PRIOR, True), ("lognormal", 0.03, 0.20, GATE, PRIOR, True)]
    for distribution, cv, share, threshold, prior, recognised in cases:
        before = ratio_streams(rng, distribution, args.streams, IN_CONTROL, PROMOTED, cv=cv)
        after = ratio_streams(rng, distribution, args.streams, 120, 0.9 * GATE, cv=cv)
        ratios = np.concatenate([before, after], axis=1)
        kept = np.ones(ratios.shape, dtype=bool)
        if share:
            ratios, baseline_hit = preempted(rng, ratios, share)
        if recognised:  # candidate times 1, so baseline times are the ratios; a preempted one waited 0.6 of 1.6
            waited = np.where(baseline_hit, ratios * (1 - 1 / PREEMPTED), 0.0)
            kept = waited <= WAIT_SHARE * ratios
            alarms, contended = screened_alarm_times(ratios, np.ones_like(ratios), waited, threshold, WAIT_SHARE,
                                                     args.alpha, BATCH)
        else:
            alarms, contended = alarm_times(ratios < threshold, args.alpha, prior), 0
        false = float(np.mean((alarms > 0) & (alarms <= IN_CONTROL)))
        delay = alarms[alarms > IN_CONTROL] - IN_CONTROL
        missed = float(np.mean(alarms == 0))
        post, post_kept = ratios[:, IN_CONTROL:] < threshold, kept[:, IN_CONTROL:]
        _, fastest, fastest_p90 = fastest_sign_detection(float(post[post_kept].mean()), args.alpha)
        label = f"{distribution} cv {cv}" + (f" + {share:.0%} preempted pairs" if share else "")
        label += "" if threshold == GATE else f", threshold {threshold:.3f}"
        label += "" if prior == PRIOR else ", prior 0.97/0.9"
        label += (f", baseline-preempted pairs recognised, left out ({contended} of "
                  f"{args.streams * ratios.shape[1] // BATCH} batches contended)" if recognised else "")
        limit = (f"least mean possible {fastest / post_kept.mean():.1f}" if recognised
                 else f"least mean possible {fastest:.1f} (its p90 {fastest_p90})")
        rows.append((label, f"before change {false:.2%}",
                     f"delay mean {delay.mean():.1f}, p90 {np.percentile(delay, 90):.0f}", limit,
                     f"undetected in 120: {missed:.2%}"))
    if args.markdown:
        print("| case | run length / false alarms | detection delay (pairs) | the limit at this noise | |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in rows:
            print("  ".join(f"{cell:<40}" for cell in row).rstrip())


if __name__ == "__main__":
    main()
