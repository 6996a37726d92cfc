"""As-of answers: a user's as-of (a log position or a time) as a log position, and the log folded up to it.

An answer as of an earlier position never touches the live read models: it
folds the log's prefix in memory (only the subject's own stream when one
subject is asked about) and writes nothing. The catch-up's `reset` and
replay verification fold the same way, up to the head they read.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from registry.formats.errors import UserError
from registry.events.store import EventStore

from .collector import collector_paused
from .fold import fold
from .log import read_log
from .read_models import RegistryState

_POSITION = re.compile(r"[0-9]+")


def check_position(store: EventStore, as_of: Any) -> int:
    """An as-of position must be a position the log has reached."""
    if isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0:
        raise UserError(f"as-of position must be a non-negative integer, got {as_of!r}")
    head = store.head_position()
    if as_of > head:
        raise UserError(f"as-of position {as_of} is beyond the log's head {head}")
    return as_of


def fold_log(store: EventStore, up_to: int, stream: str | None = None) -> RegistryState:
    """A fresh fold of the log (or one stream of it) up to and including `up_to`, in memory."""
    with collector_paused():
        state = fold(RegistryState(), read_log(store.engine, after=0, up_to=up_to, stream=stream))
    state.position = up_to
    return state


def resolve_as_of(store: EventStore, text: str | None) -> int | None:
    """A position (integer text) or an ISO-8601 time (naive = UTC) -> the last position at or before it.

    None stays None (now). A time before the first event gives 0: nothing had
    been recorded yet. A position beyond the head is refused, not clamped.
    """
    if text is None:
        return None
    value = text.strip()
    if _POSITION.fullmatch(value):
        return check_position(store, int(value))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(
            f"as-of {text!r} is neither a log position (a non-negative integer) nor an ISO-8601 time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return store.position_at(moment)
