"""Reading the log for folding: lean event records, payloads decoded only when needed.

A full replay is dominated by JSON decoding, and most of it would be wasted:
of the many evidence events an artifact accumulates, its state keeps only the
latest of each kind, and keeps even those by reference (their items are
read by position when a question shows them: items.py). So the reader reads
only each evidence event's `artifact`, `identity` and `payload_sha256` (the
fields the fold needs to check and scope it) and leaves the rest of the
payload text undecoded unless the fold asks for it.

The store writes every payload as canonical JSON (registry/events/canonical.py:
sorted keys, no whitespace), so an evidence payload's top-level keys appear in
the order artifact, identity, item, payload_sha256, run (events recorded
before identities were have no `identity` key). Inside a JSON string a quote
is escaped, so the text `,"` cannot occur in one: the first `,"` ends the
`artifact` value and starts the second key. The reader takes a value
(null, or a string without escapes) only when its key occurs once in the
whole text and the key that must follow it does; any payload not in that
layout (a nested or repeated key included) is decoded in full instead, so
the shortcut never guesses.
Events written under an older payload schema go through the store's
upcasters (validated) first, so the fold only ever sees current-schema
payloads.
"""
from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Iterator, cast

from sqlalchemy import Engine

from registry.events.canonical import strict_json_loads
from registry.events.catalogue import EVIDENCE_KIND_BY_TYPE
from registry.events.catalogue import SCHEMA_VERSIONS as CURRENT_SCHEMA
from registry.events.chain import timestamp_text
from registry.events.errors import StoreError
from registry.events.store import EventStore, LogRow, StoredEvent

PAGE = 20_000


class LogEvent:
    """One event as the fold sees it: identity, place, and a payload decoded on first use.

    `scope` and `identity` are the payload's `payload_sha256` and `identity`
    for evidence events (None otherwise), available without decoding the
    payload.
    """

    __slots__ = ("position", "event_id", "stream", "type", "scope", "identity", "_recorded_at", "_text", "_payload")

    def __init__(self, position: int, event_id: str, stream: str, type: str, scope: str | None,
                 identity: str | None, recorded_at: Any, text: str | None, payload: dict[str, Any] | None):
        self.position = position
        self.event_id = event_id
        self.stream = stream
        self.type = type
        self.scope = scope
        self.identity = identity
        self._recorded_at = recorded_at
        self._text = text
        self._payload = payload

    @classmethod
    def from_stored(cls, event: StoredEvent) -> LogEvent:
        payload = event.payload
        if CURRENT_SCHEMA.get(event.type) != event.schema_version:
            payload = event.typed().model_dump(mode="python")  # upcast (and validate) an older payload
        return _decoded(event.position, event.event_id, event.stream, event.type, event.recorded_at, payload)

    @property
    def payload(self) -> dict[str, Any]:
        if self._payload is None:
            self._payload = strict_json_loads(cast(str, self._text))  # held as text until now
        return self._payload

    def named_artifact(self) -> Any:
        """The artifact an evidence payload names, read from its text without decoding it where the layout allows."""
        return self.payload["artifact"] if self._text is None else artifact_of(self._text)

    @property
    def recorded_at(self) -> str:
        """UTC time in the hash chain's text form (SQLite hands back naive text, Postgres aware times)."""
        return chain_time(self._recorded_at)


@lru_cache(maxsize=4096)
def chain_time(recorded_at: Any) -> str:
    """A stored time as the driver returns it -> the hash chain's text form.

    A pure function of the stored value, kept for the last few thousand
    values: the events of one append share their time, and the fold asks for
    the time of several of them (each kept evidence item, each verdict).
    """
    moment = recorded_at
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return timestamp_text(moment)


def _decoded(position: int, event_id: str, stream: str, type_: str, recorded_at: Any,
             payload: dict[str, Any]) -> LogEvent:
    if type_ in EVIDENCE_KIND_BY_TYPE:
        return LogEvent(position, event_id, stream, type_, payload.get("payload_sha256"), payload.get("identity"),
                        recorded_at, None, payload)
    return LogEvent(position, event_id, stream, type_, None, None, recorded_at, None, payload)


SCOPE_KEY = '"payload_sha256":'
SCOPE_NEXT = ',"run":'
IDENTITY_KEY = ',"identity":'
IDENTITY_NEXT = ',"item":'
IDENTITY_NAME = IDENTITY_KEY[1:]
DIGEST_LENGTH = 64


def scope_of(text: str) -> str | None:
    """The top-level payload_sha256 of an evidence payload (every evidence schema requires the key), decoding as
    little as possible: the shortcut answers only when the key occurs once in the whole text."""
    at = text.rfind(SCOPE_KEY)
    # A text holding the key twice (a nested one, or a repeat the store never writes but a log written by
    # other means can hold) is decoded, so the shortcut reads what a decode reads.
    if at >= 0 and text.find(SCOPE_KEY) == at:
        start = at + len(SCOPE_KEY)
        if text.startswith('"', start):
            end = text.find('"', start + 1)
            value = text[start + 1:end]
            # Without a backslash the JSON string's text is its value (no escapes to undo).
            if end > start and "\\" not in value and text.startswith(SCOPE_NEXT, end + 1):
                return value
        elif text.startswith("null" + SCOPE_NEXT, start):
            return None
    return strict_json_loads(text).get("payload_sha256")


def identity_of(text: str) -> str | None:
    """The top-level identity of a canonical evidence payload (None when it has none), decoding as little as possible.

    The shortcut answers only when the key occurs at most once in the whole
    text, so a text holding it twice (never written by the store, possible in
    a log written by other means) is decoded and reads as a decode reads.
    """
    second_key = text.find(',"')
    if text.startswith('{"artifact":"') and second_key > 0:
        if text.startswith(IDENTITY_NEXT, second_key):
            if IDENTITY_NAME not in text:
                return None  # recorded before identities were
        elif text.startswith(IDENTITY_KEY, second_key):
            start = second_key + len(IDENTITY_KEY)
            if text.find(IDENTITY_NAME, start) < 0:
                if text.startswith("null" + IDENTITY_NEXT, start):
                    return None
                end = start + DIGEST_LENGTH + 1
                value = text[start + 1:end]
                if text.startswith('"', start) and text.startswith('"' + IDENTITY_NEXT, end) \
                        and '"' not in value and "\\" not in value:
                    return value
    return strict_json_loads(text).get("identity")


ARTIFACT_KEY = '"artifact":'
ARTIFACT_OPENING = '{' + ARTIFACT_KEY + '"'


def artifact_of(text: str) -> Any:
    """The top-level `artifact` an evidence payload names, decoding as little as possible.

    The canonical text begins `{"artifact":"NAME",` (keys sorted): the first
    `,"` ends the name, since a quote inside a JSON string is escaped. The
    shortcut answers only for a name without escapes and a key that occurs
    once in the whole text; any other text is decoded, so the shortcut reads
    what a decode reads (a payload without the key raises KeyError, one that
    is not an object TypeError, which the fold reports as malformed).
    """
    end = text.find(',"')
    if text.startswith(ARTIFACT_OPENING) and end > len(ARTIFACT_OPENING) and text[end - 1] == '"' \
            and text.find(ARTIFACT_KEY, len(ARTIFACT_OPENING)) < 0:
        value = text[len(ARTIFACT_OPENING):end - 1]
        if "\\" not in value:
            return value
    return strict_json_loads(text)["artifact"]


def _upcast(row: tuple) -> LogEvent:
    """An event stored under an older (or unknown) schema: upcast and validate it."""
    from registry.events.types import read_payload  # pydantic only for the rare event that needs it

    position, event_id, stream, type_, schema_version, text, recorded_at = row
    try:
        payload = read_payload(type_, schema_version, strict_json_loads(text)).model_dump(mode="python")
    except StoreError as exc:
        raise StoreError(f"event at position {position} cannot be read: {exc}") from None
    return _decoded(position, event_id, stream, type_, recorded_at, payload)


def row_payload(row: LogRow) -> dict[str, Any]:
    """A row's payload as the fold reads it: decoded, or upcast and validated when stored under an older schema."""
    if CURRENT_SCHEMA.get(row[3]) != row[4]:
        return _upcast(row).payload
    return strict_json_loads(row[5])


def read_log(source: EventStore | Engine, *, after: int, up_to: int, stream: str | None = None,
             page: int = PAGE) -> Iterator[LogEvent]:
    """Events with after < position <= up_to (of one stream if given), in position order.

    Read through the store (`source`, or a store opened on the engine given)
    in pages by position, so memory stays flat however long the log is.
    """
    store = source if isinstance(source, EventStore) else EventStore(source)
    current = CURRENT_SCHEMA
    evidence = EVIDENCE_KIND_BY_TYPE
    event = LogEvent
    for rows in store.log_pages(after=after, up_to=up_to, stream=stream, page=page):
        for row in rows:
            position, event_id, stream_name, type_, schema_version, text, recorded_at = row
            if current.get(type_) != schema_version:
                yield _upcast(row)
            elif type_ in evidence:
                yield event(position, event_id, stream_name, type_, scope_of(text), identity_of(text),
                            recorded_at, text, None)
            else:
                yield event(position, event_id, stream_name, type_, None, None, recorded_at, text, None)
