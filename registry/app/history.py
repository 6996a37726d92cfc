"""`history`: every event of one stream in order, a page at a time, what each verdict rested on and what
each contract redeclaration changed.

A stream of any length is read in pages of `HISTORY_PAGE` events up to one
fixed end (the head when the history was asked for, or the --as-of
position), so the pages, each read on its own, show one prefix of the log
and the command's memory stays flat. A workload's stream is read from its
first event, so each `WorkloadDeclared` after the first is compared with
the contract it replaced, whichever page that one was on.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator

from registry.events.store import StoredEvent
from registry.formats.errors import UserError
from registry.formats.names import artifact_stream

from .context import Registry

# Events per page: `history` holds one page at a time, so its memory stays flat on any stream.
HISTORY_PAGE = 1000


def stream_name(name: str) -> str:
    """An artifact id, or any full stream name such as `workload:ID`."""
    return name if ":" in name else artifact_stream(name)


@dataclass(frozen=True)
class VerdictBasis:
    """What one verdict rested on: each evidence event by its id, None where the log holds no such event."""

    verdict: StoredEvent
    rested_on: list[StoredEvent | None]


def history_pages(registry: Registry, stream: str, as_of: str | None = None) -> tuple[str, Iterator[list[StoredEvent]]]:
    """The stream's full name and its events in pages; a stream with no events (up to --as-of) is refused."""
    from registry.projections import resolve_as_of

    position = resolve_as_of(registry.store, as_of)
    name = stream_name(stream)
    # A fixed end, so that the pages, each read on its own, show one prefix of the log.
    up_to = registry.store.head_position() if position is None else position
    events = registry.store.iter_stream(name, up_to_position=up_to, page=HISTORY_PAGE)
    first = next(events, None)
    if first is None:
        raise UserError(f"no events in stream {name}" + (f" up to position {position}" if position is not None else ""))
    return name, _pages(itertools.chain([first], events), HISTORY_PAGE)


def _pages(events: Iterator[StoredEvent], size: int) -> Iterator[list[StoredEvent]]:
    while page := list(itertools.islice(events, size)):
        yield page


@dataclass(frozen=True)
class FieldChange:
    """One field of a redeclared contract: its dotted path, and its value before and after (None when absent)."""

    path: str
    old: Any
    new: Any


def contract_changes(pages: Iterator[list[StoredEvent]]) -> Iterator[tuple[list[StoredEvent], dict[int, list[FieldChange]]]]:
    """Each page with, by position, what each `WorkloadDeclared` on it changed in the contract before it.

    The first declaration has nothing before it and gets no entry; a
    redeclaration gets every field whose value differs, nested fields by
    dotted path (`fidelity.min_ssim`), lists compared whole.
    """
    contract = None
    for page in pages:
        changes = {}
        for event in page:
            if event.type == "WorkloadDeclared":
                if contract is not None:
                    changes[event.position] = changed_fields(contract, event.payload["contract"])
                contract = event.payload["contract"]
        yield page, changes


def changed_fields(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[FieldChange]:
    """Every leaf whose value differs between two documents, in key order, nested objects by dotted path."""
    found = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if isinstance(before, dict) and isinstance(after, dict):
            found += changed_fields(before, after, f"{prefix}{key}.")
        elif before != after:
            found.append(FieldChange(prefix + key, before, after))
    return found


def verdict_bases(registry: Registry, page: list[StoredEvent]) -> list[VerdictBasis]:
    """For each verdict on the page, its evidence events: from the page when there, else read by id."""
    by_id = {event.event_id: event for event in page}
    return [VerdictBasis(event, [by_id[i] if i in by_id else registry.store.get(i)
                                 for i in event.payload["verdict"]["evidence_ids"]])
            for event in page if event.type == "VerdictRendered"]
