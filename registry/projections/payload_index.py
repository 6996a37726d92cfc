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

The rows are a function of the folded artifact state (`index_rows`), so the
live catch-up writes the difference between a touched artifact's rows before
and after its events, `reset` writes them all, and `replay --verify` compares
the table with the rows of a fresh fold.
"""
from __future__ import annotations

from typing import Any, Iterable

IndexRow = tuple[str, str, str]  # (workload, payload_sha256, artifact)


def index_rows(state: dict[str, Any]) -> set[IndexRow]:
    """The index rows of one folded artifact state."""
    return {(state["workload"], payload, state["artifact"])
            for payload in state.get("registered_payloads", ()) if payload is not None}


def all_index_rows(states: Iterable[dict[str, Any]]) -> set[IndexRow]:
    return set().union(*(index_rows(state) for state in states))


def as_mapping(row: IndexRow) -> dict[str, str]:
    workload, payload, artifact = row
    return {"workload": workload, "payload_sha256": payload, "artifact": artifact}


def index_key(row: IndexRow) -> str:
    """How a replay difference names a row: WORKLOAD/PAYLOAD/ARTIFACT."""
    return "/".join(row)
