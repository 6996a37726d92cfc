"""The launch spec of a compiled kernel bundle (registry/formats/launch_spec.py): parsing, and matching one call.

Every malformed spec is refused in one line naming its field; a call the
spec does not take (a dtype, a rank, a shape, a stride, an alignment, a
constraint, no variant) is refused in one line and nothing is chosen.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.formats.errors import UserError
from registry.formats.launch_spec import (SCALAR_TYPES, CallRefused, CallTensor, SpecError, contiguous_strides,
                                          match_call, parse_launch_spec)
from registry.kernels.launch_plan import SCALAR_TYPES as PLAN_SCALAR_TYPES


def target(name: str, arch: str) -> dict:
    return {"shared": 0, "ttir": f"k/{name}/{arch}.ttir", "cubin": f"k/{name}/{arch}.cubin",
            "metadata": f"k/{name}/{arch}.json"}


def spec() -> dict:
    """A small valid spec: y = f(x, w) row-wise, two dtypes, two hidden sizes, one of them in two launches."""
    kernel = {"entry": "_k", "num_warps": 4, "params": ["ptr", "ptr", "ptr", "i32", "fp32"],
              "targets": {"sm_90a": target("a", "sm_90a"), "sm_100a": target("a", "sm_100a")}}
    args = [{"buffer": "x"}, {"buffer": "w"}, {"buffer": "y"}, {"scalar": "i32", "value": "S"},
            {"scalar": "fp32", "value": 1e-06}]
    return {
        "dtypes": {"T": ["bfloat16", "float16"]},
        "tensors": [
            {"name": "x", "role": "input", "dtype": "T", "shape": ["B", "S", "D"], "layout": "contiguous", "align": 16},
            {"name": "w", "role": "input", "dtype": "float32", "shape": ["D"], "layout": "contiguous", "align": 16},
            {"name": "y", "role": "output", "dtype": "T", "shape": ["B", "S", "D"], "layout": "contiguous",
             "align": 16},
        ],
        "symbols": {"B": {"tensor": "x", "dim": 0}, "S": {"tensor": "x", "dim": 1}, "D": {"tensor": "x", "dim": 2}},
        "constraints": ["B >= 1", "S >= 1", "B * S <= 2147483647"],
        "kernels": {"k128": copy.deepcopy(kernel),
                    "k256": {**copy.deepcopy(kernel), "targets": {"sm_90a": target("b", "sm_90a"),
                                                                  "sm_100a": target("b", "sm_100a")}}},
        "variants": [
            {"name": "bf16_128", "dtypes": {"T": "bfloat16"}, "when": "D == 128",
             "launches": [{"kernel": "k128", "grid": ["B * S", 1, 1], "args": args}]},
            {"name": "any_256", "dtypes": {"T": "float16"}, "when": "D == 256 or D == 128",
             "launches": [{"kernel": "k256", "grid": ["cdiv(B * S, 2)", 1, 1], "args": args},
                          {"kernel": "k128", "grid": ["B", "S", 1], "args": args}]},
        ],
    }


def tensor(dtype: str, *shape: int, address: int | None = None) -> CallTensor:
    return CallTensor(dtype, tuple(shape), contiguous_strides(tuple(shape)), address)


def test_a_valid_spec_parses_and_its_canonical_form_reads_back_the_same():
    parsed = parse_launch_spec(spec())
    assert parsed.canonical() == spec()
    assert parse_launch_spec(parsed.canonical()).canonical() == parsed.canonical()
    assert parsed.arches == ("sm_100a", "sm_90a")
    assert parsed.kernels["k128"].param_bytes == (8, 8, 8, 4, 4)


def test_the_scalar_types_are_the_launch_plans():
    assert SCALAR_TYPES == PLAN_SCALAR_TYPES


def edit(path: str, value) -> dict:
    """The valid spec with the field at `path` (dotted; list indices as numbers) set, or removed when value is ...."""
    data = spec()
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return data


@pytest.mark.parametrize("path, value, fragment", [
    ("extra", 1, "spec.extra: unknown field"),
    ("dtypes", ..., "spec.dtypes: required"),
    ("tensors.0.extra", 1, "spec.tensors[0].extra: unknown field"),
    ("tensors.0.strides", [1, 1, 1], "spec.tensors[0].strides: unknown field"),
    ("tensors.1.name", "x", "'x' is declared twice"),
    ("tensors.1.name", "min", "cannot name a symbol"),
    ("tensors.1.dtype", "float128", "is not one of"),
    ("tensors.1.dtype", "U", "is not one of"),
    ("tensors.1.role", "scratch", "is not one of input, output, inout"),
    ("tensors.1.layout", "strided", "is not one of contiguous"),
    ("tensors.1.align", 8, "is not a power of two from 16"),
    ("tensors.1.align", 24, "is not a power of two"),
    ("tensors.1.align", True, "expected an integer"),
    ("tensors.1.shape", ["D"] * 9, "more than the 8"),
    ("tensors.1.shape", ["E"], "'E' is not a declared symbol"),
    ("tensors.1.shape", [-1], "below the minimum 0"),
    ("tensors.1.shape", ["D < 1"], "an integer is expected"),
    ("tensors.1.shape", ["D.real"], "'.' is not part of the expression language"),
    ("dtypes.T", ["bfloat16", "bfloat16"], "listed twice"),
    ("dtypes.bfloat16", ["float16"], "cannot be named as an element type"),
    ("dtypes.U", ["float16"], "spec.dtypes.U: is the dtype of no input"),
    ("symbols.B", {"tensor": "y", "dim": 0}, "is an output"),
    ("symbols.B", {"tensor": "z", "dim": 0}, "'z' is not a declared tensor"),
    ("symbols.B", {"tensor": "x", "dim": 3}, "x has 3 dimensions"),
    ("symbols.B", {"tensor": "x", "dim": 1}, "x.shape[1] is 'S', not the symbol B"),
    ("symbols.B", {"tensor": "x", "dim": 0, "from": 1}, "unknown field"),
    ("symbols.T", {"tensor": "x", "dim": 0}, "is also a type variable"),
    ("symbols.cdiv", {"tensor": "x", "dim": 0}, "cannot name a symbol"),
    ("constraints", ["B"], "a truth value is expected"),
    ("constraints", ["B >= 1 and"], "not an expression"),
    ("constraints", "B >= 1", "expected a list"),
    ("kernels", {}, "spec.kernels: empty object"),
    ("kernels.k128.entry", "1bad", "is not an entry symbol"),
    ("kernels.k128.entry", "a b", "is not an entry symbol"),
    ("kernels.k128.num_warps", 3, "is not one of 1, 2, 4, 8, 16, 32"),
    ("kernels.k128.params", ["ptr", "f16"], "is not one of"),
    ("kernels.k128.targets.sm_80", target("c", "sm_80"), "is not one of sm_90a, sm_100a"),
    ("kernels.k128.targets.sm_90a.shared", 232449, "more than the 232448"),
    ("kernels.k128.targets.sm_90a.shared", -1, "is negative"),
    ("kernels.k128.targets.sm_90a.sass", "x", "unknown field"),
    ("kernels.k256.targets", {"sm_90a": target("b", "sm_90a")}, "every kernel of a bundle carries the same ones"),
    ("kernels.bad key", {}, "cannot name a kernel"),
    ("variants", [], "spec.variants: empty list"),
    ("variants.1.name", "bf16_128", "'bf16_128' is declared twice"),
    ("variants.0.dtypes", {}, "required (a variant binds every type variable)"),
    ("variants.0.dtypes", {"T": "float32"}, "is not one of bfloat16, float16"),
    ("variants.0.dtypes", {"T": "float16", "U": "float16"}, "U: is not a declared type variable"),
    ("variants.0.when", "D", "a truth value is expected"),
    ("variants.0.when", "D == 128 if 1 else 0", "a conditional expression"),
    ("variants.0.launches", [], "empty list"),
    ("variants.0.launches.0.kernel", "k512", "'k512' is not a declared kernel"),
    ("variants.0.launches.0.grid", ["B"], "expected a list of 3 sizes"),
    ("variants.0.launches.0.grid", ["B < 1", 1, 1], "an integer is expected"),
    ("variants.0.launches.0.args", [{"buffer": "x"}], "1 arguments for the 5 parameters of k128"),
    ("variants.0.launches.0.args.0", {"buffer": "z"}, "'z' is not a declared tensor"),
    ("variants.0.launches.0.args.0", {"scalar": "i32", "value": "S"}, "the parameter is a pointer"),
    ("variants.0.launches.0.args.3", {"buffer": "x"}, "the parameter is a scalar i32"),
    ("variants.0.launches.0.args.3", {"scalar": "i64", "value": "S"}, "the kernel's parameter is i32"),
    ("variants.0.launches.0.args.3", {"scalar": "i32", "value": 5}, "an integer scalar is an integer expression"),
    ("variants.0.launches.0.args.3", {"scalar": "i32", "value": "S == 1"}, "an integer is expected"),
    ("variants.0.launches.0.args.4", {"scalar": "fp32", "value": 1e39}, "outside fp32's range"),
    ("variants.0.launches.0.args.4", {"scalar": "fp32", "value": "1"}, "expected a number"),
    ("variants.0.launches.0.args.2", {"buffer": "x"}, "no launch is passed y, which the call must write"),
])
def test_a_malformed_spec_is_refused_in_one_line_naming_the_field(path, value, fragment):
    with pytest.raises(SpecError) as caught:
        parse_launch_spec(edit(path, value))
    message = str(caught.value)
    assert fragment in message and "\n" not in message and isinstance(caught.value, UserError), message


@pytest.mark.parametrize("value", [None, [], "spec", 1])
def test_a_spec_that_is_not_an_object_is_refused(value):
    with pytest.raises(SpecError, match="expected an object"):
        parse_launch_spec(value)


def test_the_first_matching_variant_is_chosen_by_dtype_and_predicate():
    parsed = parse_launch_spec(spec())
    bf16 = match_call(parsed, {"x": tensor("bfloat16", 2, 5, 128), "w": tensor("float32", 128)})
    assert bf16.variant.name == "bf16_128" and bf16.dtypes == {"T": "bfloat16"}
    assert dict(bf16.values) == {"B": 2, "S": 5, "D": 128}
    fp16 = match_call(parsed, {"x": tensor("float16", 1, 3, 128), "w": tensor("float32", 128)})
    assert fp16.variant.name == "any_256"  # bf16_128 binds T to bfloat16 only


@pytest.mark.parametrize("inputs, fragment", [
    ({"x": tensor("bfloat16", 1, 3, 200), "w": tensor("float32", 200)}, "no variant of the spec matches"),
    ({"x": tensor("bfloat16", 1, 3, 256), "w": tensor("float32", 256)}, "no variant of the spec matches"),
    ({"x": tensor("bfloat16", 0, 3, 128), "w": tensor("float32", 128)}, "constraint 'B >= 1'"),
    ({"x": tensor("bfloat16", 1 << 16, 1 << 16, 128), "w": tensor("float32", 128)}, "B * S <= 2147483647"),
    ({"x": tensor("float32", 1, 3, 128), "w": tensor("float32", 128)}, "x is float32; its type T takes"),
    ({"x": tensor("bfloat16", 1, 3, 128), "w": tensor("float16", 128)}, "w is float16; the spec declares float32"),
    ({"x": tensor("bfloat16", 3, 128), "w": tensor("float32", 128)}, "x has 2 dimensions"),
    ({"x": tensor("bfloat16", 1, 3, 128), "w": tensor("float32", 127)}, "w.shape[0] is 127; the spec says D = 128"),
    ({"x": tensor("bfloat16", 1, 3, 128)}, "the call gives no tensor w"),
    ({"x": tensor("bfloat16", 1, 3, 128), "w": tensor("float32", 128), "y": tensor("bfloat16", 1, 3, 128)},
     "'y' is not an input of the spec"),
    ({"x": CallTensor("bfloat16", (1, 3, 128), (384, 1, 3)), "w": tensor("float32", 128)},
     "declares it contiguous"),
    ({"x": tensor("bfloat16", 1, 3, 128, address=0x1008), "w": tensor("float32", 128)}, "not aligned to the 16"),
    ({"x": tensor("bfloat16", 1, 3, 128, address=-16), "w": tensor("float32", 128)}, "an integer >= 0"),
    ({"x": CallTensor("bfloat16", (1, True, 128), (128, 128, 1)), "w": tensor("float32", 128)}, "tuples of integers"),
    ({"x": CallTensor("bfloat16", [1, 3, 128], (384, 128, 1)), "w": tensor("float32", 128)}, "tuples of integers"),
    ({"x": CallTensor("bfloat16", (1, -3, 128), (384, 128, 1)), "w": tensor("float32", 128)}, "is negative"),
    ({"x": CallTensor("bfloat16", (1, 3, 128), (384, 128)), "w": tensor("float32", 128)}, "2 strides"),
    ({"x": (1, 3, 128), "w": tensor("float32", 128)}, "not described as a CallTensor"),
])
def test_a_call_the_spec_does_not_take_is_refused_in_one_line(inputs, fragment):
    with pytest.raises(CallRefused) as caught:
        match_call(parse_launch_spec(spec()), inputs)
    assert fragment in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_strides_of_size_one_dimensions_and_empty_tensors_do_not_decide_contiguity():
    parsed = parse_launch_spec(spec())
    odd = CallTensor("bfloat16", (1, 3, 128), (99999, 128, 1))
    assert match_call(parsed, {"x": odd, "w": tensor("float32", 128)}).variant.name == "bf16_128"


def test_a_type_variable_binds_the_same_dtype_in_every_tensor_that_names_it():
    data = spec()
    data["tensors"].insert(1, {"name": "r", "role": "input", "dtype": "T", "shape": ["B", "S", "D"],
                               "layout": "contiguous", "align": 16})
    parsed = parse_launch_spec(data)
    with pytest.raises(CallRefused, match="r is float16, but T is bfloat16 in this call"):
        match_call(parsed, {"x": tensor("bfloat16", 1, 3, 128), "r": tensor("float16", 1, 3, 128),
                            "w": tensor("float32", 128)})


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.integers(-2, 1 << 40), st.integers(-2, 1 << 40), st.sampled_from([0, 127, 128, 256, 4096])),
       st.sampled_from(["bfloat16", "float16", "float32", "int8"]), st.integers(0, 64))
def test_any_call_is_matched_as_written_or_refused_in_one_line(shape, dtype, address):
    """Hostile sizes (negative, past the grid, past int64 products), dtypes and addresses: a CallRefused or the
    variant the spec's rules choose, never another exception."""
    parsed = parse_launch_spec(spec())
    b, s, d = shape
    inputs = {"x": CallTensor(dtype, shape, contiguous_strides(shape) if min(shape) >= 0 else (1, 1, 1),
                              address * 8),
              "w": tensor("float32", max(d, 0))}
    try:
        matched = match_call(parsed, inputs)
    except CallRefused as exc:
        assert "\n" not in str(exc)
        return
    assert min(shape) >= 1 and b * s <= 2147483647 and (address * 8) % 16 == 0
    expected = "bf16_128" if (dtype, d) == ("bfloat16", 128) else "any_256"
    assert matched.variant.name == expected and dtype in ("bfloat16", "float16")
    assert d in (128, 256) and (dtype == "float16" or d == 128)
