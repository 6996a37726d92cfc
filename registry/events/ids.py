"""Event ids: RFC 9562 version-8 UUIDs that carry the event's log position.

An id carries its position in its first 48 bits, so ids stay opaque, unique
(positions are) and sort in log order, and finding an event by id is a
primary-key lookup: the log keeps no second unique index that every append
would have to write.
"""
from __future__ import annotations

import random
import uuid

from .errors import StoreError

_POSITION_LIMIT = 1 << 48
_LOW_62 = (1 << 62) - 1


def positional_event_id(position: int) -> str:
    """A new event id for `position`: 48 bits of position, the version nibble 8, 74 random bits.

    The random bits make two registries' events at the same position differ.
    They need no cryptographic source (uniqueness comes from the position);
    `random` is reseeded in a forked child, so workers never share a sequence.
    """
    if not 0 < position < _POSITION_LIMIT:
        raise StoreError(f"position {position} does not fit an event id")
    noise = random.getrandbits(74)
    value = (position << 80) | (0x8 << 76) | ((noise >> 62) << 64) | (0b10 << 62) | (noise & _LOW_62)
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def position_of_event_id(event_id: str) -> int | None:
    """The log position a registry event id carries, or None for any other string."""
    try:
        parsed = uuid.UUID(event_id)
    except (ValueError, TypeError, AttributeError):
        return None
    return parsed.int >> 80 if parsed.version == 8 else None
