"""plan_call: a launch spec and one call's inputs -> the LaunchPlan the launcher takes (registry/kernels/plan.py).

The built-in kernels' specs (registry/kernels/builtin_bundles.py, built here
without compiling: the shared memory and entries are given) must plan every
corpus case exactly as the Triton wrappers launch it: one program per row,
num_warps from the wrappers' rule, the same arguments in the kernel's
order, every buffer's bytes. Any other call is refused in one line.
"""
from __future__ import annotations

from math import prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.formats.dtypes import ELEMENT_BYTES
from registry.formats.launch_spec import CallRefused, CallTensor, contiguous_strides, parse_launch_spec
from registry.kernels.builtin_bundles import BUILTIN, CONSTRAINTS, EPS, corpus_dims, kernel_key, spec_for
from registry.kernels.corpus import CORPORA, corpus_cases
from registry.kernels.launch_plan import BufferArg, LaunchPlan, ScalarArg
from registry.kernels.plan import plan_call
from registry.kernels.reference import EPS as REFERENCE_EPS
from registry.kernels.rowwise import row_launch_meta

ARCHES = ["sm_100a", "sm_90a"]
CASES = corpus_dims()


def builtin_spec(op: str):
    warps = {kernel_key(op, d, t): row_launch_meta(d)["num_warps"] for d, t in CASES}
    shared = {(kernel_key(op, d, t), arch): 16 * d for d, t in CASES for arch in ARCHES}
    return parse_launch_spec(spec_for(op, CASES, ARCHES, shared, BUILTIN[op].function, warps))


SPECS = {op: builtin_spec(op) for op in BUILTIN}


def inputs_for(op: str, batch: int, seq: int, dim: int, dtype: str) -> dict[str, CallTensor]:
    sizes = {"B": batch, "S": seq, "D": dim}
    found = {}
    for name, role, declared, shape in BUILTIN[op].tensors:
        if role == "output":
            continue
        concrete = tuple(sizes[s] for s in shape)
        found[name] = CallTensor(dtype if declared == "T" else declared, concrete, contiguous_strides(concrete))
    return found


def test_the_specs_epsilon_is_the_references():
    assert EPS == REFERENCE_EPS


def test_every_corpus_case_of_every_op_is_planned_as_its_wrapper_launches_it():
    cases = [(corpus, case) for corpus in CORPORA for case in corpus_cases(corpus)]
    assert {(case.dim, case.dtype) for _, case in cases} == set(CASES)
    for op, spec in SPECS.items():
        builtin = BUILTIN[op]
        for corpus, case in cases:
            for arch in ARCHES:
                plan = plan_call(spec, inputs_for(op, case.batch, case.seq, case.dim, case.dtype), arch=arch)
                assert isinstance(plan, LaunchPlan)
                assert plan.variant == f"d{case.dim}_{case.dtype}"
                (launch,) = plan.launches
                meta = row_launch_meta(case.dim)
                assert launch.kernel == kernel_key(op, case.dim, case.dtype) and launch.arch == arch
                assert launch.entry == builtin.function and launch.grid == (case.rows, 1, 1)
                assert launch.block == (32 * meta["num_warps"], 1, 1) and launch.shared_bytes == 16 * case.dim
                assert launch.scratch_args == 2
                expected_args = [BufferArg(p.tensor) if p.tensor else
                                 ScalarArg(p.scalar, case.seq if p.value == "S" else EPS) for p in builtin.params]
                assert list(launch.args) == expected_args, (op, corpus, case.label)
                assert [b.name for b in plan.buffers] == [t[0] for t in builtin.tensors]
                for buffer, (name, role, declared, shape) in zip(plan.buffers, builtin.tensors):
                    sizes = {"B": case.batch, "S": case.seq, "D": case.dim}
                    assert buffer.role == role and buffer.align == 16
                    assert buffer.dtype == (case.dtype if declared == "T" else declared)
                    assert buffer.shape == tuple(sizes[s] for s in shape)
                    assert buffer.strides == contiguous_strides(buffer.shape)
                    assert buffer.nbytes == prod(buffer.shape) * ELEMENT_BYTES[buffer.dtype]


@pytest.mark.parametrize("batch, seq, dim, dtype, arch, fragment", [
    (1, 8, 129, "bfloat16", "sm_90a", "no variant of the spec matches"),
    (1, 8, 96, "bfloat16", "sm_90a", "no variant of the spec matches"),  # 96 is compiled for float16 only
    (1, 8, 128, "float32", "sm_90a", "its type T takes bfloat16, float16"),
    (0, 8, 128, "bfloat16", "sm_90a", "'B >= 1'"),
    (1, 0, 128, "bfloat16", "sm_90a", "'S >= 1'"),
    (1 << 16, 1 << 15, 128, "bfloat16", "sm_90a", "'B * S <= 2147483647'"),
    (1, 8, 128, "bfloat16", "sm_80", "carries no cubin for sm_80"),
    (1, 8, 128, "bfloat16", "sm_90", "carries no cubin for sm_90"),
])
def test_a_call_no_compiled_kernel_serves_is_refused_and_nothing_is_planned(batch, seq, dim, dtype, arch, fragment):
    for op, spec in SPECS.items():
        with pytest.raises(CallRefused) as caught:
            plan_call(spec, inputs_for(op, batch, seq, dim, dtype), arch=arch)
        assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_second_activation_of_another_dtype_or_shape_is_refused():
    good = inputs_for("gated_residual", 1, 8, 128, "bfloat16")
    with pytest.raises(CallRefused, match="x is float16, but T is bfloat16"):
        plan_call(SPECS["gated_residual"], {**good, "x": CallTensor("float16", (1, 8, 128), (1024, 128, 1))},
                  arch="sm_90a")
    with pytest.raises(CallRefused, match=r"x.shape\[1\] is 9; the spec says S = 8"):
        plan_call(SPECS["gated_residual"], {**good, "x": CallTensor("bfloat16", (1, 9, 128), (1152, 128, 1))},
                  arch="sm_90a")


def grid_spec(grid: list, arg: str = "S", ctype: str = "i32"):
    data = spec_for("rms_norm", [(128, "bfloat16")], ARCHES, {(kernel_key("rms_norm", 128, "bfloat16"), a): 0
                                                              for a in ARCHES}, "_rms_norm_kernel",
                    {kernel_key("rms_norm", 128, "bfloat16"): 1})
    data["constraints"] = []
    data["kernels"][kernel_key("rms_norm", 128, "bfloat16")]["params"].append(ctype)
    launch = data["variants"][0]["launches"][0]
    launch["grid"] = grid
    launch["args"].append({"scalar": ctype, "value": arg})
    return parse_launch_spec(data)


@pytest.mark.parametrize("grid, arg, ctype, shape, fragment", [
    (["B * S", 1, 1], "S", "i32", (1 << 16, 1 << 16, 128), "x = 4294967296, outside 1..2147483647"),
    (["B", "S", 1], "S", "i32", (1, 70000, 128), "y = 70000, outside 1..65535"),
    (["B", 1, "S - S"], "S", "i32", (1, 5, 128), "z = 0, outside 1..65535"),
    (["B", 1, 1], "S - 10", "u32", (1, 5, 128), "the u32 argument 'S - 10' = -5 is outside 0..4294967295"),
    (["B", 1, 1], "S * S", "i32", (1, 1 << 16, 128), "the i32 argument 'S * S' = 4294967296 is outside"),
    (["B", 1, 1], "S // (B - 1)", "i64", (1, 5, 128), "division by zero"),
    (["B", 1, 1], "S * S * S * S", "i64", (1, 1 << 16, 128), "outside +-9223372036854775807"),
])
def test_a_grid_or_argument_outside_its_range_is_refused(grid, arg, ctype, shape, fragment):
    inputs = {"x": CallTensor("bfloat16", shape, contiguous_strides(shape)),
              "weight": CallTensor("float32", (128,), (1,))}
    with pytest.raises(CallRefused) as caught:
        plan_call(grid_spec(grid, arg, ctype), inputs, arch="sm_90a")
    assert fragment in str(caught.value), caught.value


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(BUILTIN)), st.integers(-1, 70000), st.integers(-1, 70000),
       st.sampled_from([0, 96, 128, 200, 257, 1536, 1537, 5120, 4096]), st.sampled_from(["bfloat16", "float16"]),
       st.sampled_from(ARCHES + ["sm_80"]))
def test_any_call_is_planned_exactly_or_refused_in_one_line(op, batch, seq, dim, dtype, arch):
    try:
        plan = plan_call(SPECS[op], inputs_for(op, batch, seq, dim, dtype), arch=arch)
    except CallRefused as exc:
        assert "\n" not in str(exc)
        assert (dim, dtype) not in CASES or min(batch, seq) < 1 or batch * seq > 2147483647 or arch == "sm_80"
        return
    assert (dim, dtype) in CASES and batch >= 1 and seq >= 1 and arch in ARCHES
    assert plan.launches[0].grid == (batch * seq, 1, 1)
    assert sum(b.nbytes for b in plan.buffers) == sum(
        prod({"B": batch, "S": seq, "D": dim}[s] for s in shape) * ELEMENT_BYTES[dtype if d == "T" else d]
        for _, _, d, shape in BUILTIN[op].tensors)


def test_the_built_in_constraints_are_the_specs():
    assert [c.text for c in SPECS["rms_norm"].constraints] == list(CONSTRAINTS)
