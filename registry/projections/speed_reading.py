"""A payload's speed record read under its workload's contract: the one reading every question uses.

`promote` hands the record to the gate, a benchmark session checks its next
batch against it, `show`, `report` and the live view summarise it: each
reads the same thing here (`RecordReading`), from the record's row and the
workload's row a unit of work read (view.py). The workload's speed gate is
derived one way, from the stored contract's speed block
(`SpeedGate.from_mapping`, as `contract_terms` reads every version's), and
the confident rule's reading is registry/gate/record.py's `read_record`.
Neither numpy nor the gate's other rules are imported: `show` reads a record
as cheaply as a row.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .read_models import KeptReading, SpeedRecordState, WorkloadState

if TYPE_CHECKING:
    from registry.contracts import SpeedGate
    from registry.gate import SpeedRecord
    from registry.gate.record import Reading, Terms


@dataclass(frozen=True)
class RecordReading:
    """A payload's speed record under its workload's current contract.

    `row` is the record's read-model row (None when nothing was recorded for
    the bytes yet, or for an artifact without a payload, which has no
    record); `record` what the gate reads; `speed` the workload's current
    speed block (None when it declares none); `reading` the confident rule's
    reading of the record (None unless the block declares that rule), made
    when first asked: `promote` hands the record to the gate, which reads it
    itself, so a promote reads a record once. Either reads the running
    reading the row keeps when it is kept under the current terms (`kept`),
    and only then: otherwise the record's documents must be attached first.
    """

    row: SpeedRecordState | None
    record: SpeedRecord
    speed: SpeedGate | None
    terms: list[Terms]

    @property
    def confident(self) -> bool:
        return self.record.payload_sha256 is not None and self.speed is not None \
            and self.speed.decision == "confident"

    @property
    def kept(self) -> KeptReading | None:
        """The running reading the row keeps (record_readings.py), when it answers under the current contract:
        None when the row keeps none, keeps one that has not read its latest entry, or keeps the confident rule's
        under other terms than the current ones (a contract declared since the record's last entry), which is
        never used."""
        from registry.gate.record import terms_key

        kept = None if self.row is None else self.row.get("reading")
        entries = [] if self.row is None else self.row["entries"]
        if kept is None or kept["through"] != (entries[-1]["position"] if entries else 0):
            return None
        if not self.confident:
            return kept
        assert self.speed is not None
        return kept if (kept["rule"] or {}).get("terms") == terms_key(self.speed, self.terms) else None

    @cached_property
    def reading(self) -> Reading | None:
        from registry.gate.record import read_record

        if not self.confident:
            return None
        assert self.speed is not None
        return read_record(self.record, self.speed, self.terms)


def speed_terms(workload: WorkloadState | None) -> tuple[SpeedGate | None, list[Terms]]:
    """(the workload's current speed block, its confident versions' terms): what reading its records needs.

    Only the stored contract's speed block is read, as `contract_terms` reads each version's.
    """
    from registry.contracts import SpeedGate
    from registry.gate.record import contract_terms

    block = None if workload is None else workload["contract"].get("speed")
    speed = None if block is None else SpeedGate.from_mapping(block, stored=True)
    if speed is None or speed.decision != "confident":
        return speed, []
    assert workload is not None
    return speed, contract_terms(workload["versions"])


def read_speed_record(row: SpeedRecordState | None, workload: WorkloadState | None, payload_sha256: str | None,
                      rule: tuple[SpeedGate | None, list[Terms]] | None = None) -> RecordReading:
    """The record of `payload_sha256`'s bytes (`row`, its documents attached) read under `workload`.

    `rule` is `speed_terms(workload)`, given by a caller that reads many
    records of one workload.
    """
    from registry.gate import SpeedRecord

    versions: Any = workload["versions"] if workload is not None else []
    if row is None:
        record = SpeedRecord(payload_sha256, (), 0, versions)
    else:
        kept = row.get("reading")
        record = SpeedRecord(payload_sha256, row["entries"], len(row["sessions"]), versions, row["record"],
                             row["last_position"], row["digest"], None if kept is None else kept["rule"])
    speed, terms = speed_terms(workload) if rule is None else rule
    return RecordReading(row, record, speed, terms)
