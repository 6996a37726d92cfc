"""Event ids: RFC 9562 version-8 UUIDs that carry the event's log position.

An id carries its position in its first 48 bits, so ids stay opaque, unique
(positions are) and sort in log order, and finding an event by id is a
primary-key lookup: the log keeps no second unique index that every append
would have to write.
"""
from __future__ import annotations

import uuid
from random import getrandbits

from .errors import StoreError

_POSITION_LIMIT = 1 << 48
# The 128 bits of an id: position (48), version 8 (4), noise (12), the RFC 9562 variant 0b10 (2), noise (62).
_FIXED_BITS = 0x8 << 76 | 0b10 << 62
_NOISE_BITS = 0xFFF << 64 | (1 << 62) - 1


def positional_event_id(position: int) -> str:
    """A new event id for `position` (see `positional_event_ids`)."""
    return positional_event_ids(position, 1)[0]


def positional_event_ids(first_position: int, count: int) -> list[str]:
    """New event ids for `count` positions from `first_position`: each 48 bits of position, the version
    nibble 8, the RFC 9562 variant, and 74 random bits.

    The random bits make two registries' events at the same position differ.
    They need no cryptographic source (uniqueness comes from the position);
    `random` is reseeded in a forked child, so workers never share a sequence.
    A batch's ids are made in one loop: an append makes them inside its lock.
    Each is the 128-bit number written as 32 hex digits and cut into the five
    groups (faster than formatting five numbers).
    """
    last = first_position + count - 1
    if not 0 < first_position <= last < _POSITION_LIMIT:
        raise StoreError(f"positions {first_position} to {last} do not fit event ids")
    ids = []
    for position in range(first_position, last + 1):
        digits = "%032x" % (position << 80 | getrandbits(128) & _NOISE_BITS | _FIXED_BITS)
        ids.append(f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}")
    return ids


def position_of_event_id(event_id: str) -> int | None:
    """The log position a registry event id carries, or None for any other string."""
    try:
        parsed = uuid.UUID(event_id)
    except (ValueError, TypeError, AttributeError):
        return None
    return parsed.int >> 80 if parsed.version == 8 else None
