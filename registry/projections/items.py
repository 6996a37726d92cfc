"""Evidence items, read from the log by position when a question shows them.

A read model's evidence entry references its event (`event_id`, `position`)
and holds no item: decoding the latest item of each kind was half the fold's
time, and the rows carried a kilobyte per item that most reads never look at.
A question that shows items (`show`, promote's gate, `report`, `what-if`,
`rejudge`, as-of answers, `rebuild`) attaches them here: every entry of every
artifact asked about, current and set-aside identities alike, read through the
store by primary key in a few reads, whatever the number of artifacts.

Each item is decoded as the fold reads any payload (log.py's `row_payload`:
strict JSON, an older schema upcast and validated); a payload without an
`item`, a position that holds no evidence of the entry's kind in the
artifact's stream, or one that two entries name (an event is the evidence
of one identity: a row pointing a current entry at a set-aside identity's
event), is refused in one line naming the position.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from sqlalchemy import Connection

from registry.events.catalogue import EVIDENCE_KIND_BY_TYPE
from registry.events.store import EventStore
from registry.formats.names import ARTIFACT_PREFIX

from .log import chain_time, row_payload
from .read_models import ArtifactState
from .errors import ProjectionError

# Positions per read: a page of rows and their payload texts is in memory at a time.
ITEM_PAGE = 5_000


def evidence_entries(artifact: ArtifactState) -> Iterator[tuple[str, Any]]:
    """(kind, entry) of every evidence entry of the artifact: its current identity's and each set-aside one's."""
    yield from artifact["evidence"].items()
    for kept in artifact["earlier_identities"].values():
        yield from kept["evidence"].items()


def attach_items(store: EventStore, artifacts: Iterable[ArtifactState], on: Connection | None = None) -> None:
    """Give every evidence entry of `artifacts` its `item` and `measured_at`, read from the log (in place), in the
    read transaction `on` when one is given (a unit of work's snapshot).

    `measured_at` is an imported document's own time where it gives one
    (docs/import.md), else the time the event was recorded.
    """
    wanted: dict[int, tuple[str, str, dict[str, Any]]] = {}
    for artifact in artifacts:
        for kind, entry in evidence_entries(artifact):
            if entry["position"] in wanted:  # an event is the evidence of one identity of one artifact
                raise _not_its_evidence(entry["position"], artifact["artifact"], kind,
                                        "an event another evidence entry already names")
            wanted[entry["position"]] = (artifact["artifact"], kind, entry)
    if not wanted:
        return
    for rows in store.log_rows_at(wanted, page=ITEM_PAGE, on=on):
        for row in rows:
            position, _, stream, type_, _, _, recorded_at = row
            artifact_id, kind, entry = wanted.pop(position)
            if stream != ARTIFACT_PREFIX + artifact_id or EVIDENCE_KIND_BY_TYPE.get(type_) != kind:
                raise _not_its_evidence(position, artifact_id, kind, f"{type_} in stream {stream}")
            payload = row_payload(row)
            try:
                item = payload["item"]
            except (KeyError, TypeError) as exc:
                raise ProjectionError(
                    f"event at position {position} ({type_}) cannot be folded: malformed payload ({exc!r})"
                ) from None
            entry["item"] = item
            entry["measured_at"] = (payload.get("origin") or {}).get("document_time") or chain_time(recorded_at)
    if wanted:
        position = min(wanted)
        artifact_id, kind, _ = wanted[position]
        raise _not_its_evidence(position, artifact_id, kind, "no event")


def _not_its_evidence(position: int, artifact_id: str, kind: str, found: str) -> ProjectionError:
    return ProjectionError(
        f"the read model of artifact {artifact_id!r} names position {position} as its {kind} evidence, but the log "
        f"holds {found} there: `registry replay` rebuilds the read models from the log"
    )
