"""Building the report: the projected state plus what only the app layer can add.

The report itself is a pure function of a RegistryState
(registry.projections.report); two parts need more than the state:
- imported verdicts compared with the registry's own judgement of the very
  evidence each document brought (app.imports reads those events);
- the support matrix's staleness, judged at the moment the report speaks for
  (the time of the as-of position, or now);
- the chain head (position and hash) the report speaks for, so a later
  `verify --expect-head` can show the log still holds what it reported on.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .context import Registry


def moment_of(registry: Registry, position: int | None) -> datetime:
    """When the log stood at `position`: that event's recorded time; now for the live head."""
    if position is None:
        return datetime.now(timezone.utc)
    if position == 0:
        return datetime.min.replace(tzinfo=timezone.utc)
    found = registry.store.read_all(after_position=position - 1, up_to_position=position)
    if not found:
        return datetime.now(timezone.utc)
    moment = found[0].recorded_at
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def build(registry: Registry, *, workload: str | None, position: int | None, stale_days: int,
          archs: tuple[str, ...] = ()) -> tuple[dict[str, Any], Any]:
    """(report, state) as of `position` (None: now), with imported comparisons and the support matrix."""
    from registry.projections.matrix import support_matrix
    from registry.projections.report import build_report

    with registry.view(as_of=position) as view:
        state = view.state(history=False)  # a report shows no verdict history
    matrix = support_matrix(state, at=moment_of(registry, position), stale_days=stale_days, archs=archs)
    report = build_report(state, workload=workload, imported=compare_recorded_verdicts(registry, state),
                          matrix=matrix)
    report["head"] = chain_head(registry, state.position)
    report["benchmark_records"] = benchmark_records(state, report["workloads"])
    return report, state


def benchmark_records(state, workloads: dict[str, Any]) -> list[dict]:
    """Every in-scope speed record (registry/app/record_summary.py `summarize_record`), from the state's rows:
    the records were read with the rest of the state (one query for the whole table), never a stream each."""
    from registry.projections.speed_reading import read_speed_record, speed_terms

    from .record_summary import summarize_record

    rules = {name: speed_terms(state.workloads[name]) for name in workloads if name in state.workloads}
    records = []
    for key in sorted(state.records):
        found = state.records[key]
        if found["workload"] in rules:
            records.append(summarize_record(read_speed_record(found, state.workloads[found["workload"]],
                                                              found["payload_sha256"], rules[found["workload"]])))
    return records


def chain_head(registry: Registry, position: int) -> dict[str, Any] | None:
    """The hash-chain link at `position`: what a reader of this report can later check the log against
    (`registry verify --expect-head POSITION:HASH`), since a chain alone cannot see its end cut off."""
    if position == 0:
        return None
    found = registry.store.read_all(after_position=position - 1, up_to_position=position)
    return {"position": position, "hash": found[0].hash} if found else None


def compare_recorded_verdicts(registry: Registry, state) -> list[dict[str, Any]]:
    """Each imported verdict beside the registry's own judgement, disagreements first.

    Where the document brought raw evidence, the registry judges exactly that
    evidence with the gate under the workload's contract as of `state` (not
    the artifact's latest evidence, which may come from another document);
    where it brought none, the registry's side is the artifact's current
    decision. A workload with no declared contract holds: no contract is invented.
    """
    from registry.contracts import Contract
    from registry.formats.names import ARTIFACT_PREFIX
    from registry.gate import ArtifactFacts, GateEvidence, Recorded, decide
    from registry.projections.log import EVIDENCE_KIND_BY_TYPE

    rows = []
    for artifact_id in sorted(state.artifacts):
        artifact = state.artifacts[artifact_id]
        records = [record for record in artifact.get("external", ()) if record.get("recorded_verdict")]
        if not records:
            continue
        by_document: dict[str, dict[str, Recorded]] = {}
        for event in registry.store.read_stream(ARTIFACT_PREFIX + artifact_id, up_to_position=state.position):
            kind = EVIDENCE_KIND_BY_TYPE.get(event.type)
            sha = ((event.payload.get("origin") or {}) if kind else {}).get("sha256")
            if sha:
                by_document.setdefault(sha, {})[kind] = Recorded(event.event_id, event.payload["item"])
        declared = state.workloads.get(artifact["workload"])
        for record in records:
            evidence = by_document.get(record["origin"]["sha256"])
            if declared is None:
                ours = {"decision": "held", "rule": "contract.missing",
                        "reason": f"workload {artifact['workload']} has no declared contract"}
            elif evidence:
                verdict = decide(Contract.from_stored(declared["contract"]), GateEvidence(**evidence),
                                 ArtifactFacts(artifact_id, artifact["kind"], artifact["backend"]))
                ours = {"decision": verdict.decision, "rule": verdict.rule, "reason": verdict.reasons[0]}
            else:
                ours = {"decision": artifact["decision"], "rule": artifact["rule"],
                        "reason": "no raw evidence was imported; this is the artifact's current decision"}
            recorded = record["recorded_verdict"]
            agree = (recorded["decision"] in ("pass", "promoted")) == (ours["decision"] == "promoted")
            rows.append({
                "artifact": artifact_id, "workload": artifact["workload"], "origin": record["origin"],
                "recorded": recorded, "registry": ours, "agree": agree,
            })
    return sorted(rows, key=lambda row: (row["agree"], row["artifact"], row["origin"]["path"]))
