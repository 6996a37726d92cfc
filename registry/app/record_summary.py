"""A payload's speed record as `show`, `report` and the HTML report give it: its reading under the workload's
current speed block (registry/projections/speed_reading.py, the one reading every question uses), summarized.

Kept apart from the benchmark sessions that write the record (bench.py), so that `show` loads only what reads
it; registry/gate/record.py reads the record without numpy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from registry.formats.sequential import SequentialResult
    from registry.projections.speed_reading import RecordReading


def summarize_record(read: RecordReading) -> dict[str, Any]:
    """A speed record's row as `show`, `report` and the HTML report give it: sessions, documents, devices, archs,
    timers, pairs, what it shows, its speedup over every pair read up to what decided (and how many, how
    estimated), the running bounds with their level, alpha, the stop reason, and pairs set aside (timed by an
    interpreter or emulator: never read).

    A record under a contract that does not declare the confident rule is
    given with its pairs, sessions and documents only (no rule reads it).
    """
    found, speed, reading = read.row, read.speed, read.reading
    assert found is not None
    entries = found["entries"]
    kept = read.kept
    if kept is None:  # the documents attached: what the row keeps of them, made here
        kept = {"pairs": sum(len(e["baseline_s"]) for e in entries),
                **{name: sorted({e[key] for e in entries if e[key]})
                   for name, key in (("devices", "device"), ("archs", "arch"), ("timers", "timer"))}}
    summary: dict[str, Any] = {
        "record": found["record"], "workload": found["workload"], "payload_sha256": found["payload_sha256"],
        "documents": found["documents"], "entries": len(entries), "head": found["last_position"],
        "digest": found["digest"],
        "sessions": [{"session": name, **{key: session[key] for key in ("artifact", "pairs", "device", "timer",
                                                                       "arch", "opened_position")}}
                     for name, session in in_opened_order(found["sessions"])],
        "artifacts": sorted({entry["artifact"] for entry in entries} | {s["artifact"]
                                                                         for s in found["sessions"].values()}),
        "devices": kept["devices"], "archs": kept["archs"], "timers": kept["timers"],
    }
    if speed is None or reading is None:
        return {**summary, "reading": None, "shows": None, "pairs": kept["pairs"],
                "stop": f"speed.decision is {speed.decision if speed else 'undeclared'}"}
    result, figure = reading.result, reading.figure
    return {**summary, "reading": READINGS[result.decision], "shows": SHOWS[result.decision],
            "pairs": reading.pairs,
            "speedup": figure and figure.value, "speedup_pairs": figure and figure.pairs,
            "speedup_method": figure and figure.method, "speedup_source": figure and figure.source,
            "set_aside_pairs": sum(aside.pairs for aside in reading.set_aside),
            "decided_at": result.decided_at, "lower": result.lower, "upper": result.upper,
            "level": reading.level, "alpha": result.alpha, "gate": speed.gate, "max_pairs": speed.max_pairs,
            "stop": stop_reason(result, reading.pairs, speed.max_pairs),
            "holds": [{"rule": hold.rule, "text": hold.text} for hold in reading.holds],
            "running_bounds": [list(bound) for bound in reading.bounds]}


def in_opened_order(sessions: dict[str, Any]) -> list[tuple[str, Any]]:
    """A record's sessions in the order they were opened (a stored row keeps them keyed, in key order)."""
    return sorted(sessions.items(), key=lambda item: item[1]["opened_position"])


# What a speed record shows, in words that never name an artifact's state (the artifact's verdict does that):
# the rule's outcome (`SequentialResult.decision`) as the record's `reading`, and as a phrase.
READINGS = {"promoted": "above", "rejected": "below", "held": "undecided"}
SHOWS = {"promoted": "shown above the gate", "rejected": "shown below the gate", "held": "undecided"}
PHRASES = {READINGS[outcome]: phrase for outcome, phrase in SHOWS.items()}


def stop_reason(result: SequentialResult, pairs: int, max_pairs: int) -> str:
    """Why the record stopped or goes on: decided, max_pairs, measuring, or shown_below_earlier (shown below the
    gate under an earlier contract version, which stands)."""
    if result.stop == "rejected_before":
        return "shown_below_earlier"
    if result.decision != "held":
        return "decided"
    return "max_pairs" if pairs >= max_pairs else "measuring"
