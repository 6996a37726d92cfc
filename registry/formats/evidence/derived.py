"""What the registry derives from an item's raw measurements, and the contradictions found while deriving.

The gate reads these numbers, never a client's: a benchmark's speedup, its
interval and CV (registry.formats.stats, which cites its methods), a parity
item's worst leaf, a perceptual item's worst frame per metric. Each function
takes a schema-checked item and the path naming it, and refuses an item whose
fields disagree with each other (arms of different lengths under pairing,
SSIM and LPIPS over different frame counts).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from registry.formats.evidence.errors import EvidenceError
from registry.formats.evidence.schemas import HARNESS_LAUNCHER, METRICS, UNREPORTED, check_confinement
from registry.formats.stats import summarize_benchmark


def _execution(item: dict[str, Any], where: str) -> dict[str, Any]:
    if ("sandbox" in item) != ("harness_sha256" in item):
        raise EvidenceError(f"{where}: sandbox and harness_sha256 name the harness together; one without the "
                            "other says nothing")
    check_confinement(item.get("sandbox"), item.get("confinement"), where)
    if (item.get("confinement") or {}).get("identity") == UNREPORTED:
        raise EvidenceError(f"{where}.confinement: unreported means no jail was built, and an execution item "
                            "counts the calls of a worker that started in one")
    _launcher_fields(item, where)
    return {"ran": item["candidate_calls"] > 0 and item["fallbacks"] == 0}


def _launcher_fields(item: dict[str, Any], where: str) -> None:
    """The harness launcher's item names its harness, the cubins it loaded and every call's launches, and they
    agree; no other item names cubins or launches (only that launcher launched them)."""
    named = [key for key in ("cubins", "launches") if key in item]
    if item.get("launch_signal") != HARNESS_LAUNCHER:
        if named:
            raise EvidenceError(f"{where}.{named[0]}: only launch_signal {HARNESS_LAUNCHER!r} names the cubins it "
                                "launched")
        return
    for key in ("cubins", "launches", "sandbox"):
        if key not in item:
            raise EvidenceError(f"{where}: launch_signal {HARNESS_LAUNCHER!r} needs {key}")
    made = sum(len(call) for call in item["launches"])
    if made != item["candidate_calls"]:
        raise EvidenceError(f"{where}.candidate_calls: {item['candidate_calls']}, but the launches listed number {made}")
    if item["fallbacks"]:
        raise EvidenceError(f"{where}.fallbacks: the harness launcher never falls back; {item['fallbacks']} recorded")
    unknown = sorted({name for call in item["launches"] for name in call} - set(item["cubins"]))
    if unknown:
        raise EvidenceError(f"{where}.launches: {unknown[0]} was launched, and no cubin of that name is listed")


def _benchmark(item: dict[str, Any], where: str) -> dict[str, Any]:
    baseline, candidate = item["baseline_s"], item["candidate_s"]
    schedule = item.get("schedule")
    if item["protocol"] == "paired":
        if len(baseline) != len(candidate):
            raise EvidenceError(
                f"{where}.candidate_s: {len(candidate)} runs but baseline_s has {len(baseline)}; "
                "paired arms must have one run each per pair"
            )
        waited = item.get("baseline_waited_s")
        if waited is not None and len(waited) != len(baseline):
            raise EvidenceError(f"{where}.baseline_waited_s: {len(waited)} waits for {len(baseline)} pairs")
        if schedule is None:
            raise EvidenceError(f"{where}.schedule: required for the paired protocol")
        if len(schedule) != len(baseline):
            raise EvidenceError(f"{where}.schedule: {len(schedule)} entries for {len(baseline)} pairs")
    elif schedule is not None:
        raise EvidenceError(f"{where}.schedule: only the paired protocol has a pair schedule")
    elif item.get("baseline_waited_s") is not None:
        raise EvidenceError(f"{where}.baseline_waited_s: only the paired protocol has a wait per pair")
    derived = summarize_benchmark(item["protocol"], baseline, candidate, schedule)
    for key, value in derived.items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise EvidenceError(f"{where}: the timings are too extreme to summarise ({key} is not finite)")
    return derived


def _parity(item: dict[str, Any], where: str) -> dict[str, Any]:
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


def _perceptual(item: dict[str, Any], where: str) -> dict[str, Any]:
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
        index = min(range(len(lists["ssim"])), key=lists["ssim"].__getitem__)  # the first lowest, as numpy's argmin
        derived.update(worst_ssim=lists["ssim"][index], worst_ssim_frame=index)
    if "lpips" in lists:
        index = max(range(len(lists["lpips"])), key=lists["lpips"].__getitem__)  # the first highest
        derived.update(worst_lpips=lists["lpips"][index], worst_lpips_frame=index)
    return derived


def _failure(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {}


# Item kind -> (validated item, where) -> its derived dict.
DERIVE: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "execution": _execution,
    "benchmark": _benchmark,
    "parity": _parity,
    "perceptual": _perceptual,
    "failure": _failure,
}
