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


def plan_to_json(plan: LaunchPlan) -> dict:
    """The plan as JSON values, how the harness sends it to a launcher in another process."""
    def arg(value: BufferArg | ScalarArg) -> dict:
        return {"buffer": value.buffer} if isinstance(value, BufferArg) else {"ctype": value.ctype, "value": value.value}

    return {"variant": plan.variant,
            "buffers": [{"name": b.name, "role": b.role, "dtype": b.dtype, "shape": list(b.shape),
                         "strides": list(b.strides), "nbytes": b.nbytes, "align": b.align} for b in plan.buffers],
            "launches": [{"kernel": launch.kernel, "arch": launch.arch, "entry": launch.entry,
                          "grid": list(launch.grid), "block": list(launch.block), "shared_bytes": launch.shared_bytes,
                          "args": [arg(a) for a in launch.args], "scratch_args": launch.scratch_args}
                         for launch in plan.launches]}


def plan_from_json(value: object) -> LaunchPlan:
    """The plan ``plan_to_json`` wrote; ValueError (one line) for anything else. Only the JSON shape is checked
    here: what the plan may launch is the launcher's check (``registry.kernels.launcher.check_plan``)."""
    def need(found: object, kind: type | tuple, where: str) -> object:
        if not isinstance(found, kind) or isinstance(found, bool) and kind is not bool:
            raise ValueError(f"launch plan: {where} is {type(found).__name__}, not {getattr(kind, '__name__', kind)}")
        return found

    def ints(found: object, where: str) -> tuple[int, ...]:
        return tuple(need(n, int, f"{where}[{i}]") for i, n in enumerate(need(found, list, where)))

    def fields(found: object, names: tuple[str, ...], where: str) -> dict:
        need(found, dict, where)
        if set(found) != set(names):
            raise ValueError(f"launch plan: {where} has fields {sorted(found)}, expected {sorted(names)}")
        return found

    def arg(found: object, where: str) -> BufferArg | ScalarArg:
        if isinstance(found, dict) and set(found) == {"buffer"}:
            return BufferArg(need(found["buffer"], str, f"{where}.buffer"))
        item = fields(found, ("ctype", "value"), where)
        return ScalarArg(need(item["ctype"], str, f"{where}.ctype"), need(item["value"], (int, float), f"{where}.value"))

    plan = fields(value, ("variant", "buffers", "launches"), "plan")
    buffers = []
    for i, found in enumerate(need(plan["buffers"], list, "buffers")):
        b = fields(found, ("name", "role", "dtype", "shape", "strides", "nbytes", "align"), f"buffers[{i}]")
        buffers.append(BufferSpec(need(b["name"], str, "name"), need(b["role"], str, "role"),
                                  need(b["dtype"], str, "dtype"), ints(b["shape"], "shape"),
                                  ints(b["strides"], "strides"), need(b["nbytes"], int, "nbytes"),
                                  need(b["align"], int, "align")))
    launches = []
    for i, found in enumerate(need(plan["launches"], list, "launches")):
        where = f"launches[{i}]"
        item = fields(found, ("kernel", "arch", "entry", "grid", "block", "shared_bytes", "args", "scratch_args"),
                      where)
        launches.append(Launch(need(item["kernel"], str, f"{where}.kernel"), need(item["arch"], str, f"{where}.arch"),
                               need(item["entry"], str, f"{where}.entry"), ints(item["grid"], f"{where}.grid"),
                               ints(item["block"], f"{where}.block"),
                               need(item["shared_bytes"], int, f"{where}.shared_bytes"),
                               tuple(arg(a, f"{where}.args[{j}]")
                                     for j, a in enumerate(need(item["args"], list, f"{where}.args"))),
                               need(item["scratch_args"], int, f"{where}.scratch_args")))
    return LaunchPlan(tuple(buffers), tuple(launches), need(plan["variant"], str, "variant"))
