"""The store's own checks that no backend changes: what an append refuses before it reaches a database,
and the event id scheme. The store's contract on each backend is the conformance suite
(tests/support/store_conformance.py, run by tests/events/test_store_sqlite.py and tests/events/test_store_postgres.py)."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.events.database import make_engine, upgrade
from registry.events.errors import StoreError
from registry.events.store import EventStore, NewEvent, position_of_event_id, positional_event_id


# -- text that is not Unicode: refused in one line, nothing written ------------------------

# Text, or text around a lone surrogate (JSON's \\udXXX escapes can spell one; st.text never draws them).
any_text = st.text(max_size=6) | st.tuples(st.text(max_size=3), st.integers(0xD800, 0xDFFF).map(chr),
                                           st.text(max_size=3)).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)


def _holds_surrogate(value) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(_holds_surrogate(v) for v in value)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(contract=st.dictionaries(any_text, json_values, max_size=3), actor=st.sampled_from(["t", "t\udcff"]))
def test_any_text_is_stored_or_refused_in_one_line_with_nothing_written(sqlite_url, contract, actor):
    """Text with a lone surrogate anywhere (a key, a nested value, the actor) is refused in one line that can be
    printed, with nothing written; any other text is stored and reads back as it was."""
    engine = make_engine(sqlite_url)
    upgrade(engine)
    store = EventStore(engine)
    head = store.head_position()
    event = NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                          "contract": contract})
    if _holds_surrogate(contract) or _holds_surrogate(actor):
        with pytest.raises(StoreError, match="lone surrogate") as refused:
            store.append("s:w", [event], actor=actor)
        message = str(refused.value)
        assert "\n" not in message and message.encode("utf-8")
        assert store.head_position() == head
    else:
        [position] = store.append("s:w", [event], actor=actor)
        assert store.read_all(after_position=position - 1)[0].payload["contract"] == contract
    store.close()
    engine.dispose()


# -- event ids ------------------------------------------------------------------------

@given(st.integers(1, 2**48 - 1))
def test_positional_ids_are_rfc9562_version_8(position):
    event_id = positional_event_id(position)
    parsed = uuid.UUID(event_id)
    assert str(parsed) == event_id
    assert parsed.version == 8 and parsed.variant == uuid.RFC_4122
    assert position_of_event_id(event_id) == position
    assert positional_event_id(position) != event_id  # the free bits are random


def test_a_payload_that_holds_itself_is_refused_in_one_line(sqlite_url):
    engine = make_engine(sqlite_url)
    upgrade(engine)
    store = EventStore(engine)
    looped: list = []
    looped.append(looped)
    event = NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                          "contract": {"steps": looped}})
    with pytest.raises(StoreError, match="nested too deeply") as refused:
        store.append("s:w", [event], actor="t")
    assert "\n" not in str(refused.value)
    assert store.head_position() == 0
    engine.dispose()
