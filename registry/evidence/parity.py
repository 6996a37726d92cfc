"""Tensor parity: the comparator behind every parity evidence item.

Two failure modes shaped it (docs/architecture.md, "The problem"): a comparator that
reported ``max_abs_error=nan`` while ``allclose`` said True, and a tolerance
widened until 131072.0 absolute error passed. So:

- every leaf records both sides' dtype, shape and strides, so a float32
  candidate of a bfloat16 reference, or a (2, 4) candidate of a (2, 8) one,
  is visible in the evidence (the gate quarantines it);
- byte equality means equal bytes, shape, dtype *and* strides; under the
  ``byte_equal`` policy nothing else decides and no tolerance is recorded;
- errors are taken over elements finite in both tensors (matching infinities
  count as zero error), so a NaN can never hide inside a maximum;
- every NaN/inf position and sign is compared separately (``nonfinite_mismatch``);
- a tolerance is always passed in and recorded with the leaf, never defaulted.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from registry.formats.fields import is_finite_number

POLICIES = ("byte_equal", "tolerance")
_TOLERANCE_KEYS = {"atol", "rtol", "max_abs"}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: the key tolerances are declared under."""
    return str(dtype).removeprefix("torch.")


def validate_tolerance(tolerance: Any) -> dict[str, float]:
    """Check a declared tolerance: atol and rtol finite and >= 0, optional max_abs finite and > 0."""
    if not isinstance(tolerance, Mapping):
        raise ValueError(f"a tolerance must be a mapping with atol and rtol, got {tolerance!r}")
    unknown = set(tolerance) - _TOLERANCE_KEYS
    if unknown:
        raise ValueError(f"unknown tolerance fields {sorted(unknown)}; allowed: {sorted(_TOLERANCE_KEYS)}")
    missing = {"atol", "rtol"} - set(tolerance)
    if missing:
        raise ValueError(f"tolerance lacks {sorted(missing)}; a tolerance is never filled in by default")
    clean: dict[str, float] = {}
    for key, value in tolerance.items():
        if not is_finite_number(value):
            raise ValueError(f"tolerance {key} must be a finite number, got {value!r}")
        if value < 0 or (key == "max_abs" and value == 0):
            raise ValueError(f"tolerance {key} must be {'> 0' if key == 'max_abs' else '>= 0'}, got {value!r}")
        clean[key] = float(value)
    return clean


def _same_bytes(a: torch.Tensor, b: torch.Tensor, device: torch.device) -> bool:
    """Equal storage bytes of two tensors of one shape, dtype and stride."""
    flat_a = a.detach().to(device).contiguous().reshape(-1).view(torch.uint8)
    flat_b = b.detach().to(device).contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(flat_a, flat_b))


def compare_leaf(name: str, reference: torch.Tensor, candidate: torch.Tensor, policy: str,
                 tolerance: Mapping[str, float] | None) -> dict[str, Any]:
    """One parity leaf (docs/evidence-format.md) for a reference/candidate tensor pair.

    The leaf records both sides' dtype, shape and strides, so a candidate of
    another dtype or layout is visible as such, never hidden behind one name.
    Errors are the maxima over elements finite in both tensors; over an empty
    set they are 0.0 (nothing finite differs), so null always means "not
    compared": a shape mismatch leaves nothing to compare element by element,
    its errors are null and, under the tolerance policy, every reference
    element counts as outside the tolerance.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown parity policy {policy!r}; expected one of {list(POLICIES)}")
    if policy == "tolerance" and tolerance is None:
        raise ValueError(f"leaf {name!r}: the tolerance policy needs a declared tolerance; none was given")
    if policy == "byte_equal" and tolerance is not None:
        raise ValueError(f"leaf {name!r}: the byte_equal policy takes no tolerance")
    for label, t in (("reference", reference), ("candidate", candidate)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"leaf {name!r}: {label} is a {type(t).__name__}, not a torch.Tensor")
    tol = validate_tolerance(tolerance) if tolerance is not None else None

    # Work where the tensors live (a GPU corpus leaf has ~1e8 elements); mixed -> CPU.
    device = reference.device if reference.device == candidate.device else torch.device("cpu")
    same_shape = reference.shape == candidate.shape
    same_layout = same_shape and reference.stride() == candidate.stride() and reference.dtype == candidate.dtype
    leaf: dict[str, Any] = {"name": name}
    for side, tensor in (("reference", reference), ("candidate", candidate)):
        leaf[f"{side}_dtype"] = dtype_name(tensor.dtype)
        leaf[f"{side}_shape"] = list(tensor.shape)
        leaf[f"{side}_strides"] = list(tensor.stride())
    leaf["byte_equal"] = same_layout and _same_bytes(reference, candidate, device)
    ref = reference.detach().to(device, torch.float64)
    cand = candidate.detach().to(device, torch.float64)
    leaf["has_nan"] = bool(torch.isnan(cand).any())
    leaf["has_inf"] = bool(torch.isinf(cand).any())
    leaf["reference_has_nan"] = bool(torch.isnan(ref).any())
    leaf["reference_has_inf"] = bool(torch.isinf(ref).any())
    if not same_shape:
        leaf.update(max_abs_error=None, max_rel_error=None,
                    nonfinite_mismatch=leaf["has_nan"] or leaf["has_inf"]
                    or leaf["reference_has_nan"] or leaf["reference_has_inf"])
        if tol is not None:
            leaf.update(tolerance=tol, outside_tolerance=reference.numel())
        return leaf

    nan_r, nan_c = torch.isnan(ref), torch.isnan(cand)
    inf_r, inf_c = torch.isinf(ref), torch.isinf(cand)
    matching_inf = inf_r & inf_c & (torch.sign(ref) == torch.sign(cand))
    leaf["nonfinite_mismatch"] = bool((nan_r != nan_c).any() or ((inf_r | inf_c) & ~matching_inf).any())

    finite = torch.isfinite(ref) & torch.isfinite(cand)
    diff = (cand - ref).abs()[finite]
    ref_abs = ref.abs()[finite]
    # Relative error is |c - r| / |r|; where r == 0 it is 0 if c == r and undefined
    # (left to the absolute error) otherwise.
    rel_defined = (ref_abs > 0) | (diff == 0)
    rel = torch.where(ref_abs > 0, diff / ref_abs.clamp_min(torch.finfo(torch.float64).tiny), 0.0)[rel_defined]
    leaf["max_abs_error"] = float(diff.max()) if diff.numel() else 0.0
    if rel.numel():
        leaf["max_rel_error"] = float(rel.max())
    else:  # no finite pair has a defined relative error: 0.0 if none differs, else not measurable
        leaf["max_rel_error"] = 0.0 if not diff.numel() else None
    if tol is not None:
        leaf["tolerance"] = tol
        leaf["outside_tolerance"] = int((diff > tol["atol"] + tol["rtol"] * ref_abs).sum())
    return leaf


def _as_tuple(outputs: Any, label: str) -> tuple[torch.Tensor, ...]:
    if isinstance(outputs, torch.Tensor):
        return (outputs,)
    if isinstance(outputs, (tuple, list)):
        return tuple(outputs)
    raise TypeError(f"{label} outputs must be a tensor or a tuple of tensors, got {type(outputs).__name__}")


def compare_outputs(ref_outputs: Any, cand_outputs: Any, names: Sequence[str], policy: str,
                    tolerances_by_dtype: Mapping[str, Mapping[str, float]] | None,
                    approx_math: Sequence[str] | None = None) -> dict[str, Any]:
    """A parity evidence item over named outputs.

    Under ``tolerance`` each leaf gets the tolerance declared for its reference
    dtype (a dtype without one is an error). Under ``byte_equal`` only bytes
    decide, so declared tolerances are neither applied nor recorded;
    ``approx_math`` (the source-screen findings) is recorded there.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown parity policy {policy!r}; expected one of {list(POLICIES)}")
    refs, cands = _as_tuple(ref_outputs, "reference"), _as_tuple(cand_outputs, "candidate")
    if not (len(refs) == len(cands) == len(names)):
        raise ValueError(f"{len(names)} output names, {len(refs)} reference and {len(cands)} candidate outputs")
    if policy == "tolerance" and tolerances_by_dtype is None:
        raise ValueError("the tolerance policy needs tolerances_by_dtype; none was given")
    leaves = []
    for name, ref, cand in zip(names, refs, cands):
        tol = None
        if policy == "tolerance":
            key = dtype_name(ref.dtype) if isinstance(ref, torch.Tensor) else None
            if key not in tolerances_by_dtype:
                raise ValueError(f"leaf {name!r}: no tolerance declared for dtype {key}")
            tol = tolerances_by_dtype[key]
        leaves.append(compare_leaf(name, ref, cand, policy, tol))
    item: dict[str, Any] = {"kind": "parity", "policy": policy, "leaves": leaves}
    if policy == "byte_equal" and approx_math is not None:
        item["approx_math"] = list(approx_math)
    return item
