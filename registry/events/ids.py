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
_LOW_48 = (1 << 48) - 1


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
    """
    last = first_position + count - 1
    if not 0 < first_position <= last < _POSITION_LIMIT:
        raise StoreError(f"positions {first_position} to {last} do not fit event ids")
    ids = []
    for position in range(first_position, last + 1):
        noise = getrandbits(74)
        # The five groups: position (32 and 16 bits); 8 and 12 noise bits; the variant 0b10 and 14 noise
        # bits; 48 noise bits.
        ids.append("%08x-%04x-8%03x-%04x-%012x" % (position >> 16, position & 0xFFFF, noise >> 62,
                                                  0x8000 | (noise >> 48) & 0x3FFF, noise & _LOW_48))
    return ids


def position_of_event_id(event_id: str) -> int | None:
    """The log position a registry event id carries, or None for any other string."""
    try:
        parsed = uuid.UUID(event_id)
    except (ValueError, TypeError, AttributeError):
        return None
    return parsed.int >> 80 if parsed.version == 8 else None
