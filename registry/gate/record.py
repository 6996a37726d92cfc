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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.contracts import SpeedGate
from registry.formats.changepoint import level_shift
from registry.formats.order_statistics import (
    as_doubles, is_interleaved, median, ratios as pair_ratios, speedup_bounds,
)
from registry.formats.sequential import SequentialResult, decide_terms
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
class Span:
    """One source's pairs in the stream read: where they end, and its arms (for the figure)."""

    end: int  # the stream's pair count once this source's pairs are read
    document: bool  # a complete document (else a session's batch)
    sequential: bool  # a complete document timed arm after arm
    baseline: list[float]
    candidate: list[float]


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
    ratios: list[float]  # every pair the record holds that is read, in recorded order
    positions: list[int]  # the position each pair was recorded at
    sessions: int
    documents: int
    sources: list[str]  # "timer device" of every contribution read
    holds: list[Hold] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rejected_under: int | None = None  # a contract version under which the record was already rejected
    bounds: list[tuple[float | None, float | None]] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    set_aside: list[SetAside] = field(default_factory=list)

    @property
    def level(self) -> float:
        """The running bounds' two-sided coverage: 1 - 2 alpha."""
        return 1.0 - 2.0 * self.result.alpha

    @property
    def figure(self) -> Figure | None:
        """The speedup over every pair read up to the batch or document holding the last pair counted (the deciding
        one, once decided); None before any pair is read."""
        if not self.result.pairs:
            return None
        last = next(index for index, span in enumerate(self.spans) if span.end >= self.result.pairs)
        spans = self.spans[: last + 1]
        if all(span.sequential for span in spans):
            baseline = [time for span in spans for time in span.baseline]
            candidate = [time for span in spans for time in span.candidate]
            value, method = median(baseline) / median(candidate), "ratio of the arm medians"
        else:
            value, method = median(self.ratios[: spans[-1].end]), "median of the pair ratios"
        return Figure(value, spans[-1].end, method, "document" if spans[-1].document else "batch")

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
    of one workload.
    """
    terms = contract_terms(record.versions) if terms is None else list(terms)
    current = Terms(terms[-1].version if terms else 0, terms[-1].position if terms else 0, speed.gate,
                    speed.alpha, speed.max_pairs)
    if not terms or (terms[-1].gate, terms[-1].alpha, terms[-1].max_pairs) != (speed.gate, speed.alpha,
                                                                                speed.max_pairs):
        terms = [*terms, current]  # judged under terms not (yet) declared: a what-if
    ratios, positions, sources, holds, notes, spans, set_aside = _contributions(record, speed)
    bounds: list[tuple[float | None, float | None]] = []
    result = _decide(ratios, positions, terms, current, bounds)
    rejected_under = None
    for earlier, following in zip(terms, terms[1:]):
        before = [i for i, at in enumerate(positions) if at < following.position]
        past = _decide([ratios[i] for i in before], [positions[i] for i in before],
                       [t for t in terms if t.position <= earlier.position], earlier)
        if past.decision == "rejected":
            rejected_under = earlier.version
            break
    if rejected_under is not None and result.decision != "rejected":
        result = SequentialResult("rejected", result.pairs, result.decided_at, result.lower, result.upper,
                                  result.alpha, "rejected_before")
    return Reading(result, ratios, positions, record.sessions,
                   sum(1 for entry in record.entries if entry["source"] == "document"), sources,
                   holds, notes, rejected_under, bounds, spans, set_aside)


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


def _contributions(record: SpeedRecord, speed: SpeedGate):
    ratios: list[float] = []
    positions: list[int] = []
    sources: list[str] = []
    holds: list[Hold] = []
    notes: list[str] = []
    spans: list[Span] = []
    set_aside: dict[str, SetAside] = {}
    opted_out = speed.drift_check == "none"
    documents: list[tuple[str, _Arms]] = []  # earlier documents, whose bounds the drift check may need
    for entry in record.entries:
        event_id, protocol = entry["event_id"], entry["protocol"]
        if protocol is None:
            holds.append(Hold("evidence.invalid", f"benchmark evidence {event_id} in the speed record is not a "
                                                  "benchmark item, so the record cannot be read"))
            continue
        baseline, candidate = as_doubles(entry["baseline_s"]), as_doubles(entry["candidate_s"])
        source = f"{entry['timer']} {entry['device']}"
        reason = not_speed_evidence(entry["timer"], entry["device"])
        if reason is not None:
            earlier = set_aside.get(source)
            set_aside[source] = SetAside(source, reason, (earlier.pairs if earlier else 0) + min(len(baseline),
                                                                                                   len(candidate)))
            continue
        interleaved = entry["source"] == "session" or (
            protocol == "paired" and entry["schedule"] is not None and is_interleaved(entry["schedule"]))
        if entry["source"] == "document" and protocol == "paired" and not interleaved:
            notes.append(f"document {event_id} ran a paired schedule that does not alternate BC/CB: set aside")
            continue
        if not interleaved:
            if opted_out:
                notes.append(f"document {event_id} did not interleave its arms; speed.drift_check is none, so "
                             "its runs are read as exchangeable, paired by index")
            else:
                hold = _drift(event_id, baseline, candidate, documents, speed.alpha)
                if hold is not None:
                    holds.append(hold)
                    documents.append((event_id, _Arms(protocol, baseline, candidate)))
                    continue
        if entry["source"] == "document":
            documents.append((event_id, _Arms(protocol, baseline, candidate)))
        read = pair_ratios(baseline, candidate)
        ratios.extend(read)
        positions.extend([entry["position"]] * len(read))
        spans.append(Span(len(ratios), entry["source"] == "document", protocol == "sequential", baseline, candidate))
        if source not in sources:
            sources.append(source)
    for found in set_aside.values():
        notes.append(f"{found.pairs} pair{'' if found.pairs == 1 else 's'} timed by {found.source} set aside, never "
                     f"read: {found.reason}")
    return ratios, positions, sources, holds, notes, spans, list(set_aside.values())


@dataclass(frozen=True)
class _Arms:
    """A document's arms, whose confident bounds are computed only when a drift check compares with them."""

    protocol: str
    baseline: list[float]
    candidate: list[float]

    def bounds(self, alpha: float) -> tuple[float, float] | None:
        return speedup_bounds(self.protocol, self.baseline, self.candidate, alpha)


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


def _drift(event_id: str, baseline: list[float], candidate: list[float],
           documents: list[tuple[str, _Arms]], alpha: float) -> Hold | None:
    """The drift check of a document that did not interleave its arms: None when it passes."""
    found = arm_drift(baseline, candidate, alpha)
    if found is not None:
        rule, text = found
        return Hold(rule, f"document {event_id} did not interleave its arms and {text}")
    own = speedup_bounds("sequential", baseline, candidate, alpha)
    for earlier_id, arms in documents:
        earlier = arms.bounds(alpha)
        if own is not None and earlier is not None and (own[0] > earlier[1] or own[1] < earlier[0]):
            return Hold("speed.drift",
                        f"document {event_id} did not interleave its arms and its bounds [{own[0]:.4g}, "
                        f"{own[1]:.4g}] are disjoint from those of document {earlier_id} of the same bytes "
                        f"[{earlier[0]:.4g}, {earlier[1]:.4g}] (alpha {alpha:g} per side): the runs are not "
                        "exchangeable draws of one speedup")
    return None
