"""The plain payload path (registry/events/plain_payloads.py) held to the pydantic models on hostile payloads.

An append takes a payload through its compiled plain form when that accepts
it, else through the model. Whatever the payload, the outcome must be the
model's: the same canonical text, or the same refusal in the same words.
"""
from __future__ import annotations

import math
from typing import Any, Literal, get_args, get_origin

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import field_validator, Field

from registry.events import types
from registry.events.canonical import CanonicalError, canonical_json
from registry.events.errors import PayloadError, UnknownEventType
from registry.events.plain_payloads import compile_plain
from registry.events.store import NewEvent, _prepare_batch

BENCH_PAYLOAD = {"artifact": "wan-mln-v3", "payload_sha256": "ab" * 32, "run": None,
                 "item": {"kind": "execution", "candidate_calls": 6143, "fallbacks": 0}}
MISSING = object()
COMPILED = sorted(event_type for event_type in types.PAYLOAD_TYPES if types.PLAIN_PAYLOADS[event_type] is not None)


class TaggedStr(str):
    pass


class TaggedInt(int):
    pass


class TaggedDict(dict):
    pass


class Impostor(str):
    """A key that says it equals every string and hashes as the field name it imitates."""

    def __new__(cls, text: str, imitated: str):
        key = super().__new__(cls, text)
        key.imitated = imitated
        return key

    def __eq__(self, other):
        return True

    def __hash__(self):
        return hash(self.imitated)


def model_outcome(event_type: str, data: Any) -> tuple:
    """What the append did before the plain path: the model, then canonical JSON of its fields."""
    try:
        typed = types.validate_payload(event_type, data)
        return "ok", typed.schema_version, canonical_json(typed.__dict__)
    except CanonicalError as exc:
        return "refused", PayloadError, f"invalid {event_type} payload: {exc}"
    except (PayloadError, UnknownEventType) as exc:
        return "refused", type(exc), str(exc)


def append_outcome(event_type: str, data: Any) -> tuple:
    try:
        [(_, schema_version, text)] = _prepare_batch([NewEvent(event_type, data)])
        return "ok", schema_version, text
    except (PayloadError, UnknownEventType) as exc:
        return "refused", type(exc), str(exc)


surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = st.one_of(st.text(max_size=12), st.text(alphabet=st.one_of(st.characters(), surrogates), max_size=6),
                  st.builds(TaggedStr, st.text(max_size=6)))
hexes = st.one_of(
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    st.text(alphabet="0123456789abcdef", min_size=63, max_size=65),
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda text: text + "\n"),
    st.text(alphabet="0123456789ABCDEF", min_size=64, max_size=64),
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(TaggedStr),
)
numbers = st.one_of(st.integers(-3, 3), st.integers(), st.sampled_from([2**63, -(2**63) - 1]),
                    st.just(5000).map(lambda digits: 10**digits),  # past what Python writes as text
                    st.booleans(), st.floats(), st.sampled_from([math.nan, math.inf, -0.0, 1.0]),
                    st.builds(TaggedInt, st.integers(-3, 3)))
scalars = st.one_of(st.none(), numbers, texts, st.binary(max_size=4))
json_keys = st.one_of(st.text(max_size=6), st.text(alphabet=st.one_of(st.characters(), surrogates), max_size=3),
                      st.builds(TaggedStr, st.text(max_size=4)))
any_keys = st.one_of(json_keys, st.integers(-2, 2), st.none(), st.booleans(), st.floats(allow_nan=False))
nested = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner),
                                     st.dictionaries(json_keys, inner, max_size=3)),
    max_leaves=8)
objects = st.one_of(st.dictionaries(json_keys, nested, max_size=4), st.dictionaries(any_keys, nested, max_size=3),
                    st.dictionaries(json_keys, nested, max_size=3).map(TaggedDict), st.just({}),
                    st.lists(nested, max_size=2))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
# Near the limits the models use: lengths 0, 1 and 63 to 65; bounds 0 and 1.
boundary = st.one_of(st.just(""), st.text(min_size=1, max_size=2), st.text(min_size=63, max_size=65), hexes,
                     st.integers(-1, 2))


def valid_values(info) -> st.SearchStrategy:
    """Values the model itself should take for a field, read from its annotation and constraints."""
    annotation = info.annotation
    nullable = type(None) in get_args(annotation)
    if nullable:
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    limits = {type(item).__name__: item for item in info.metadata}
    if annotation is str:
        if getattr(limits.get("_PydanticGeneralMetadata"), "pattern", None):
            own = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
        else:
            low = limits["MinLen"].min_length if "MinLen" in limits else 0
            own = st.text(min_size=low, max_size=limits["MaxLen"].max_length if "MaxLen" in limits else low + 8)
    elif annotation is int:
        own = st.integers(min_value=limits["Ge"].ge if "Ge" in limits else None)
    elif get_origin(annotation) is Literal:
        own = st.sampled_from(get_args(annotation))
    else:
        own = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
    return st.one_of(own, st.none()) if nullable else own


def field_value(draw, info) -> Any:
    """A value for one field: mostly one the model takes, sometimes one near its limits, a hostile one, or none."""
    roll = draw(st.integers(0, 99))
    if roll < 2:
        return MISSING
    if roll < 4:
        return None
    if roll < 7:
        return draw(boundary)
    if roll < 10:
        return draw(st.one_of(scalars, objects, numbers, texts, st.sampled_from(["approve", "APPROVE"])))
    return draw(valid_values(info))


@st.composite
def payloads(draw):
    event_type = draw(st.sampled_from(COMPILED))
    data: dict[Any, Any] = {}
    for name, info in types.PAYLOAD_TYPES[event_type].model_fields.items():
        value = field_value(draw, info)
        if value is not MISSING and (value is not None or info.is_required() or draw(st.booleans())):
            key = draw(st.sampled_from([name] * 48 + [TaggedStr(name), Impostor("zzz", name)]))
            data[key] = value
    if draw(st.integers(0, 9)) == 0:
        extra = draw(st.dictionaries(any_keys, scalars, min_size=1, max_size=2))
        data.update({key: value for key, value in extra.items() if key not in data})
    if draw(st.integers(0, 29)) == 0:
        return event_type, draw(st.one_of(st.builds(TaggedDict, st.just(data)), st.lists(scalars, max_size=2),
                                          scalars))
    return event_type, data


# 1,000 generated payloads (2,000 before: 14 s of the suite for little more reach); the rarest corners the
# generator reaches (a wrapped dict as the payload, a number past what Python writes as text, a key that equals
# every string, a surrogate, a NaN) are also given outright, so each run holds them whatever it draws.
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads())
@example(("ExecutionObserved", TaggedDict(BENCH_PAYLOAD)))
@example(("ExecutionObserved", dict(BENCH_PAYLOAD, run=10**5000)))
@example(("ExecutionObserved", {**{key: value for key, value in BENCH_PAYLOAD.items() if key != "artifact"},
                                Impostor("zzz", "artifact"): "wan-mln-v3"}))
@example(("ExecutionObserved", dict(BENCH_PAYLOAD, artifact="wan-\ud800")))
@example(("ExecutionObserved", dict(BENCH_PAYLOAD, item={"kind": "execution", "x": math.nan})))
def test_an_append_takes_every_payload_as_its_model_does(case):
    event_type, data = case
    plain_text = types.PLAIN_PAYLOADS[event_type].encode(data)
    event("plain path accepts" if plain_text is not None else "plain path defers to the model")
    expected = model_outcome(event_type, data)
    if plain_text is not None:
        assert expected == ("ok", types.PLAIN_PAYLOADS[event_type].schema_version, plain_text)
    assert append_outcome(event_type, data) == expected


@pytest.mark.parametrize("event_type", COMPILED)
def test_a_valid_payload_of_every_compiled_type_takes_the_plain_path(event_type):
    """The property above is not vacuous: a valid payload of each compiled type is the plain path's."""
    cls = types.PAYLOAD_TYPES[event_type]
    data = {}
    for name, info in cls.model_fields.items():
        if not info.is_required():
            continue
        field = next(field for field in types.PLAIN_PAYLOADS[event_type].fields if field.name == name)
        data[name] = {"str": "a" * 64, "int": 1, "dict": {"k": [1, 2.5, None]},
                      "literal": min(field.members or {""})}[field.kind]
    text = types.PLAIN_PAYLOADS[event_type].encode(data)
    assert text is not None
    assert model_outcome(event_type, data) == ("ok", cls.schema_version, text)


def test_the_benchmark_payload_takes_the_plain_path():
    assert types.PLAIN_PAYLOADS["ExecutionObserved"].encode(BENCH_PAYLOAD) == \
        model_outcome("ExecutionObserved", BENCH_PAYLOAD)[2]


def test_a_payload_too_large_for_one_encoder_chunk_is_encoded_whole():
    """The C encoder hands back a large value's text in several pieces; all of them are kept."""
    data = dict(BENCH_PAYLOAD, item={f"k{index}": index for index in range(120_000)})
    text = types.PLAIN_PAYLOADS["ExecutionObserved"].encode(data)
    assert text == model_outcome("ExecutionObserved", data)[2]


def test_models_with_anything_but_plain_fields_are_not_compiled():
    class WithValidator(types.EventPayload):
        name: str

        @field_validator("name")
        @classmethod
        def lower(cls, value: str) -> str:
            return value.lower()

    class WithDefault(types.EventPayload):
        name: str = "x"

    class WithAlias(types.EventPayload):
        name: str = Field(alias="Name")

    class WithPattern(types.EventPayload):
        name: str = Field(pattern="^a$")

    class WithList(types.EventPayload):
        values: list[float]

    class Lenient(types.EventPayload):
        model_config = dict(types.EventPayload.model_config, strict=False)
        name: str

    for model in (WithValidator, WithDefault, WithAlias, WithPattern, WithList, Lenient):
        assert compile_plain(model) is None, model.__name__
    # Lists of floats (the pairs), a float statistic and lists of profiles, and a defaulted, patterned field
    # (a session's arch): the model validates them.
    # A token's scopes are a list and its workload glob is defaulted; a revocation's key id is patterned; a
    # webhook's id is patterned and its events a list, an attempt's status and error defaulted.
    assert COMPILED == sorted(set(types.PAYLOAD_TYPES) - {"BenchmarkPairsRecorded", "BenchmarkSessionOpened",
                                                          "PairsRemeasured", "RegressionDetected",
                                                          "TokenIssued", "TokenRevoked", "HookAdded",
                                                          "HookRemoved", "HookDeliveryAttempted"})
    assert types.PLAIN_PAYLOADS["NoSuchEvent"] is None and "NoSuchEvent" not in types.PLAIN_PAYLOADS


def test_the_written_forms_are_the_models_compiled_forms():
    """plain_forms.json, what an append reads instead of the models, is what `compile_plain` makes of them now:
    a changed model with a stale written form fails here (`python -m registry.events.types` rewrites it)."""
    from registry.events import plain_payloads

    written = plain_payloads.FORMS_FILE.read_text(encoding="utf-8")
    assert written == plain_payloads.written_forms(types.PAYLOAD_TYPES)
    for event_type in types.PAYLOAD_TYPES:
        compiled, stored = types.PLAIN_PAYLOADS[event_type], plain_payloads.WRITTEN_FORMS[event_type]
        assert (compiled is None) == (stored is None), event_type
        if compiled is not None:
            assert (stored.schema_version, stored.source) == (compiled.schema_version, compiled.source), event_type
