"""Rule 4: speed, on benchmark evidence taken the way the contract declares.

A speedup counts only when it was measured with the declared runs per arm
and protocol, a paired schedule interleaved ABBA-style, noise under the
declared CV ceiling, real timers on a real device (an interpreter or emulator
time says nothing about the GPU) and, when the contract requires it, a
distribution-free interval that excludes 1.0 (registry/formats/stats.py:
under equal arms it does so at most 5% of the time, for every accepted run
count). Otherwise the artifact is held; a
speedup that then meets the gate promotes, one below it rejects.

Re-benchmarking until one run passes (optional stopping) would defeat any
statistical rule, so every verdict states how many benchmark items the
artifact's current identity has had, and `speed.max_benchmark_attempts`
caps them. Over the cap the artifact is held, not quarantined: nothing shows
the artifact is broken, only that its speed can no longer be shown by
another benchmark of this identity; a new identity or a re-declared contract
decides again. A declared cap with no count holds (it cannot be checked).

Which comparison decides is the contract's `speed.decision`. Under `point`
(the seed project's rule, and what every contract declared before the rule
existed means) the point speedup against the gate. Under `confident` the
speedup's distribution-free bounds at `speed.alpha` per side
(registry/formats/order_statistics.py, `speedup_bounds`): a lower bound above the gate
promotes, an upper bound below it rejects, anything else holds, naming the
bounds; the verdict's `speedup_ci` is then those bounds. A bound equal to the
gate shows nothing (a run exactly at the gate counts against both).
"""
from __future__ import annotations

from typing import Any

from registry.contracts import SpeedGate
from dataclasses import dataclass

from registry.formats.order_statistics import speedup_bounds
from registry.gate.ledger import Ledger
from registry.gate.record import Reading, arm_drift, not_speed_evidence, read_record
from registry.gate.model import Recorded, SpeedRecord, StandingRejection
from registry.gate.text import num, times_pair


@dataclass(frozen=True)
class SpeedResult:
    """What a verdict records of speed: the speedup, its interval and the interval's two-sided level; for a speed
    record, how many pairs the speedup is over, the pair whose running bounds the interval is, and the record read
    (`SpeedRecord.reference`)."""

    value: float | None = None
    interval: tuple[float, float] | None = None
    level: float | None = None
    pairs: int | None = None
    interval_pair: int | None = None
    record: dict[str, Any] | None = None


def check_speed(
    speed: SpeedGate | None, recorded: Recorded | None, attempts: int | None, ledger: Ledger,
    record: SpeedRecord | None = None, rejection: StandingRejection | None = None,
) -> SpeedResult:
    """Rule 4. Under the confident rule a given speed record decides (registry/gate/record.py); otherwise the
    latest complete benchmark item does, one look. A standing rejection of the bytes rejects whatever they show."""
    result = _speed(speed, recorded, attempts, ledger, record)
    if rejection is not None:
        ledger.add("speed.below_gate", "rejected", rejection_text(rejection))
    return result


def rejection_text(rejection: StandingRejection) -> str:
    """The reason a standing rejection gives: which verdict rejected the bytes, and that it stands."""
    return (f"these bytes were rejected by verdict {rejection.verdict_event_id} of {rejection.artifact} under "
            f"contract v{rejection.contract_version}, and a rejection stands: no re-declaration, rejudge, new claim "
            "or new artifact id reopens it")


def _speed(speed: SpeedGate | None, recorded: Recorded | None, attempts: int | None, ledger: Ledger,
           record: SpeedRecord | None) -> SpeedResult:
    if speed is not None and speed.decision == "confident" and record is not None and (
            record.payload_sha256 is None or record.entries):
        return _judge_record(speed, record, recorded, attempts, ledger)
    _check_attempts(speed, recorded, attempts, ledger)
    if record is not None and record.sessions:
        opened = f"{record.sessions} benchmark session{'' if record.sessions == 1 else 's'} opened for these bytes"
        ledger.note("speed.attempts", f"{opened} recorded no pairs" if not record.entries else
                    f"{opened} {'holds' if record.sessions == 1 else 'hold'} pairs, which only "
                    "speed.decision confident reads")
    if speed is None:
        ledger.add(
            "speed.no_gate", "held",
            "the workload declares no speed block, so there is no speed gate to meet",
        )
    if recorded is None:
        if speed is not None:
            ledger.add("speed.missing", "held", "no benchmark evidence: the speedup was never measured")
        return SpeedResult()
    item = ledger.admit(recorded, "benchmark")
    if item is None:
        return SpeedResult()
    derived = item["derived"]
    value, ci, level = derived["speedup"], (derived["speedup_ci"][0], derived["speedup_ci"][1]), derived["ci_level"]
    if speed is not None:
        bounds = _judge(speed, item, ledger)
        if bounds is not None:
            ci, level = bounds, 1.0 - 2.0 * speed.alpha
    return SpeedResult(value, ci, level)


def _check_attempts(speed: SpeedGate | None, recorded: Recorded | None, attempts: int | None,
                    ledger: Ledger) -> None:
    """State the attempt count (when known) and the cap; hold over the cap or when it cannot be checked."""
    cap = speed.max_benchmark_attempts if speed is not None else None
    count, problem = _attempt_count(recorded, attempts)
    if cap is None:
        if count is not None:
            ledger.note(
                "speed.attempts",
                f"{_attempts_text(count)} for this identity; speed.max_benchmark_attempts is not declared, "
                "so attempts are not capped",
            )
        return
    if count is None:
        ledger.add(
            "speed.attempts_unknown", "held",
            f"{problem}, so speed.max_benchmark_attempts {cap} cannot be checked",
        )
    elif count > cap:
        ledger.add(
            "speed.attempts_exceeded", "held",
            f"{_attempts_text(count)} for this identity exceed speed.max_benchmark_attempts {cap}: "
            "no further benchmark of this identity can promote it",
        )
    else:
        ledger.note("speed.attempts", f"{_attempts_text(count)} for this identity, of at most {cap} "
                                      "(speed.max_benchmark_attempts)")


def _attempt_count(recorded: Recorded | None, attempts: int | None) -> tuple[int | None, str]:
    """(count, why it is unknown): a count that is not a count, or contradicts the evidence, is unknown."""
    if attempts is None:
        return None, "the number of benchmark attempts was not counted"
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        return None, f"the benchmark attempt count {attempts!r} is not a count"
    if recorded is not None and attempts == 0:
        return None, "benchmark evidence is recorded but the attempt count is 0"
    return attempts, ""


def _attempts_text(count: int) -> str:
    return f"{count} benchmark attempt{'' if count == 1 else 's'}"


def _judge(speed: SpeedGate, item: dict[str, Any], ledger: Ledger, compare: bool = True) -> tuple[float, float] | None:
    """Apply the speed rules; under the confident rule return the bounds it compared with the gate.

    With `compare` False only the holds run (what the item must be to count), for a speed record that
    decides instead of the item.
    """
    derived = item["derived"]
    held_before = len(ledger.findings)
    if compare:
        ledger.margin("speedup", derived["speedup"], speed.gate, higher_is_better=True)
    if derived["runs_per_arm"] < speed.runs_per_arm:
        ledger.add(
            "speed.runs_per_arm", "held",
            f"{derived['baseline_runs']} baseline and {derived['candidate_runs']} candidate runs: "
            f"fewer than runs_per_arm {speed.runs_per_arm}",
        )
    if item["protocol"] != speed.protocol:
        ledger.add(
            "speed.protocol", "held",
            f"the benchmark used the {item['protocol']} protocol but speed.protocol is {speed.protocol}",
        )
    elif item["protocol"] == "paired" and not derived["interleaved"]:
        ledger.add(
            "speed.interleave", "held",
            f"the paired schedule {''.join(s[0] for s in item['schedule'])} (first arm of each pair) "
            "does not alternate BC/CB, so run order is confounded with the arms",
        )
    if speed.max_cv is not None:
        for arm in ("baseline", "candidate"):
            cv = derived[f"{arm}_cv"]
            if not ledger.margin(f"{arm}_cv", cv, speed.max_cv, higher_is_better=False).passed:
                ledger.add("speed.max_cv", "held", f"{arm} CV {num(cv)} exceeds max_cv {num(speed.max_cv)}")
    _check_timer(item, ledger)
    if speed.max_peak_memory_regression is not None:
        ledger.add(
            "speed.memory_unmeasured", "held",
            f"max_peak_memory_regression {num(speed.max_peak_memory_regression)} is declared "
            "but benchmark evidence records no peak memory",
        )
    if len(ledger.findings) > held_before or not compare:
        return None
    if speed.decision == "confident" and item["protocol"] == "sequential" and speed.drift_check != "none":
        drift = arm_drift(item["baseline_s"], item["candidate_s"], speed.alpha)
        if drift is not None:
            rule, text = drift
            ledger.add(rule, "held", f"the arms were not interleaved and {text}")
            return None
    low, high = derived["speedup_ci"]
    if speed.require_conclusive and low <= 1.0 <= high:
        ledger.add(
            "speed.inconclusive", "held",
            f"the {derived['ci_level']:.1%} order-statistic CI [{num(low)}, {num(high)}] of the speedup "
            "includes 1.0 and require_conclusive is set",
        )
        return None
    shown, gate = times_pair(derived["speedup"], speed.gate)
    basis = "min_speedup" if speed.ceiling is None else (
        f"ceiling_share {num(speed.ceiling_share)}, ceiling {speed.ceiling:.2f}x"
    )
    if speed.decision == "confident":
        return _judge_bounds(speed, item, shown, gate, basis, ledger)
    if derived["speedup"] >= speed.gate:
        ledger.add("speed.passed", "promoted", f"speedup {shown} meets the gate {gate} ({basis})")
    else:
        ledger.add("speed.below_gate", "rejected", f"speedup {shown} is below the gate {gate} ({basis})")
    return None


def _judge_bounds(speed: SpeedGate, item: dict[str, Any], shown: str, gate: str, basis: str,
                  ledger: Ledger) -> tuple[float, float] | None:
    """The confident rule on a complete benchmark: its bounds at alpha per side against the gate."""
    bounds = speedup_bounds(item["protocol"], item["baseline_s"], item["candidate_s"], speed.alpha)
    level = f"alpha {num(speed.alpha)} per side"
    if bounds is None:
        ledger.add(
            "speed.undecided", "held",
            f"speedup {shown}: {item['derived']['runs_per_arm']} runs per arm are too few for distribution-free "
            f"bounds at {level}, so nothing about the gate {gate} is shown",
        )
        return None
    low, high = bounds
    interval = f"[{num(low)}, {num(high)}] ({level})"
    if low > speed.gate:
        ledger.add("speed.passed", "promoted",
                   f"speedup {shown}: its bounds {interval} lie above the gate {gate} ({basis})")
    elif high < speed.gate:
        ledger.add("speed.below_gate", "rejected",
                   f"speedup {shown}: its bounds {interval} lie below the gate {gate} ({basis})")
    else:
        ledger.add("speed.undecided", "held",
                   f"speedup {shown}: its bounds {interval} reach both sides of the gate {gate} ({basis}), "
                   "so neither meeting nor missing it is shown")
    return bounds


def _check_timer(item: dict[str, Any], ledger: Ledger) -> None:
    reason = not_speed_evidence(item["timer"], item["device"])
    if reason is not None:
        ledger.add("speed.interpreter", "held", reason)


def _judge_record(speed: SpeedGate, record: SpeedRecord, recorded: Recorded | None, attempts: int | None,
                  ledger: Ledger) -> SpeedResult:
    """The confident rule on the speed record of the artifact's bytes: every pair, in recorded order, read after each.

    Sessions and complete documents are one record however many there are
    (registry/gate/record.py), so their count is stated; the latest complete
    item must still be what an item must be to count (runs, protocol,
    interleaving, CV), and a declared attempt cap still applies. Pairs timed
    under an interpreter or emulator are set aside by the record (a latest
    item so timed is not checked either): they hold only a record that has
    nothing else to read.
    """
    if record.payload_sha256 is None:
        ledger.add("speed.no_payload", "held",
                   "the artifact was registered without a payload, so it has no speed record of its own and borrows "
                   "none: register its bytes (`registry artifact register --payload`) and measure them")
        return SpeedResult()
    item = None
    if recorded is not None:
        _check_attempts(speed, recorded, attempts, ledger)
        item = ledger.admit(recorded, "benchmark")
        if item is not None and not_speed_evidence(item["timer"], item["device"]) is None:
            _judge(speed, item, ledger, compare=False)
    reading = read_record(record, speed)
    cited = record.reference()  # the record by key, head and digest: a verdict never lists every entry it read
    ledger.note("speed.attempts", f"{record_sentence(reading.sessions, reading.documents)}, every pair read in "
                                  "recorded order as one record")
    notes, more_notes = reading.notes[:MOST_LISTED], len(reading.notes) - MOST_LISTED
    for note in notes:
        ledger.note("speed.attempts", note)
    if more_notes > 0:
        ledger.note("speed.attempts", f"and {more_notes} more such notes on the record's entries ({LISTED_WHERE})")
    held_before = len(ledger.findings)
    _hold_listed(ledger, [(hold.rule, hold.text) for hold in reading.holds])
    if not reading.pairs:
        _hold_listed(ledger, [("speed.interpreter", found.reason) for found in reading.set_aside])
    result, figure = reading.result, reading.figure
    bounds = None if result.lower is None or result.upper is None else (result.lower, result.upper)
    if figure is not None:
        speed_result = SpeedResult(figure.value, bounds, reading.level if bounds else None, figure.pairs,
                                   (result.decided_at or result.pairs) if bounds else None, cited)
    elif item is not None:  # nothing read: the latest complete item's own figure, as a document publishes it
        derived = item["derived"]
        speed_result = SpeedResult(derived["speedup"], tuple(derived["speedup_ci"]), derived["ci_level"],
                                   record=cited)
    else:
        speed_result = SpeedResult(record=cited)
    if len(ledger.findings) > held_before or figure is None:
        if figure is None and len(ledger.findings) == held_before:
            ledger.add("speed.missing", "held", "the speed record of these bytes holds no pairs it can read")
        return speed_result
    ledger.margin("speedup", figure.value, speed.gate, higher_is_better=True)
    _record_finding(speed, reading, ledger)
    return speed_result


# A verdict names at most this many of a record's holds, notes and entries set aside one by one, and counts the
# rest by rule: its size must not grow with the record (a record of thousands of drifting documents would otherwise
# list each), while every entry stays listed by `registry show ID --documents` and in `history`.
MOST_LISTED = 10
LISTED_WHERE = "`registry show ARTIFACT --documents` lists every entry"


def _hold_listed(ledger: Ledger, holds: list[tuple[str, str]]) -> None:
    """The first MOST_LISTED holds as they read, then one held finding per rule counting the rest."""
    for rule, text in holds[:MOST_LISTED]:
        ledger.add(rule, "held", text)
    rest: dict[str, int] = {}
    for rule, _ in holds[MOST_LISTED:]:
        rest[rule] = rest.get(rule, 0) + 1
    for rule, count in rest.items():
        ledger.add(rule, "held", f"and {count} more entries of the speed record hold it by {rule} ({LISTED_WHERE})")


def _record_finding(speed: SpeedGate, reading: Reading, ledger: Ledger) -> None:
    """The sentence of a record's decision: the figure over every pair up to what decided, then the pair at which the
    rule decided (or the last pair read) and its running bounds with their level."""
    result, figure = reading.result, reading.figure
    assert figure is not None  # a figure is judged once a pair is read
    shown, gate = times_pair(figure.value, speed.gate)
    low = "none yet" if result.lower is None else num(result.lower)
    high = "none yet" if result.upper is None else num(result.upper)
    bounds = (f"running bounds [{low}, {high}] (two-sided {reading.level:.0%}, alpha {num(result.alpha)} per side)")
    if result.decided_at:
        text = (f"speedup {shown} over the {figure.pairs} pairs read up to the {figure.source} that decided "
                f"({figure.method}); decided at pair {result.decided_at} of {reading.pairs} recorded: {bounds}")
    else:
        text = (f"speedup {shown} over the {figure.pairs} pairs read ({figure.method}); after pair {result.pairs}: "
                f"{bounds}")
    if result.stop == "rejected_before":
        ledger.add("speed.below_gate", "rejected", f"{text}; the record of these bytes was shown below the gate "
                                                   f"under contract v{reading.rejected_under}, and a rejection stands")
    elif result.decision == "promoted":
        ledger.add("speed.passed", "promoted", f"{text} lie above the gate {gate}")
    elif result.decision == "rejected":
        ledger.add("speed.below_gate", "rejected", f"{text} lie below the gate {gate}")
    elif result.stop == "max_pairs":
        ledger.add("speed.undecided", "held", f"{text} reach both sides of the gate {gate} at speed.max_pairs "
                                              f"{speed.max_pairs}: the record ends held")
    else:
        ledger.add("speed.undecided", "held", f"{text} do not yet decide against the gate {gate}; measuring "
                                              f"may continue up to speed.max_pairs {speed.max_pairs}")


def record_sentence(sessions: int, documents: int) -> str:
    """How many sessions and complete documents a speed record holds, in one sentence's opening."""
    return (f"the speed record of these bytes holds {sessions} benchmark session{'' if sessions == 1 else 's'} "
            f"and {documents} complete benchmark document{'' if documents == 1 else 's'}")
