"""The parity policy: byte equality by default, declared per-dtype tolerances otherwise.

A tolerance is never invented: a widened default is how kernels with 131072.0
absolute error were once admitted at `match=true` (docs/architecture.md, "The problem").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, cast

from registry.contracts import fields as f
from registry.contracts.errors import ContractError
from registry.formats.dtypes import is_floating_dtype, normalize_dtype

POLICIES = ("byte_equal", "tolerance")


@dataclass(frozen=True)
class Tolerance:
    """|candidate - reference| <= atol + rtol * |reference| elementwise, and, when
    declared, max_abs bounds the absolute error outright (rtol alone lets a
    3.3e6-magnitude reference hide an error of 32768)."""

    atol: float
    rtol: float
    max_abs: float | None = None

    def canonical(self) -> dict[str, Any]:
        return {"atol": self.atol, "max_abs": self.max_abs, "rtol": self.rtol}


@dataclass(frozen=True)
class ParityPolicy:
    policy: str = "byte_equal"
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)

    def __post_init__(self) -> None:
        f.choice(self.policy, POLICIES, "parity.policy")
        normalized: dict[str, Tolerance] = {}
        for dtype, tol in self.tolerances.items():
            path = f"parity.tolerances.{dtype}"
            name = normalize_dtype(f.text(dtype, path))
            if not is_floating_dtype(name):
                raise ContractError(
                    f"{path}: a tolerance applies only to floating dtypes; {name} leaves need byte equality"
                )
            if name in normalized:
                raise ContractError(f"{path}: tolerance for {name} declared twice")
            normalized[name] = _checked_tolerance(tol, path)
        if self.policy == "tolerance" and not normalized:
            raise ContractError("parity.tolerances: the tolerance policy needs a tolerance per dtype; none declared")
        if self.policy == "byte_equal" and normalized:
            raise ContractError("parity.tolerances: declared under policy byte_equal, where no tolerance applies")
        object.__setattr__(self, "tolerances", MappingProxyType(dict(sorted(normalized.items()))))

    def tolerance_for(self, dtype: str) -> Tolerance:
        """The declared tolerance for `dtype`; never a default."""
        name = normalize_dtype(dtype)
        try:
            return self.tolerances[name]
        except KeyError:
            raise ContractError(f"no tolerance declared for dtype {name}") from None

    def canonical(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "tolerances": {dtype: tol.canonical() for dtype, tol in self.tolerances.items()},
        }

    @classmethod
    def from_mapping(cls, obj: Any) -> ParityPolicy:
        if obj is None:
            return cls()
        raw = f.block(obj, "parity")
        f.only_known(raw, ("policy", "tolerances"), "parity")
        tolerances: dict[str, Tolerance] = {}
        if raw.get("tolerances") is not None:
            for dtype, spec in f.block(raw["tolerances"], "parity.tolerances").items():
                tolerances[dtype] = _tolerance_from_mapping(spec, f"parity.tolerances.{dtype}")
        return cls(policy=raw.get("policy", "byte_equal"), tolerances=tolerances)


def _tolerance_from_mapping(obj: Any, path: str) -> Tolerance:
    raw = f.block(obj, path)
    f.only_known(raw, ("atol", "rtol", "max_abs"), path)
    return Tolerance(
        atol=f.required(raw, "atol", path),
        rtol=f.required(raw, "rtol", path),
        max_abs=raw.get("max_abs"),
    )


def _checked_tolerance(tol: Any, path: str) -> Tolerance:
    if not isinstance(tol, Tolerance):
        raise ContractError(f"{path}: expected a Tolerance, got {type(tol).__name__}")
    values = {"atol": tol.atol, "rtol": tol.rtol, "max_abs": tol.max_abs}
    checked: dict[str, float | None] = {}
    for name, value in values.items():
        if value is None and name == "max_abs":
            checked[name] = None
            continue
        number = f.number(value, f"{path}.{name}")
        if number < 0:
            raise ContractError(f"{path}.{name}: {value} is negative")
        checked[name] = number
    return Tolerance(atol=cast(float, checked["atol"]), rtol=cast(float, checked["rtol"]), max_abs=checked["max_abs"])
