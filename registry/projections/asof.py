"""Turning a user's as-of (a log position or a time) into a log position."""
from __future__ import annotations

import re
from datetime import datetime, timezone

from registry.formats.errors import UserError
from registry.events.store import EventStore

from .live import check_position

_POSITION = re.compile(r"[0-9]+")


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
