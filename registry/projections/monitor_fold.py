"""The monitor's part of the fold: re-measured pairs -> the detector's state, alarms and acknowledgments. No I/O.

Rules (docs/monitor.md):
- An artifact's monitors are kept by identity (`monitors`, present once one
  has pairs), each watching the promoting verdict its first batch named, with
  that batch's threshold and alpha for as long as it runs.
- A batch feeds its ratios to the detector (registry/formats/monitor.py) in
  recorded order, less the pairs whose baseline run the harness saw wait for
  a CPU past the monitor's `baseline_wait_share` (none without that term;
  `batch_signs` says what a contended batch does), counted as `left_out`;
  at the first pair fed at which it crosses 1/alpha the monitor is
  `crossed` there, and the detector stops: later pairs are counted as
  after the alarm, and no second alarm is due (a known regression is not
  alerted again). The shipping questions treat a crossed monitor as
  regressed even before its `RegressionDetected` is in the log.
- `RegressionDetected` must name the crossing the fold computed (the same
  identity, verdict and pair); anything else is refused (ProjectionError),
  so the alarm's position is reproduced by every replay.
- A batch naming another verdict than a running, uncrossed monitor's starts
  a fresh monitor (a new promotion); one that names another verdict than a
  crossed monitor's is counted after its alarm: a later verdict (a rejudge
  of the same evidence) does not clear a regression. Only a revoke does: it
  restarts the identity's evidence, so its next promotion rests on new
  measurements, and it drops the identity's monitor.
- An acknowledgment must name the monitor's recorded alarm.
"""
from __future__ import annotations

from typing import Any

from registry.formats.monitor import START, DetectorState, alarm_level, flagged_pairs, read

from .log import LogEvent
from .state import ProjectionError


def _monitors(artifact: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return artifact.setdefault("monitors", {})


def _new_monitor(event: LogEvent, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "verdict_event_id": payload["verdict_event_id"], "threshold": payload["threshold"],
        "alpha": payload["alpha"], "reference": payload["reference"],
        "baseline_wait_share": payload.get("baseline_wait_share"),
        "contract_version": payload["contract_version"], "started_position": event.position,
        "detector": START.to_dict(), "left_out": 0, "contended_batches": 0, "crossed_at": None,
        "log_statistic_at_cross": None,
        "below_at_cross": None, "pairs_after_alarm": 0, "profiles": [], "alarm": None, "acknowledged": None,
        "last_position": event.position,
    }


def remeasured(artifact: dict[str, Any], event: LogEvent) -> None:
    payload = event.payload
    _named(artifact, event, payload)
    if len(payload["baseline_s"]) != len(payload["candidate_s"]):
        raise ProjectionError(f"event at position {event.position} (PairsRemeasured): arms of unequal length")
    waited = payload.get("baseline_waited_s")
    if waited is not None and len(waited) != len(payload["baseline_s"]):
        raise ProjectionError(f"event at position {event.position} (PairsRemeasured): {len(waited)} baseline "
                              f"waits for {len(payload['baseline_s'])} pairs")
    monitors = _monitors(artifact)
    monitor = monitors.get(payload["identity"])
    ratios = [b / c for b, c in zip(payload["baseline_s"], payload["candidate_s"])]
    if monitor is None or (monitor["crossed_at"] is None and monitor["verdict_event_id"] != payload["verdict_event_id"]):
        monitor = monitors[payload["identity"]] = _new_monitor(event, payload)
    monitor["last_position"] = event.position
    if monitor["crossed_at"] is not None:
        monitor["pairs_after_alarm"] += len(ratios)
        return
    profile = {"device": payload["device"], "software": payload["software"]}
    if profile not in monitor["profiles"]:
        monitor["profiles"].append(profile)
    flagged = flagged_pairs(payload["baseline_s"], waited, monitor["baseline_wait_share"])
    reading = read(DetectorState.from_dict(monitor["detector"]), ratios, monitor["threshold"], monitor["alpha"],
                   flagged)
    monitor["detector"] = reading.state.to_dict()
    monitor["left_out"] += reading.left_out
    monitor["contended_batches"] += reading.contended
    if reading.alarm_at is not None:
        monitor["crossed_at"] = reading.alarm_at
        monitor["log_statistic_at_cross"] = reading.state.log_statistic
        monitor["below_at_cross"] = reading.state.below
        monitor["pairs_after_alarm"] = len(ratios) - reading.timed


def _named(artifact: dict[str, Any], event: LogEvent, payload: dict[str, Any]) -> None:
    if payload["artifact"] != artifact["artifact"]:
        raise ProjectionError(f"event at position {event.position} ({event.type}) in stream {event.stream} "
                              f"names {payload['artifact']!r}")


def _refuse(event: LogEvent, why: str) -> None:
    raise ProjectionError(f"event at position {event.position} ({event.type}): {why}")


def detected(artifact: dict[str, Any], event: LogEvent) -> None:
    payload = event.payload
    _named(artifact, event, payload)
    monitor = _monitors(artifact).get(payload["identity"])
    if monitor is None or monitor["crossed_at"] is None:
        _refuse(event, "an alarm for a monitor whose detector has not crossed its threshold")
    if monitor["alarm"] is not None:
        _refuse(event, f"a second alarm for a monitor alarmed at position {monitor['alarm']['position']}")
    claimed = (payload["verdict_event_id"], payload["pairs"], payload["below"], payload["threshold"], payload["alpha"])
    computed = (monitor["verdict_event_id"], monitor["crossed_at"], monitor["below_at_cross"], monitor["threshold"],
                monitor["alpha"])
    if claimed != computed:
        _refuse(event, f"the alarm claims (verdict, pair, below, threshold, alpha) {claimed}; the detector "
                       f"crossed at {computed}")
    monitor["alarm"] = {"event_id": event.event_id, "position": event.position, "pairs": payload["pairs"],
                        "recorded_at": event.recorded_at}
    monitor["last_position"] = event.position


def acknowledged(artifact: dict[str, Any], event: LogEvent) -> None:
    payload = event.payload
    _named(artifact, event, payload)
    monitor = _monitors(artifact).get(payload["identity"])
    if monitor is None or monitor["alarm"] is None or monitor["alarm"]["event_id"] != payload["alarm_event_id"]:
        _refuse(event, f"acknowledges {payload['alarm_event_id']}, which is not this identity's alarm")
    monitor["acknowledged"] = {"person": payload["person"], "reason": payload["reason"],
                               "event_id": event.event_id, "position": event.position}
    monitor["last_position"] = event.position


def revoked(artifact: dict[str, Any], identity: str) -> None:
    """A revoke restarts the identity's evidence and drops its monitor (the log keeps its history)."""
    artifact.get("monitors", {}).pop(identity, None)


def regression_of(artifact: dict[str, Any]) -> dict[str, Any] | None:
    """The current identity's monitor when it has crossed (alarmed or about to be), else None."""
    monitor = artifact.get("monitors", {}).get(artifact["identity"])
    return monitor if monitor is not None and monitor["crossed_at"] is not None else None


def current_monitor(state: dict[str, Any]) -> dict[str, Any] | None:
    """The monitor of the artifact's current identity, or None before its first re-measured batch."""
    return state.get("monitors", {}).get(state["identity"])


def monitor_summary(state: dict[str, Any]) -> dict[str, Any] | None:
    """What `show`, `report` and the live view print of the current identity's monitor (None: no re-measurement).

    status: `in_control`; `alarm_due` (crossed, its alarm not yet appended:
    already regressed); `regressed` (alarmed, not acknowledged: an alert);
    `acknowledged` (a known regression).
    """
    monitor = current_monitor(state)
    if monitor is None:
        return None
    detector = DetectorState.from_dict(monitor["detector"])
    if monitor["crossed_at"] is None:
        status = "in_control"
    elif monitor["alarm"] is None:
        status = "alarm_due"
    else:
        status = "acknowledged" if monitor["acknowledged"] else "regressed"
    return {
        "status": status, "watches_verdict": monitor["verdict_event_id"], "threshold": monitor["threshold"],
        "reference": monitor["reference"], "alpha": monitor["alpha"], "arl_at_least": 1.0 / monitor["alpha"],
        "baseline_wait_share": monitor["baseline_wait_share"], "left_out": monitor["left_out"],
        "contended_batches": monitor["contended_batches"],
        "pairs": detector.pairs, "below": detector.below, "log_statistic": detector.log_statistic,
        "log_alarm_level": alarm_level(monitor["alpha"]), "crossed_at": monitor["crossed_at"],
        "pairs_after_alarm": monitor["pairs_after_alarm"], "alarm": monitor["alarm"],
        "acknowledged": monitor["acknowledged"], "profiles": monitor["profiles"],
    }
