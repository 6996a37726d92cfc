"""The monitor's terms: how a promoted artifact's re-measurements are watched for a regression.

```yaml
monitor:
  alpha: 0.001          # average run length to a false alarm >= 1/alpha pairs
  reference: gate       # or promoted: the speedup the promoting verdict recorded
  margin: 0.0           # the threshold is reference * (1 - margin)
  baseline_wait_share: 0.05   # optional: leave out a pair whose baseline run waited for a CPU longer
                              # than this share of its time (as the harness saw it)
```

Every term is required: a false-alarm rate or a threshold nobody declared
is not invented. The detector (registry/formats/monitor.py) alarms once the
re-measured pairs show, at level alpha, that the median ratio fell below the
threshold. A monitor needs a speed block (it watches the speedup the gate
promoted); a threshold relative to the gate must stay at or above 1.0 (a
slowdown is not a speedup to defend), and with `reference: promoted` the
threshold is fixed at the promotion, from the speedup its verdict recorded.
`baseline_wait_share` is the one optional term: without it no pair is left
out (docs/monitor.md, "Leaving out preempted pairs"), and a block without it
keeps the content hash it had.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.contracts import fields as f
from registry.contracts.errors import ContractError

REFERENCES = ("gate", "promoted")
_FIELDS = ("alpha", "reference", "margin")
_OPTIONAL = ("baseline_wait_share",)
# A margin of half the reference would call a 2x slowdown of the promoted speed in control.
MAX_MARGIN = 0.5


@dataclass(frozen=True)
class MonitorTerms:
    alpha: float
    reference: str
    margin: float
    baseline_wait_share: float | None = None

    def __post_init__(self) -> None:
        alpha = f.number(self.alpha, "monitor.alpha")
        if not 0.0 < alpha <= 0.5:
            raise ContractError(f"monitor.alpha: {alpha} is outside (0, 0.5]")
        f.choice(self.reference, REFERENCES, "monitor.reference")
        margin = f.number(self.margin, "monitor.margin")
        if not 0.0 <= margin < MAX_MARGIN:
            raise ContractError(f"monitor.margin: {margin} is outside [0, {MAX_MARGIN})")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "margin", margin)
        if self.baseline_wait_share is not None:
            share = f.number(self.baseline_wait_share, "monitor.baseline_wait_share")
            if not 0.0 < share <= 1.0:
                raise ContractError(f"monitor.baseline_wait_share: {share} is outside (0, 1]")
            object.__setattr__(self, "baseline_wait_share", share)

    def threshold(self, gate: float, promoted_speedup: float | None) -> float:
        """The ratio below which a re-measured pair counts as regressed."""
        if self.reference == "gate":
            return gate * (1.0 - self.margin)
        if promoted_speedup is None:
            raise ContractError("monitor.reference is promoted, but the promoting verdict recorded no speedup")
        return promoted_speedup * (1.0 - self.margin)

    def check_against(self, gate: float | None) -> None:
        """Refuse terms the speed block cannot back: no gate to defend, or a threshold under 1.0."""
        if gate is None:
            raise ContractError("monitor: needs a speed block (the monitor defends the promoted speedup)")
        if self.reference == "gate" and gate * (1.0 - self.margin) < 1.0:
            raise ContractError(f"monitor.margin: {self.margin} puts the threshold at "
                                f"{gate * (1.0 - self.margin):.4g}, below 1.0 (a slowdown)")

    def canonical(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS + _OPTIONAL if getattr(self, name) is not None}

    @classmethod
    def from_mapping(cls, obj: Any) -> MonitorTerms:
        raw = f.block(obj, "monitor")
        f.only_known(raw, _FIELDS + _OPTIONAL, "monitor")
        return cls(**{name: f.required(raw, name, "monitor") for name in _FIELDS},
                   **{name: raw[name] for name in _OPTIONAL if name in raw})
