"""The hash chain's canonical row form, held to the standard encoder by property."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from registry.events.chain import hashed_body, timestamp_text

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
