"""Deciding again when the stream moved: the one retry loop of the use cases that append after a read.

A use case reads a read model, decides, and appends expecting the stream
version it read; when another writer reached the stream first the store
refuses the append (ConcurrencyError) and nothing was written, so the use
case reads and decides again. A stream that moves on every attempt ends in
one line saying nothing was recorded, never in a loop without end.
"""
from __future__ import annotations

from typing import Callable, TypeVar

from registry.events.errors import ConcurrencyError
from registry.formats.errors import UserError

Outcome = TypeVar("Outcome")


def decided_on_a_still_stream(attempt: Callable[[], Outcome], tries: int, refusal: str) -> Outcome:
    """`attempt()` until its append lands, at most `tries` times; else UserError(`refusal`)."""
    for _ in range(tries):
        try:
            return attempt()
        except ConcurrencyError:
            continue  # the stream moved between the read and the append: read it again
    raise UserError(refusal)
