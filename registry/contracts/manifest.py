"""The workload manifest: what must hold before an artifact is promoted.

Building a `Contract` validates all of it (docs/architecture.md, "Contracts"): unknown
fields, thresholds outside their metric's range, a gate that cannot be met,
or a tolerance nobody declared are errors at build time, so the gate never
meets a contract it has to second-guess.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.contracts import fields as f
from registry.contracts.errors import ContractError
from registry.contracts.fidelity import FidelityBudget
from registry.contracts.monitor import MonitorTerms
from registry.contracts.parity import ParityPolicy, Tolerance
from registry.contracts.speed import SpeedGate
from registry.formats.documents import MAX_MANIFEST_BYTES, DocumentError, read_document
from registry.formats.dtypes import is_floating_dtype, is_known_dtype, normalize_dtype

_TOP = ("workload", "model", "sampling", "parity", "fidelity", "speed", "monitor", "tags")
_SAMPLING_SIZES = ("height", "width", "frames", "steps")


@dataclass(frozen=True)
class ModelRef:
    id: str
    revision: str | None = None

    def __post_init__(self) -> None:
        f.text(self.id, "model.id")
        if self.revision is not None:
            f.text(self.revision, "model.revision")

    def canonical(self) -> dict[str, Any]:
        return {"id": self.id, "revision": self.revision}


@dataclass(frozen=True)
class Sampling:
    """How the workload samples; described, not gated (the frame set is what fidelity compares)."""

    height: int | None = None
    width: int | None = None
    frames: int | None = None
    steps: int | None = None
    seed: int | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        for name in _SAMPLING_SIZES:
            if getattr(self, name) is not None:
                f.integer(getattr(self, name), f"sampling.{name}", minimum=1)
        if self.seed is not None:
            f.integer(self.seed, "sampling.seed", minimum=0)
        if self.dtype is not None:
            name = f.text(self.dtype, "sampling.dtype")
            if not is_known_dtype(name):
                raise ContractError(f"sampling.dtype: {name!r} is not a dtype (e.g. bfloat16, float16, float32)")
            object.__setattr__(self, "dtype", normalize_dtype(name))

    def canonical(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in sorted((*_SAMPLING_SIZES, "seed", "dtype"))}


@dataclass(frozen=True)
class Contract:
    workload: str
    parity: ParityPolicy = field(default_factory=ParityPolicy)
    fidelity: FidelityBudget = field(default_factory=FidelityBudget)
    speed: SpeedGate | None = None
    model: ModelRef | None = None
    sampling: Sampling | None = None
    tags: tuple[str, ...] = ()
    monitor: MonitorTerms | None = None

    def __post_init__(self) -> None:
        f.name(self.workload, "workload")
        for name, kind in (("parity", ParityPolicy), ("fidelity", FidelityBudget)):
            if not isinstance(getattr(self, name), kind):
                raise ContractError(f"{name}: expected a {kind.__name__}")
        if self.speed is not None and not isinstance(self.speed, SpeedGate):
            raise ContractError("speed: expected a SpeedGate")
        if not isinstance(self.tags, (list, tuple)):
            raise ContractError(f"tags: expected a list, got {type(self.tags).__name__}")
        tags = [f.text(tag, f"tags[{i}]") for i, tag in enumerate(self.tags)]
        object.__setattr__(self, "tags", tuple(sorted(set(tags))))
        if self.monitor is not None:
            if not isinstance(self.monitor, MonitorTerms):
                raise ContractError("monitor: expected MonitorTerms")
            self.monitor.check_against(self.speed_gate)
        self._check_sampled_dtype_has_tolerance()

    def _check_sampled_dtype_has_tolerance(self) -> None:
        """A tolerance policy without a tolerance for a dtype it meets is refused.

        docs/architecture.md, "Contracts": a tolerance is never invented.
        """
        dtype = self.sampling.dtype if self.sampling else None
        if self.parity.policy == "tolerance" and dtype and is_floating_dtype(dtype):
            if dtype not in self.parity.tolerances:
                raise ContractError(
                    f"parity.tolerances: no tolerance declared for dtype {dtype} (sampling.dtype)"
                )

    @property
    def tier(self) -> str:
        return self.fidelity.tier

    @property
    def speed_gate(self) -> float | None:
        """The effective minimum speedup, or None when no speed block is declared."""
        return self.speed.gate if self.speed else None

    @property
    def speed_ceiling(self) -> float | None:
        """The Amdahl ceiling of a derived gate; None for a flat gate or no speed block."""
        return self.speed.ceiling if self.speed else None

    def tolerance_for(self, dtype: str) -> Tolerance:
        return self.parity.tolerance_for(dtype)

    def canonical(self) -> dict[str, Any]:
        """Plain, sorted, defaults-filled form: equivalent manifests give equal dicts.

        `monitor` is listed only when declared, so a manifest without one keeps its content hash.
        """
        monitor = {} if self.monitor is None else {"monitor": self.monitor.canonical()}
        return {
            **monitor,
            "fidelity": self.fidelity.canonical(),
            "model": self.model.canonical() if self.model else None,
            "parity": self.parity.canonical(),
            "sampling": self.sampling.canonical() if self.sampling else None,
            "speed": self.speed.canonical() if self.speed else None,
            "tags": list(self.tags),
            "workload": self.workload,
        }

    def content_hash(self) -> str:
        payload = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @classmethod
    def from_stored(cls, obj: Any) -> Contract:
        """Rebuild a contract stored in a WorkloadDeclared event (a speed block without a rule means point)."""
        return cls.from_mapping(obj, stored=True)

    @classmethod
    def from_mapping(cls, obj: Any, stored: bool = False) -> Contract:
        raw = f.block(obj, "manifest")
        f.only_known(raw, _TOP, "")
        return cls(
            workload=f.required(raw, "workload", ""),
            model=_model(raw.get("model")),
            sampling=_sampling(raw.get("sampling")),
            parity=ParityPolicy.from_mapping(raw.get("parity")),
            fidelity=FidelityBudget.from_mapping(raw.get("fidelity")),
            speed=SpeedGate.from_mapping(raw["speed"], stored) if raw.get("speed") is not None else None,
            tags=_tags(raw.get("tags")),
            monitor=MonitorTerms.from_mapping(raw["monitor"]) if raw.get("monitor") is not None else None,
        )

    @classmethod
    def from_yaml(cls, text: str) -> Contract:
        from registry.contracts.yaml_text import load_yaml  # PyYAML only where a manifest is read, not on every open

        return cls.from_mapping(load_yaml(text))


def load_manifest(path: str | Path) -> Contract:
    """Read and build a manifest; every failure is one ContractError line naming the file.

    The file must be a regular UTF-8 file of at most MAX_MANIFEST_BYTES
    (registry.formats.documents, shared with evidence documents).
    """
    try:
        text = read_document(path, "manifest", MAX_MANIFEST_BYTES)
    except DocumentError as exc:
        raise ContractError(str(exc)) from None
    try:
        return Contract.from_yaml(text)
    except ContractError as exc:
        raise ContractError(f"{path}: {exc}") from None


def _model(obj: Any) -> ModelRef | None:
    if obj is None:
        return None
    raw = f.block(obj, "model")
    f.only_known(raw, ("id", "revision"), "model")
    return ModelRef(id=f.required(raw, "id", "model"), revision=raw.get("revision"))


def _sampling(obj: Any) -> Sampling | None:
    if obj is None:
        return None
    raw = f.block(obj, "sampling")
    f.only_known(raw, (*_SAMPLING_SIZES, "seed", "dtype"), "sampling")
    return Sampling(**{key: value for key, value in raw.items() if value is not None})


def _tags(obj: Any) -> tuple[str, ...]:
    if obj is None:
        return ()
    if not isinstance(obj, list):
        raise ContractError(f"tags: expected a list, got {type(obj).__name__}")
    return tuple(obj)
