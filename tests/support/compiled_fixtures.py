"""A hand-built compiled modulated LayerNorm for the launcher's CPU tests: its launch plan and its simulated effect.

Stands in for a triton_kernel bundle's spec where a test needs a kernel the
simulated driver can compute (it runs the torch reference on the bytes at
its pointers), so that evaluation and runtime paths run whole on a machine
without a GPU.
"""
from __future__ import annotations

import hashlib
import struct

import pytest
import torch

from registry.kernels.launch_plan import BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg
from registry.kernels.corpus import corpus_cases
from registry.kernels.launcher import PlanRefused
from registry.kernels.reference import modulated_layernorm
from registry.kernels.sandbox import SandboxUnavailable, require_sandbox
from registry.kernels.simulated_driver import FakeKernel

@pytest.fixture(scope="module")
def jail():
    """A machine that can build the sandbox (strict runs fail the skip elsewhere)."""
    try:
        require_sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))


CUBINS = {("modln", "sm_90a"): b"registry-rebuilt modln cubin, sm_90a",
          ("modln", "sm_100a"): b"registry-rebuilt modln cubin, sm_100a"}
PARAMS = (8, 8, 8, 8, 4, 4, 4, 8, 8)  # x, scale, shift, y, B, S, D, then the two scratch pointers
ENTRIES = {torch.bfloat16: "modln_bf16", torch.float16: "modln_fp16"}


class ModlnBundle:
    """A hand-built stand-in for a triton_kernel bundle of the modulated LayerNorm: its plan for one call."""

    inputs, outputs, cubins = ("x", "scale", "shift"), ("y",), CUBINS

    def __init__(self, max_dim: int | None = None):
        self.max_dim = max_dim

    def for_device(self, capability):
        assert tuple(capability) == (9, 0)  # the plans below launch the sm_90a cubin
        return self

    def plan(self, args):
        x, scale, shift = args
        batch, seq, dim = x.shape
        if x.dtype not in ENTRIES or (self.max_dim is not None and dim > self.max_dim):
            raise PlanRefused(f"no variant matches x {x.dtype} {tuple(x.shape)}")

        def buffer(name, tensor, role):
            nbytes = tensor.numel() * tensor.element_size()
            return BufferSpec(name, role, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                              tuple(tensor.stride()), nbytes, 16)

        buffers = (buffer("x", x, "input"), buffer("scale", scale, "input"), buffer("shift", shift, "input"),
                   buffer("y", x, "output"))
        launch = Launch("modln", "sm_90a", ENTRIES[x.dtype], (batch * seq, 1, 1), (128, 1, 1), 0,
                        (BufferArg("x"), BufferArg("scale"), BufferArg("shift"), BufferArg("y"),
                         ScalarArg("i32", batch), ScalarArg("i32", seq), ScalarArg("i32", dim)), 2)
        return LaunchPlan(buffers, (launch,), f"{str(x.dtype).removeprefix('torch.')}-rows")


def simulated_modln(dtype: torch.dtype):
    """The kernel's effect in the simulated driver: the torch reference on the bytes at its pointers."""
    def run(memory, raw, grid):
        x_ptr, scale_ptr, shift_ptr, y_ptr = (int.from_bytes(raw[i], "little") for i in range(4))
        batch, seq, dim = (struct.unpack("<i", raw[i])[0] for i in (4, 5, 6))
        size = torch.empty((), dtype=dtype).element_size()

        def tensor(pointer, shape, kind):
            count = 1
            for n in shape:
                count *= n
            data = memory.read(pointer, count * torch.empty((), dtype=kind).element_size())
            return torch.frombuffer(bytearray(data), dtype=kind).reshape(shape)

        x = tensor(x_ptr, (batch, seq, dim), dtype)
        y = modulated_layernorm(x, tensor(scale_ptr, (batch, dim), torch.float32),
                                tensor(shift_ptr, (batch, dim), torch.float32))
        memory.write(y_ptr, y.contiguous().view(torch.uint8).numpy().tobytes())
        assert y.numel() * size == len(y.contiguous().view(torch.uint8).numpy().tobytes())

    return FakeKernel(PARAMS, seconds=3e-6, run=run)




class BuiltinSpecKernel:
    """The built-in modulated LayerNorm's launch spec (registry/kernels/builtin_bundles.py, as its bundle declares
    it), planned by `plan_call`, with stand-in cubins (one per kernel key, sm_90a) whose effects the simulated
    driver computes per image: the launcher gets real plans, variant by variant."""

    outputs = ("y",)

    def __init__(self):
        from registry.formats.launch_spec import parse_launch_spec
        from registry.kernels.builtin_bundles import corpus_dims, kernel_key, spec_for
        from registry.kernels.rowwise import row_launch_meta

        cases = corpus_dims()
        keys = {kernel_key("modulated_layernorm", d, t): (d, t) for d, t in cases}
        warps = {key: row_launch_meta(d)["num_warps"] for key, (d, _) in keys.items()}
        shared = {(key, "sm_90a"): 0 for key in keys}
        self.spec = parse_launch_spec(spec_for("modulated_layernorm", cases, ["sm_90a"], shared, "_modln_kernel",
                                               warps))
        self.inputs = tuple(t.name for t in self.spec.tensors if t.role != "output")
        self.cubins = {(key, "sm_90a"): f"stand-in cubin of {key}".encode() for key in keys}
        self.images = {}
        for key, (dim, dtype) in keys.items():
            params = self.spec.kernels[key].param_bytes + (8, 8)
            self.images[hashlib.sha256(self.cubins[(key, "sm_90a")]).hexdigest()] = {
                "_modln_kernel": FakeKernel(params, seconds=4e-6, run=modln_rows(dim, getattr(torch, dtype)))}

    def for_device(self, capability):
        assert tuple(capability) == (9, 0)
        return self

    def plan(self, args):
        from registry.formats.launch_spec import CallRefused, CallTensor
        from registry.kernels.plan import plan_call

        given = {name: CallTensor(str(t.dtype).removeprefix("torch."), tuple(t.shape), tuple(t.stride()))
                 for name, t in zip(self.inputs, args)}
        try:
            return plan_call(self.spec, given, arch="sm_90a")
        except CallRefused as exc:
            raise PlanRefused(str(exc)) from None


def modln_rows(dim: int, dtype: torch.dtype):
    """The built-in kernel's effect for one (D, dtype): parameters x, scale, shift, y, seq (i32), eps (fp32); one
    program per row, so the grid says how many rows (B * S)."""
    def run(memory, raw, grid):
        x_ptr, scale_ptr, shift_ptr, y_ptr = (int.from_bytes(raw[i], "little") for i in range(4))
        (seq,) = struct.unpack("<i", raw[4])
        rows, size = grid[0], torch.empty((), dtype=dtype).element_size()
        batch = rows // seq
        x = torch.frombuffer(bytearray(memory.read(x_ptr, rows * dim * size)), dtype=dtype)
        scale = torch.frombuffer(bytearray(memory.read(scale_ptr, batch * dim * 4)), dtype=torch.float32)
        shift = torch.frombuffer(bytearray(memory.read(shift_ptr, batch * dim * 4)), dtype=torch.float32)
        y = modulated_layernorm(x.reshape(batch, seq, dim), scale.reshape(batch, dim), shift.reshape(batch, dim))
        memory.write(y_ptr, y.contiguous().view(torch.uint8).numpy().tobytes())

    return run


BUILT_CASES = sorted({(case.dim, case.dtype) for case in corpus_cases("cpu")})  # the cpu corpus's four (D, dtype)


@pytest.fixture(scope="session")
def built_modln(tmp_path_factory):
    """The built-in modulated LayerNorm built as a registry.triton-kernel/1 bundle for the cpu corpus's four
    (D, dtype), sm_90a: (its directory, its manifest). About 15 s of compiling on a loaded 2-core machine, once
    per run, shared by the files and xdist workers that read it (`built_once_per_run`)."""
    from registry.bundles import verify_directory

    from kernel_bundle_helpers import built_once_per_run

    directory = built_once_per_run(tmp_path_factory, "modulated_layernorm", ["sm_90a"], BUILT_CASES)
    return directory, verify_directory(directory).manifest


def simulated_images(cubins, spec) -> dict:
    """Kernels for the simulated driver, per real cubin of the built modulated LayerNorm: each computes the
    reference for its (D, dtype), with the cubin's parameter layout (the spec's, then two scratch pointers)."""
    images = {}
    for (key, _), image in cubins.items():
        dim, dtype = next((d, t) for d, t in BUILT_CASES if key == f"modln_d{d}_{t}")
        kernel = spec.kernels[key]
        images[hashlib.sha256(image).hexdigest()] = {
            kernel.entry: FakeKernel(kernel.param_bytes + (8, 8), seconds=5e-6, run=modln_rows(dim, getattr(torch,
                                                                                                          dtype)))}
    return images


def modln_op_workload(runs_per_arm: int) -> str:
    """Workload `wan-modln-op`: byte-equal parity and a paired point speed rule at 1.1x over `runs_per_arm` pairs."""
    return ("workload: wan-modln-op\nparity: {policy: byte_equal}\n"
            f"speed: {{min_speedup: 1.1, runs_per_arm: {runs_per_arm}, protocol: paired, decision: point}}\n")
