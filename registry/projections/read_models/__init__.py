"""The read models, each declared once in a module of this package, and the folded state they make up.

A folded state is a plain dict whose shape is declared as a `TypedDict`, not
a dataclass: the dict *is* the read-model row's document. Its canonical JSON
is what the row stores, and `registry replay --verify` compares a fresh fold
with the stored row value for value, with no encoding or decoding step
between the fold and the row (docs/projections.md, "Why the read models are
declared dicts"). tests/projections/test_read_model_shapes.py folds generated logs and
holds every state to the declared types, so a key a fold adds without
declaring it fails there.

`DECLARATIONS` lists them in the order the fold runs their handlers for an
event type several of them fold (an artifact's own model places an event in
its stream before the models kept beside it read it). `RegistryState` holds
one dict of states per model with its own rows; `CHECKPOINT` is the row
every read model is folded up to, with the declarations' versions
(`VERSIONS`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from sqlalchemy import BigInteger, Column, String, Table, Text

from registry.events.canonical import canonical_json
from registry.events.schema import METADATA

from . import artifacts, bench_streams, framesets, monitors, outcomes, payload_index, speed_records, verdicts
from . import workloads
from .artifacts import (
    EVIDENCE_KINDS, FINAL, ArtifactState, AttachedEvidence, EvidenceEntry, HumanDecision, IdentityChange,
    IdentityScope, KeptIdentity, Margin, OpenFailure,
)
from .bench_streams import BenchStreamState
from .declaration import ReadModel, SideTable
from .framesets import FrameSetState
from .monitors import MonitorAcknowledgment, MonitorAlarm, MonitorState
from .outcomes import OutcomeRecord, OutcomesState
from .speed_records import BenchSession, KeptReading, RecordEntry, SpeedRecordState
from .verdicts import VerdictEntry
from .workloads import ContractVersion, WorkloadState

__all__ = [
    "CHECKPOINT", "DECLARATIONS", "EVIDENCE_KINDS", "FINAL", "READ_MODEL_TABLES", "VERSIONS", "ArtifactState",
    "AttachedEvidence", "BenchSession", "BenchStreamState", "ContractVersion", "EvidenceEntry", "FrameSetState",
    "HumanDecision", "IdentityChange", "IdentityScope", "KeptIdentity", "KeptReading", "Margin", "MonitorAcknowledgment",
    "MonitorAlarm", "MonitorState", "OpenFailure", "OutcomeRecord", "OutcomesState", "ReadModel", "RecordEntry",
    "RegistryState", "SideTable", "SpeedRecordState", "VerdictEntry", "WorkloadState", "by_name",
]

DECLARATIONS: tuple[ReadModel, ...] = (
    artifacts.DECLARATION, verdicts.DECLARATION, payload_index.DECLARATION, monitors.DECLARATION,
    workloads.DECLARATION, framesets.DECLARATION, outcomes.DECLARATION, bench_streams.DECLARATION,
    speed_records.DECLARATION,
)


def by_name(name: str) -> ReadModel:
    return _BY_NAME[name]


_BY_NAME = {model.name: model for model in DECLARATIONS}


def versions_text(declarations: tuple[ReadModel, ...] = DECLARATIONS) -> str:
    """What the checkpoint records of the declarations: each one's version, by name, as canonical JSON."""
    return canonical_json({model.name: model.version for model in declarations})


VERSIONS = versions_text()

# The log position the read models are folded up to, and the declarations' versions they were folded under;
# the row concurrent catch-ups race on.
CHECKPOINT = Table(
    "projection_checkpoint", METADATA,
    Column("name", String(64), primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("versions", Text, nullable=True),
)

# Every read-model table, the checkpoint first: what `replay` (and `init`, `db upgrade`) creates again when one
# is missing, and what a catch-up counts before it reads.
READ_MODEL_TABLES: tuple[str, ...] = (CHECKPOINT.name, *(
    table.name for model in DECLARATIONS
    for table in (*(() if model.table is None else (model.table,)), *(side.table for side in model.side_tables))))


@dataclass
class RegistryState:
    """Every model's states as of `position`: what a fold of the log up to it holds.

    Each artifact keeps its verdict history and its monitors; `outcomes`
    holds records imported from other systems about a workload as a whole
    (docs/import.md).
    """

    artifacts: dict[str, ArtifactState] = field(default_factory=dict)
    workloads: dict[str, WorkloadState] = field(default_factory=dict)
    framesets: dict[str, FrameSetState] = field(default_factory=dict)
    outcomes: dict[str, OutcomesState] = field(default_factory=dict)
    bench_streams: dict[str, BenchStreamState] = field(default_factory=dict)
    records: dict[str, SpeedRecordState] = field(default_factory=dict)
    position: int = 0
    # Loads a lazily loaded model's stored row by (model, key) (the live catch-up sets it; a fold from position 0
    # needs none): a speed record is touched by events of many streams, so its row cannot be chosen before the fold.
    load_row: Callable[[str, str], Any] | None = field(default=None, repr=False, compare=False)

    def states(self, model: ReadModel) -> dict[str, Any]:
        """The states of a model with its own rows (`ReadModel.own_rows`), by key."""
        return getattr(self, model.name)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position,
                **{model.name: [self.states(model)[key] for key in sorted(self.states(model))]
                   for model in DECLARATIONS if model.own_rows}}
