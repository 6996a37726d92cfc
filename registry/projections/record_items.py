"""A speed record's complete documents, read from the log by position when a question reads the record.

The fold keeps a document's entry in a speed record as a reference to its
`BenchmarkMeasured` event (read_models/speed_records.py `RecordEntry`), for the reason
evidence entries are references (items.py): decoding every benchmark item's
arms halved the fold's rate. A question that reads a record (`promote`,
`what-if`, `show`, `bench status`, `report`) attaches each document's
protocol, schedule, arms, timer, device and arch here, every record asked
about in a few reads by primary key. An item stored by some other path that
is not a benchmark's shape is attached with no protocol and no times, which
the gate holds on (registry/gate/record.py): the record never silently loses
an attempt. A position that holds no benchmark of the entry's artifact is
refused in one line naming it.
"""
from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import Connection

from registry.events.store import EventStore
from registry.formats.names import ARTIFACT_PREFIX

from .items import ITEM_PAGE
from .log import row_payload
from .read_models import SpeedRecordState
from .errors import ProjectionError


def attach_documents(store: EventStore, records: Iterable[SpeedRecordState],
                     known: dict[int, dict[str, Any]] | None = None, on: Connection | None = None) -> None:
    """Give every document entry of `records` its arms and names, read from the log (in place).

    `known` maps positions to benchmark items already read (the artifacts' latest evidence, attached by
    items.py in the same answer), which are not read again. `on`: the read transaction to read them in (a unit
    of work's snapshot), else a read of their own.
    """
    attach_entries(store, [entry for record in records for entry in record["entries"]], known, on)


def attach_entries(store: EventStore, entries: Iterable[Any],
                   known: dict[int, dict[str, Any]] | None = None, on: Connection | None = None) -> None:
    """Give each document entry among `entries` its arms and names, read from the log (in place)."""
    wanted: dict[int, Any] = {}
    for entry in entries:
        if entry["source"] == "document" and "protocol" not in entry:
            item = (known or {}).get(entry["position"])
            if item is not None:
                entry.update(document_fields(item if isinstance(item, dict) else {}))
            else:
                wanted[entry["position"]] = entry
    if not wanted:
        return
    for rows in store.log_rows_at(wanted, page=ITEM_PAGE, on=on):
        for row in rows:
            position, _, stream, type_, _, _, _ = row
            entry = wanted.pop(position)
            if stream != ARTIFACT_PREFIX + entry["artifact"] or type_ != "BenchmarkMeasured":
                raise _not_its_document(position, entry["artifact"], f"{type_} in stream {stream}")
            item = row_payload(row).get("item")
            entry.update(document_fields(item if isinstance(item, dict) else {}))
    if wanted:
        position = min(wanted)
        raise _not_its_document(position, wanted[position]["artifact"], "no event")


def attach_state_documents(store: EventStore, state: Any, on: Connection | None = None) -> None:
    """Attach the documents of every speed record of a RegistryState whose artifacts' items are attached
    (items.py), reading again only those not among the artifacts' latest benchmark items."""
    from .items import evidence_entries

    read = {entry["position"]: entry["item"] for artifact in state.artifacts.values()
            for kind, entry in evidence_entries(artifact) if kind == "benchmark"}
    attach_documents(store, state.records.values(), read, on)


def document_fields(item: dict[str, Any]) -> Any:
    """What a speed record reads of a benchmark item; no protocol and no times where it is not shaped as one."""
    arms = [item.get(arm) for arm in ("baseline_s", "candidate_s")]
    shaped = item.get("protocol") in ("paired", "sequential") and all(_are_times(times) for times in arms)
    schedule = item.get("schedule")
    return {"protocol": item["protocol"] if shaped else None,
            "schedule": schedule if shaped and isinstance(schedule, list) else None,
            "baseline_s": arms[0] if shaped else [], "candidate_s": arms[1] if shaped else [],
            "timer": _text(item.get("timer")), "device": _text(item.get("device")),
            "arch": item.get("arch") if isinstance(item.get("arch"), str) else None}


# What JSON decodes a number to (a bool is neither); an arm whose values are all of these can be compared in C.
_NUMBERS = frozenset((int, float))


def _are_times(values: Any) -> bool:
    """A non-empty list of positive numbers (no bool): every value's type, then the least, each one pass in C.

    A read attaches every document of a record, so this runs over every time a record holds; a check per value
    in Python was a third of `show`'s time on a record of 3,000 documents.
    """
    return isinstance(values, list) and bool(values) and _NUMBERS.issuperset(map(type, values)) and min(values) > 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _not_its_document(position: int, artifact_id: str, found: str) -> ProjectionError:
    return ProjectionError(
        f"a speed record names position {position} as a benchmark document of artifact {artifact_id!r}, but the "
        f"log holds {found} there: `registry replay` rebuilds the read models from the log"
    )
