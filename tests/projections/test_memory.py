"""Folding in one long-lived process holds its memory flat (registry/projections/collector.py).

Every fold pauses the cyclic collector; the folds used to freeze (`gc.freeze`)
every object alive before resuming it, so a reference cycle left as garbage
since the last collection (a refused request's exception and its traceback,
a driver's objects) was never collected: over 200 folds of a server the
permanent generation grew from 77k to 180k objects. A server folds on every
read that follows a write, and makes such garbage between them. A thousand
folds of a small log here, and a hundred live catch-ups, each after a
refusal caught the way a request's is, must leave nothing frozen and no more
live objects than a warmed-up process holds. About five seconds: the growth
it guards against is a few objects a fold, which only shows over many.
"""
from __future__ import annotations

import gc

from registry.events.store import NewEvent
from registry.formats.errors import UserError
from registry.projections import ReadModels
from registry.projections.asof import fold_log
from scripted_history import build_history
from store_helpers import opened_store

FOLDS = 1_000
CATCH_UPS = 100
# Objects a warmed-up process may still gain (caches filling their last slots, interned names): far below the
# hundreds a fold used to leave behind, times a thousand folds.
SLACK = 2_000


def refused_meanwhile() -> None:
    """A refusal caught and kept, as a request's error is: the exception, its traceback and the frame holding it
    are a reference cycle, garbage once this returns, until the collector's next pass."""
    try:
        raise UserError("refused")
    except UserError as exc:
        kept = exc  # noqa: F841 - the frame holds the exception that holds the frame
    return None


def live_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_a_thousand_folds_leave_nothing_frozen_and_memory_flat(migrated_sqlite_url):
    store = opened_store(migrated_sqlite_url)
    try:
        build_history(store)
        models = ReadModels(store)
        head = store.head_position()
        frozen = gc.get_freeze_count()

        def fold_and_catch_up(count: int, catch_ups: int) -> None:
            for index in range(count):
                refused_meanwhile()
                fold_log(store, head)
                if index < catch_ups:
                    store.append("frameset:memory", [NewEvent("FrameSetRegistered", {
                        "name": "memory", "seed": index, "frames": 1, "height": 8, "width": 8, "channels": 3,
                        "dtype": "uint8", "sha256": f"{index:064x}"})], actor="test")
                    models.catch_up()

        fold_and_catch_up(100, 10)  # warmed up: caches and pools filled
        before = live_objects()
        fold_and_catch_up(FOLDS, CATCH_UPS)
        assert gc.get_freeze_count() == frozen
        assert live_objects() - before < SLACK
    finally:
        store.engine.dispose()
