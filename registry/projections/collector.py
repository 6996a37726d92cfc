"""Pausing Python's cyclic garbage collector around a fold.

A fold allocates millions of small dicts and lists that hold no reference
cycles, and every allocation counts toward the collector's thresholds, so the
collector keeps walking an ever larger heap of live, acyclic state: on a
10^6-event log of 10-event artifacts the fold ran 38% faster with it paused
(benchmarks/scale.py; docs/benchmarks.md, "Scale").
Reference counting still frees everything the fold drops; only the cycle
search waits until the fold is done, and the previous setting is restored
however the fold ends.

Before the collector is switched back on, everything allocated meanwhile is
frozen (`gc.freeze`, moved to the permanent generation): otherwise the
first collection afterwards would walk every object the fold made (they all
sit in the youngest generation), paying the deferred cost at once. Frozen
objects are still freed by reference counting when dropped; only a
reference cycle among them would wait for `gc.unfreeze`, and the fold's
state makes none.
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
            gc.freeze()
            gc.enable()
