"""The launch spec of a compiled Triton kernel bundle: what one call takes, and what it launches.

A `registry.triton-kernel/1` bundle (docs/bundles.md) ships cubins, never a
Python wrapper: what the wrapper would have decided at run time (which
compiled kernel, which grid, which arguments) is declared here instead, and
the registry evaluates it for each call (registry/kernels/plan.py turns a
spec and one call's inputs into a LaunchPlan). The spec declares:

- `dtypes`: type variables, each with the element types it may take
  (a call binds each to one, the same for every tensor that names it);
- `tensors`: every buffer of a call, in order: name, role (`input`,
  `output`, `inout`), dtype (a name or a type variable), shape (integers or
  integer expressions over the symbols), layout (`contiguous`, the only one
  of version 1) and the base alignment it needs in bytes;
- `symbols`: each size symbol and the input dimension it is read from;
- `constraints`: truth-valued expressions every call must meet;
- `kernels`: each compiled kernel by key: its entry symbol, `num_warps`, the
  kinds of its declared parameters, and per target architecture its
  dynamic shared memory and the bundle files of its TTIR, cubin and Triton
  metadata;
- `variants`, in order: a name, the dtype of each type variable, a
  predicate (`when`) and the launches, in sequence, each a kernel, a grid
  of three integer expressions and one argument per parameter (a tensor, or
  a scalar of the parameter's type). A call takes the first variant that
  matches; a call that matches none is refused, never launched with nothing.

`match_call(spec, inputs)` checks one call against the spec (every input
declared and nothing else, each of its element type, rank, shape, layout and
alignment; the constraints) and chooses its variant; registry/kernels/plan.py
turns the match into a LaunchPlan, and a bundle's resolution asks it
whether a call site fits.

Expressions are registry.formats.expressions, parsed here, never code.
Parsing is strict: an unknown field at any depth, a name declared twice, a
reference to anything undeclared, an argument of the wrong kind, a tensor
the kernels never write, is a one-line SpecError naming the field.
Pure: no torch, no CUDA, nothing from the registry's other packages.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import Any, Union

from registry.formats.dtypes import ELEMENT_BYTES
from registry.formats.errors import UserError
from registry.formats.expressions import (INTEGER, MAX_VALUE, TRUTH, Expression, ExpressionError, check_symbol_name,
                                        parse_expression)
from registry.formats.fields import FieldKit, join

ROLES = ("input", "output", "inout")
"""An input is only read; an output only written; an inout both (docs/bundles.md)."""
LAYOUTS = ("contiguous",)
"""Row-major with no gaps: the strides follow from the shape. The only layout of version 1."""
POINTER = "ptr"
SCALAR_BYTES = {"i32": 4, "i64": 8, "u32": 4, "u64": 8, "fp32": 4, "fp64": 8}
"""The scalar parameter types a kernel may declare (Triton's names), and their size in the parameter buffer."""
SCALAR_TYPES = tuple(SCALAR_BYTES)
PARAM_BYTES = {POINTER: 8, **SCALAR_BYTES}
SCALAR_RANGES = {"i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1), "u32": (0, (1 << 32) - 1),
                 "u64": (0, (1 << 63) - 1)}
"""The values an integer scalar argument may take (u64 within what an expression can reach)."""
FP32_MAX = 3.4028234663852886e38

TRITON_VERSION = "3.7.1"
"""The Triton a bundle's kernels are compiled with, and the registry rebuilds them with (pinned in pyproject.toml)."""
SCRATCH_POINTERS = 2
"""The pointer parameters Triton 3.7.1 appends after a kernel's declared ones (global scratch, profile scratch):
every cubin's parameter layout ends with them, and a launch passes them as NULL (version 1 allows no scratch)."""

TARGET_ARCHES = {"sm_90a": ("sm90", 90), "sm_100a": ("sm100", 100)}
"""The targets a bundle may carry a cubin for (as Triton 3.7.1 and its ptxas name them), with the device
architecture a runtime reports for them (docs/bundles.md's compatibility window) and the compute capability
Triton compiles for. A cubin for sm_90a runs only on a device of capability 9.0, one for sm_100a only on 10.0."""
NUM_WARPS = (1, 2, 4, 8, 16, 32)
MAX_SHARED_BYTES = 232448
"""The dynamic shared memory a block may opt into on sm_90 and sm_100 (227 KiB)."""
MAX_GRID = ((1 << 31) - 1, 65535, 65535)
ALIGNMENTS = tuple(1 << n for n in range(4, 13))
"""A tensor's base alignment in bytes: a power of two from 16 (what Triton's pointer arguments assume) to 4096."""
MAX_TENSORS, MAX_DIMS, MAX_SYMBOLS, MAX_CONSTRAINTS = 64, 8, 64, 64
MAX_KERNELS, MAX_PARAMS, MAX_VARIANTS, MAX_LAUNCHES = 256, 64, 256, 16

_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
_SPEC = ("dtypes", "tensors", "symbols", "constraints", "kernels", "variants")
_TENSOR = ("name", "role", "dtype", "shape", "layout", "align")
_SYMBOL = ("tensor", "dim")
_KERNEL = ("entry", "num_warps", "params", "targets")
_TARGET = ("shared", "ttir", "cubin", "metadata")
_VARIANT = ("name", "dtypes", "when", "launches")
_LAUNCH = ("kernel", "grid", "args")
_BUFFER_ARG = ("buffer",)
_SCALAR_ARG = ("scalar", "value")

TARGET_FILES = ("ttir", "cubin", "metadata")
"""The bundle files each kernel carries per target: Triton's TTIR, the cubin, Triton's metadata JSON."""


class SpecError(UserError):
    """A launch spec that cannot be accepted: `path: problem`, one line."""


f = FieldKit(SpecError)

Dim = Union[int, Expression]


@dataclass(frozen=True)
class TensorDecl:
    name: str
    role: str
    dtype: str  # an element type, or a type variable of `LaunchSpec.dtypes`
    shape: tuple[Dim, ...]
    layout: str
    align: int


@dataclass(frozen=True)
class SymbolDecl:
    name: str
    tensor: str
    dim: int


@dataclass(frozen=True)
class KernelTarget:
    arch: str
    shared: int
    ttir: str
    cubin: str
    metadata: str

    def files(self) -> dict[str, str]:
        return {"ttir": self.ttir, "cubin": self.cubin, "metadata": self.metadata}


@dataclass(frozen=True)
class KernelDecl:
    key: str
    entry: str
    num_warps: int
    params: tuple[str, ...]
    targets: Mapping[str, KernelTarget]

    @property
    def param_bytes(self) -> tuple[int, ...]:
        """The size of each declared parameter, in order, as the cubin's parameter layout must list them."""
        return tuple(PARAM_BYTES[kind] for kind in self.params)


@dataclass(frozen=True)
class ArgDecl:
    """A buffer (`buffer` names a tensor) or a scalar of `ctype` (an integer expression, or a number for fp32/fp64)."""

    buffer: str | None = None
    ctype: str | None = None
    value: Expression | float | None = None


@dataclass(frozen=True)
class LaunchDecl:
    kernel: str
    grid: tuple[Dim, Dim, Dim]
    args: tuple[ArgDecl, ...]


@dataclass(frozen=True)
class VariantDecl:
    name: str
    dtypes: Mapping[str, str]
    when: Expression
    launches: tuple[LaunchDecl, ...]


@dataclass(frozen=True)
class LaunchSpec:
    dtypes: Mapping[str, tuple[str, ...]]
    tensors: tuple[TensorDecl, ...]
    symbols: tuple[SymbolDecl, ...]
    constraints: tuple[Expression, ...]
    kernels: Mapping[str, KernelDecl]
    variants: tuple[VariantDecl, ...]

    @property
    def arches(self) -> tuple[str, ...]:
        """The target architectures every kernel carries a cubin for."""
        first = next(iter(self.kernels.values()))
        return tuple(sorted(first.targets))

    def tensor(self, name: str) -> TensorDecl:
        return next(t for t in self.tensors if t.name == name)

    def canonical(self) -> dict[str, Any]:
        """The spec as the one JSON form a manifest holds and hashes."""
        return {
            "dtypes": {name: list(options) for name, options in self.dtypes.items()},
            "tensors": [{"name": t.name, "role": t.role, "dtype": t.dtype, "shape": [_dim_json(d) for d in t.shape],
                         "layout": t.layout, "align": t.align} for t in self.tensors],
            "symbols": {s.name: {"tensor": s.tensor, "dim": s.dim} for s in self.symbols},
            "constraints": [c.text for c in self.constraints],
            "kernels": {k.key: {"entry": k.entry, "num_warps": k.num_warps, "params": list(k.params),
                                "targets": {arch: {"shared": t.shared, **t.files()} for arch, t in k.targets.items()}}
                        for k in self.kernels.values()},
            "variants": [{"name": v.name, "dtypes": dict(v.dtypes), "when": v.when.text,
                          "launches": [{"kernel": x.kernel, "grid": [_dim_json(d) for d in x.grid],
                                        "args": [_arg_json(a) for a in x.args]} for x in v.launches]}
                         for v in self.variants],
        }


def _dim_json(dim: Dim) -> int | str:
    return dim if isinstance(dim, int) else dim.text


def _arg_json(arg: ArgDecl) -> dict[str, Any]:
    if arg.buffer is not None:
        return {"buffer": arg.buffer}
    return {"scalar": arg.ctype, "value": arg.value.text if isinstance(arg.value, Expression) else arg.value}


def parse_launch_spec(data: Any, path: str = "spec") -> LaunchSpec:
    """Build a spec from parsed JSON; any problem is a SpecError `path.field: problem`."""
    top = f.mapping(data, path)
    f.only_known(top, _SPEC, path)
    for key in _SPEC:
        if key not in top:
            f.refuse(join(path, key), "required")
    dtypes = _dtypes(top["dtypes"], join(path, "dtypes"))
    raw_symbols = _bounded_mapping(top["symbols"], join(path, "symbols"), MAX_SYMBOLS, allow_empty=True)
    symbol_names = set()
    for name in raw_symbols:
        _expression_call(check_symbol_name, join(join(path, "symbols"), name), name)
        if name in dtypes:
            f.refuse(join(join(path, "symbols"), name), "is also a type variable")
        symbol_names.add(name)
    tensors = _tensors(top["tensors"], join(path, "tensors"), dtypes, symbol_names)
    read = {t.dtype for t in tensors if t.role != "output"}
    unread = sorted(set(dtypes) - read)
    if unread:
        f.refuse(join(join(path, "dtypes"), unread[0]), "is the dtype of no input; a call's inputs bind each type "
                                                          "variable")
    symbols = _symbols(raw_symbols, join(path, "symbols"), tensors)
    constraints = tuple(
        _expression(text, symbol_names, TRUTH, f"{join(path, 'constraints')}[{i}]")
        for i, text in enumerate(_bounded_list(top["constraints"], join(path, "constraints"), MAX_CONSTRAINTS,
                                               allow_empty=True)))
    kernels = _kernels(top["kernels"], join(path, "kernels"))
    variants = _variants(top["variants"], join(path, "variants"), dtypes, tensors, symbol_names, kernels)
    return LaunchSpec(dtypes, tensors, symbols, constraints, kernels, variants)


def _bounded_list(value: Any, path: str, limit: int, allow_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        f.refuse(path, "expected a list")
    if not value and not allow_empty:
        f.refuse(path, "empty list")
    if len(value) > limit:
        f.refuse(path, f"{len(value)} entries, more than the {limit} a spec may hold")
    return value


def _bounded_mapping(value: Any, path: str, limit: int, allow_empty: bool = False) -> dict[str, Any]:
    mapping = f.mapping(value, path)
    if not mapping and not allow_empty:
        f.refuse(path, "empty object")
    if len(mapping) > limit:
        f.refuse(path, f"{len(mapping)} entries, more than the {limit} a spec may hold")
    return mapping


def _expression_call(check, path: str, *args):
    try:
        return check(*args)
    except ExpressionError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _expression(text: Any, symbols: set[str], kind: str, path: str) -> Expression:
    return _expression_call(parse_expression, path, text, symbols, kind)


def _dim(value: Any, symbols: set[str], path: str) -> Dim:
    """A size: an integer >= 0, or an integer expression over the symbols."""
    if isinstance(value, str):
        return _expression(value, symbols, INTEGER, path)
    return f.integer(value, path, 0)


def _key(value: Any, path: str, what: str) -> str:
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        f.refuse(path, f"{value!r} cannot name {what} (letters, digits, '_', '.', '-'; at most 128 characters)")
    return value


def _dtypes(value: Any, path: str) -> dict[str, tuple[str, ...]]:
    found = {}
    for name, options in _bounded_mapping(value, path, MAX_SYMBOLS, allow_empty=True).items():
        where = join(path, name)
        _expression_call(check_symbol_name, where, name)
        if name in ELEMENT_BYTES:
            f.refuse(where, "a type variable cannot be named as an element type")
        listed = _bounded_list(options, where, len(ELEMENT_BYTES))
        for i, option in enumerate(listed):
            f.choice(option, ELEMENT_BYTES, f"{where}[{i}]")
        if len(set(listed)) != len(listed):
            f.refuse(where, "an element type is listed twice")
        found[name] = tuple(listed)
    return found


def _tensors(value: Any, path: str, dtypes: dict, symbols: set[str]) -> tuple[TensorDecl, ...]:
    found: list[TensorDecl] = []
    for index, item in enumerate(_bounded_list(value, path, MAX_TENSORS)):
        where = f"{path}[{index}]"
        entry = f.mapping(item, where)
        f.only_known(entry, _TENSOR, where)
        name = _expression_call(check_symbol_name, join(where, "name"), f.required(entry, "name", where))
        if any(t.name == name for t in found):
            f.refuse(join(where, "name"), f"{name!r} is declared twice")
        dtype = f.required(entry, "dtype", where)
        if dtype not in dtypes:
            f.choice(dtype, ELEMENT_BYTES, join(where, "dtype"))
        shape = _bounded_list(f.required(entry, "shape", where), join(where, "shape"), MAX_DIMS, allow_empty=True)
        align = f.integer(f.required(entry, "align", where), join(where, "align"))
        if align not in ALIGNMENTS:
            f.refuse(join(where, "align"), f"{align} is not a power of two from {ALIGNMENTS[0]} to {ALIGNMENTS[-1]}")
        found.append(TensorDecl(
            name=name, role=f.choice(f.required(entry, "role", where), ROLES, join(where, "role")), dtype=dtype,
            shape=tuple(_dim(d, symbols, f"{join(where, 'shape')}[{i}]") for i, d in enumerate(shape)),
            layout=f.choice(f.required(entry, "layout", where), LAYOUTS, join(where, "layout")), align=align))
    return tuple(found)


def _symbols(raw: dict[str, Any], path: str, tensors: tuple[TensorDecl, ...]) -> tuple[SymbolDecl, ...]:
    found = []
    for name, item in raw.items():
        where = join(path, name)
        entry = f.mapping(item, where)
        f.only_known(entry, _SYMBOL, where)
        tensor_name = f.required(entry, "tensor", where)
        tensor = next((t for t in tensors if t.name == tensor_name), None)
        if tensor is None:
            f.refuse(join(where, "tensor"), f"{tensor_name!r} is not a declared tensor")
        if tensor.role == "output":
            f.refuse(join(where, "tensor"), f"{tensor_name} is an output; a size is read from an input")
        dim = f.count(f.required(entry, "dim", where), join(where, "dim"))
        if dim >= len(tensor.shape):
            f.refuse(join(where, "dim"), f"{tensor_name} has {len(tensor.shape)} dimensions")
        declared = tensor.shape[dim]
        if not isinstance(declared, Expression) or declared.text != name:
            f.refuse(join(where, "dim"), f"{tensor_name}.shape[{dim}] is {_dim_json(declared)!r}, not the symbol {name}")
        found.append(SymbolDecl(name, tensor_name, dim))
    return tuple(found)


def _kernels(value: Any, path: str) -> dict[str, KernelDecl]:
    found: dict[str, KernelDecl] = {}
    arches = None
    for key, item in _bounded_mapping(value, path, MAX_KERNELS).items():
        where = join(path, key)
        _key(key, where, "a kernel")
        entry = f.mapping(item, where)
        f.only_known(entry, _KERNEL, where)
        symbol = f.required(entry, "entry", where)
        if not isinstance(symbol, str) or not _ENTRY.fullmatch(symbol):
            f.refuse(join(where, "entry"), f"{symbol!r} is not an entry symbol (a C identifier of at most 256 "
                                           "characters)")
        num_warps = f.integer(f.required(entry, "num_warps", where), join(where, "num_warps"))
        if num_warps not in NUM_WARPS:
            f.refuse(join(where, "num_warps"), f"{num_warps} is not one of {', '.join(map(str, NUM_WARPS))}")
        params = _bounded_list(f.required(entry, "params", where), join(where, "params"), MAX_PARAMS,
                               allow_empty=True)
        for i, kind in enumerate(params):
            f.choice(kind, PARAM_BYTES, f"{join(where, 'params')}[{i}]")
        targets = {}
        for arch, raw_target in _bounded_mapping(f.required(entry, "targets", where), join(where, "targets"),
                                                 MAX_KERNELS).items():
            at = join(join(where, "targets"), arch)
            f.choice(arch, TARGET_ARCHES, at)
            target = f.mapping(raw_target, at)
            f.only_known(target, _TARGET, at)
            shared = f.count(f.required(target, "shared", at), join(at, "shared"))
            if shared > MAX_SHARED_BYTES:
                f.refuse(join(at, "shared"), f"{shared} bytes of shared memory, more than the {MAX_SHARED_BYTES} a "
                                             "block may use")
            targets[arch] = KernelTarget(arch, shared, *(f.text(f.required(target, name, at), join(at, name))
                                                         for name in TARGET_FILES))
        if arches is not None and set(targets) != arches:
            f.refuse(join(where, "targets"), f"targets {', '.join(sorted(targets))}; every kernel of a bundle "
                                             f"carries the same ones ({', '.join(sorted(arches))})")
        arches = set(targets)
        found[key] = KernelDecl(key, symbol, num_warps, tuple(params), targets)
    return found


def _variants(value: Any, path: str, dtypes: dict, tensors: tuple[TensorDecl, ...], symbols: set[str],
              kernels: dict[str, KernelDecl]) -> tuple[VariantDecl, ...]:
    found: list[VariantDecl] = []
    written = [t.name for t in tensors if t.role != "input"]
    for index, item in enumerate(_bounded_list(value, path, MAX_VARIANTS)):
        where = f"{path}[{index}]"
        entry = f.mapping(item, where)
        f.only_known(entry, _VARIANT, where)
        name = _key(f.required(entry, "name", where), join(where, "name"), "a variant")
        if any(v.name == name for v in found):
            f.refuse(join(where, "name"), f"{name!r} is declared twice")
        binding = f.mapping(f.required(entry, "dtypes", where), join(where, "dtypes"))
        for variable in sorted(set(dtypes) | set(binding)):
            if variable not in dtypes:
                f.refuse(join(join(where, "dtypes"), variable), "is not a declared type variable")
            if variable not in binding:
                f.refuse(join(join(where, "dtypes"), variable), "required (a variant binds every type variable)")
            f.choice(binding[variable], dtypes[variable], join(join(where, "dtypes"), variable))
        when = _expression(f.required(entry, "when", where), symbols, TRUTH, join(where, "when"))
        launches = tuple(_launch(raw, f"{join(where, 'launches')}[{i}]", tensors, symbols, kernels)
                         for i, raw in enumerate(_bounded_list(f.required(entry, "launches", where),
                                                               join(where, "launches"), MAX_LAUNCHES)))
        passed = {arg.buffer for launch in launches for arg in launch.args}
        unwritten = [name for name in written if name not in passed]
        if unwritten:
            f.refuse(join(where, "launches"), f"no launch is passed {unwritten[0]}, which the call must write")
        found.append(VariantDecl(name, binding, when, launches))
    return tuple(found)


def _launch(value: Any, where: str, tensors: tuple[TensorDecl, ...], symbols: set[str],
            kernels: dict[str, KernelDecl]) -> LaunchDecl:
    entry = f.mapping(value, where)
    f.only_known(entry, _LAUNCH, where)
    key = f.required(entry, "kernel", where)
    if key not in kernels:
        f.refuse(join(where, "kernel"), f"{key!r} is not a declared kernel")
    kernel = kernels[key]
    grid = f.required(entry, "grid", where)
    if not isinstance(grid, list) or len(grid) != 3:
        f.refuse(join(where, "grid"), "expected a list of 3 sizes (x, y, z)")
    args = _bounded_list(f.required(entry, "args", where), join(where, "args"), MAX_PARAMS, allow_empty=True)
    if len(args) != len(kernel.params):
        f.refuse(join(where, "args"), f"{len(args)} arguments for the {len(kernel.params)} parameters of {key}")
    x, y, z = (_dim(d, symbols, f"{join(where, 'grid')}[{i}]") for i, d in enumerate(grid))
    return LaunchDecl(key, (x, y, z),
                      tuple(_arg(raw, kind, f"{join(where, 'args')}[{i}]", tensors, symbols)
                            for i, (raw, kind) in enumerate(zip(args, kernel.params))))


def _arg(value: Any, kind: str, where: str, tensors: tuple[TensorDecl, ...], symbols: set[str]) -> ArgDecl:
    entry = f.mapping(value, where)
    if kind == POINTER:
        f.only_known(entry, _BUFFER_ARG, where, lambda _: "the parameter is a pointer: pass a tensor as "
                                                           "{\"buffer\": NAME}")
        name = f.required(entry, "buffer", where)
        if not any(t.name == name for t in tensors):
            f.refuse(join(where, "buffer"), f"{name!r} is not a declared tensor")
        return ArgDecl(buffer=name)
    f.only_known(entry, _SCALAR_ARG, where, lambda _: f"the parameter is a scalar {kind}: pass "
                                                      "{\"scalar\": TYPE, \"value\": ...}")
    ctype = f.required(entry, "scalar", where)
    if ctype != kind:
        f.refuse(join(where, "scalar"), f"{ctype!r}; the kernel's parameter is {kind}")
    raw = f.required(entry, "value", where)
    if kind in ("fp32", "fp64"):
        number = f.number(raw, join(where, "value"))
        if kind == "fp32" and abs(number) > FP32_MAX:
            f.refuse(join(where, "value"), f"{number} is outside fp32's range")
        return ArgDecl(ctype=kind, value=number)
    if not isinstance(raw, str):
        f.refuse(join(where, "value"), f"an integer scalar is an integer expression (a string), got {type(raw).__name__}")
    return ArgDecl(ctype=kind, value=_expression(raw, symbols, INTEGER, join(where, "value")))


# ---- one call ------------------------------------------------------------------------------------

class CallRefused(UserError):
    """A call the spec does not accept (or a variant that cannot launch it): nothing is launched."""


@dataclass(frozen=True)
class CallTensor:
    """One input of a call as its caller holds it.

    `strides` are in elements; `address` is where its storage starts on the
    device (checked against the spec's alignment), or None where the launcher
    allocates the buffer itself (aligned as the plan says).
    """

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int | None = None

    def describe(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class CallMatch:
    """A call the spec accepts: its variant, the dtype of each type variable, the value of each symbol."""

    variant: VariantDecl
    dtypes: Mapping[str, str]
    values: Mapping[str, int]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements (the last dimension's is 1)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def match_call(spec: LaunchSpec, inputs: Mapping[str, CallTensor]) -> CallMatch:
    """Check one call's inputs against the spec and choose its variant (the first whose dtypes and predicate match),
    or refuse the call (CallRefused, one line): every input declared and nothing else, each of its element type,
    rank, shape, layout and alignment, every constraint met."""
    bound = _check_inputs(spec, inputs)
    values = {s.name: inputs[s.tensor].shape[s.dim] for s in spec.symbols}
    for tensor in spec.tensors:
        if tensor.role != "output":
            _check_shape(tensor, inputs[tensor.name], values)
    for constraint in spec.constraints:
        if not evaluate(constraint, values):
            raise CallRefused(f"the call does not meet the constraint {constraint.text!r} ({shown(values)})")
    variant = next((v for v in spec.variants if dict(v.dtypes) == bound and evaluate(v.when, values)), None)
    if variant is None:
        given = ", ".join(f"{name} {inputs[name].describe()}" for name in sorted(inputs))
        raise CallRefused(f"no variant of the spec matches this call ({given}; {shown(values)}): nothing is launched")
    return CallMatch(variant, bound, values)


def shown(values: Mapping[str, int]) -> str:
    """The symbols' values as a refusal quotes them."""
    return ", ".join(f"{name}={value}" for name, value in sorted(values.items())) or "no symbols"


def evaluate(expression: Expression, values: Mapping[str, int]) -> int | bool:
    """An expression's value for one call; an evaluation the language refuses refuses the call."""
    try:
        return expression.evaluate(values)
    except ExpressionError as exc:
        raise CallRefused(f"{exc} ({shown(values)})") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_inputs(spec: LaunchSpec, inputs: Mapping[str, CallTensor]) -> dict[str, str]:
    """Every input the spec declares, and nothing else, each of its dtype, rank, layout and alignment; returns the
    type variables' binding."""
    declared = [t for t in spec.tensors if t.role != "output"]
    names = {t.name for t in declared}
    extra = sorted(set(inputs) - names)
    if extra:
        raise CallRefused(f"{extra[0]!r} is not an input of the spec (its inputs: {', '.join(sorted(names))})")
    bound: dict[str, str] = {}
    for tensor in declared:
        given = inputs.get(tensor.name)
        if given is None:
            raise CallRefused(f"the call gives no tensor {tensor.name} (an {tensor.role} of the spec)")
        if not isinstance(given, CallTensor):
            raise CallRefused(f"{tensor.name} is not described as a CallTensor")
        if not (isinstance(given.shape, tuple) and isinstance(given.strides, tuple)
                and all(_is_int(n) for n in given.shape + given.strides)):
            raise CallRefused(f"{tensor.name}: shape and strides must be tuples of integers")
        if any(n < 0 or n > MAX_VALUE for n in given.shape):
            raise CallRefused(f"{tensor.name}: a size of {given.shape} is negative or past {MAX_VALUE}")
        if len(given.shape) != len(tensor.shape) or len(given.strides) != len(given.shape):
            raise CallRefused(f"{tensor.name} has {len(given.shape)} dimensions and {len(given.strides)} strides; "
                              f"the spec declares {len(tensor.shape)}")
        _check_dtype(spec, tensor, given, bound)
        expected = contiguous_strides(given.shape)
        if prod(given.shape) > 0 and any(size > 1 and stride != want for size, stride, want
                                         in zip(given.shape, given.strides, expected)):
            raise CallRefused(f"{tensor.name} has strides {given.strides}; the spec declares it {tensor.layout} "
                              f"(strides {expected})")
        if given.address is not None:
            if not _is_int(given.address) or given.address < 0:
                raise CallRefused(f"{tensor.name}: its address must be an integer >= 0")
            if given.address % tensor.align:
                raise CallRefused(f"{tensor.name} starts at {given.address:#x}, not aligned to the {tensor.align} "
                                  "bytes the spec requires")
    return bound


def _check_dtype(spec: LaunchSpec, tensor: TensorDecl, given: CallTensor, bound: dict[str, str]) -> None:
    if tensor.dtype in spec.dtypes:
        options = spec.dtypes[tensor.dtype]
        if given.dtype not in options:
            raise CallRefused(f"{tensor.name} is {given.dtype}; its type {tensor.dtype} takes {', '.join(options)}")
        if bound.setdefault(tensor.dtype, given.dtype) != given.dtype:
            raise CallRefused(f"{tensor.name} is {given.dtype}, but {tensor.dtype} is {bound[tensor.dtype]} in this "
                              "call")
    elif given.dtype != tensor.dtype:
        raise CallRefused(f"{tensor.name} is {given.dtype}; the spec declares {tensor.dtype}")


def size_of(dim: Dim, values: Mapping[str, int]) -> int:
    """A declared size (a literal or an integer expression) for one call."""
    return dim if isinstance(dim, int) else evaluate(dim, values)


def _check_shape(tensor: TensorDecl, given: CallTensor, values: Mapping[str, int]) -> None:
    for index, (dim, size) in enumerate(zip(tensor.shape, given.shape)):
        want = size_of(dim, values)
        if want != size:
            written = dim if isinstance(dim, int) else f"{dim.text} = {want}"
            raise CallRefused(f"{tensor.name}.shape[{index}] is {size}; the spec says {written} ({shown(values)})")
