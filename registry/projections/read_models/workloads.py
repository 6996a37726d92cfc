"""The workloads read model: one row per workload, its current contract and every version it had.

A `WorkloadDeclared` sets the workload's contract (the manifest, its version
and hash) and adds the version, with its speed block, to `versions`: the
speed record's loosening rule reads every version's speed terms (docs/gate.md,
"The speed record"). The number of versions is the stream's version, what a
declaration's append expects.
"""
# No `from __future__ import annotations`: TypedDict reads its annotations evaluated.
from typing import Any, Protocol, TypedDict

from sqlalchemy import BigInteger, Column, Integer

from registry.formats.names import WORKLOAD_PREFIX, workload_stream

from ..log import LogEvent
from .declaration import ReadModel, same_subject, state_table

VERSION = 1


class ContractVersion(TypedDict):
    """One declared version of a workload's contract, with its speed block (the loosening rule reads every
    version's speed terms: docs/gate.md, "The speed record")."""

    version: int
    hash: str
    position: int
    speed: dict[str, Any] | None


class WorkloadState(TypedDict):
    """A workload: its latest contract (`_declared`) and every version it had."""

    workload: str
    contract_version: int
    contract_hash: str
    contract: dict[str, Any]  # the manifest (docs/workloads.md)
    versions: list[ContractVersion]
    last_position: int


class Workloads(Protocol):
    """What this model's handler folds into (RegistryState): the workloads by id."""

    workloads: dict[str, WorkloadState]


WORKLOADS = state_table(
    "projection_workloads", "workload",
    Column("contract_version", Integer, nullable=False),
    Column("last_position", BigInteger, nullable=False),
)


def _declared(state: Workloads, event: LogEvent) -> None:
    payload = event.payload
    workload_id = payload["workload"]
    same_subject(event, workload_stream(workload_id), event.stream)
    current = state.workloads.setdefault(workload_id, {"workload": workload_id,  # type: ignore[typeddict-item]
                                                       "versions": []})
    current.update({
        "contract_version": payload["contract_version"], "contract_hash": payload["contract_hash"],
        "contract": payload["contract"], "last_position": event.position,
    })
    current["versions"].append(
        {"version": payload["contract_version"], "hash": payload["contract_hash"], "position": event.position,
         "speed": payload["contract"].get("speed")}
    )


DECLARATION = ReadModel(
    name="workloads", version=VERSION, row_type=WorkloadState, singular="workload",
    folds={"WorkloadDeclared": _declared},
    table=WORKLOADS, key=("workload",),
    stream_prefix=WORKLOAD_PREFIX, logged=True,
)
