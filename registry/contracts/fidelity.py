"""The fidelity budget: which tier decides correctness, and its perceptual thresholds.

- exact: parity evidence decides; a budget here carries no thresholds.
- perceptual: SSIM (Wang et al. 2004, range [-1, 1]), LPIPS (Zhang et al.
  2018, a distance >= 0) and VBench (scores in [0, 1]) on a named frame set
  replace parity; at least one threshold and the frame set are required, or
  nothing could be checked.
- advisory: never promotes; thresholds are optional and only produce margins
  for the person who decides.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.contracts import fields as f
from registry.contracts.errors import ContractError

TIERS = ("exact", "perceptual", "advisory")
# metric -> (manifest field, lower bound, upper bound); None is unbounded.
THRESHOLDS: dict[str, tuple[str, float | None, float | None]] = {
    "ssim": ("min_ssim", -1.0, 1.0),
    "lpips": ("max_lpips", 0.0, None),
    "vbench": ("min_vbench", 0.0, 1.0),
}
_FIELDS = ("tier", "min_ssim", "max_lpips", "min_vbench", "frame_set", "seed", "frames")


@dataclass(frozen=True)
class FidelityBudget:
    tier: str = "exact"
    min_ssim: float | None = None
    max_lpips: float | None = None
    min_vbench: float | None = None
    frame_set: str | None = None
    seed: int | None = None
    frames: int | None = None

    def __post_init__(self) -> None:
        f.choice(self.tier, TIERS, "fidelity.tier")
        for name, low, high in THRESHOLDS.values():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _in_range(value, low, high, f"fidelity.{name}"))
        if self.frame_set is not None:
            f.name(self.frame_set, "fidelity.frame_set")
        if self.seed is not None:
            f.integer(self.seed, "fidelity.seed")
        if self.frames is not None:
            f.integer(self.frames, "fidelity.frames", minimum=1)
        if self.tier == "exact":
            self._refuse_perceptual_fields()
        if self.tier == "perceptual":
            if not self.thresholds:
                raise ContractError(
                    "fidelity: a perceptual budget needs at least one of min_ssim, max_lpips, min_vbench"
                )
            if self.frame_set is None:
                raise ContractError("fidelity.frame_set: required by a perceptual budget")

    @property
    def thresholds(self) -> dict[str, float]:
        """Gated metric -> declared threshold, for the thresholds that are declared."""
        return {
            metric: getattr(self, name)
            for metric, (name, _, _) in THRESHOLDS.items()
            if getattr(self, name) is not None
        }

    def canonical(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in sorted(_FIELDS)}

    @classmethod
    def from_mapping(cls, obj: Any) -> FidelityBudget:
        if obj is None:
            return cls()
        raw = f.block(obj, "fidelity")
        f.only_known(raw, _FIELDS, "fidelity")
        present = {key: value for key, value in raw.items() if value is not None}
        return cls(**present)

    def _refuse_perceptual_fields(self) -> None:
        for name in ("min_ssim", "max_lpips", "min_vbench", "frame_set", "seed", "frames"):
            if getattr(self, name) is not None:
                raise ContractError(
                    f"fidelity.{name}: an exact budget is decided by parity and takes no "
                    "perceptual thresholds or frame set (use tier perceptual or advisory)"
                )


def _in_range(value: Any, low: float | None, high: float | None, path: str) -> float:
    number = f.number(value, path)
    if (low is not None and number < low) or (high is not None and number > high):
        if high is None:
            raise ContractError(f"{path}: {value} is below {_fmt(low)}")
        raise ContractError(f"{path}: {value} is outside [{_fmt(low)}, {_fmt(high)}]")
    return number


def _fmt(bound: float | None) -> str:
    return f"{bound:g}"
