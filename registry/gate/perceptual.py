"""Rule 3, perceptual and advisory tiers: worst-frame metrics against the declared budget.

Evidence counts only for the frame set (and seed and frame count, when the
budget names them) the budget declares: a score on other frames says nothing
about these. Each gated metric gets a signed margin on its worst frame
(SSIM and VBench: value - threshold; LPIPS: threshold - value; exactly at
threshold passes). A failing margin quarantines only when the evidence is
admissible (right frames, stage completed); otherwise it is recorded and
the artifact is held for the inadmissibility.
"""
from __future__ import annotations

from typing import Any

from registry.contracts import FidelityBudget
from registry.gate.ledger import Ledger
from registry.gate.model import Margin, Recorded
from registry.gate.text import num, signed

_FIELD = {"ssim": "min_ssim", "lpips": "max_lpips", "vbench": "min_vbench"}
_LABEL = {"ssim": "SSIM", "lpips": "LPIPS", "vbench": "VBench"}


def check_perceptual(budget: FidelityBudget, recorded: Recorded | None, ledger: Ledger) -> None:
    if recorded is None:
        frames = f" on frame set '{budget.frame_set}'" if budget.frame_set else ""
        ledger.add(
            "fidelity.missing", "held",
            f"no perceptual evidence: the {budget.tier} budget needs its metrics measured{frames}",
        )
        return
    item = ledger.admit(recorded, "perceptual")
    if item is None:
        return
    admissible = _check_provenance(budget, item, ledger)
    if item["stage_status"] != "ok":
        admissible = False
        ledger.add(
            "fidelity.stage_failed", "held",
            f"the perceptual stage reported status '{item['stage_status']}', not ok",
        )
    failing = []
    for metric, threshold in budget.thresholds.items():
        margin = _margin(metric, threshold, item, ledger)
        if margin is not None and not margin.passed:
            failing.append((metric, margin))
    if admissible:
        for metric, margin in failing:
            ledger.add("fidelity.failed", "quarantined", _failing_reason(metric, margin, item))


def _check_provenance(budget: FidelityBudget, item: dict[str, Any], ledger: Ledger) -> bool:
    mismatches = []
    if budget.frame_set is not None and item["frame_set"] != budget.frame_set:
        mismatches.append(
            f"the evidence is from frame set '{item['frame_set']}' but fidelity.frame_set is '{budget.frame_set}'"
        )
    if budget.seed is not None and item["seed"] != budget.seed:
        mismatches.append(f"the evidence used seed {item['seed']} but fidelity.seed is {budget.seed}")
    count = item["derived"]["frame_count"]
    if budget.frames is not None and count != budget.frames:
        measured = f"{count} frames" if count is not None else "an unstated number of frames"
        mismatches.append(f"the evidence measured {measured} but fidelity.frames is {budget.frames}")
    for reason in mismatches:
        ledger.add("fidelity.frame_set_mismatch", "held", reason)
    return not mismatches


def _margin(metric: str, threshold: float, item: dict[str, Any], ledger: Ledger) -> Margin | None:
    derived = item["derived"]
    value = item.get("vbench") if metric == "vbench" else derived[f"worst_{metric}"]
    if value is None:
        measured = ", ".join(derived["measured"]) or "nothing"
        absent = (item.get("absent") or {}).get(metric)
        why = f" (absent: {absent})" if absent else ""
        ledger.add(
            "fidelity.metric_absent", "held",
            f"the budget gates on {metric} (fidelity.{_FIELD[metric]} {num(threshold)}) "
            f"but the harness measured {measured}{why}",
        )
        return None
    return ledger.margin(metric, value, threshold, higher_is_better=metric != "lpips")


def _failing_reason(metric: str, margin: Margin, item: dict[str, Any]) -> str:
    frame = item["derived"].get(f"worst_{metric}_frame")
    where = f"worst-frame {_LABEL[metric]} {num(margin.value)} (frame {frame})" if frame is not None else (
        f"{_LABEL[metric]} {num(margin.value)}"
    )
    relation = "exceeds" if metric == "lpips" else "is below"
    return f"{where} {relation} fidelity.{_FIELD[metric]} {num(margin.threshold)} (margin {signed(margin.margin)})"
