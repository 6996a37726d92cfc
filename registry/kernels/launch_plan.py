"""A launch plan: what one call of a compiled Triton kernel bundle launches, with every size already known.

A bundle's launch spec (symbols, constraints, variants, grid and argument
expressions) is evaluated against the shapes of one concrete call by the
registry, never by the candidate; the result is this plan. The launcher
(the process that loads the registry's own cubins and calls
`cuLaunchKernel`) takes only a plan: it allocates the buffers the plan
names, launches in the plan's order on its own stream and times them. It
parses no spec and evaluates no expression, so nothing a bundle declares is
ever code in the process that holds the device.

Pure dataclasses: no torch, no CUDA.
"""
from __future__ import annotations

from dataclasses import dataclass

BUFFER_ROLES = ("input", "output", "inout")
"""An input is mapped read-only for the kernel's call; an output is pre-filled with random bits; an inout is both read
and written (filled from the caller's bytes)."""

SCALAR_TYPES = ("i32", "i64", "u32", "u64", "fp32", "fp64")
"""The kernel parameter types a scalar argument may have (Triton's signature names)."""


@dataclass(frozen=True)
class BufferSpec:
    """One device buffer the launcher allocates for a call."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    nbytes: int
    align: int


@dataclass(frozen=True)
class ScalarArg:
    """A scalar kernel parameter, passed by value as `ctype`."""

    ctype: str
    value: int | float


@dataclass(frozen=True)
class BufferArg:
    """A pointer kernel parameter: the device address of the named buffer."""

    buffer: str


@dataclass(frozen=True)
class Launch:
    """One `cuLaunchKernel` of the plan."""

    kernel: str
    arch: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[BufferArg | ScalarArg, ...]
    scratch_args: int


@dataclass(frozen=True)
class LaunchPlan:
    """Every buffer of one call and the launches that make it, in order, with the spec variant that matched."""

    buffers: tuple[BufferSpec, ...]
    launches: tuple[Launch, ...]
    variant: str
