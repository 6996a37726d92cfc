"""The operation registry: what each op computes, its reference, kernels, corpus and cost.

Entries are ``"module:function"`` strings so that evidence names the exact code
that ran and a CLI can evaluate a candidate that lives outside this package.
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from registry.formats.errors import UserError
from registry.kernels.corpus import Case, Sampler, corpus_cases


# Dotted Python identifiers: a module path, or an attribute path inside a module.
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class EntryError(UserError):
    """An entry string that does not name an importable callable."""


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
    for spec in _OPERATIONS:
        if spec.name == name:
            return spec
    raise UserError(f"unknown operation {name!r}; known: {[s.name for s in _OPERATIONS]}")


def resolve_entry(entry: str) -> Callable:
    """Import ``"package.module:function"`` and return the Python function it names.

    Checked before anything is imported: the form (dotted Python identifiers
    on both sides) and that the module is not part of Python's standard
    library, whose functions (``builtins:print``, ``os:system``) are never
    kernels and must never receive a kernel's arguments. After the import the
    target must be a function written in Python, not a builtin, a class or
    another kind of callable. Anything else is one EntryError line.
    """
    if not isinstance(entry, str) or entry.count(":") != 1:
        raise EntryError(f"entry {entry!r} must have the form 'module:function'")
    module_name, attr = entry.split(":")
    if not module_name or not attr:
        raise EntryError(f"entry {entry!r} must have the form 'module:function'")
    if not (_DOTTED.fullmatch(module_name) and _DOTTED.fullmatch(attr)):
        raise EntryError(f"entry {entry!r} must have the form 'module:function' in Python identifiers")
    if module_name.split(".")[0] in sys.stdlib_module_names:
        raise EntryError(f"entry {entry!r}: module {module_name!r} is part of Python's standard library, not a kernel")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EntryError(f"entry {entry!r}: cannot import module {module_name!r} ({exc})") from exc
    except Exception as exc:  # the module's own code failed while importing
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "no message"
        raise EntryError(f"entry {entry!r}: importing {module_name!r} failed: {type(exc).__name__}: {reason}") from None
    target = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise EntryError(f"entry {entry!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise EntryError(f"entry {entry!r} names a {type(target).__name__}, not a callable")
    if not inspect.isfunction(target):
        raise EntryError(f"entry {entry!r} names a {type(target).__name__}, not a function written in Python")
    return target
