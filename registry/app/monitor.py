"""The monitor of a promoted artifact: re-measured pairs recorded, alarms appended, alarms acknowledged.

A re-measurement is a batch of pairs (baseline and candidate seconds, timed
as for the gate) for the artifact's current identity while it is promoted,
with the device and software it was timed on. The batch is one
`PairsRemeasured` event under the idempotency key `monitor:<identity>:<batch>`,
so a job that dies after appending and is retried appends it once. The fold
(projections/read_models/monitors.py) feeds it to the detector of
registry/formats/monitor.py; once the detector crosses 1/alpha the artifact
is regressed for `resolve` and `lock`, and the alarm is appended as one
`RegressionDetected` under the key `regression:<identity>:<verdict>`, whose
content the fold's state fixes, so two workers that both see the crossing
append it once, and a crossing whose alarm a crash left unwritten is
written by the next batch (`settle_alarm`).

The monitor's terms (threshold and alpha) are read from the workload's
contract (`monitor:` block, registry/contracts/monitor.py) when its first
batch is recorded and stay with it: a contract changed mid-run does not
move the threshold under the detector's guarantee. See docs/monitor.md.
"""
from __future__ import annotations

from typing import Any

from registry.formats.errors import UserError
from registry.formats.monitor import START, DetectorState, flagged_pairs, read
from registry.formats.names import artifact_stream, check_name
from registry.projections.read_models.monitors import current_monitor, monitor_summary
from registry.projections.view import View

from .bench import _check_times, finite_number
from .context import Registry

MAX_TEXT = 200


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT or "\x00" in value:
        raise UserError(f"{what}: expected 1 to {MAX_TEXT} characters")
    return value


def _software(software: dict[str, str]) -> dict[str, str]:
    if not isinstance(software, dict) or not software:
        raise UserError("software: name at least one component and its version (e.g. torch=2.5.1)")
    return {check_name(key, "software component"): _text(value, f"software {key}")
            for key, value in sorted(software.items())}


def _current(view: View, artifact: str) -> dict[str, Any]:
    state = view.artifact(check_name(artifact, "artifact id"))
    if state is None:
        raise UserError(f"unknown artifact {artifact!r}")
    return state  # type: ignore[return-value]


def _terms(view: View, state: dict[str, Any]) -> dict[str, Any]:
    """The running monitor's terms, or those the workload's contract gives a new one."""
    from .workloads import declared_contract

    monitor = current_monitor(state)
    if monitor is not None and (monitor["crossed_at"] is not None
                                or monitor["verdict_event_id"] == state["verdict_event_id"]):
        return {key: monitor[key] for key in ("threshold", "alpha", "reference", "baseline_wait_share",
                                              "contract_version", "verdict_event_id")}
    declared = declared_contract(view, state["workload"])
    terms = declared.contract.monitor
    if terms is None:
        raise UserError(f"workload {state['workload']} declares no monitor block: no threshold or alpha to "
                         "watch the re-measurements under; nothing recorded")
    threshold = terms.threshold(declared.contract.speed_gate, state.get("speedup"))
    return {"threshold": threshold, "alpha": terms.alpha, "reference": terms.reference,
            "baseline_wait_share": terms.baseline_wait_share, "contract_version": declared.version,
            "verdict_event_id": state["verdict_event_id"]}


def record_remeasurement(registry: Registry, artifact: str, baseline: list[float], candidate: list[float], *,
                         batch: str, device: str, software: dict[str, str],
                         baseline_waited: list[float | None] | None = None,
                         summary: bool = True) -> tuple[bool, dict[str, Any] | None]:
    """Append one batch of re-measured pairs of a promoted artifact; (appended, monitor summary or None).

    The state is read once before the append (one unit of work); the alarm
    is settled (one more) only when the running detector, fed this batch,
    crosses or had crossed, and the summary is read again only when asked
    for (a job does not). Whether the batch was appended is what the store
    did: a retry of a recorded batch says False.
    `baseline_waited` is the harness's record of how long each baseline run
    waited for a CPU (None per pair where it could not tell); the monitor's
    `baseline_wait_share`, when declared, leaves out the pairs that waited more.

    Refused, nothing written: an artifact not promoted now, a workload with
    no monitor block, times that are not positive finite seconds, arms of
    unequal length, waits that are not one finite non-negative number (or
    None) per pair, a device or software not named. A batch key already
    recorded with the same pairs appends nothing; with other pairs it is refused.
    """
    from registry.events.store import NewEvent
    from registry.events.types import PairsRemeasured

    check_name(batch, "batch key")
    _check_times(baseline, candidate)
    _check_waits(baseline_waited, len(baseline))
    device = _text(device, "device")
    software = _software(software)
    with registry.view() as view:
        state = _current(view, artifact)
        if state["decision"] != "promoted" or state.get("verdict_event_id") is None:
            raise UserError(f"{artifact} is {state['decision']}, not promoted: there is no promotion to monitor; "
                            "nothing recorded")
        terms = _terms(view, state)
        payload = PairsRemeasured(artifact=artifact, identity=state["identity"],
                                  payload_sha256=state["payload_sha256"], batch=batch,
                                  baseline_s=[float(t) for t in baseline], candidate_s=[float(t) for t in candidate],
                                  device=device, software=software,
                                  baseline_waited_s=None if baseline_waited is None else [
                                      None if t is None else float(t) for t in baseline_waited], **terms)
        placed = view.append(artifact_stream(artifact), [NewEvent(payload.type, payload)],
                             idempotency_key=f"monitor:{state['identity']}:{batch}")
    if _may_cross(state, terms, baseline, candidate, baseline_waited):
        settle_alarm(registry, artifact)
    return placed.new, monitor_status(registry, artifact) if summary else None


def _check_waits(waited: list[float | None] | None, pairs: int) -> None:
    if waited is None:
        return
    if not isinstance(waited, list) or len(waited) != pairs:
        raise UserError(f"baseline waits: expected one per pair ({pairs}); nothing recorded")
    for i, value in enumerate(waited):
        if value is not None and (not finite_number(value) or value < 0):
            raise UserError(f"baseline wait[{i}]: {value!r} is not a finite number of seconds >= 0 (or "
                             "unreported); nothing recorded")


def _may_cross(state: dict[str, Any], terms: dict[str, Any], baseline: list[float], candidate: list[float],
               baseline_waited: list[float | None] | None) -> bool:
    """Whether the monitor, as read before this batch, has crossed or crosses with it (then an alarm may be due)."""
    running = current_monitor(state)
    if running is not None and running["verdict_event_id"] != terms["verdict_event_id"] \
            and running["crossed_at"] is None:
        running = None  # this batch starts a new monitor
    if running is not None and running["crossed_at"] is not None:
        return running["alarm"] is None
    start = START if running is None else DetectorState.from_dict(running["detector"])
    ratios = [b / c for b, c in zip(baseline, candidate)]
    flagged = flagged_pairs(baseline, baseline_waited, terms["baseline_wait_share"])
    return read(start, ratios, terms["threshold"], terms["alpha"], flagged).alarm_at is not None


def settle_alarm(registry: Registry, artifact: str) -> bool:
    """Append the `RegressionDetected` a crossed monitor is due, once; True when this call appended it."""
    from registry.events.store import NewEvent
    from registry.events.types import RegressionDetected

    with registry.view() as view:
        state = _current(view, artifact)
        monitor = current_monitor(state)
        if monitor is None or monitor["crossed_at"] is None or monitor["alarm"] is not None:
            return False
        payload = RegressionDetected(
            artifact=artifact, identity=state["identity"], payload_sha256=state["payload_sha256"],
            verdict_event_id=monitor["verdict_event_id"], pairs=monitor["crossed_at"],
            below=monitor["below_at_cross"], log_statistic=monitor["log_statistic_at_cross"],
            threshold=monitor["threshold"], alpha=monitor["alpha"], profiles=monitor["profiles"])
        return view.append(artifact_stream(artifact), [NewEvent(payload.type, payload)],
                           idempotency_key=f"regression:{state['identity']}:{monitor['verdict_event_id']}").new


def acknowledge(registry: Registry, artifact: str, alarm_event_id: str, *, reason: str) -> dict:
    """The acting person's acknowledgment of the current identity's alarm; refused for any other alarm or twice."""
    from registry.events.store import NewEvent
    from registry.events.types import RegressionAcknowledged

    person, reason = registry.actor, _text(reason, "--reason")
    with registry.view() as view:
        state = _current(view, artifact)
        monitor = current_monitor(state)
        alarm = None if monitor is None else monitor["alarm"]
        if monitor is None or alarm is None or alarm["event_id"] != alarm_event_id:
            held = "no alarm" if alarm is None else f"alarm {alarm['event_id']}"
            raise UserError(f"{alarm_event_id} is not the standing alarm of {artifact} (it has {held}); "
                            "nothing recorded")
        if monitor["acknowledged"] is not None:
            raise UserError(f"alarm {alarm_event_id} was already acknowledged by "
                            f"{monitor['acknowledged']['person']}; nothing recorded")
        payload = RegressionAcknowledged(artifact=artifact, identity=state["identity"],
                                         alarm_event_id=alarm_event_id, person=person, reason=reason)
        view.append(artifact_stream(artifact), [NewEvent(payload.type, payload)],
                    expected_version=state["stream_version"])
    return monitor_status(registry, artifact)


def monitor_status(registry: Registry, artifact: str) -> dict[str, Any]:
    with registry.view() as view:
        return monitor_summary(_current(view, artifact))  # type: ignore[return-value]
