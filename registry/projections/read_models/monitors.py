"""The monitors read model: re-measured pairs -> the detector's state, alarms and acknowledgments. No I/O.

Kept inside the artifacts' rows (each artifact's `monitors`, by identity), so
it has no table of its own; its version is its own, and a change to what it
folds refolds every row (declaration.py).

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
# No `from __future__ import annotations`: TypedDict reads its annotations evaluated.
from typing import Any, Mapping, NoReturn, Protocol, TypedDict

from registry.formats.monitor import START, DetectorState, alarm_level, flagged_pairs, read
from registry.formats.names import ARTIFACT_PREFIX

from ..errors import ProjectionError
from ..log import LogEvent
from .declaration import ReadModel

VERSION = 1


class MonitorAlarm(TypedDict):
    """The `RegressionDetected` of a monitor (`detected`)."""

    event_id: str
    position: int
    pairs: int
    recorded_at: str


class MonitorAcknowledgment(TypedDict):
    """A person's `RegressionAcknowledged` of a monitor's alarm."""

    person: str
    reason: str
    event_id: str
    position: int


class MonitorState(TypedDict):
    """One identity's monitor (docs/monitor.md): its terms, the detector, its alarm.

    `detector` is registry/formats/monitor.py's `DetectorState.to_dict()`;
    `crossed_at` the pair at which it crossed 1/alpha (None while in
    control), with the log statistic and the count below the threshold there;
    `profiles` every device and software the counted pairs were timed on;
    `baseline_wait_share` the term fixed when the monitor started (None: not
    declared, nothing is left out); `left_out` the pairs not fed because the
    harness saw their baseline run wait for a CPU past it, `contended_batches`
    the batches with more such pairs than may be left out
    (registry/formats/monitor.py, `batch_signs`).
    """

    verdict_event_id: str
    threshold: float
    alpha: float
    reference: str
    baseline_wait_share: float | None
    contract_version: int
    started_position: int
    detector: dict[str, Any]
    left_out: int
    contended_batches: int
    crossed_at: int | None
    log_statistic_at_cross: float | None
    below_at_cross: int | None
    pairs_after_alarm: int
    profiles: list[dict[str, Any]]
    alarm: MonitorAlarm | None
    acknowledged: MonitorAcknowledgment | None
    last_position: int


class Monitored(Protocol):
    """What this model's handlers fold into (RegistryState): the artifacts, each with its monitors."""

    artifacts: dict[str, Any]


def _artifact(state: Monitored, event: LogEvent) -> dict[str, Any]:
    """The artifact of the event's stream, which artifacts.py has placed the event in and checked it names."""
    return state.artifacts[event.stream[len(ARTIFACT_PREFIX):]]


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


def remeasured(state: Monitored, event: LogEvent) -> None:
    artifact = _artifact(state, event)
    payload = event.payload
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


def _refuse(event: LogEvent, why: str) -> NoReturn:
    raise ProjectionError(f"event at position {event.position} ({event.type}): {why}")


def detected(state: Monitored, event: LogEvent) -> None:
    artifact = _artifact(state, event)
    payload = event.payload
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


def acknowledged(state: Monitored, event: LogEvent) -> None:
    artifact = _artifact(state, event)
    payload = event.payload
    monitor = _monitors(artifact).get(payload["identity"])
    if monitor is None or monitor["alarm"] is None or monitor["alarm"]["event_id"] != payload["alarm_event_id"]:
        _refuse(event, f"acknowledges {payload['alarm_event_id']}, which is not this identity's alarm")
    monitor["acknowledged"] = {"person": payload["person"], "reason": payload["reason"],
                               "event_id": event.event_id, "position": event.position}
    monitor["last_position"] = event.position


def revoked(state: Monitored, event: LogEvent) -> None:
    """A revoke restarts the identity's evidence (artifacts.py) and drops its monitor (the log keeps its history).

    The identity is the one the decision names, or for a decision recorded
    before identities were, the current one when its payload matches: every
    identity ever registered is current or kept, so that is the identity
    whose evidence artifacts.py restarts.
    """
    payload = event.payload
    if payload["action"] != "revoke":
        return
    artifact = _artifact(state, event)
    identity = payload.get("identity")
    if identity is None and payload["payload_sha256"] == artifact["payload_sha256"]:
        identity = artifact["identity"]
    artifact.get("monitors", {}).pop(identity, None)


def regression_of(artifact: Mapping[str, Any]) -> dict[str, Any] | None:
    """The current identity's monitor when it has crossed (alarmed or about to be), else None."""
    monitor = artifact.get("monitors", {}).get(artifact["identity"])
    return monitor if monitor is not None and monitor["crossed_at"] is not None else None


def current_monitor(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The monitor of the artifact's current identity, or None before its first re-measured batch."""
    return state.get("monitors", {}).get(state["identity"])


def monitor_summary(state: Mapping[str, Any]) -> dict[str, Any] | None:
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


DECLARATION = ReadModel(
    name="monitors", version=VERSION, row_type=MonitorState, singular="monitor",
    folds={"PairsRemeasured": remeasured, "RegressionDetected": detected, "RegressionAcknowledged": acknowledged,
           "HumanDecision": revoked},
)
