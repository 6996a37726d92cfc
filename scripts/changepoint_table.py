"""Write registry/formats/changepoint_table.py: the exact null law of the min-p Mann-Whitney change-point scan.

For n untied runs in a uniformly random order (exchangeable runs), the scan's
statistic is M = min over splits k of the exact two-sided Mann-Whitney p-value
of the first k runs against the rest (registry/formats/changepoint.py,
`split_p_value`). For every achievable level c (every value a split's p-value
can take), in increasing order, this counts the orders whose every split
stays above c: a chain of rank subsets A_1 < A_2 < ... < A_n, A_k the ranks of
the first k runs, each of whose sums has p-value above c. The count over all
2^n subsets is a sum over each subset's k predecessors (the last run's rank
removed), so P(M <= c) = 1 - count / n! is exact, in integers (20! < 2^63).
Levels are written while P(M <= c) is at most MAX_TABLED_P: no contract's
alpha / 2 exceeds it.

    .venv/bin/python scripts/changepoint_table.py            # about a minute, most of it n = 19 and 20

tests/formats/test_changepoint.py checks the written table against every permutation
for small n, against the same count done in plain Python, and against this
function for n up to 14.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from registry.formats.changepoint import split_p_value

TABLE_RUNS = 20
MAX_TABLED_P = 0.25
TARGET = Path(__file__).resolve().parent.parent / "registry" / "formats" / "changepoint_table.py"


def scan_null(n: int, limit: float = MAX_TABLED_P) -> list[tuple[float, float]]:
    """[(c, P(M <= c))] for every achievable split level c of n untied runs, ascending, while P <= limit."""
    top = n * (n + 1) // 2
    level = np.ones((n + 1, top + 1))
    for k in range(1, n):
        for s in range(k * (k + 1) // 2, k * (2 * n - k + 1) // 2 + 1):
            level[k, s] = split_p_value(n, k, s)
    masks = np.arange(1 << n, dtype=np.int64)
    size = np.zeros(1 << n, dtype=np.int64)
    total = np.zeros(1 << n, dtype=np.int64)
    for bit in range(n):
        has = (masks >> bit) & 1
        size += has
        total += has * (bit + 1)
    mask_level = level[size, total]
    by_size = [masks[size == k] for k in range(n + 1)]
    parents = [[(np.flatnonzero((members >> bit) & 1), members[(members >> bit) & 1 == 1] ^ (1 << bit))
                for bit in range(n)] for members in by_size]
    orders = math.factorial(n)
    found = []
    for c in sorted({float(value) for value in level[1:n].ravel() if value < 1.0} | {1.0}):
        stays = mask_level > c
        chains = np.zeros(1 << n, dtype=np.int64)
        chains[0] = 1
        for k in range(1, n + 1):
            members = by_size[k]
            count = np.zeros(len(members), dtype=np.int64)
            for where, parent in parents[k]:
                count[where] += chains[parent]
            if k < n:
                count[~stays[members]] = 0
            chains[members] = count
        p = (orders - int(chains[-1])) / orders
        if p > limit:
            break
        found.append((c, p))
    return found


def main() -> None:
    lines = [
        '"""The exact null law of the min-p Mann-Whitney change-point scan (registry/formats/changepoint.py).',
        "",
        "Written by scripts/changepoint_table.py; do not edit. SCAN_P[n] lists, for n untied runs in random order,",
        "every achievable split level c (ascending) with P(min over splits of the split p-value <= c), while that",
        'probability is at most MAX_TABLED_P."""',
        "",
        f"TABLE_RUNS = {TABLE_RUNS}",
        f"MAX_TABLED_P = {MAX_TABLED_P!r}",
        "SCAN_P: dict[int, tuple[tuple[float, float], ...]] = {",
    ]
    for n in range(2, TABLE_RUNS + 1):
        rows = scan_null(n)
        print(f"n={n}: {len(rows)} levels", file=sys.stderr)
        lines.append(f"    {n}: (" + "".join(f"\n        ({c!r}, {p!r})," for c, p in rows)
                     + ("\n    ),"if rows else "),"))
    lines.append("}")
    TARGET.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
