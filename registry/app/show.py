"""`show`: one artifact's state as of a moment, with its workload's contract and its benchmark record.

One-artifact questions read the read models (registry.projections.subject):
the artifact's row and a bounded range of its latest verdicts, however many
came before, and its workload's row; never a whole stream or the log.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from registry.formats.errors import UserError

from .record_summary import summarize_record
from .context import Registry


def as_of_text(position: int | None) -> str:
    """The words naming the --as-of position in a refusal (position 0 included); empty when answering now."""
    return "" if position is None else f" as of position {position}"


@dataclass(frozen=True)
class ShownArtifact:
    state: dict[str, Any]  # the projected state, with its latest `shown_verdicts` verdicts
    verdict_count: int  # how many verdicts it has in all
    workload_declared: bool
    contract_note: str | None  # set when a final decision stands under an older contract than the current one
    bench: dict[str, Any] | None  # the identity's benchmark record (app/bench.py), when the workload is declared
    monitor: dict[str, Any] | None  # the current identity's monitor (projections/read_models/monitors.py `monitor_summary`)
    # The speed record's entries `show` lists, latest last: its latest few, or every one (--documents); the record's
    # counts and reading are in `bench` either way.
    entries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The `show --json` document (also `GET /api/artifacts/{id}` of `registry serve`): the projected state with
        the decision on top, how much verdict history it leaves out, the benchmark record and the monitor."""
        from registry.projections.headline import headline

        state = self.state
        return {"artifact": state["artifact"], "decision": state["decision"], "headline": headline(state),
                "contract_note": self.contract_note,
                **state, "verdict_count": self.verdict_count,
                "verdicts_omitted": self.verdict_count - len(state["verdicts"]),
                "verdicts_in_full": history_command(state["artifact"]), "workload_declared": self.workload_declared,
                "bench": self.bench, "monitor": self.monitor, "record_entries": self.entries,
                "record_entries_omitted": (self.bench["entries"] - len(self.entries)) if self.bench else 0}


def history_command(artifact_id: str) -> str:
    """The command that lists every verdict (and every other event) of an artifact."""
    return f"registry history artifact:{artifact_id}"


# How many of a speed record's latest entries `show` lists unless asked for every one (`--documents`): a record of
# tens of thousands of documents must not make `show` print them all.
SHOWN_ENTRIES = 5
# What `show` gives of each listed entry: where it is in the log and what it is (a document's arms stay there).
ENTRY_FIELDS = ("source", "position", "event_id", "artifact", "identity", "session")


def show_artifact(registry: Registry, artifact_id: str, shown_verdicts: int,
                  as_of: str | None = None, every_entry: bool = False) -> ShownArtifact:
    """The artifact as `show` presents it, as of `as_of` (a position or an ISO-8601 time; None: now); with
    `every_entry`, every entry of its bytes' speed record rather than the latest SHOWN_ENTRIES."""
    from registry.projections import resolve_as_of
    from registry.projections.read_models.artifacts import contract_note
    from registry.projections.read_models.monitors import monitor_summary

    position = resolve_as_of(registry.store, as_of)
    with registry.view(as_of=position) as view:
        state, verdict_count = view.shown_artifact(artifact_id, shown_verdicts)
        if state is None:
            raise UserError(f"unknown artifact {artifact_id!r}" + as_of_text(position))
        workload = view.workload(state["workload"])
        record = view.speed_record(state, workload) if workload is not None else None
    bench = summarize_record(record) if record is not None and record.row is not None else None
    entries = [] if bench is None or record is None or record.row is None else record.row["entries"]
    listed = entries if every_entry else entries[-SHOWN_ENTRIES:]
    return ShownArtifact(state, verdict_count, workload is not None, contract_note(state, workload), bench,
                         monitor_summary(state), [{name: entry[name] for name in ENTRY_FIELDS} for entry in listed])
