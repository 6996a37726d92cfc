"""The payload index read model (`projection_payloads`): which artifacts of a workload ever registered given bytes.

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

The rows are a function of the folded artifact state (its
`registered_payloads`, which this model's handler keeps: `_registered`), so
the live catch-up writes the difference between a touched artifact's rows
before and after its events, `reset` writes them all, and `replay --verify`
compares the table with the rows of a fresh fold.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol

from sqlalchemy import BigInteger, Column, Connection, String, Table, func, select

from registry.events.canonical import sha256_hex
from registry.events.schema import METADATA
from registry.formats.digests import is_sha256
from registry.formats.names import ARTIFACT_PREFIX

from ..errors import REPLAY, DamagedReadModel
from ..log import LogEvent
from .declaration import Keyed, ReadModel, SideTable, counted

VERSION = 1
IndexRow = tuple[str, str, str]  # (workload, index_key(payload_sha256), artifact)

PAYLOADS = Table(
    "projection_payloads", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("payload_sha256", String(64), primary_key=True),
    Column("artifact", String(200), primary_key=True),
)
# How many rows of the index each (workload, payload digest) has, kept beside it: a read of the index compares
# its range with this count, so rows deleted from the index are a refusal, never a smaller attempt count.
PAYLOAD_COUNTS = Table(
    "projection_payload_counts", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("payload_sha256", String(64), primary_key=True),
    Column("artifacts", BigInteger, nullable=False),
)
# The key every registered payload value that is not text shares.
NOT_TEXT = sha256_hex("payload value that is not text")


def payload_key(payload: Any) -> str:
    """The index's key for a registered payload value: the digest itself, else a digest of it (see above)."""
    if is_sha256(payload):
        return payload
    return sha256_hex(payload) if isinstance(payload, str) else NOT_TEXT


def index_rows(state: Mapping[str, Any]) -> set[IndexRow]:
    """The index rows of one folded artifact state."""
    return {(state["workload"], payload_key(payload), state["artifact"])
            for payload in state.get("registered_payloads", ()) if payload is not None}


def all_index_rows(states: Iterable[Mapping[str, Any]]) -> set[IndexRow]:
    return set().union(*(index_rows(state) for state in states))


def as_mapping(row: IndexRow) -> dict[str, str]:
    workload, payload, artifact = row
    return {"workload": workload, "payload_sha256": payload, "artifact": artifact}


class Registrations(Protocol):
    """What this model's handler folds into (RegistryState): the artifacts, each with its registered payloads."""

    artifacts: dict[str, Any]


def _registered(state: Registrations, event: LogEvent) -> None:
    """A registration's payload joins the artifact's registered payloads (artifacts.py registered it)."""
    payloads = state.artifacts[event.stream[len(ARTIFACT_PREFIX):]].setdefault("registered_payloads", [])
    if event.payload.get("payload_sha256") not in payloads:
        payloads.append(event.payload.get("payload_sha256"))


def check_payload_count(conn: Connection, workload: str, payload_sha256: Any, rows: list, asking: str | None) -> None:
    """Refuse an index range that holds another number of rows than its count kept beside it, a row without an
    artifact row (`rows` are the artifact rows the range joined), or that lacks `asking`, an artifact that
    registered these bytes: an index that lost rows would otherwise count fewer benchmark attempts."""
    key = payload_key(payload_sha256)
    in_range = (PAYLOADS.c.workload == workload, PAYLOADS.c.payload_sha256 == key)
    indexed = conn.execute(select(func.count()).select_from(PAYLOADS).where(*in_range)).scalar()
    counted_now = conn.execute(select(PAYLOAD_COUNTS.c.artifacts).where(
        PAYLOAD_COUNTS.c.workload == workload, PAYLOAD_COUNTS.c.payload_sha256 == key)).scalar()
    if (counted_now or 0) != indexed or indexed != len(rows) or (
            asking is not None and asking not in {row[0] for row in rows}):
        raise DamagedReadModel(
            f"the payload index of workload {workload!r} does not match its count for payload "
            f"{str(payload_sha256)[:12]} ({indexed} rows, {len(rows)} with an artifact row, "
            f"{'no count' if counted_now is None else f'{counted_now} counted'}); {REPLAY}")


def _rows(state: dict[str, Any]) -> Keyed:
    return {row: as_mapping(row) for row in index_rows(state)}


DECLARATION = ReadModel(
    name="payloads", version=VERSION, row_type=dict, singular="payload index row",
    folds={"ArtifactRegistered": _registered},
    table=PAYLOADS, key=("workload", "payload_sha256", "artifact"), parent="artifacts", derive=_rows,
    side_tables=(SideTable(PAYLOAD_COUNTS, ("workload", "payload_sha256"),
                           lambda rows: counted(("workload", "payload_sha256"), "artifacts",
                                                ((row["workload"], row["payload_sha256"]) for row in rows)), "add"),),
)
