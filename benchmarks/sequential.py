"""Pairs to a speed decision: the anytime-valid (confident) rule beside fixed 16- and 32-pair designs.

For true speedups of 0.9x, 1.05x, 1.25x and 2x the gate, with per-run CVs of
2% and 5% (log-normal timings), it draws paired streams, reads the confident
rule (registry/formats/sequential.py) after every pair up to --max-pairs, and
prints its mean and 90th-percentile pairs to a decision, its false-promotion
rate (below the gate) or false-rejection rate (at or above it), and the share
it left held at max_pairs; beside it the fixed designs spend 16 or 32 pairs
every time, with the point rule (median >= gate promotes) and the
order-statistic rule (a 1 - 2 alpha distribution-free interval: lower bound
above the gate promotes, upper below rejects, else held).

    .venv/bin/python benchmarks/sequential.py [--streams N] [--alpha A] [--max-pairs M] [--markdown]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # the tests' helpers
from sequential_sim import confident_rule, fixed_rules, ratio_streams  # noqa: E402

GATE = 1.2
SPEEDUPS = (0.9, 1.05, 1.25, 2.0)
CVS = (0.02, 0.05)
FIXED = (16, 32)


def wrong(decision: np.ndarray, speedup: float) -> float:
    """Share of wrong outcomes: a promotion below the gate, a rejection at or above it."""
    return float(np.mean(decision == (1 if speedup < 1.0 else -1)))


def held(decision: np.ndarray) -> float:
    return float(np.mean(decision == 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20_000)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--max-pairs", type=int, default=128)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args()
    rng = np.random.default_rng(21)
    header = ("speedup/gate", "CV", "confident mean", "p90", "wrong", "held",
              "point 16 wrong", "order 16 wrong", "order 16 held", "point 32 wrong", "order 32 wrong",
              "order 32 held")
    rows = []
    for speedup in SPEEDUPS:
        for cv in CVS:
            ratios = ratio_streams(rng, "lognormal", args.streams, args.max_pairs, speedup * GATE, cv=cv)
            decision, pairs = confident_rule(ratios, GATE, args.alpha)
            row = [f"{speedup:g}x", f"{cv:.0%}", f"{pairs.mean():.1f}", f"{np.percentile(pairs, 90):.0f}",
                   f"{wrong(decision, speedup):.3f}", f"{held(decision):.3f}"]
            for size in FIXED:
                fixed = fixed_rules(ratios, GATE, size, args.alpha)
                row += [f"{wrong(fixed['point'], speedup):.3f}", f"{wrong(fixed['order-statistic'], speedup):.3f}",
                        f"{held(fixed['order-statistic']):.3f}"]
            rows.append(row)
    print(f"gate {GATE}x, alpha {args.alpha}, {args.streams} log-normal streams per row, "
          f"confident rule read after every pair up to {args.max_pairs}; fixed designs spend 16 or 32 pairs")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for line in (header, *rows):
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))


if __name__ == "__main__":
    main()
