"""One call of a compiled kernel bundle, planned: its spec evaluated against the call's inputs.

`plan_call(spec, inputs, arch=...)` is the only place a launch spec
(registry/formats/launch_spec.py) meets concrete sizes. It checks every input
the spec declares (element type, rank, shape, contiguity, base alignment),
reads the size symbols, checks the constraints, takes the first variant
whose dtypes and predicate match, and evaluates its grids and arguments into
a LaunchPlan (registry/kernels/launch_plan.py) with every buffer's bytes.
The launcher takes only that plan: it parses no spec and evaluates no
expression. Anything the call does not meet is refused in one line
(`CallRefused`), and nothing is launched.

Pure: no torch, no CUDA; a caller describes its tensors as `CallTensor`s.
"""
from __future__ import annotations

from collections.abc import Mapping
from math import prod

from registry.formats.dtypes import ELEMENT_BYTES
from registry.formats.expressions import MAX_VALUE, Expression
from registry.formats.launch_spec import (MAX_GRID, SCALAR_RANGES, SCRATCH_POINTERS, ArgDecl, CallRefused, CallTensor,
                                          LaunchSpec, TensorDecl, VariantDecl, contiguous_strides, evaluate, match_call,
                                          shown, size_of)
from registry.kernels.launch_plan import BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg

WARP_THREADS = 32


def plan_call(spec: LaunchSpec, inputs: Mapping[str, CallTensor], *, arch: str) -> LaunchPlan:
    """The launch plan of one call on a device of target `arch` (`sm_90a`, ...), or CallRefused."""
    if arch not in spec.arches:
        raise CallRefused(f"the bundle carries no cubin for {arch} (it carries {', '.join(spec.arches)})")
    matched = match_call(spec, inputs)
    buffers = tuple(_buffer(tensor, matched.dtypes, matched.values) for tensor in spec.tensors)
    return LaunchPlan(buffers=buffers, launches=_launches(spec, matched.variant, matched.values, arch),
                      variant=matched.variant.name)


def _buffer(tensor: TensorDecl, bound: Mapping[str, str], values: Mapping[str, int]) -> BufferSpec:
    dtype = bound.get(tensor.dtype, tensor.dtype)
    shape = tuple(size_of(dim, values) for dim in tensor.shape)
    if any(size < 0 for size in shape):
        raise CallRefused(f"{tensor.name} would have the negative shape {shape} ({shown(values)})")
    nbytes = prod(shape) * ELEMENT_BYTES[dtype]
    if nbytes > MAX_VALUE:
        raise CallRefused(f"{tensor.name} would hold {nbytes} bytes, past {MAX_VALUE}")
    return BufferSpec(name=tensor.name, role=tensor.role, dtype=dtype, shape=shape, strides=contiguous_strides(shape),
                      nbytes=nbytes, align=tensor.align)


def _launches(spec: LaunchSpec, variant: VariantDecl, values: Mapping[str, int], arch: str) -> tuple[Launch, ...]:
    found = []
    for index, launch in enumerate(variant.launches):
        kernel = spec.kernels[launch.kernel]
        grid = tuple(size_of(dim, values) for dim in launch.grid)
        for axis, (size, limit) in enumerate(zip(grid, MAX_GRID)):
            if not 1 <= size <= limit:
                raise CallRefused(f"variant {variant.name}, launch {index} ({launch.kernel}): grid {grid} has "
                                  f"{'xyz'[axis]} = {size}, outside 1..{limit} ({shown(values)})")
        found.append(Launch(kernel=launch.kernel, arch=arch, entry=kernel.entry, grid=grid,
                            block=(WARP_THREADS * kernel.num_warps, 1, 1), shared_bytes=kernel.targets[arch].shared,
                            args=tuple(_argument(arg, values, variant.name, index) for arg in launch.args),
                            scratch_args=SCRATCH_POINTERS))
    return tuple(found)


def _argument(arg: ArgDecl, values: Mapping[str, int], variant: str, index: int) -> BufferArg | ScalarArg:
    if arg.buffer is not None:
        return BufferArg(arg.buffer)
    if not isinstance(arg.value, Expression):
        return ScalarArg(arg.ctype, arg.value)
    value = evaluate(arg.value, values)
    low, high = SCALAR_RANGES[arg.ctype]
    if not low <= value <= high:
        raise CallRefused(f"variant {variant}, launch {index}: the {arg.ctype} argument {arg.value.text!r} = {value} "
                          f"is outside {low}..{high} ({shown(values)})")
    return ScalarArg(arg.ctype, value)
