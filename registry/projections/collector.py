"""Pausing Python's cyclic garbage collector around a fold.

A fold allocates millions of small dicts and lists that hold no reference
cycles, and every allocation counts toward the collector's thresholds, so the
collector keeps walking an ever larger heap of live, acyclic state: on a
10^6-event log of 10-event artifacts the fold ran 38% faster with it paused
(benchmarks/scale.py; docs/benchmarks.md, "Scale").
Reference counting still frees everything the fold drops; only the cycle
search waits until the fold is done, and the previous setting is restored
however the fold ends.

Nothing is frozen afterwards (`gc.freeze`): a frozen object is never
examined again, so a reference cycle among the objects a fold allocated (a
driver's, an exception's traceback) would stay in memory for the life of the
process, and a long-running `registry serve` folds on every write it reads.
The first collection after a fold walks the objects it left alive once and
moves them to an older generation, as it would any others
(tests/projections/test_memory.py folds a thousand times and holds memory flat).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; restore whatever it was, even on an error."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
