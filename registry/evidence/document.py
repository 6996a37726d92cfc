"""Evidence documents (format `registry.evidence/1`): validation and derived statistics.

Evidence is raw measurement (docs/architecture.md, "Events"). This module refuses any
document that is malformed, non-finite, self-contradictory or that carries a
client-computed summary, and attaches to each item a `derived` dict the
registry computed itself. The gate re-runs `parse_item` on every payload it
reads, so a payload stored by any other path meets the same checks.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from registry.contracts.names import name_refusal
from registry.contracts.parity import is_known_dtype, normalize_dtype
from registry.documents import MAX_EVIDENCE_BYTES, DocumentError, load_json, read_document
from registry.errors import UserError
from registry.evidence.ranks import MAX_RUNS_PER_ARM
from registry.evidence.stats import summarize_benchmark

FORMAT = "registry.evidence/1"
KINDS = ("execution", "benchmark", "parity", "perceptual", "failure")
TIMERS = ("cuda_event", "perf_counter", "interpreter", "emulator")
ORDERS = ("BC", "CB")
METRICS = ("ssim", "lpips", "vbench")
ARCH = re.compile(r"sm[0-9]{2,3}[a-z]?|cpu")
# Names of statistics the registry derives itself; a client sending one is refused by name.
SUMMARY_FIELDS = frozenset({
    "derived", "summary", "speedup", "speedup_ci", "ci", "median", "mean", "cv", "std",
    "ratios", "p_value", "pvalue", "wilcoxon_p", "interleaved", "runs_per_arm",
    "baseline_median", "candidate_median", "baseline_mean", "candidate_mean",
    "baseline_cv", "candidate_cv", "worst_ssim", "worst_lpips", "mean_ssim", "mean_lpips",
    "min_ssim", "max_lpips", "worst_ssim_frame", "worst_lpips_frame", "frame_count",
    "all_byte_equal", "worst_max_abs_error", "match", "passed", "ran",
})


class EvidenceError(UserError):
    """An evidence document or item the registry refuses; one line naming where and why."""


# Field name -> (required, checker(value, path) -> normalized value).
Spec = dict[str, tuple[bool, Callable[[Any, str], Any]]]


@dataclass(frozen=True)
class EvidenceDocument:
    artifact: str
    run: str | None
    items: list[dict[str, Any]]
    # The payload the items were measured on; the registry refuses it for any other.
    payload_sha256: str | None = None


def read_document_file(path: str | Path) -> str:
    """The text of an evidence document file: a regular UTF-8 file of at most MAX_EVIDENCE_BYTES."""
    return read_document(path, "evidence document", MAX_EVIDENCE_BYTES)


def parse_document_text(text: str) -> EvidenceDocument:
    """Strict JSON, then `parse_document`.

    Refused while parsing: the NaN/Infinity tokens, a key repeated in one
    object (JSON readers keep the last silently), integers past
    MAX_INTEGER_DIGITS, and (registry.documents.check_tree) nesting past
    MAX_DEPTH and strings holding a lone surrogate.
    """
    try:
        obj = load_json(text, "document")
    except DocumentError as exc:
        raise EvidenceError(str(exc)) from None
    return parse_document(obj)


def parse_document(obj: Any) -> EvidenceDocument:
    doc = _object(obj, "document")
    _only_known(doc, ("format", "artifact", "run", "payload_sha256", "evidence"), "document")
    if doc.get("format") != FORMAT:
        raise EvidenceError(f"format: expected {FORMAT!r}, got {doc.get('format')!r}")
    artifact = _name(_required(doc, "artifact", ""), "artifact")
    run = _optional(doc, "run", "", _name)
    payload_sha256 = _optional(doc, "payload_sha256", "", _sha256)
    items = _required(doc, "evidence", "")
    if not isinstance(items, list):
        raise EvidenceError(f"evidence: expected a list, got {_type(items)}")
    if not items:
        raise EvidenceError("evidence: empty list; a document must carry at least one item")
    return EvidenceDocument(
        artifact=artifact,
        run=run,
        items=[parse_item(item, f"evidence[{i}]") for i, item in enumerate(items)],
        payload_sha256=payload_sha256,
    )


def parse_item(obj: Any, where: str = "item") -> dict[str, Any]:
    """Validate one raw item and return it normalized, with a registry-computed `derived` dict."""
    raw = _object(obj, where)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise EvidenceError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    spec = _SPECS[kind]
    _only_known(raw, ("kind", *spec), where)
    item: dict[str, Any] = {"kind": kind, **_fields(raw, spec, where)}
    item["derived"] = _DERIVE[kind](item, where)
    return item


def _fields(raw: Mapping[str, Any], spec: Spec, where: str) -> dict[str, Any]:
    """Check each field of `spec` present in `raw`; an optional field may be omitted (or null, where
    its checker allows), and omitted stays omitted so a stored item reads back exactly as sent."""
    checked: dict[str, Any] = {}
    for name, (is_required, check) in spec.items():
        path = f"{where}.{name}"
        if name not in raw:
            if is_required:
                raise EvidenceError(f"{path}: required")
            continue
        checked[name] = check(raw[name], path)
    return checked


# ---- field checkers: (value, path) -> normalized value ----------------------------

def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise EvidenceError(f"{path}: expected a non-empty string, got {_type(value)}")
    return value


def _name(value: Any, path: str) -> str:
    """An id (artifact, run, frame set): the registry's one naming rule (registry.contracts.names)."""
    refusal = name_refusal(value)
    if refusal is not None:
        raise EvidenceError(f"{path}: {refusal}")
    return value


def _sha256(value: Any, path: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or set(value) - set("0123456789abcdef"):
        got = f"a string of {len(value)} characters" if isinstance(value, str) and len(value) > 80 else _type(value)
        raise EvidenceError(f"{path}: expected 64 lowercase hex digits (a sha256), got {got}")
    return value


def _note(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise EvidenceError(f"{path}: expected a string, got {_type(value)}")
    return value


def _arch(value: Any, path: str) -> str:
    """A device architecture: `sm` and the CUDA compute capability (sm90, sm100), or `cpu`."""
    text = _text(value, path)
    if not ARCH.fullmatch(text):
        raise EvidenceError(f"{path}: {text!r} is not a device architecture such as sm90, sm100 or cpu")
    return text


def _flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise EvidenceError(f"{path}: expected true or false, got {_type(value)}")
    return value


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EvidenceError(f"{path}: expected an integer, got {_type(value)}")
    if value < 0:
        raise EvidenceError(f"{path}: {value} is negative")
    return value


def _frame_count(value: Any, path: str) -> int:
    count = _count(value, path)
    if count == 0:
        raise EvidenceError(f"{path}: 0 frames")
    return count


def _integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EvidenceError(f"{path}: expected an integer, got {_type(value)}")
    return value


def _real(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EvidenceError(f"{path}: expected a number, got {_type(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range (about 1.8e308)
        raise EvidenceError(f"{path}: an integer too large to be a finite number") from None
    if not math.isfinite(number):
        raise EvidenceError(f"{path}: {value} is not a finite number")
    return number


def _bounded(low: float | None, high: float | None, what: str) -> Callable[[Any, str], float]:
    def check(value: Any, path: str) -> float:
        number = _real(value, path)
        if (low is not None and number < low) or (high is not None and number > high):
            raise EvidenceError(f"{path}: {number} is outside the {what} range {_range(low, high)}")
        return number
    return check


def _positive_time(value: Any, path: str) -> float:
    number = _real(value, path)
    if number <= 0:
        raise EvidenceError(f"{path}: {number} is not a positive time")
    return number


def _runs(value: Any, path: str) -> list[float]:
    """One arm's run times; over MAX_RUNS_PER_ARM is refused before any element is read."""
    if isinstance(value, list) and len(value) > MAX_RUNS_PER_ARM:
        raise EvidenceError(f"{path}: {len(value)} runs; a benchmark arm carries at most {MAX_RUNS_PER_ARM}")
    return _list_of(_positive_time)(value, path)


def _nullable(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    def nullable(value: Any, path: str) -> Any:
        return None if value is None else check(value, path)
    return nullable


def _list_of(check: Callable[[Any, str], Any], allow_empty: bool = False) -> Callable[[Any, str], list[Any]]:
    def check_list(value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise EvidenceError(f"{path}: expected a list, got {_type(value)}")
        if not value and not allow_empty:
            raise EvidenceError(f"{path}: empty list")
        return [check(element, f"{path}[{i}]") for i, element in enumerate(value)]
    return check_list


def _one_of(options: tuple[str, ...]) -> Callable[[Any, str], str]:
    def check(value: Any, path: str) -> str:
        if value not in options:
            raise EvidenceError(f"{path}: {value!r} is not one of {', '.join(options)}")
        return value
    return check


def _metric_map(value: Any, path: str) -> dict[str, str]:
    mapping = _object(value, path)
    for metric, text in mapping.items():
        _one_of(METRICS)(metric, f"{path}.{metric}")
        _text(text, f"{path}.{metric}")
    return dict(mapping)


def _tolerance(value: Any, path: str) -> dict[str, float | None]:
    raw = _object(value, path)
    _only_known(raw, ("atol", "rtol", "max_abs"), path)
    nonneg = _bounded(0.0, None, "tolerance")
    tol = {name: nonneg(_required(raw, name, path), f"{path}.{name}") for name in ("atol", "rtol")}
    if raw.get("max_abs") is not None:
        tol["max_abs"] = nonneg(raw["max_abs"], f"{path}.max_abs")
    return tol


def _leaf(value: Any, path: str) -> dict[str, Any]:
    raw = _object(value, path)
    two_sided = any(name in raw for name in _TWO_SIDED)
    spec = _TWO_SIDED_LEAF if two_sided else _ONE_SIDED_LEAF
    if two_sided:
        for name in _ONE_SIDED:
            if name in raw:
                raise EvidenceError(
                    f"{path}.{name}: a leaf that records reference_* and candidate_* fields "
                    f"records both sides; {name} belongs to the older one-sided leaf"
                )
    _only_known(raw, tuple(spec), path)
    leaf = _fields(raw, spec, path)
    _check_leaf_consistency(leaf, path)
    return leaf


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


def _check_leaf_consistency(leaf: dict[str, Any], path: str) -> None:
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
    name = _text(value, path)
    if not is_known_dtype(name):
        raise EvidenceError(f"{path}: {name!r} is not a dtype (e.g. bfloat16, float32, int64, bool)")
    return name


_nonneg_error = _nullable(_bounded(0.0, None, "error"))
_nullable_flag = _nullable(_flag)
# A leaf names each side's layout (two-sided) or, as written before two-sided
# leaves, one dtype and shape for both (one-sided). The gate holds one-sided
# leaves: they cannot show that the candidate's layout equals the reference's.
_TWO_SIDED: Spec = {
    "reference_dtype": (True, _dtype),
    "candidate_dtype": (True, _dtype),
    "reference_shape": (True, _list_of(_count, allow_empty=True)),
    "candidate_shape": (True, _list_of(_count, allow_empty=True)),
    "reference_strides": (True, _list_of(_integer, allow_empty=True)),
    "candidate_strides": (True, _list_of(_integer, allow_empty=True)),
}
_ONE_SIDED: Spec = {
    "dtype": (True, _dtype),
    "shape": (True, _list_of(_count, allow_empty=True)),
    "strides_equal": (False, _nullable_flag),
}
_COMPARISON: Spec = {
    "byte_equal": (True, _flag),
    "max_abs_error": (False, _nonneg_error),
    "max_rel_error": (False, _nonneg_error),
    "has_nan": (True, _flag),
    "has_inf": (True, _flag),
    "reference_has_nan": (False, _nullable_flag),
    "reference_has_inf": (False, _nullable_flag),
    "nonfinite_mismatch": (False, _nullable_flag),
    "tolerance": (False, _nullable(_tolerance)),
    "outside_tolerance": (False, _nullable(_count)),
}
_TWO_SIDED_LEAF: Spec = {"name": (True, _text), **_TWO_SIDED, **_COMPARISON}
_ONE_SIDED_LEAF: Spec = {"name": (True, _text), **_ONE_SIDED, **_COMPARISON}

_SPECS: dict[str, Spec] = {
    "execution": {
        "candidate_calls": (True, _count),
        "fallbacks": (True, _count),
        "requested_backend": (False, _nullable(_text)),
        "effective_backend": (False, _nullable(_text)),
    },
    "benchmark": {
        "protocol": (True, _one_of(("paired", "sequential"))),
        "device": (True, _text),
        "timer": (True, _one_of(TIMERS)),
        "baseline_s": (True, _runs),
        "candidate_s": (True, _runs),
        "schedule": (False, _nullable(_list_of(_one_of(ORDERS)))),
        "warmup": (False, _nullable(_count)),
        "bandwidth_share": (False, _nullable(_bounded(0.0, None, "bandwidth share"))),
        "notes": (False, _nullable(_note)),
        "arch": (False, _nullable(_arch)),
    },
    "parity": {
        "policy": (False, _nullable(_one_of(("byte_equal", "tolerance")))),
        "leaves": (True, _list_of(_leaf)),
        "approx_math": (False, _nullable(_list_of(_text, allow_empty=True))),
    },
    "perceptual": {
        "frame_set": (True, _name),
        "seed": (True, _integer),
        "frames": (False, _nullable(_frame_count)),
        "ssim": (False, _nullable(_list_of(_bounded(-1.0, 1.0, "SSIM")))),
        "lpips": (False, _nullable(_list_of(_bounded(0.0, None, "LPIPS")))),
        "vbench": (False, _nullable(_bounded(0.0, 1.0, "VBench"))),
        "stage_status": (True, _text),
        "backends": (False, _nullable(_metric_map)),
        "absent": (False, _nullable(_metric_map)),
    },
    "failure": {
        "stage": (True, _text),
        "error": (True, _text),
    },
}


# ---- derivations: (validated item, where) -> derived dict ----------------------------

def _derive_execution(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {"ran": item["candidate_calls"] > 0 and item["fallbacks"] == 0}


def _derive_benchmark(item: dict[str, Any], where: str) -> dict[str, Any]:
    baseline, candidate = item["baseline_s"], item["candidate_s"]
    schedule = item.get("schedule")
    if item["protocol"] == "paired":
        if len(baseline) != len(candidate):
            raise EvidenceError(
                f"{where}.candidate_s: {len(candidate)} runs but baseline_s has {len(baseline)}; "
                "paired arms must have one run each per pair"
            )
        if schedule is None:
            raise EvidenceError(f"{where}.schedule: required for the paired protocol")
        if len(schedule) != len(baseline):
            raise EvidenceError(f"{where}.schedule: {len(schedule)} entries for {len(baseline)} pairs")
    elif schedule is not None:
        raise EvidenceError(f"{where}.schedule: only the paired protocol has a pair schedule")
    derived = summarize_benchmark(item["protocol"], baseline, candidate, schedule)
    for key, value in derived.items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise EvidenceError(f"{where}: the timings are too extreme to summarise ({key} is not finite)")
    return derived


def _derive_parity(item: dict[str, Any], where: str) -> dict[str, Any]:
    leaves = item["leaves"]
    names = [leaf["name"] for leaf in leaves]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise EvidenceError(f"{where}.leaves[{i}].name: duplicate leaf name {name!r}")
    errors = [(leaf["max_abs_error"], leaf["name"]) for leaf in leaves if leaf.get("max_abs_error") is not None]
    worst = max(errors, key=lambda pair: pair[0]) if errors else (None, None)
    return {
        "leaf_count": len(leaves),
        "all_byte_equal": all(leaf["byte_equal"] for leaf in leaves),
        "worst_max_abs_error": worst[0],
        "worst_leaf": worst[1],
    }


def _derive_perceptual(item: dict[str, Any], where: str) -> dict[str, Any]:
    lists = {metric: item[metric] for metric in ("ssim", "lpips") if item.get(metric) is not None}
    lengths = {metric: len(values) for metric, values in lists.items()}
    if len(set(lengths.values())) > 1:
        raise EvidenceError(f"{where}.lpips: {lengths['lpips']} frames but ssim has {lengths['ssim']}")
    frames = item.get("frames")
    for metric, length in lengths.items():
        if frames is not None and length != frames:
            raise EvidenceError(f"{where}.{metric}: {length} values but frames is {frames}")
    measured = [metric for metric in METRICS if item.get(metric) is not None]
    for metric in (item.get("absent") or {}):
        if metric in measured:
            raise EvidenceError(f"{where}.absent.{metric}: reported absent but {metric} has values")
    derived: dict[str, Any] = {
        "frame_count": next(iter(lengths.values()), frames),
        "measured": measured,
        "worst_ssim": None,
        "worst_ssim_frame": None,
        "worst_lpips": None,
        "worst_lpips_frame": None,
    }
    if "ssim" in lists:
        index = int(np.argmin(lists["ssim"]))
        derived.update(worst_ssim=lists["ssim"][index], worst_ssim_frame=index)
    if "lpips" in lists:
        index = int(np.argmax(lists["lpips"]))
        derived.update(worst_lpips=lists["lpips"][index], worst_lpips_frame=index)
    return derived


def _derive_failure(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {}


_DERIVE: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "execution": _derive_execution,
    "benchmark": _derive_benchmark,
    "parity": _derive_parity,
    "perceptual": _derive_perceptual,
    "failure": _derive_failure,
}


# ---- helpers ------------------------------------------------------------------------

def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise EvidenceError(f"{path}: expected an object, got {_type(value)}")
    for key in value:
        if not isinstance(key, str):
            raise EvidenceError(f"{path}: keys must be strings, got {key!r}")
    return dict(value)


def _only_known(obj: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in sorted(obj):
        if key in allowed:
            continue
        where = f"{path}.{key}" if path else key
        if key in SUMMARY_FIELDS:
            raise EvidenceError(
                f"{where}: client-supplied summary refused; the registry computes it from the raw measurements"
            )
        raise EvidenceError(f"{where}: unknown field (allowed: {', '.join(allowed)})")


def _required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    where = f"{path}.{key}" if path else key
    if key not in obj or obj[key] is None:
        raise EvidenceError(f"{where}: required")
    return obj[key]


def _optional(obj: Mapping[str, Any], key: str, path: str, check: Callable[[Any, str], Any]) -> Any:
    where = f"{path}.{key}" if path else key
    return None if obj.get(key) is None else check(obj[key], where)


def _range(low: float | None, high: float | None) -> str:
    return f"[{low:g}, {high:g}]" if high is not None else f"[{low:g}, inf)"


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (str, bool, int, float)):
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__
