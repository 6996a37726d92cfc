"""A parity leaf: one compared tensor, and the contradictions a leaf may not hold.

A leaf names each side's layout (two-sided) or, as written before two-sided
leaves, one dtype and shape for both (one-sided). The gate holds one-sided
leaves: they cannot show that the candidate's layout equals the reference's
(docs/gate.md, "Parity decision table"). A leaf whose own fields contradict
each other (byte-equal with an error, more elements outside tolerance than
the tensor has) describes no comparison that happened, and is refused.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from registry.formats.dtypes import is_known_dtype, normalize_dtype
from registry.formats.evidence.errors import KIT, EvidenceError, only_known


def is_two_sided(leaf: Mapping[str, Any]) -> bool:
    """Whether a validated leaf records the reference's and the candidate's dtype, shape and strides."""
    return "reference_dtype" in leaf


def layout_differences(leaf: Mapping[str, Any]) -> list[str]:
    """What differs between the two sides of a two-sided leaf: dtype, shape, strides (one phrase each)."""
    differences = []
    for field, differ, canonical in (("dtype", "differs", normalize_dtype), ("shape", "differs", list),
                                     ("strides", "differ", list)):
        reference, candidate = leaf[f"reference_{field}"], leaf[f"candidate_{field}"]
        if canonical(reference) != canonical(candidate):
            differences.append(f"{field} {differ}: reference {_show(reference)}, candidate {_show(candidate)}")
    return differences


def leaf(value: Any, path: str) -> dict[str, Any]:
    """One leaf checked against the two-sided or the one-sided schema, whichever its fields name."""
    raw = KIT.mapping(value, path)
    two_sided = any(name in raw for name in _TWO_SIDED)
    spec = _TWO_SIDED_LEAF if two_sided else _ONE_SIDED_LEAF
    if two_sided:
        for name in _ONE_SIDED:
            if name in raw:
                raise EvidenceError(
                    f"{path}.{name}: a leaf that records reference_* and candidate_* fields "
                    f"records both sides; {name} belongs to the older one-sided leaf"
                )
    only_known(raw, tuple(spec), path)
    checked = KIT.fields(raw, spec, path)
    _check_consistency(checked, path)
    return checked


def _check_consistency(leaf: dict[str, Any], path: str) -> None:
    """Refuse a leaf whose own fields contradict each other: no such comparison happened."""
    if two_sided := is_two_sided(leaf):
        for side in ("reference", "candidate"):
            shape, strides = leaf[f"{side}_shape"], leaf[f"{side}_strides"]
            if len(strides) != len(shape):
                raise EvidenceError(f"{path}.{side}_strides: {len(strides)} strides for {len(shape)} dimensions")
    outside, tolerance, error = leaf.get("outside_tolerance"), leaf.get("tolerance"), leaf.get("max_abs_error")
    if outside is not None:
        if tolerance is None:
            raise EvidenceError(f"{path}.outside_tolerance: counted under no recorded tolerance")
        elements = math.prod(leaf["reference_shape"] if two_sided else leaf["shape"])
        if outside > elements:
            raise EvidenceError(f"{path}.outside_tolerance: {outside} exceeds the reference's {elements} elements")
        if outside and error is not None and error <= tolerance["atol"]:
            raise EvidenceError(
                f"{path}.outside_tolerance: {outside} element(s) outside atol {tolerance['atol']} "
                f"but max_abs_error {error} is within it"
            )
    for flag in ("nan", "inf"):
        reference = leaf.get(f"reference_has_{flag}")
        if leaf.get("nonfinite_mismatch") is False and reference is not None and reference != leaf[f"has_{flag}"]:
            raise EvidenceError(
                f"{path}.nonfinite_mismatch: false but has_{flag} and reference_has_{flag} differ"
            )
    if not leaf["byte_equal"]:
        return
    if two_sided and (differences := layout_differences(leaf)):
        raise EvidenceError(f"{path}.byte_equal: true but {differences[0]}")
    if leaf.get("strides_equal") is False:
        raise EvidenceError(f"{path}.strides_equal: false but byte_equal is true")
    if error:
        raise EvidenceError(f"{path}.max_abs_error: {error} but byte_equal is true")
    if leaf.get("nonfinite_mismatch"):
        raise EvidenceError(f"{path}.nonfinite_mismatch: true but byte_equal is true")
    if outside:
        raise EvidenceError(f"{path}.outside_tolerance: {outside} but byte_equal is true")
    for flag in ("nan", "inf"):
        reference = leaf.get(f"reference_has_{flag}")
        if reference is not None and reference != leaf[f"has_{flag}"]:
            raise EvidenceError(f"{path}.reference_has_{flag}: differs from has_{flag} but byte_equal is true")


def _dtype(value: Any, path: str) -> str:
    name = KIT.text(value, path)
    if not is_known_dtype(name):
        raise EvidenceError(f"{path}: {name!r} is not a dtype (e.g. bfloat16, float32, int64, bool)")
    return name


def _tolerance(value: Any, path: str) -> dict[str, float | None]:
    raw = KIT.mapping(value, path)
    only_known(raw, ("atol", "rtol", "max_abs"), path)
    nonneg = KIT.bounded(0.0, None, "tolerance")
    tol = {name: nonneg(KIT.required(raw, name, path), f"{path}.{name}") for name in ("atol", "rtol")}
    if raw.get("max_abs") is not None:
        tol["max_abs"] = nonneg(raw["max_abs"], f"{path}.max_abs")
    return tol


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


_nonneg_error = KIT.nullable(KIT.bounded(0.0, None, "error"))
_nullable_flag = KIT.nullable(KIT.flag)
_TWO_SIDED = {
    "reference_dtype": (True, _dtype),
    "candidate_dtype": (True, _dtype),
    "reference_shape": (True, KIT.list_of(KIT.count, allow_empty=True)),
    "candidate_shape": (True, KIT.list_of(KIT.count, allow_empty=True)),
    "reference_strides": (True, KIT.list_of(KIT.integer, allow_empty=True)),
    "candidate_strides": (True, KIT.list_of(KIT.integer, allow_empty=True)),
}
_ONE_SIDED = {
    "dtype": (True, _dtype),
    "shape": (True, KIT.list_of(KIT.count, allow_empty=True)),
    "strides_equal": (False, _nullable_flag),
}
_COMPARISON = {
    "byte_equal": (True, KIT.flag),
    "max_abs_error": (False, _nonneg_error),
    "max_rel_error": (False, _nonneg_error),
    "has_nan": (True, KIT.flag),
    "has_inf": (True, KIT.flag),
    "reference_has_nan": (False, _nullable_flag),
    "reference_has_inf": (False, _nullable_flag),
    "nonfinite_mismatch": (False, _nullable_flag),
    "tolerance": (False, KIT.nullable(_tolerance)),
    "outside_tolerance": (False, KIT.nullable(KIT.count)),
}
_TWO_SIDED_LEAF = {"name": (True, KIT.text), **_TWO_SIDED, **_COMPARISON}
_ONE_SIDED_LEAF = {"name": (True, KIT.text), **_ONE_SIDED, **_COMPARISON}
