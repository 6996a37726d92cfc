"""`history`: every event of one stream in order, a page at a time, what each verdict rested on and what
each contract redeclaration changed.

A stream of any length is read in pages of `HISTORY_PAGE` events up to one
fixed end (the head when the history was asked for, or the --as-of
position), so the pages, each read on its own, show one prefix of the log
and the command's memory stays flat. A workload's stream is read from its
first event, so each `WorkloadDeclared` after the first is compared with
the contract it replaced, whichever page that one was on.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator

from registry.events.store import StoredEvent
from registry.formats.errors import UserError
from registry.formats.names import artifact_stream
from registry.formats.text import one_line, quoted_text

from .context import Registry

# Events per page: `history` holds one page at a time, so its memory stays flat on any stream.
HISTORY_PAGE = 1000


def stream_name(name: str) -> str:
    """An artifact id, or any full stream name such as `workload:ID`."""
    return name if ":" in name else artifact_stream(name)


@dataclass(frozen=True)
class VerdictBasis:
    """What one verdict rested on: each evidence event by its id, None where the log holds no such event."""

    verdict: StoredEvent
    rested_on: list[StoredEvent | None]


def history_pages(registry: Registry, stream: str, as_of: str | None = None) -> tuple[str, Iterator[list[StoredEvent]]]:
    """The stream's full name and its events in pages; a stream with no events (up to --as-of) is refused."""
    from registry.projections import resolve_as_of

    position = resolve_as_of(registry.store, as_of)
    name = stream_name(stream)
    # A fixed end, so that the pages, each read on its own, show one prefix of the log.
    up_to = registry.store.head_position() if position is None else position
    events = registry.store.iter_stream(name, up_to_position=up_to, page=HISTORY_PAGE)
    first = next(events, None)
    if first is None:
        raise UserError(f"no events in stream {name}" + (f" up to position {position}" if position is not None else ""))
    return name, _pages(itertools.chain([first], events), HISTORY_PAGE)


def _pages(events: Iterator[StoredEvent], size: int) -> Iterator[list[StoredEvent]]:
    while page := list(itertools.islice(events, size)):
        yield page


@dataclass(frozen=True)
class FieldChange:
    """One field of a redeclared contract: its dotted path, and its value before and after (None when absent)."""

    path: str
    old: Any
    new: Any


def contract_changes(pages: Iterator[list[StoredEvent]]) -> Iterator[tuple[list[StoredEvent], dict[int, list[FieldChange]]]]:
    """Each page with, by position, what each `WorkloadDeclared` on it changed in the contract before it.

    The first declaration has nothing before it and gets no entry; a
    redeclaration gets every field whose value differs, nested fields by
    dotted path (`fidelity.min_ssim`), lists compared whole.
    """
    contract = None
    for page in pages:
        changes = {}
        for event in page:
            if event.type == "WorkloadDeclared":
                if contract is not None:
                    changes[event.position] = changed_fields(contract, event.payload["contract"])
                contract = event.payload["contract"]
        yield page, changes


def changed_fields(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[FieldChange]:
    """Every leaf whose value differs between two documents, in key order, nested objects by dotted path."""
    found = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if isinstance(before, dict) and isinstance(after, dict):
            found += changed_fields(before, after, f"{prefix}{key}.")
        elif before != after:
            found.append(FieldChange(prefix + key, before, after))
    return found


def verdict_bases(registry: Registry, page: list[StoredEvent]) -> list[VerdictBasis]:
    """For each verdict on the page, its evidence events: from the page when there, else read by id."""
    by_id = {event.event_id: event for event in page}
    return [VerdictBasis(event, [by_id[i] if i in by_id else registry.store.get(i)
                                 for i in event.payload["verdict"]["evidence_ids"]])
            for event in page if event.type == "VerdictRendered"]


def _count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _item_summary(kind: str, item: dict[str, Any]) -> str:
    """One evidence item in words: what was measured, never the raw JSON."""
    if kind == "parity":
        leaves = item.get("leaves") or []
        equal = sum(1 for leaf in leaves if leaf.get("byte_equal"))
        return f"parity: {equal} of {_count(len(leaves), 'leaf', 'leaves')} byte-equal (comparator policy {item.get('policy') or '-'})"
    if kind == "benchmark":
        return (f"benchmark: {_count(len(item.get('baseline_s') or []), 'run')} per arm, {item.get('protocol')}, "
                f"timer {item.get('timer')} on {item.get('device')}")
    if kind == "execution":
        ran = item.get("effective_backend")
        return (f"execution: {_count(item.get('candidate_calls', 0), 'candidate call')}, "
                f"{_count(item.get('fallbacks', 0), 'fallback')}" + (f", backend {ran}" if ran else ""))
    if kind == "perceptual":
        ssim = item.get("ssim") or []
        worst = f", worst SSIM {min(ssim):.4g} (frame {ssim.index(min(ssim))})" if ssim else ""
        return f"perceptual on frame set {item.get('frame_set')} (seed {item.get('seed')}){worst}, {item.get('stage_status')}"
    return kind


def event_summary(event: StoredEvent) -> str | None:
    """A line for people on one event of a stream's history (None: the caller prints the payload in short).

    Every identifier a reader may type back (a digest, a session, a batch key) is printed in full.
    """
    from registry.events.catalogue import EVIDENCE_KIND_BY_TYPE

    payload = event.payload
    kind = EVIDENCE_KIND_BY_TYPE.get(event.type)
    if kind is not None:
        return _item_summary(kind, payload.get("item") or {}) + (f" (run {payload['run']})" if payload.get("run") else "")
    if event.type == "ArtifactRegistered":
        what = "bundle" if payload.get("bundle") else "payload"
        claims = "".join(f", {key} {payload[key]}" for key in ("backend", "op", "entry") if payload.get(key))
        return f"{payload['kind']} of workload {payload['workload']}, {what} {payload.get('payload_sha256') or 'none'}{claims}"
    if event.type == "BenchmarkSessionOpened":
        return (f"session {payload['session']} opened for {payload['artifact']} on {payload['device']} "
                f"(timer {payload['timer']})")
    if event.type == "BenchmarkPairsRecorded":
        return (f"session {payload['session']}, batch {payload['batch']}: {_count(len(payload['baseline_s']), 'pair')} "
                f"for {payload['artifact']}")
    if event.type == "PairsRemeasured":
        return (f"monitor batch {payload['batch']}: {_count(len(payload['baseline_s']), 'pair')} on {payload['device']} "
                f"against the threshold {payload['threshold']:.4g}x")
    if event.type == "RegressionDetected":
        return (f"regression detected at pair {payload['pairs']} of the re-measurements ({payload['below']} below the "
                f"threshold {payload['threshold']:.4g}x, alpha {payload['alpha']:g})")
    if event.type == "RegressionAcknowledged":
        return f"alarm {payload['alarm_event_id']} acknowledged by {payload['person']}: {one_line(payload['reason'])}"
    if event.type == "FrameSetRegistered":
        return (f"frame set {payload['name']}: {payload['frames']} frames {payload['height']}x{payload['width']}, "
                f"seed {payload['seed']}, sha256 {payload['sha256']}")
    if event.type == "TokenIssued":
        return (f"token {payload['key_id']} issued to {payload['principal']}: {', '.join(payload['scopes'])}, "
                f"until {payload['not_after']}")
    if event.type == "ExternalOutcome":
        origin = payload.get("origin") or {}
        what = payload.get("outcome") or (payload.get("recorded_verdict") or {}).get("decision") or "a summary"
        return (f"imported {what} for workload {payload['workload']}"
                + (f" on {payload['arch']}" if payload.get("arch") else "")
                + f" from {origin.get('path', 'an import')} (never evidence: the gate does not read it)")
    if event.type == "HookAdded":
        return (f"hook {payload['hook_id']} added: {payload['url']} for {', '.join(payload['events'])} (secret "
                f"{payload['secret_id']} read from {payload['secret_file']})")
    if event.type == "HookDeliveryAttempted":
        answer = f" ({payload['status']})" if payload.get("status") else ""
        return (f"{payload['event']} at position {payload['position']}, attempt {payload['attempt']}: "
                f"{payload['outcome']}{answer}" + (f": {quoted_text(payload['error'])}" if payload.get("error") else "")
                + (f"; next after {payload['next_attempt_after']}" if payload.get("next_attempt_after") else ""))
    if event.type == "HookRemoved":
        return f"hook {payload['hook_id']} removed: {one_line(payload['reason'])}"
    if event.type == "TokenRevoked":
        return f"token {payload['key_id']} revoked: {one_line(payload['reason'])}"
    return None


@dataclass(frozen=True)
class OtherStream:
    """Evidence a verdict rested on that lives in another stream (a speed record's session batches)."""

    stream: str
    events: list[StoredEvent]

    def text(self) -> str:
        sessions: dict[str, list[StoredEvent]] = {}
        for event in self.events:
            sessions.setdefault(event.payload.get("session") or event.type, []).append(event)
        parts = [f"session {name}: {_count(len(found), 'batch', 'batches')}, "
                 f"{_count(sum(len(e.payload.get('baseline_s') or []) for e in found), 'pair')} "
                 f"(positions {found[0].position}-{found[-1].position})" for name, found in sessions.items()]
        return f"from {self.stream}: " + "; ".join(parts) + f" (`registry history {self.stream}` lists them)"


@dataclass(frozen=True)
class CitedRecord:
    """The speed record a verdict cites (its `speed_record`: key, head, entries, digest) as the log holds it now:
    its entries up to the cited head, which must be as many as cited and chain to the cited digest."""

    citation: dict[str, Any]
    entries: list[dict[str, Any]]

    def lines(self) -> list[str]:
        from registry.formats.names import bench_stream
        from registry.projections.read_models.speed_records import next_digest

        digest = ""
        for entry in self.entries:
            digest = next_digest(digest, entry["event_id"])
        cited = self.citation
        said = (f"speed record {cited['record']}: {_count(cited['entries'], 'entry', 'entries')} up to position "
                f"{cited['head']}, digest {cited['digest'][:16]}")
        if len(self.entries) != cited["entries"] or digest != cited["digest"]:
            return [said + f"; the log now holds {_count(len(self.entries), 'entry', 'entries')} up to that "
                           "position with another digest: the record is not the one the verdict read"]
        sessions: dict[str, dict[str, list[dict[str, Any]]]] = {}
        documents = [entry for entry in self.entries if entry["source"] == "document"]
        for entry in self.entries:
            if entry["source"] == "session":
                stream = bench_stream(entry["identity"])
                sessions.setdefault(stream, {}).setdefault(entry["session"], []).append(entry)
        lines = [said]
        for stream, batches in sessions.items():
            parts = [f"session {name}: {_count(len(found), 'batch', 'batches')}, "
                     f"{_count(sum(len(e.get('baseline_s') or []) for e in found), 'pair')} "
                     f"(positions {found[0]['position']}-{found[-1]['position']})" for name, found in batches.items()]
            lines.append(f"from {stream}: " + "; ".join(parts) + f" (`registry history {stream}` lists them)")
        if documents:
            lines.append(f"{_count(len(documents), 'benchmark document')} (positions {documents[0]['position']}-"
                         f"{documents[-1]['position']})")
        return lines


def cited_record(registry: Registry, basis: VerdictBasis) -> CitedRecord | None:
    """The speed record the verdict cites, with its entries up to the cited head; None for a verdict citing none."""
    citation = basis.verdict.payload["verdict"].get("speed_record")
    if not citation:
        return None
    with registry.view() as view:
        row = view.record(citation["record"])
    entries = [entry for entry in (row or {}).get("entries", []) if entry["position"] <= citation["head"]]
    return CitedRecord(citation, list(entries))


def other_streams(basis: VerdictBasis, stream: str) -> list[OtherStream]:
    """The events of a verdict's basis that live outside `stream` (the artifact's), grouped by their stream."""
    found: dict[str, list[StoredEvent]] = {}
    for event in basis.rested_on:
        if event is not None and event.stream != stream:
            found.setdefault(event.stream, []).append(event)
    return [OtherStream(name, events) for name, events in found.items()]
