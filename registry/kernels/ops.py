"""The operation registry: what each op computes, its reference, kernels, corpus and cost.

Entries are strings (registry.kernels.entries) so that evidence names the exact
code that ran; built-in kernels and references are ``"registry.module:function"``.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from registry.kernels.corpus import Case, Sampler, corpus_cases
from registry.kernels.entries import EntryError, parse_entry
from registry.kernels.operation_names import check_operation

__all__ = ["EntryError", "entry_function", "get_operation", "list_operations", "resolve_entry"]


@dataclass(frozen=True)
class Cost:
    """Work of one call: floating-point operations and the minimum bytes read + written."""

    flops: int
    bytes: int


@dataclass(frozen=True)
class OperationSpec:
    """Everything the evaluation runner needs to know about one operation."""

    name: str
    reference: str
    kernels: tuple[str, ...]
    outputs: tuple[str, ...]
    cost_model: str
    cost: Callable[[Case], Cost]
    make_inputs: Callable[[Case, torch.device | str], tuple[torch.Tensor, ...]]

    def corpus(self, kind: str) -> tuple[Case, ...]:
        return corpus_cases(kind)


def _modln_inputs(case: Case, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    s = Sampler(case.seed, device)
    x = s.normal((case.batch, case.seq, case.dim), 1.0, 2.0, case.torch_dtype)
    return x, s.normal((case.batch, case.dim), 0.0, 0.1), s.normal((case.batch, case.dim), 0.0, 0.1)


def _gated_inputs(case: Case, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    s = Sampler(case.seed, device)
    shape = (case.batch, case.seq, case.dim)
    residual = s.normal(shape, 0.0, 4.0, case.torch_dtype)
    x = s.normal(shape, 0.0, 1.0, case.torch_dtype)
    return residual, x, s.normal((case.batch, case.dim), 0.0, 0.5)


def _gated_ln_inputs(case: Case, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    residual, x, gate = _gated_inputs(case, device)
    s = Sampler(case.seed + 500, device)
    return residual, x, gate, s.normal((case.dim,), 1.0, 0.1), s.normal((case.dim,), 0.0, 0.1)


def _rms_inputs(case: Case, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    s = Sampler(case.seed, device)
    x = s.normal((case.batch, case.seq, case.dim), 0.0, 1.0, case.torch_dtype)
    return x, s.normal((case.dim,), 1.0, 0.1)


def _elements(case: Case) -> int:
    return case.rows * case.dim


_OPERATIONS = (
    OperationSpec(
        name="modulated_layernorm",
        reference="registry.kernels.reference:modulated_layernorm",
        kernels=("registry.kernels.modln:modulated_layernorm_triton",),
        outputs=("y",),
        cost_model="bytes = 2*B*S*D*elt (read x, write y) + 2*B*D*4 (scale, shift); flops = 8*B*S*D",
        cost=lambda c: Cost(8 * _elements(c), 2 * _elements(c) * c.element_size + 2 * c.batch * c.dim * 4),
        make_inputs=_modln_inputs,
    ),
    OperationSpec(
        name="gated_residual",
        reference="registry.kernels.reference:gated_residual",
        kernels=("registry.kernels.gated:gated_residual_triton",),
        outputs=("out",),
        cost_model="bytes = 3*B*S*D*elt (read residual, x; write out) + B*D*4 (gate); flops = 2*B*S*D",
        cost=lambda c: Cost(2 * _elements(c), 3 * _elements(c) * c.element_size + c.batch * c.dim * 4),
        make_inputs=_gated_inputs,
    ),
    OperationSpec(
        name="gated_residual_layernorm",
        reference="registry.kernels.reference:gated_residual_layernorm",
        kernels=("registry.kernels.gated:gated_residual_layernorm_triton",),
        outputs=("n", "u"),
        cost_model=("bytes = 4*B*S*D*elt (read residual, x; write n, u) + B*D*4 (gate) + 2*D*4 "
                    "(weight, bias); flops = 9*B*S*D"),
        cost=lambda c: Cost(9 * _elements(c),
                            4 * _elements(c) * c.element_size + c.batch * c.dim * 4 + 2 * c.dim * 4),
        make_inputs=_gated_ln_inputs,
    ),
    OperationSpec(
        name="rms_norm",
        reference="registry.kernels.reference:rms_norm",
        kernels=("registry.kernels.rmsnorm:rms_norm_triton",),
        outputs=("y",),
        cost_model="bytes = 2*B*S*D*elt (read x, write y) + D*4 (weight); flops = 4*B*S*D",
        cost=lambda c: Cost(4 * _elements(c), 2 * _elements(c) * c.element_size + c.dim * 4),
        make_inputs=_rms_inputs,
    ),
)


def list_operations() -> list[OperationSpec]:
    """Every registered operation, in a fixed order."""
    return list(_OPERATIONS)


def get_operation(name: str) -> OperationSpec:
    """The spec called ``name``; an unknown name is an error listing the known ones."""
    check_operation(name)
    return next(spec for spec in _OPERATIONS if spec.name == name)


def resolve_entry(entry: str) -> Callable:
    """Import a ``"registry.module:function"`` entry (a built-in kernel or reference) and return its function.

    Only modules of the registry package itself are imported here; a
    candidate's file entry is loaded by the evaluation worker alone
    (registry.kernels.worker), never by this process. After the import the
    target must be a function written in Python. Anything else is one
    EntryError line.
    """
    parsed = parse_entry(entry)
    if parsed.module is None:
        raise EntryError(f"entry {entry!r} is a candidate file: only the evaluation worker loads it")
    try:
        module = importlib.import_module(parsed.module)
    except ImportError as exc:
        raise EntryError(f"entry {entry!r}: cannot import module {parsed.module!r} ({exc})") from exc
    return entry_function(module, entry, parsed.function)


def entry_function(module: object, entry: str, name: str) -> Callable:
    """``module``'s attribute ``name``, which must be a function written in Python (one EntryError line otherwise)."""
    target = getattr(module, name, None)
    if target is None:
        raise EntryError(f"entry {entry!r}: the module has no attribute {name!r}")
    if not inspect.isfunction(target):
        raise EntryError(f"entry {entry!r} names a {type(target).__name__}, not a function written in Python")
    return target
