"""The speed record of a payload, read by the confident rule (docs/gate.md, "The speed record").

One record per payload within a workload: every session batch and every
complete benchmark document of those bytes, under any artifact id, backend or
other claim, is one stream of pairs read in recorded order by the rule of
registry/formats/sequential.py. A complete document is therefore not a fresh
look: its pairs continue the stream, so the mixture martingale over the whole
stream keeps Ville's bound (P(ever promoting when the median is below the
gate) <= alpha) however many documents and sessions arrive. Retrying a
document, naming the bytes anew, or claiming another backend changes nothing.

Three rules close the record against re-reading:

- **Loosening.** Each pair counts for promotion against the highest gate,
  and for rejection against the lowest gate, in force from the moment it was
  recorded until now, and the look after it is taken at the lowest alpha in
  force over the same span. A loosened contract (higher alpha, lower gate)
  therefore counts only pairs recorded after it at its looser terms; a
  tightened one is in force since every pair was recorded, so it re-reads
  everything. Per-pair gates keep each capital a supermartingale under its
  null (docs/gate.md; `decide_terms`).
- **Rejection stands.** The record is read again as it stood just before each
  later contract version was declared, under the terms in force then; if any
  of those readings rejected, the record stays rejected for these bytes.
- **Exchangeability.** Only an interleaved design is read without a check.
  A document whose arms were not interleaved (the sequential protocol) joins
  the stream, its runs paired by index, only when the drift check passes:
  neither arm shows a level shift at any point (registry/formats/changepoint.py,
  a min-p Mann-Whitney scan with an exact permutation p-value, at most
  alpha / 2 per arm, so alpha a document), and its confident bounds overlap
  those of every earlier document of the record (two exchangeable runs of
  one speedup have disjoint bounds with probability at most 4 alpha). A
  document that fails holds the record (`speed.drift`, with where the shift
  is, how large, and p); one too short to check holds it too
  (`speed.not_interleaved`). `speed.drift_check: none` opts out: such
  documents are read as exchangeable and the verdict says so. A paired
  document whose schedule does not alternate is set aside (the item-level
  `speed.interleave` holds it).
- **Speed evidence only.** Pairs timed by an interpreter or an emulator (a
  timer or device naming one: `not_speed_evidence`) say nothing about the
  device's speed. They are set aside, never read: they decide nothing and
  never close the record, so the same bytes measured later on a GPU are read
  as if they had never been timed on a CPU. A record whose only pairs are set
  aside holds (`speed.interpreter`).

The figure a record shows (`Reading.value`) is the estimate over every pair
read up to the batch or document that decided (or every pair read, while
undecided), by the method the evidence format names for the protocol: the
ratio of the arm medians when every source in that span is a sequential
document (so one document shows the speedup it publishes), else the median
of the per-pair ratios. The rule itself decides at a pair, and its running
bounds at that pair are given beside the figure (docs/gate.md, "The speed
record": why the two differ).
"""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.contracts import SpeedGate
from registry.formats.changepoint import level_shift
from registry.formats.order_statistics import (
    as_doubles, is_interleaved, median, ratios as pair_ratios, speedup_bounds,
)
from registry.formats.sequential import SequentialResult, decide_terms, needed_count
from registry.gate.model import SpeedRecord


@dataclass(frozen=True)
class Terms:
    """One confident contract version's speed terms, and the position it was declared at."""

    version: int
    position: int
    gate: float
    alpha: float
    max_pairs: int


@dataclass(frozen=True)
class Hold:
    """Something in the record that holds it: a rule id, and the sentence with its figures."""

    rule: str
    text: str


@dataclass(frozen=True)
class Figure:
    """The speedup a record shows: over `pairs` pairs read, up to and including a whole `source` (a session's
    "batch" or a "document"), estimated by `method`."""

    value: float
    pairs: int
    method: str
    source: str


@dataclass(frozen=True)
class SetAside:
    """Pairs of one timer and device that are not speed evidence: recorded, never read."""

    source: str  # "timer device"
    reason: str  # the sentence `not_speed_evidence` gives
    pairs: int


@dataclass(frozen=True)
class Reading:
    """The confident rule's reading of a speed record."""

    result: SequentialResult
    pairs: int  # every pair the record holds that is read
    sessions: int
    documents: int
    sources: list[str]  # "timer device" of every contribution read
    figure: Figure | None  # the speedup over every pair read up to what decided (all read, while undecided)
    holds: list[Hold] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rejected_under: int | None = None  # a contract version under which the record was already rejected
    bounds: list[tuple[float | None, float | None]] = field(default_factory=list)
    set_aside: list[SetAside] = field(default_factory=list)

    @property
    def level(self) -> float:
        """The running bounds' two-sided coverage: 1 - 2 alpha."""
        return 1.0 - 2.0 * self.result.alpha

    @property
    def value(self) -> float | None:
        """The speedup a record shows: its `figure` (None before any pair)."""
        figure = self.figure
        return None if figure is None else figure.value


def not_speed_evidence(timer: str, device: str) -> str | None:
    """Why timings of this timer and device are not speed evidence (an interpreter or emulator), or None."""
    source = f"{timer} {device}".lower()
    if "interpreter" in source:
        return "timings came from Triton's interpreter and are not speed evidence"
    if "emulator" in source:
        return "timings came from an emulator and are not speed evidence"
    return None


def contract_terms(versions: Sequence[Mapping[str, Any]]) -> list[Terms]:
    """The confident versions' terms, in declaration order (a point or speedless version imposes none)."""
    found = []
    for version in versions:
        block = version.get("speed")
        if block is None:
            continue
        speed = SpeedGate.from_mapping(block, stored=True)
        if speed.decision == "confident":
            found.append(Terms(version["version"], version["position"], speed.gate, speed.alpha, speed.max_pairs))
    return found


def read_record(record: SpeedRecord, speed: SpeedGate, terms: list[Terms] | None = None) -> Reading:
    """The record under the current contract `speed` (confident), with the loosening and rejection rules.

    `terms`, when given, are `contract_terms(record.versions)` computed once by a caller reading many records
    of one workload. A record that carries its running reading (`SpeedRecord.reading`, kept by the read model)
    under these very terms is read from it, and from the entries recorded since (a batch just appended); any
    other is read entry by entry.
    """
    terms = contract_terms(record.versions) if terms is None else list(terms)
    kept = record.reading
    if kept is not None and kept.get("terms") == terms_key(speed, terms):
        behind = _entries_after(record.entries, kept["through"])
        if all("protocol" in entry for entry in behind):  # entries recorded since, each with its arms: read on
            reader = RecordReader(speed, terms, copy.deepcopy(dict(kept)))
            for entry in behind:
                reader.add(entry)
            return reader.reading(record.sessions)
    reader = RecordReader(speed, terms)
    reader.read_all(record.entries)
    return reader.reading(record.sessions)


def _entries_after(entries: Sequence[Mapping[str, Any]], position: int) -> list[Mapping[str, Any]]:
    """The entries recorded after `position`, read from the end (a kept reading is at most a few behind)."""
    start = len(entries)
    while start and entries[start - 1]["position"] > position:
        start -= 1
    return list(entries[start:])


def terms_key(speed: SpeedGate, terms: Sequence[Terms]) -> str:
    """What a running reading is kept under: every confident version's terms with its position, and the current
    block's gate, alpha, max_pairs and drift check. Another key means another reading: it is read again."""
    return json.dumps([[[t.version, t.position, t.gate, t.alpha, t.max_pairs] for t in terms],
                       [speed.gate, speed.alpha, speed.max_pairs, speed.drift_check]])


class RecordReader:
    """The confident rule's reading of a speed record, made one entry at a time and kept as a JSON state.

    Each entry is read as it arrives, in recorded order: its pairs join the
    stream, its holds and notes are kept, and the rule counts its pairs
    against the terms in force since it was recorded. The rule reads at most
    max_pairs pairs and stops where it decides, so the state keeps the
    counted pairs (at most max_pairs) and, until the rule stops, the ratios
    and arms the figure needs; once it stops the figure is fixed and later entries only
    add to the counts, holds, notes and the pairs set aside. A document that
    did not interleave its arms is compared with the least upper and the
    greatest lower bound of the documents before it (disjoint from one of
    them is disjoint from one document), so the state never holds every
    document. Reading a whole record entry by entry (`read_all`) is the same
    computation as keeping the state and adding entries later, which is why
    the read model can keep it (registry/projections/record_readings.py).

    Whether the record was rejected under an earlier contract version depends only on the pairs recorded before
    the last version was declared: it is found once, when a whole record is read (`read_all`), and later entries
    (recorded after every version) leave it as it is.
    """

    def __init__(self, speed: SpeedGate, terms: list[Terms], state: dict[str, Any] | None = None):
        self.speed = speed
        current = Terms(terms[-1].version if terms else 0, terms[-1].position if terms else 0, speed.gate,
                        speed.alpha, speed.max_pairs)
        if not terms or (terms[-1].gate, terms[-1].alpha, terms[-1].max_pairs) != (speed.gate, speed.alpha,
                                                                                    speed.max_pairs):
            terms = [*terms, current]  # judged under terms not (yet) declared: a what-if
        self.terms, self.current = terms, current
        self.state: dict[str, Any] = state if state is not None else {
            "terms": terms_key(speed, terms[:-1] if terms[-1] is current else terms),
            "through": 0, "pairs": 0, "documents": 0, "counted": [], "above": 0, "below": 0, "stopped": False,
            "spans": [], "figure": None, "sources": [], "holds": [], "notes": [], "set_aside": [],
            "least_upper": None, "greatest_lower": None, "rejected_under": None}

    def read_all(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Read every entry of a record, then whether it was rejected under an earlier contract version."""
        pairs: list[tuple[float, int]] = []
        for entry in entries:
            self.add(entry, pairs)
        self._rejected_before(pairs)

    def add(self, entry: Mapping[str, Any], pairs: list[tuple[float, int]] | None = None) -> None:
        """Read one entry (its arms attached), recorded after every entry read so far. `pairs`, when given,
        receives each pair read with its position."""
        state, speed = self.state, self.speed
        event_id, protocol = entry["event_id"], entry["protocol"]
        state["through"] = entry["position"]
        if entry["source"] == "document":
            state["documents"] += 1
        if protocol is None:
            state["holds"].append(["evidence.invalid", f"benchmark evidence {event_id} in the speed record is not "
                                                       "a benchmark item, so the record cannot be read"])
            return
        baseline, candidate = as_doubles(entry["baseline_s"]), as_doubles(entry["candidate_s"])
        source = f"{entry['timer']} {entry['device']}"
        reason = not_speed_evidence(entry["timer"], entry["device"])
        if reason is not None:
            count = min(len(baseline), len(candidate))
            for aside in state["set_aside"]:
                if aside[0] == source:
                    aside[2] += count
                    break
            else:
                state["set_aside"].append([source, reason, count])
            return
        interleaved = entry["source"] == "session" or (
            protocol == "paired" and entry["schedule"] is not None and is_interleaved(entry["schedule"]))
        if entry["source"] == "document" and protocol == "paired" and not interleaved:
            state["notes"].append(f"document {event_id} ran a paired schedule that does not alternate BC/CB: set "
                                  "aside")
            return
        if not interleaved:
            if speed.drift_check == "none":
                state["notes"].append(f"document {event_id} did not interleave its arms; speed.drift_check is "
                                      "none, so its runs are read as exchangeable, paired by index")
            else:
                hold = self._drift(event_id, baseline, candidate)
                if hold is not None:
                    state["holds"].append([hold.rule, hold.text])
                    self._bound(event_id, protocol, baseline, candidate)
                    return
        if entry["source"] == "document":
            self._bound(event_id, protocol, baseline, candidate)
        read = pair_ratios(baseline, candidate)
        if pairs is not None:
            pairs.extend((ratio, entry["position"]) for ratio in read)
        state["pairs"] += len(read)
        if source not in state["sources"]:
            state["sources"].append(source)
        self._count(read, entry["position"])
        if not state["stopped"]:
            sequential = protocol == "sequential"
            state["spans"].append([state["pairs"], entry["source"] == "document", sequential,
                                   baseline if sequential else [], candidate if sequential else [], read])
            if self._stops():
                state["figure"] = self._figure(len(state["counted"]))
                state["spans"] = []
                state["stopped"] = True

    def _count(self, read: list[float], position: int) -> None:
        """Count the pairs the rule reads (up to max_pairs, and none after the one that decides), each with the
        terms in force since it was recorded; the state notes where the rule stops."""
        state = self.state
        if state["stopped"]:
            return
        promote, reject, alpha = _strictest([position], self.terms)[position]
        for ratio in read:
            if self._stops():
                return
            state["counted"].append([ratio, promote, reject, alpha])
            state["above"] += ratio > promote
            state["below"] += ratio < reject

    def _stops(self) -> bool:
        """Whether the rule has read its last pair: decided at the last one counted, or at max_pairs."""
        counted = self.state["counted"]
        if len(counted) >= self.current.max_pairs:
            return True
        if not counted:
            return False
        need = needed_count(len(counted), counted[-1][3])
        return self.state["above"] >= need or self.state["below"] >= need

    def _figure(self, pairs: int) -> list[Any] | None:
        """[value, pairs, method, source]: the estimate over every pair read up to the batch or document holding
        pair `pairs` (the last counted), by the method the protocols name; None before any pair."""
        if not pairs:
            return None
        spans = self.state["spans"]
        last = next(index for index, span in enumerate(spans) if span[0] >= pairs)
        spans = spans[: last + 1]
        if all(span[2] for span in spans):
            baseline = [time for span in spans for time in span[3]]
            candidate = [time for span in spans for time in span[4]]
            value, method = median(baseline) / median(candidate), "ratio of the arm medians"
        else:
            value, method = median([ratio for span in spans for ratio in span[5]]), "median of the pair ratios"
        return [value, spans[-1][0], method, "document" if spans[-1][1] else "batch"]

    def _bound(self, event_id: str, protocol: str, baseline: list[float], candidate: list[float]) -> None:
        """Keep the least upper and greatest lower confident bound of the record's documents so far."""
        bounds = speedup_bounds(protocol, baseline, candidate, self.speed.alpha)
        if bounds is None:
            return
        state = self.state
        if state["least_upper"] is None or bounds[1] < state["least_upper"][0]:
            state["least_upper"] = [bounds[1], bounds[0], event_id]
        if state["greatest_lower"] is None or bounds[0] > state["greatest_lower"][0]:
            state["greatest_lower"] = [bounds[0], bounds[1], event_id]

    def _drift(self, event_id: str, baseline: list[float], candidate: list[float]) -> Hold | None:
        """The drift check of a document that did not interleave its arms: None when it passes."""
        alpha = self.speed.alpha
        found = arm_drift(baseline, candidate, alpha)
        if found is not None:
            rule, text = found
            return Hold(rule, f"document {event_id} did not interleave its arms and {text}")
        own = speedup_bounds("sequential", baseline, candidate, alpha)
        upper, lower = self.state["least_upper"], self.state["greatest_lower"]
        if own is None:
            return None
        if upper is not None and own[0] > upper[0]:
            earlier = (upper[1], upper[0], upper[2])
        elif lower is not None and own[1] < lower[0]:
            earlier = (lower[0], lower[1], lower[2])
        else:
            return None
        return Hold("speed.drift",
                    f"document {event_id} did not interleave its arms and its bounds [{own[0]:.4g}, {own[1]:.4g}] "
                    f"are disjoint from those of document {earlier[2]} of the same bytes [{earlier[0]:.4g}, "
                    f"{earlier[1]:.4g}] (alpha {alpha:g} per side): the runs are not exchangeable draws of one "
                    "speedup")

    def _rejected_before(self, pairs: list[tuple[float, int]]) -> None:
        """Read the record as it stood just before each later contract version, under the terms in force then."""
        ratios, positions = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
        for earlier, following in zip(self.terms, self.terms[1:]):
            before = [i for i, at in enumerate(positions) if at < following.position]
            past = _decide([ratios[i] for i in before], [positions[i] for i in before],
                           [t for t in self.terms if t.position <= earlier.position], earlier)
            if past.decision == "rejected":
                self.state["rejected_under"] = earlier.version
                return

    def reading(self, sessions: int) -> Reading:
        """The reading of the entries read so far (`sessions`: how many sessions the record has opened)."""
        state, current = self.state, self.current
        counted = state["counted"]
        bounds: list[tuple[float | None, float | None]] = []
        result = decide_terms([pair[0] for pair in counted], [pair[1] for pair in counted],
                              [pair[2] for pair in counted], [pair[3] for pair in counted], current.max_pairs,
                              current.alpha, bounds)
        rejected_under = state["rejected_under"]
        if rejected_under is not None and result.decision != "rejected":
            result = SequentialResult("rejected", result.pairs, result.decided_at, result.lower, result.upper,
                                      result.alpha, "rejected_before")
        figure = state["figure"] if state["stopped"] else self._figure(len(counted))
        set_aside = [SetAside(source, reason, count) for source, reason, count in state["set_aside"]]
        notes = [*state["notes"], *(f"{found.pairs} pair{'' if found.pairs == 1 else 's'} timed by {found.source} "
                                    f"set aside, never read: {found.reason}" for found in set_aside)]
        return Reading(result, state["pairs"], sessions, state["documents"], list(state["sources"]),
                       None if figure is None else Figure(*figure), [Hold(*hold) for hold in state["holds"]], notes,
                       rejected_under, bounds, set_aside)


def _decide(ratios: list[float], positions: list[int], terms: list[Terms], current: Terms,
            bounds: list | None = None) -> SequentialResult:
    strictest = _strictest(positions, terms)
    promote = [strictest[at][0] for at in positions]
    reject = [strictest[at][1] for at in positions]
    return decide_terms(ratios, promote, reject, [strictest[at][2] for at in positions], current.max_pairs,
                        current.alpha, bounds)


def _strictest(positions: list[int], terms: list[Terms]) -> dict[int, tuple[float, float, float]]:
    """(highest gate, lowest gate, lowest alpha) in force since each position (one entry's pairs share one)."""
    found = {}
    for at in dict.fromkeys(positions):
        since = _in_force_since(at, terms)
        found[at] = (max(t.gate for t in since), min(t.gate for t in since), min(t.alpha for t in since))
    return found


def _in_force_since(position: int, terms: list[Terms]) -> list[Terms]:
    """The versions in force at any moment from `position` until the last of `terms`."""
    earlier = [t for t in terms if t.position < position]
    return ([earlier[-1]] if earlier else []) + [t for t in terms if t.position >= position] or terms[-1:]


def arm_drift(baseline: list[float], candidate: list[float], alpha: float) -> tuple[str, str] | None:
    """(rule, what was found) when a design that did not interleave its arms cannot be read as exchangeable: an arm
    shifted at some point (at most alpha / 2 per arm), or an arm too short to show a shift at that level."""
    scans = [(arm, times, level_shift(times)) for arm, times in (("baseline", baseline), ("candidate", candidate))]
    for arm, times, scan in scans:
        if scan is None or not scan.checkable(alpha):
            least = "none" if scan is None or scan.least_p is None else f"{scan.least_p:.2g}"
            return ("speed.not_interleaved",
                    f"its {len(times)} {arm} runs are too few to show a level shift at alpha / 2 = {alpha / 2:g} "
                    f"(the least exact p-value they allow is {least}; speed.drift_check), so they are not read")
    shifted = [f"{arm} {scan.text()}" for arm, _, scan in scans if scan is not None and scan.shifted(alpha)]
    if shifted:
        return ("speed.drift", f"{' and '.join(shifted)}: at most alpha / 2 = {alpha / 2:g} per arm when the runs "
                               "are exchangeable, so they are not read as one speedup")
    return None
