"""Kernels against their torch references on the cpu corpus (Triton interpreter on CPU).

Declared tolerances: bfloat16 atol 1e-2 rtol 1e-2, float16 atol 1e-3 rtol 1e-3
(both at least one ulp of the dtype at every magnitude). Observed under the
interpreter with torch 2.13 CPU: modulated_layernorm, rms_norm and
gated_residual are bit-exact on every cpu-corpus case; gated_residual_layernorm's
``n`` differs by one ulp in 1 of 771 elements of the fp16 D=257 case. The
elementwise ops (gated_residual and the ``u`` output) do the same fp32
operations in the same order as torch and are asserted bit-exact.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from registry.kernels.corpus import Case, corpus_cases
from registry.kernels.launches import counting
from registry.kernels.operation_names import OPERATION_NAMES
from registry.kernels.ops import EntryError, get_operation, list_operations, resolve_entry
from registry.kernels.gated import gated_residual_triton
from registry.kernels.modln import modulated_layernorm_triton
from registry.kernels.reference import gated_residual as gated_residual_ref

from limits import HANG_GUARD_S
from paths import ROOT

TOLERANCES = {torch.bfloat16: dict(atol=1e-2, rtol=1e-2), torch.float16: dict(atol=1e-3, rtol=1e-3)}
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
OP_NAMES = ["modulated_layernorm", "gated_residual", "gated_residual_layernorm", "rms_norm"]
CPU_CASES = corpus_cases("cpu")
DEVICE = "cpu" if INTERPRETED else "cuda"


def _outputs(value):
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("op_name", OP_NAMES)
def test_kernel_matches_reference_within_declared_tolerance(op_name):
    spec = get_operation(op_name)
    reference, kernel = resolve_entry(spec.reference), resolve_entry(spec.kernels[0])
    for case in CPU_CASES:
        args = spec.make_inputs(case, DEVICE)
        expected, got = _outputs(reference(*args)), _outputs(kernel(*args))
        assert len(got) == len(spec.outputs)
        for name, e, g in zip(spec.outputs, expected, got):
            assert g.dtype == e.dtype == case.torch_dtype and g.shape == e.shape, (case, name)
            torch.testing.assert_close(g, e, **TOLERANCES[e.dtype], msg=lambda m: f"{case} {name}: {m}")


@pytest.mark.device
@pytest.mark.skipif(not INTERPRETED, reason="exactness pinned for the interpreter (no FMA contraction)")
@pytest.mark.parametrize("op_name,output", [("gated_residual", 0), ("gated_residual_layernorm", 1)])
def test_elementwise_outputs_are_bit_exact(op_name, output):
    spec = get_operation(op_name)
    reference, kernel = resolve_entry(spec.reference), resolve_entry(spec.kernels[0])
    for case in CPU_CASES:
        args = spec.make_inputs(case, DEVICE)
        e, g = _outputs(reference(*args))[output], _outputs(kernel(*args))[output]
        assert torch.equal(e.view(torch.int16), g.view(torch.int16)), case


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy, fp16 -> inf
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_store_rounds_to_nearest_even_like_torch(dtype):
    # out = 0 + 1 * gate, so every fp32 gate value goes through the kernel's
    # rounding to the 16-bit dtype: ties, overflow to inf, subnormals, NaN.
    info = torch.finfo(dtype)
    specials = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 3 * 2**-8), 1 + 2**-11, 1 + 3 * 2**-11,
                             float(info.max) * 1.001, -float(info.max) * 1.001, float("inf"), float("-inf"),
                             float("nan"), float(info.tiny) / 3, -float(info.tiny) / 5, 0.0], dtype=torch.float32)
    gen = torch.Generator().manual_seed(7)
    spread = torch.randn(499, generator=gen) * torch.logspace(-30, 30, 499, base=2.0)
    gate = torch.cat([specials, spread])[None, :].to(DEVICE)
    residual = torch.zeros(1, 1, gate.shape[1], dtype=dtype, device=DEVICE)
    x = torch.ones_like(residual)
    got, expected = gated_residual_triton(residual, x, gate), gated_residual_ref(residual, x, gate)
    nan = torch.isnan(expected)
    assert torch.equal(nan, torch.isnan(got))
    assert torch.equal(got[~nan].view(torch.int16), expected[~nan].view(torch.int16))


def test_awkward_dimension_masks_the_tail():
    case = Case("odd", 2, 3, 1537, "bfloat16", 11)
    spec = get_operation("modulated_layernorm")
    args = spec.make_inputs(case, DEVICE)
    torch.testing.assert_close(modulated_layernorm_triton(*args), resolve_entry(spec.reference)(*args),
                               **TOLERANCES[torch.bfloat16])


def test_launch_counter_counts_each_wrapper_call_once():
    spec = get_operation("rms_norm")
    args = spec.make_inputs(CPU_CASES[0], DEVICE)
    kernel = resolve_entry(spec.kernels[0])
    with counting() as outer:
        kernel(*args)
        with counting() as inner:
            kernel(*args)
    assert (outer.launches, inner.launches, outer.fallbacks) == (2, 1, 0)
    assert outer.interpreted_launches == (2 if INTERPRETED else 0)
    assert outer.by_kernel == {"_rms_norm_kernel": 2}


def test_wrappers_refuse_inputs_they_were_not_written_for():
    x = torch.zeros(1, 4, 8, dtype=torch.bfloat16, device=DEVICE)
    vec = torch.zeros(1, 8, device=DEVICE)
    with pytest.raises(ValueError, match="x must be bfloat16 or float16"):
        modulated_layernorm_triton(x.float(), vec, vec)
    with pytest.raises(ValueError, match=r"scale has shape \[1, 7\]"):
        modulated_layernorm_triton(x, vec[:, :7], vec)
    with pytest.raises(ValueError, match="shift must be float32"):
        modulated_layernorm_triton(x, vec, vec.to(torch.bfloat16))
    with pytest.raises(ValueError, match="x has dtype torch.float16"):
        gated_residual_triton(x, x.half(), vec)
    with pytest.raises(ValueError, match=r"must be \[B, S, D\]"):
        gated_residual_triton(x[0], x[0], vec)


def test_registry_lists_every_operation_with_resolvable_entries():
    specs = list_operations()
    assert [s.name for s in specs] == OP_NAMES
    for spec in specs:
        assert callable(resolve_entry(spec.reference))
        assert spec.kernels and all(callable(resolve_entry(k)) for k in spec.kernels)
        assert spec.outputs and spec.cost_model
    assert get_operation("gated_residual_layernorm").outputs == ("n", "u")
    assert tuple(spec.name for spec in specs) == OPERATION_NAMES  # what registration checks without torch
    with pytest.raises(ValueError, match="unknown operation 'softmax'"):
        get_operation("softmax")


@pytest.mark.parametrize("entry,message", [
    ("registry.kernels.modln", "must have the form 'path/to/kernel.py:function'"),
    ("a:b:c", "must have the form 'path/to/kernel.py:function'"),
    ("gallery.freed_memory:op", "not part of the registry package"),
    ("registry.kernels.no_such_module:f", "cannot import module"),
    ("registry.kernels.modln:no_such_function", "has no attribute 'no_such_function'"),
    ("registry.kernels.reference:EPS", "names a float, not a function written in Python"),
    ("kernel.py:f", "is a candidate file: only the evaluation worker loads it"),
])
def test_resolve_entry_names_what_is_wrong(entry, message):
    with pytest.raises(EntryError, match=message):
        resolve_entry(entry)


def test_resolve_entry_returns_the_named_function():
    assert resolve_entry("registry.kernels.modln:modulated_layernorm_triton") is modulated_layernorm_triton


def test_corpora_hold_the_declared_shapes():
    gpu = [(c.batch, c.seq, c.dim, c.dtype) for c in corpus_cases("gpu")]
    assert gpu == [(1, 20280, 1536, "bfloat16"), (1, 32760, 1536, "bfloat16"), (1, 20280, 5120, "bfloat16"),
                   (1, 5070, 5120, "bfloat16"), (1, 8190, 5120, "bfloat16"), (1, 257, 1537, "bfloat16"),
                   (2, 511, 1536, "bfloat16")]
    assert {c.dtype for c in CPU_CASES} == {"bfloat16", "float16"}
    assert any(c.dim & (c.dim - 1) for c in CPU_CASES)  # a non-power-of-two hidden size
    assert [c.label for c in CPU_CASES] == [f"shape{i}" for i in range(len(CPU_CASES))]
    with pytest.raises(ValueError, match="unknown corpus 'tpu'"):
        corpus_cases("tpu")


def test_inputs_are_reproducible_from_the_seed():
    spec = get_operation("gated_residual_layernorm")
    first, second = spec.make_inputs(CPU_CASES[1], "cpu"), spec.make_inputs(CPU_CASES[1], "cpu")
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    other = spec.make_inputs(CPU_CASES[0], "cpu")
    assert not torch.equal(first[2][:, :8], other[2][:, :8])


def test_cost_model_counts_bytes_moved():
    wan = corpus_cases("gpu")[0]  # 1 x 20280 x 1536 bf16
    elements = 20280 * 1536
    assert get_operation("modulated_layernorm").cost(wan).bytes == 2 * elements * 2 + 2 * 1536 * 4
    assert get_operation("gated_residual").cost(wan).bytes == 3 * elements * 2 + 1536 * 4
    assert get_operation("gated_residual_layernorm").cost(wan).bytes == 4 * elements * 2 + 1536 * 4 + 2 * 1536 * 4
    assert get_operation("rms_norm").cost(wan).flops == 4 * elements


_COMPILE_FOR_HOPPER = r'''
import json, os, re, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from registry.evidence.source_screen import screen_source
from registry.kernels import gated, modln, rmsnorm
from registry.kernels.rowwise import row_launch_meta

act = {"D": 1537, "IS_BF16": True}
kernels = {
    "modln": (modln._modln_kernel, dict(x_ptr="*bf16", scale_ptr="*fp32", shift_ptr="*fp32", y_ptr="*i16",
                                        seq="i32", eps="fp32")),
    "gated": (gated._gated_residual_kernel, dict(res_ptr="*bf16", x_ptr="*bf16", gate_ptr="*fp32",
                                                 out_ptr="*i16", seq="i32")),
    "gated_ln": (gated._gated_residual_ln_kernel, dict(res_ptr="*bf16", x_ptr="*bf16", gate_ptr="*fp32",
                                                       w_ptr="*fp32", b_ptr="*fp32", n_ptr="*i16", u_ptr="*i16",
                                                       seq="i32", eps="fp32")),
    "rms": (rmsnorm._rms_norm_kernel, dict(x_ptr="*bf16", w_ptr="*fp32", y_ptr="*i16", eps="fp32")),
}
meta = row_launch_meta(act["D"])
out = {}
for name, (fn, sig) in kernels.items():
    consts = dict(act, BLOCK_D=meta["BLOCK_D"])
    sig = dict(sig, **{k: "constexpr" for k in consts})
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": meta["num_warps"], "enable_fp_fusion": meta["enable_fp_fusion"]})
    ptx = compiled.asm["ptx"]
    out[name] = {"cubin": len(compiled.asm["cubin"]) > 0, "screen": screen_source(ptx),
                 "fma": len(re.findall(r"\bfma\.", ptx))}
json.dump(out, sys.stdout)
'''


def _missing_cuda_toolchain() -> str | None:
    """Why Triton cannot assemble sm_90 code here, or None: its Linux wheels bundle ptxas
    (TRITON_PTXAS_PATH may name another)."""
    try:
        from triton import knobs

        knobs.nvidia.ptxas  # noqa: B018 - the lookup runs `ptxas --version` and raises when there is none
    except Exception as exc:  # noqa: BLE001 - any failure to find the assembler means no toolchain
        return f"no CUDA assembler for Triton on this machine ({type(exc).__name__}: {exc})"
    return None


def test_kernels_compile_for_hopper_without_fma_or_approximate_math(tmp_path):
    """The GPU path, checked on CPU: Triton compiles each kernel for sm_90 (no GPU needed).

    With the launch options the wrappers use, the PTX holds no FMA (eager
    torch rounds after every op) and no approximate instruction. It needs
    only the assembler Triton's wheel bundles; without one it skips, naming
    why (and a strict run fails on that skip).
    """
    missing = _missing_cuda_toolchain()
    if missing:
        pytest.skip(missing)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", _COMPILE_FOR_HOPPER], env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S,  # the compile took 3.4 s here
                          cwd=str(ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert set(report) == {"modln", "gated", "gated_ln", "rms"}
    for name, found in report.items():
        assert found == {"cubin": True, "screen": [], "fma": 0}, name
