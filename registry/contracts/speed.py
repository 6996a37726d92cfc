"""The speed gate: a flat minimum speedup, or one derived from Amdahl's law.

With `ceiling_share: S` the workload declares the share of end-to-end time
the targeted operation takes. Amdahl's law bounds any speedup of that share
by ceiling = 1 / (1 - S) (the operation made free). The gate asks for half
that headroom, and never less than a 10% gain, since smaller end-to-end
gains sit inside run-to-run noise: gate = max(1.10, 1 + 0.5 * (ceiling - 1)).
A gate above its own ceiling cannot be met by any artifact, so such a
manifest is refused rather than left to reject everything.

`max_benchmark_attempts: N` caps how many benchmark items one identity of an
artifact may have: re-benchmarking until a run happens to pass is optional
stopping, and the cap bounds it. Absent means no cap (the gate says so).

`require_conclusive: true` asks that the speedup's 95% distribution-free
interval exclude 1.0 (registry/formats/stats.py). No such interval exists
below 6 pairs (paired) or 7 runs per arm (sequential): with 5 pairs all
ratios on one side of 1.0 happens by chance 2/32 = 6.25% of the time. A
contract asking for it with fewer runs is refused.

`decision` names the rule that turns the measurements into a verdict
(docs/gate.md, "Confident speed decisions"):
- `confident`: promote only what is shown at or above the gate and reject only
  what is shown below it, each wrong outcome at most `alpha` (in (0, 0.5]),
  under any number of looks (registry/formats/sequential.py); otherwise held.
  A benchmark session stops at `max_pairs` pairs, held if nothing was decided.
- `point`: the seed project's rule, the point median against the gate.
A manifest that declares no rule gets `confident`, with `alpha` 0.05 and
`max_pairs` 128 unless declared (the defaults are part of the documented
contract format, docs/workloads.md). A contract stored before the rule
existed carries no `decision` and means `point`: `Contract.from_stored` reads
it so, and `canonical()` leaves the three fields out of a point contract, so
its content hash, and every verdict recorded under it, stay as they were.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from registry.contracts import fields as f
from registry.contracts.errors import ContractError
from registry.formats.ranks import CI_LEVEL, MAX_RUNS_PER_ARM, min_conclusive_runs
from registry.formats.sequential import MAX_SEQUENTIAL_PAIRS, fewest_pairs_to_decide

PROTOCOLS = ("paired", "sequential")
DECISIONS = ("confident", "point")
DEFAULT_ALPHA = 0.05
DEFAULT_MAX_PAIRS = 128
MIN_DERIVED_GATE = 1.10
HEADROOM_SHARE = 0.5
_FIELDS = (
    "min_speedup", "ceiling_share", "runs_per_arm", "protocol", "max_cv",
    "require_conclusive", "max_peak_memory_regression", "max_benchmark_attempts",
    "decision", "alpha", "max_pairs", "drift_check",
)
# Fields added after the first contract format: canonical() lists them only when
# declared, so a manifest that does not use them keeps its content hash.
_OPTIONAL_LATER_FIELDS = ("max_benchmark_attempts", "drift_check")
# How a design that did not interleave its arms is checked before the confident rule reads it
# (docs/gate.md, "The drift check"): `changepoint` (the default: each arm's level-shift scan at speed.alpha / 2),
# `halves` (the first check's name, kept so a contract declaring it reads back; it runs the same scan) or `none`,
# an explicit opt-out.
DRIFT_CHECKS = ("changepoint", "halves", "none")
# The confident rule's fields: listed only under it, so a point contract hashes as before.
_CONFIDENT_FIELDS = ("decision", "alpha", "max_pairs")


def derived_gate(ceiling_share: float) -> tuple[float, float]:
    """(gate, ceiling) for a targeted share of runtime, per Amdahl's law."""
    ceiling = 1.0 / (1.0 - ceiling_share)
    return max(MIN_DERIVED_GATE, 1.0 + HEADROOM_SHARE * (ceiling - 1.0)), ceiling


@dataclass(frozen=True)
class SpeedGate:
    runs_per_arm: int
    protocol: str
    min_speedup: float | None = None
    ceiling_share: float | None = None
    max_cv: float | None = None
    require_conclusive: bool = False
    max_peak_memory_regression: float | None = None
    max_benchmark_attempts: int | None = None
    decision: str = "point"
    alpha: float | None = None
    max_pairs: int | None = None
    drift_check: str | None = None
    gate: float = field(init=False)
    ceiling: float | None = field(init=False)

    def __post_init__(self) -> None:
        f.integer(self.runs_per_arm, "speed.runs_per_arm", minimum=2)
        f.choice(self.protocol, PROTOCOLS, "speed.protocol")
        if self.protocol == "paired" and self.runs_per_arm % 2:
            raise ContractError(
                f"speed.runs_per_arm: {self.runs_per_arm} is odd; the paired protocol "
                "alternates BC/CB pairs, so it needs an even count"
            )
        if self.runs_per_arm > MAX_RUNS_PER_ARM:
            raise ContractError(
                f"speed.runs_per_arm: {self.runs_per_arm} is above the {MAX_RUNS_PER_ARM} runs per arm "
                "benchmark evidence may carry"
            )
        f.flag(self.require_conclusive, "speed.require_conclusive")
        fewest = min_conclusive_runs(self.protocol)
        if self.require_conclusive and self.runs_per_arm < fewest:
            raise ContractError(
                f"speed.runs_per_arm: {self.runs_per_arm} is too few for require_conclusive: the "
                f"{self.protocol} protocol needs at least {fewest} to keep chance passes under {1 - CI_LEVEL:.0%}"
            )
        if self.max_cv is not None:
            self._set("max_cv", _positive(self.max_cv, "speed.max_cv"))
        if self.max_peak_memory_regression is not None:
            value = f.number(self.max_peak_memory_regression, "speed.max_peak_memory_regression")
            if value < 0:
                raise ContractError(f"speed.max_peak_memory_regression: {value} is negative")
            self._set("max_peak_memory_regression", value)
        if self.max_benchmark_attempts is not None:
            f.integer(self.max_benchmark_attempts, "speed.max_benchmark_attempts", minimum=1)
        self._check_rule()
        self._set_gate()

    def _check_rule(self) -> None:
        f.choice(self.decision, DECISIONS, "speed.decision")
        if self.decision == "point":
            for name in ("alpha", "max_pairs", "drift_check"):
                if getattr(self, name) is not None:
                    raise ContractError(f"speed.{name}: applies only to decision: confident, not point")
            return
        if self.drift_check is not None:
            f.choice(self.drift_check, DRIFT_CHECKS, "speed.drift_check")
        alpha = f.number(self.alpha, "speed.alpha")
        if not 0.0 < alpha <= 0.5:
            raise ContractError(f"speed.alpha: {alpha} is outside (0, 0.5]")
        self._set("alpha", alpha)
        fewest = fewest_pairs_to_decide(alpha)
        max_pairs = f.integer(self.max_pairs, "speed.max_pairs", minimum=fewest)
        if max_pairs > MAX_SEQUENTIAL_PAIRS:
            raise ContractError(f"speed.max_pairs: {self.max_pairs} is above the {MAX_SEQUENTIAL_PAIRS} pairs "
                                "a benchmark record may hold")

    def _set_gate(self) -> None:
        if (self.min_speedup is None) == (self.ceiling_share is None):
            raise ContractError("speed: declare exactly one of min_speedup or ceiling_share")
        if self.min_speedup is not None:
            value = f.number(self.min_speedup, "speed.min_speedup")
            if value < 1.0:
                raise ContractError(f"speed.min_speedup: {value} is below 1.0 (a slowdown is not a gate)")
            self._set("min_speedup", value)
            self._set("gate", value)
            self._set("ceiling", None)
            return
        share = f.number(self.ceiling_share, "speed.ceiling_share")
        if not 0.0 < share < 1.0:
            raise ContractError(f"speed.ceiling_share: {share} is outside (0, 1)")
        gate, ceiling = derived_gate(share)
        if gate > ceiling:
            raise ContractError(
                f"speed.ceiling_share: {share} caps any speedup at {ceiling:.4f}x, below the "
                f"derived gate {gate:.2f}x; the workload is unreachable"
            )
        self._set("ceiling_share", share)
        self._set("gate", gate)
        self._set("ceiling", ceiling)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def canonical(self) -> dict[str, Any]:
        return {
            name: getattr(self, name) for name in sorted(_FIELDS)
            if (name not in _OPTIONAL_LATER_FIELDS or getattr(self, name) is not None)
            and (name not in _CONFIDENT_FIELDS or self.decision == "confident")
        }

    @classmethod
    def from_mapping(cls, obj: Any, stored: bool = False) -> SpeedGate:
        """Build from a manifest's speed block, or (stored=True) from a contract stored in the log.

        A manifest without `decision` gets the confident rule and its
        defaults; a stored block without it was declared before the rule
        existed (or as point, which is stored without the field) and means point.
        """
        raw = f.block(obj, "speed")
        f.only_known(raw, _FIELDS, "speed")
        present = {key: value for key, value in raw.items() if value is not None}
        f.required(present, "runs_per_arm", "speed")
        f.required(present, "protocol", "speed")
        present.setdefault("decision", "point" if stored else "confident")
        if present["decision"] == "confident":
            present.setdefault("alpha", DEFAULT_ALPHA)
            present.setdefault("max_pairs", DEFAULT_MAX_PAIRS)
        return cls(**present)


def _positive(value: Any, path: str) -> float:
    number = f.number(value, path)
    if number <= 0:
        raise ContractError(f"{path}: {value} must be above 0")
    return number
