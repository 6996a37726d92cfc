"""The hash chain over the global order of events.

hash(n) = sha256(prev_hash || canonical(row n)), with the row's position,
identity, stream, version, type, schema version, payload, time, actor and
idempotency key all inside the hashed form. Editing any of those, deleting or
reordering a row, or injecting one breaks the chain at that position.

Two things a chain cannot show by itself are checked beside it. Times must
never go backwards along the log (appends stamp them that way, so "as of a
time" is a prefix of the log). And the log's end: cutting off the last events
leaves a shorter chain that is intact, so a walk reports the head it saw and
can be given a head known from before (a lock file, a noted `verify`) that
the log must still hold.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from hashlib import sha256
from json.encoder import encode_basestring as _quote  # the encoder's own string quoting
from typing import Any, Iterable, Sequence

GENESIS_HASH = "0" * 64
HASHED_FIELDS = ("position", "event_id", "stream", "version", "type", "schema_version", "payload",
                 "recorded_at", "actor", "idempotency_key")


def timestamp_text(moment: datetime) -> str:
    """The one text form of a time inside the chain: UTC, microseconds."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    elif moment.tzinfo is not timezone.utc:
        moment = moment.astimezone(timezone.utc)
    return moment.isoformat(timespec="microseconds")


def event_hash(prev_hash: str, **fields: Any) -> str:
    """The link for one row, from its hashed fields as stored (`recorded_at` a datetime)."""
    return link(prev_hash, hashed_body(**{**fields, "recorded_at": timestamp_text(fields["recorded_at"])}))


def link(prev_hash: str, body: str) -> str:
    """hash(n) = sha256(prev_hash || body(n)), as lowercase hex."""
    return sha256(f"{prev_hash}{body}".encode()).hexdigest()


def hashed_body(
    *,
    position: int,
    event_id: str,
    stream: str,
    version: int,
    type: str,
    schema_version: int,
    payload: str,
    recorded_at: str,
    actor: str,
    idempotency_key: str | None,
) -> str:
    """The canonical JSON of a row's hashed fields (sorted keys, no spaces, UTF-8).

    `recorded_at` is the time's chain text (`timestamp_text`). The result is
    exactly `json.dumps(fields, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)` (a property test holds it to that), written out field
    by field because it runs for every event appended and verified.
    """
    unplaced = unplaced_body(actor=actor, stream=stream, type=type, schema_version=schema_version, payload=payload)
    return placed_body(unplaced, position=position, event_id=event_id, version=version, recorded_at=recorded_at,
                       idempotency_key=idempotency_key)


def unplaced_body(*, actor: str, stream: str, type: str, schema_version: int, payload: str) -> tuple[str, str, str]:
    """The hashed body's text around the fields only the append lock decides, already encoded."""
    return (f'{{"actor":{_quote(actor)},"event_id":', f',"payload":{_quote(payload)},"position":',
            f',"schema_version":{int(schema_version)},"stream":{_quote(stream)},"type":{_quote(type)},"version":')


def placed_body(unplaced: tuple[str, str, str], *, position: int, event_id: str, version: int, recorded_at: str,
                idempotency_key: str | None) -> str:
    """The hashed body of an event once the lock has placed it (see `unplaced_body`)."""
    head, middle, tail = unplaced
    key = "null" if idempotency_key is None else _quote(idempotency_key)
    return (f'{head}{_quote(event_id)},"idempotency_key":{key}{middle}{int(position)},'
            f'"recorded_at":{_quote(recorded_at)}{tail}{int(version)}}}')


@dataclass(frozen=True, slots=True)
class UnplacedBatch:
    """A batch's hashed bodies as far as they are known before the append lock, already quoted.

    An append makes this before it takes the lock, so the lock holder only
    fills in each event's position, id, version, the time and the key. The
    actor and the stream are the batch's, quoted once; each event's type and
    payload are quoted by `map`, with no Python loop per event.
    """

    actor: str  # '{"actor":<actor>'
    stream: str  # ',"stream":<stream>'
    types: list[str]
    schema_versions: list[int]
    payloads: list[str]


def unplaced_bodies(actor: str, stream: str, events: Sequence[tuple[str, int, str]]) -> UnplacedBatch:
    """The unplaced bodies of a batch's (type, schema version, payload) events, which share its actor and stream."""
    types, schema_versions, payloads = zip(*events)
    return UnplacedBatch(f'{{"actor":{_quote(actor)}', f',"stream":{_quote(stream)}', list(map(_quote, types)),
                         list(map(int, schema_versions)), list(map(_quote, payloads)))


def link_batch(prev_hash: str, unplaced: UnplacedBatch, *, first_position: int, first_version: int,
               event_ids: Sequence[str], recorded_at: str, idempotency_key: str | None) -> list[str]:
    """The hashes of a batch placed at `first_position` (and its stream's `first_version`), each linked to
    the one before, the first to `prev_hash`.

    Exactly `link(previous, hashed_body(...))` event by event, with the
    idempotency key on the first event only (a property test holds it to
    that); the batch's one time is quoted once. It runs inside the append
    lock, once per event.
    """
    actor, stream = unplaced.actor, unplaced.stream
    time_text = f',"recorded_at":{_quote(recorded_at)}'
    key = "null" if idempotency_key is None else _quote(idempotency_key)
    position, version = int(first_position), int(first_version)
    hashes = []
    for type, schema_version, payload, quoted_id in zip(unplaced.types, unplaced.schema_versions, unplaced.payloads,
                                                        map(_quote, event_ids)):
        # prev_hash and the body in one string, built once: this loop is the lock holder's main work.
        prev_hash = sha256(f'{prev_hash}{actor},"event_id":{quoted_id},"idempotency_key":{key},"payload":{payload},'
                           f'"position":{position}{time_text},"schema_version":{schema_version}{stream},"type":{type},'
                           f'"version":{version}}}'.encode()).hexdigest()
        hashes.append(prev_hash)
        key = "null"  # the key is the first event's only
        position += 1
        version += 1
    return hashes


@dataclass(frozen=True)
class ChainReport:
    """The outcome of walking the log: intact with a head, or the first break.

    `count` and `head_hash` describe the events checked good: the whole log
    when intact, the part before the break otherwise. Positions run 1..N, so
    the last good event's position is `count` (0 and the genesis hash for none).
    """

    count: int
    head_hash: str
    broken_at: int | None = None
    problem: str | None = None
    expected_head: tuple[int, str] | None = None

    @property
    def intact(self) -> bool:
        return self.broken_at is None

    @property
    def head_position(self) -> int:
        return self.count


def walk_chain(rows: Iterable[dict], *, expect_head: tuple[int, str] | None = None) -> ChainReport:
    """Check positions are 1..N in order, every link recomputes, times never go backwards,
    and the log holds `expect_head` (position, hash) when one is given."""
    expected_prev = GENESIS_HASH
    expected_position = 1
    previous_time = ""
    count = 0

    def broken(position: int, problem: str) -> ChainReport:
        return ChainReport(count, expected_prev, position, problem, expect_head)

    if expect_head is not None and expect_head[0] == 0 and expect_head[1] != GENESIS_HASH:
        return broken(0, f"the expected head at position 0 is {expect_head[1]}, but position 0 is the genesis "
                         f"hash {GENESIS_HASH}")
    for row in rows:
        position = row["position"]
        if position != expected_position:
            return broken(position, f"expected position {expected_position}, found {position}")
        if row["prev_hash"] != expected_prev:
            return broken(position, "prev_hash does not match the previous event's hash")
        recorded = timestamp_text(row["recorded_at"])
        fields = {name: row[name] for name in HASHED_FIELDS if name != "recorded_at"}
        if link(row["prev_hash"], hashed_body(**fields, recorded_at=recorded)) != row["hash"]:
            return broken(position, "stored hash does not match the event's content")
        # Both are the same fixed-width UTC text, so text order is time order.
        if recorded < previous_time:
            return broken(position, f"time goes backwards: recorded at {recorded}, before position "
                                    f"{position - 1}'s {previous_time}")
        if expect_head is not None and position == expect_head[0] and row["hash"] != expect_head[1]:
            return broken(position, f"the hash at position {position} is {row['hash']}, not the expected head's "
                                    f"{expect_head[1]}")
        expected_prev = row["hash"]
        previous_time = recorded
        expected_position += 1
        count += 1
    if expect_head is not None and expect_head[0] > count:
        return broken(count + 1, f"the log ends at position {count}, before the expected head at position "
                                 f"{expect_head[0]}: events at its end are missing")
    return ChainReport(count, expected_prev, expected_head=expect_head)
