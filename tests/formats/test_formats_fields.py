"""The one field kit (registry.formats.fields): exact types or a one-line refusal in the bound error class.

Every parser binds the kit to its own error (contracts, evidence documents,
bundle manifests, the MotionKernel import), so these properties hold for all
of them: a checker returns exactly what the field declares or raises that
error with one line naming the path; it never coerces a value and never
lets another exception (an overflow, a type error) escape.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.contracts import ContractError
from registry.evidence.motionkernel import MotionKernelError
from registry.formats.evidence.errors import EvidenceError
from registry.formats.fields import ARCH, FieldKit, describe, is_count, is_finite_number, join


class Refused(ValueError):
    pass


KIT = FieldKit(Refused)
# Anything a JSON or YAML parser can hand over, and what Python adds (huge ints, NaN, infinities, surrogates).
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**308, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(), st.text(alphabet=st.characters(min_codepoint=0xD800,
                                                                                             max_codepoint=0xDFFF)),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                      max_leaves=8)


def refusal(check, value, path="a.b"):
    with pytest.raises(Refused) as caught:
        check(value, path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


@given(VALUES)
def test_a_number_is_a_finite_float_or_refused_in_one_line(value):
    try:
        result = KIT.number(value, "x")
    except Refused as exc:
        assert str(exc).startswith("x: ") and "\n" not in str(exc)
        assert not is_finite_number(value)
        return
    assert type(result) is float and math.isfinite(result)
    assert is_finite_number(value) and result == float(value)


@given(VALUES)
def test_a_count_is_an_int_at_least_zero_never_a_bool(value):
    try:
        result = KIT.count(value, "x")
    except Refused:
        assert not is_count(value)
        return
    assert result is value and is_count(value)


@given(VALUES)
def test_text_is_a_string_with_something_besides_whitespace(value):
    try:
        result = KIT.text(value, "x")
    except Refused as exc:
        assert not (isinstance(value, str) and value.strip())
        assert len(str(exc)) < 200  # a hostile value is quoted short
        return
    assert result is value


@given(VALUES)
def test_a_flag_is_a_bool_and_nothing_else(value):
    try:
        assert KIT.flag(value, "x") is value
    except Refused:
        assert not isinstance(value, bool)
        return
    assert isinstance(value, bool)


@pytest.mark.parametrize("check, value, reason", [
    (KIT.number, True, "expected a number, got bool True"),
    (KIT.number, "1.0", "expected a number, got str '1.0'"),
    (KIT.number, 10**400, "an integer too large to be a finite number"),
    (KIT.number, math.inf, "inf is not a finite number"),
    (KIT.integer, 2.0, "expected an integer, got float 2.0"),
    (KIT.count, -1, "-1 is negative"),
    (KIT.text, "  ", "expected a non-empty string, got str '  '"),
    (KIT.text, None, "expected a non-empty string, got null"),
    (KIT.note, 3, "expected a string, got int 3"),
    (KIT.flag, 1, "expected true or false, got int 1"),
    (KIT.mapping, [1], "expected an object, got list"),
    (KIT.mapping, {1: 2}, "keys must be strings, got int 1"),
    (KIT.name, "a b", "contains whitespace"),
    (KIT.sha256, "A" * 64, "expected 64 lowercase hex digits (a sha256)"),
    (KIT.sha256, "ab", "got str 'ab'"),
    (KIT.arch, "hopper", "'hopper' is not a device architecture such as sm90, sm100 or cpu"),
    (KIT.one_of(("x", "y")), "z", "'z' is not one of x, y"),
    (KIT.bounded(0.0, 1.0, "share"), 1.5, "1.5 is outside the share range [0, 1]"),
    (KIT.bounded(0.0, None, "error"), -0.5, "-0.5 is outside the error range [0, inf)"),
    (KIT.list_of(KIT.count), [], "empty list"),
    (KIT.list_of(KIT.count), (1,), "expected a list, got tuple"),
])
def test_each_refusal_names_the_path_and_the_problem(check, value, reason):
    assert reason in refusal(check, value)


def test_a_long_hostile_value_is_quoted_short():
    message = refusal(KIT.one_of(("a",)), "x" * 10_000)
    assert len(message) < 120 and message.endswith("… is not one of a")
    assert describe("y" * 1000) == "a string of 1000 characters" and describe("y" * 50).startswith("str 'yyy")


def test_list_elements_are_checked_with_their_index_in_the_path():
    assert KIT.list_of(KIT.count)([0, 3], "runs") == [0, 3]
    with pytest.raises(Refused, match=r"^runs\[1\]: -3 is negative$"):
        KIT.list_of(KIT.count)([0, -3], "runs")


def test_nullable_passes_null_and_checks_anything_else():
    check = KIT.nullable(KIT.count)
    assert check(None, "x") is None and check(2, "x") == 2
    refusal(check, -1)


def test_a_cpu_is_refused_where_a_gpu_is_asked_for():
    assert KIT.arch("cpu", "arch") == "cpu" and KIT.arch("sm100a", "arch", allow_cpu=False) == "sm100a"
    assert refusal(lambda v, p: KIT.arch(v, p, allow_cpu=False), "cpu") == \
        "a.b: 'cpu' is not a GPU architecture such as sm90 or sm100"
    assert ARCH.fullmatch("sm90") and not ARCH.fullmatch("sm9")


def test_fields_keeps_omitted_optional_fields_omitted_and_requires_the_rest():
    spec = {"a": (True, KIT.count), "b": (False, KIT.nullable(KIT.text))}
    assert KIT.fields({"a": 1}, spec, "item") == {"a": 1}
    assert KIT.fields({"a": 1, "b": None}, spec, "item") == {"a": 1, "b": None}
    with pytest.raises(Refused, match=r"^item\.a: required$"):
        KIT.fields({"b": "x"}, spec, "item")


def test_only_known_names_the_first_unknown_field_and_lets_a_parser_explain_it():
    with pytest.raises(Refused, match=r"^doc\.extra: unknown field \(allowed: a, b\)$"):
        KIT.only_known({"a": 1, "extra": 2}, ("b", "a"), "doc")
    with pytest.raises(Refused, match=r"^speedup: a summary$"):
        KIT.only_known({"speedup": 2}, ("a",), "", explain=lambda key: "a summary")


def test_required_and_optional_treat_null_as_absent():
    assert KIT.required({"k": 0}, "k", "") == 0 and KIT.optional({"k": None}, "k", "", KIT.count) is None
    with pytest.raises(Refused, match=r"^block\.k: required$"):
        KIT.required({"k": None}, "k", "block")
    assert join("", "k") == "k" and join("a", "k") == "a.k"


@pytest.mark.parametrize("error", [ContractError, EvidenceError, MotionKernelError])
def test_every_parser_s_error_class_can_be_bound(error):
    with pytest.raises(error, match="^x: expected an integer"):
        FieldKit(error).integer("1", "x")


def test_the_manifest_calls_a_block_a_mapping_and_explains_numbers_yaml_read_as_text():
    from registry.contracts import fields as f

    with pytest.raises(ContractError, match="^speed: expected a mapping, got list$"):
        f.block([], "speed")
    with pytest.raises(ContractError, match="it is quoted in the manifest"):
        f.number("1.5", "speed.min_speedup")
