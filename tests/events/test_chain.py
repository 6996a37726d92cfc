"""The hash chain's canonical row form, held to the standard encoder by property."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from registry.events.chain import hashed_body, link, link_batch, timestamp_text, unplaced_bodies

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(
    position=st.integers(1, 2**62), version=st.integers(1, 2**31), schema_version=st.integers(0, 99),
    event_id=texts, stream=texts, type=texts, payload=texts, actor=texts,
    idempotency_key=st.one_of(st.none(), texts),
    recorded_at=st.datetimes(timezones=st.just(timezone.utc)).map(timestamp_text),
)
def test_hashed_body_is_the_canonical_json_of_the_fields(**fields):
    expected = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert hashed_body(**fields) == expected


def test_naive_times_are_read_as_utc():
    naive = datetime(2026, 11, 30, 6, 0, 0, 123456)
    assert timestamp_text(naive) == "2026-11-30T06:00:00.123456+00:00"


@given(
    prev_hash=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64), actor=texts, stream=texts,
    events=st.lists(st.tuples(texts, st.integers(0, 99), texts, texts), min_size=1, max_size=4),
    first_position=st.integers(1, 2**40), first_version=st.integers(1, 2**20),
    recorded_at=st.datetimes(timezones=st.just(timezone.utc)).map(timestamp_text),
    idempotency_key=st.one_of(st.none(), texts),
)
def test_a_batch_links_exactly_as_its_events_do_one_by_one(prev_hash, actor, stream, events, first_position,
                                                          first_version, recorded_at, idempotency_key):
    """The append path's batch form of the chain (quoting shared parts once) against the row form `verify` reads."""
    prepared = [(type_, schema_version, payload) for type_, schema_version, payload, _ in events]
    event_ids = [event_id for *_, event_id in events]
    hashes = link_batch(prev_hash, unplaced_bodies(actor, stream, prepared), first_position=first_position,
                        first_version=first_version, event_ids=event_ids, recorded_at=recorded_at,
                        idempotency_key=idempotency_key)
    expected, previous = [], prev_hash
    for index, ((type_, schema_version, payload), event_id) in enumerate(zip(prepared, event_ids)):
        previous = link(previous, hashed_body(
            position=first_position + index, event_id=event_id, stream=stream, version=first_version + index,
            type=type_, schema_version=schema_version, payload=payload, recorded_at=recorded_at, actor=actor,
            idempotency_key=idempotency_key if index == 0 else None))
        expected.append(previous)
    assert hashes == expected
