"""How the evidence format refuses: EvidenceError, raised by the shared field kit bound to it.

A client may send only raw measurements (docs/architecture.md, "Events");
a field named like a statistic the registry derives itself is refused as a
client's summary, not merely as unknown, so the sender learns why.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.formats.errors import UserError
from registry.formats.fields import FieldKit


class EvidenceError(UserError):
    """An evidence document or item the registry refuses; one line naming where and why."""


KIT = FieldKit(EvidenceError)
# Names of statistics the registry derives itself; a client sending one is refused by name.
SUMMARY_FIELDS = frozenset({
    "derived", "summary", "speedup", "speedup_ci", "ci", "median", "mean", "cv", "std",
    "ratios", "p_value", "pvalue", "wilcoxon_p", "interleaved", "runs_per_arm",
    "baseline_median", "candidate_median", "baseline_mean", "candidate_mean",
    "baseline_cv", "candidate_cv", "worst_ssim", "worst_lpips", "mean_ssim", "mean_lpips",
    "min_ssim", "max_lpips", "worst_ssim_frame", "worst_lpips_frame", "frame_count",
    "all_byte_equal", "worst_max_abs_error", "match", "passed", "ran",
})
_SUMMARY_REFUSAL = "client-supplied summary refused; the registry computes it from the raw measurements"


def only_known(obj: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    """Refuse an unknown field, and a client's summary statistic as such."""
    KIT.only_known(obj, allowed, path, explain=lambda key: _SUMMARY_REFUSAL if key in SUMMARY_FIELDS else None)
