"""Each speed record's running reading, kept in its row (`reading`) by the catch-up that folds its entries.

A question about a hot artifact must not read every document of its bytes'
record again: `show` and `promote` of a record of 28,000 documents read
every one from the log and the rule over every pair, on every call. So the
catch-up that folds a record's new entries also reads them, and only them,
into the record's running reading (registry/gate/record.py `RecordReader`),
and keeps it in the row beside what the fold wrote:

- `through`: the position of the last entry read into it;
- `pairs`, `devices`, `archs`, `timers`: what `show` and `report` give of
  any record, under any rule (`pairs`: every pair the record holds);
- `rule`: the confident rule's state under the contract in force at the
  record's last position (its terms are part of it, `terms_key`), or None
  when that contract does not decide speed by the confident rule.

The reading is a function of the record's entries and of the workload's
contract versions up to the record's last position, however the entries
were folded: a catch-up reads the entries after `through` into the kept
state while the terms stay the same, and reads every entry again (from the
log, once) when they changed; a fresh fold (`replay`, `replay --verify`)
reads every entry of every record. So `replay --verify` compares a kept
reading with one made from scratch, value for value. A read uses a kept
rule state only under the very terms the workload's current contract gives
(`read_record`); a contract declared since the record's last entry makes it
stale, and the record is read entry by entry until its next entry is
folded.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, cast

from registry.events.store import EventStore

from .asof import fold_log
from .read_models import KeptReading, RegistryState, SpeedRecordState, WorkloadState
from .record_items import attach_entries


def fold_kept(store: EventStore, up_to: int) -> RegistryState:
    """A fresh fold of the log up to `up_to` with every record's running reading read from scratch: the rows a
    catch-up keeps (what `replay` writes and `replay --verify` compares with)."""
    state = fold_log(store, up_to)
    keep_readings(store, state.records.values(), state.workloads.get)
    return state


def keep_readings(store: EventStore, records: Iterable[SpeedRecordState],
                  workload: Callable[[str], WorkloadState | None]) -> None:
    """Bring the running reading of each record up to its last entry (in place); `workload` gives a workload's
    row by name."""
    for record in records:
        _keep(store, record, workload(record["workload"]))


def rule_as_of(workload: WorkloadState | None, position: int) -> tuple[Any, list[Any]] | None:
    """(speed block, confident versions' terms) of the contract in force at `position`, or None when it does not
    decide speed by the confident rule (or the workload has no contract)."""
    from registry.contracts import SpeedGate
    from registry.gate.record import contract_terms

    if workload is None:
        return None
    versions = [version for version in workload["versions"] if version["position"] <= position]
    block = versions[-1]["speed"] if versions else None
    if block is None:
        return None
    speed = SpeedGate.from_mapping(block, stored=True)
    if speed.decision != "confident":
        return None
    return speed, contract_terms(versions)


def _keep(store: EventStore, record: SpeedRecordState, workload: WorkloadState | None) -> None:
    from registry.gate.record import RecordReader, terms_key

    entries = record["entries"]
    through = entries[-1]["position"] if entries else 0
    found: Any = record.get("reading")
    rule = rule_as_of(workload, record["last_position"])
    key = None if rule is None else terms_key(*rule)
    again = found is None or (found["rule"] or {}).get("terms") != key
    if not again and found["through"] == through:
        return
    kept: dict[str, Any] = {"through": 0, "pairs": 0, "devices": [], "archs": [], "timers": [], "rule": None} \
        if again else found
    start = len(entries)
    while start and entries[start - 1]["position"] > kept["through"]:  # from the end: a few new entries
        start -= 1
    fed: list[dict[str, Any]] = [dict(entry) for entry in entries[start:]]
    attach_entries(store, fed)  # on copies: the row keeps a document by reference
    for entry in fed:
        kept["pairs"] += len(entry["baseline_s"])
        for name, value in (("devices", entry["device"]), ("archs", entry["arch"]), ("timers", entry["timer"])):
            if value and value not in kept[name]:
                kept[name] = sorted([*kept[name], value])
    if rule is not None:
        reader = RecordReader(*rule, None if again else kept["rule"])
        if again:
            reader.read_all(fed)
        else:
            for entry in fed:
                reader.add(entry)
        kept["rule"] = reader.state
    kept["through"] = through
    record["reading"] = cast(KeptReading, kept)
