"""The payload index (`projection_payloads`): which artifacts of a workload ever registered given bytes.

`promote` counts the benchmark attempts of an artifact's bytes across its
workload (docs/gate.md, "Attempts"): the same payload under another artifact
id, or under set-aside claims of this one, does not start a fresh count. Only
the artifacts that registered those bytes can add to that count, so the index
holds one row per (workload, payload digest, artifact) for every payload in an
artifact's `registered_payloads`, under the artifact's workload; the count
then reads the states of those artifacts only, whatever else the workload
holds. A registration without a payload digest has nothing to match by and
gets no row.

The app registers only digests (64 lowercase hex digits), but the store
takes any text there (and a log from an older writer may hold a value that
is not text), and no content of the log may stop the catch-up that writes
this table: a value that is not a digest is keyed by the sha256 of its text
(`payload_key`), and every value that is not text shares one key. Two equal values always share a
key, so no artifact that adds to a count is missed; an artifact found under a
shared key whose bytes differ adds nothing (`attempts_on` compares the values
themselves).

Beside the index, `projection_payload_counts` keeps how many rows each
(workload, key) has (`count_deltas`), so a read can tell an index that lost
rows from a payload few artifacts registered.

The rows are a function of the folded artifact state (`index_rows`), so the
live catch-up writes the difference between a touched artifact's rows before
and after its events, `reset` writes them all, and `replay --verify` compares
the table with the rows of a fresh fold.
"""
from __future__ import annotations

from typing import Any, Iterable

from registry.events.canonical import sha256_hex
from registry.formats.digests import is_sha256

IndexRow = tuple[str, str, str]  # (workload, index_key(payload_sha256), artifact)
# The key every registered payload value that is not text shares.
NOT_TEXT = sha256_hex("payload value that is not text")


def payload_key(payload: Any) -> str:
    """The index's key for a registered payload value: the digest itself, else a digest of it (see above)."""
    if is_sha256(payload):
        return payload
    return sha256_hex(payload) if isinstance(payload, str) else NOT_TEXT


def index_rows(state: dict[str, Any]) -> set[IndexRow]:
    """The index rows of one folded artifact state."""
    return {(state["workload"], payload_key(payload), state["artifact"])
            for payload in state.get("registered_payloads", ()) if payload is not None}


def all_index_rows(states: Iterable[dict[str, Any]]) -> set[IndexRow]:
    return set().union(*(index_rows(state) for state in states))


def count_deltas(gone: Iterable[IndexRow], added: Iterable[IndexRow]) -> dict[tuple[str, str], int]:
    """How each (workload, key)'s row count in `projection_payload_counts` moves when these rows go and come."""
    deltas: dict[tuple[str, str], int] = {}
    for rows, step in ((gone, -1), (added, 1)):
        for workload, payload, _ in rows:
            deltas[(workload, payload)] = deltas.get((workload, payload), 0) + step
    return {key: delta for key, delta in deltas.items() if delta}


def as_mapping(row: IndexRow) -> dict[str, str]:
    workload, payload, artifact = row
    return {"workload": workload, "payload_sha256": payload, "artifact": artifact}


def index_key(row: IndexRow) -> str:
    """How a replay difference names a row: WORKLOAD/PAYLOAD/ARTIFACT."""
    return "/".join(row)
