"""The trusted launcher on a CUDA device, with NVIDIA's driver bindings (marked `device`: skipped without a GPU).

Cubins are compiled here from Triton source for the device's own arch (Triton
needs no GPU to compile) and launched by `registry.kernels.launcher.Launcher`
on `cuda.bindings.driver`: an honest copy kernel's output equals the
Triton-JIT launch's byte for byte, its parameters (the declared ones, then
Triton's two scratch pointers as NULL) are what the cubin reads, its CUDA
event time agrees with the kernel's CUPTI span, and every hostile kernel of
tests/gallery/compiled_hostile.py is caught by the class its docstring
names. benchmarks/gpu_kernels.sh runs this file; the first GPU session ran
out of time before it (docs/benchmarks.md, "Kernels").
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
import torch

from registry.kernels.launch_plan import BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg
from registry.kernels.launcher import DriverError, Launcher, cuda_driver
from paths import GALLERY, SUPPORT

pytestmark = [pytest.mark.device, pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
    reason="needs a CUDA GPU with compiled Triton kernels")]



def compiled(fn, signature: dict, constexprs: dict, num_warps: int = 4):
    """(cubin bytes, entry name, shared bytes, arch) of ``fn`` compiled for this device."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    major, minor = torch.cuda.get_device_capability()
    kernel = triton.compile(ASTSource(fn, signature=signature, constexprs=constexprs),
                            target=GPUTarget("cuda", major * 10 + minor, 32), options={"num_warps": num_warps})
    suffix = "a" if major >= 9 else ""
    return kernel.asm["cubin"], kernel.metadata.name, kernel.metadata.shared, f"sm_{major}{minor}{suffix}"


def copy_source():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    return copy_kernel


def copy_plan(n: int, arch: str, entry: str, block: int = 1024) -> LaunchPlan:
    return LaunchPlan((BufferSpec("x", "input", "float32", (n,), (1,), 4 * n, 16),
                       BufferSpec("y", "output", "float32", (n,), (1,), 4 * n, 16)),
                      (Launch("copy", arch, entry, (-(-n // block), 1, 1), (128, 1, 1), 0,
                              (BufferArg("x"), BufferArg("y"), ScalarArg("i32", n)), 2),), "copy")


@pytest.fixture(scope="module")
def copy_cubin():
    fn = copy_source()
    return fn, compiled(fn, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024})


def test_the_launchers_output_equals_the_triton_jit_launch_byte_for_byte(copy_cubin):
    fn, (cubin, entry, _, arch) = copy_cubin
    n = 1_000_003
    x = torch.randn(n, device="cuda")
    jit = torch.empty_like(x)
    fn[(-(-n // 1024),)](x, jit, n, BLOCK=1024, num_warps=4)
    launcher = Launcher(cuda_driver())
    try:
        launcher.load({("copy", arch): cubin})
        outcome = launcher.call([(copy_plan(n, arch, entry), {"x": x.cpu().numpy().tobytes()})], deadline_s=10)
    finally:
        launcher.close()
    assert outcome.violations() == []
    assert outcome.cases[0].outputs["y"] == jit.cpu().numpy().tobytes()
    assert outcome.device_s > 0


def test_the_launchers_event_time_agrees_with_the_kernels_cupti_span(copy_cubin):
    """A 64 Mi-element copy (512 MB moved, over 100 us on any GPU): events within 2% of CUPTI's span."""
    from torch.profiler import ProfilerActivity, profile

    _, (cubin, entry, _, arch) = copy_cubin
    n = 64 << 20
    data = torch.randn(n).numpy().tobytes()
    launcher = Launcher(cuda_driver())
    try:
        launcher.load({("copy", arch): cubin})
        launcher.call([(copy_plan(n, arch, entry), {"x": data})], deadline_s=30)  # warm-up
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            events = [launcher.call([(copy_plan(n, arch, entry), {"x": data})], deadline_s=30).device_s
                      for _ in range(5)]
    finally:
        launcher.close()
    spans = [e.device_time_total / 1e6 for e in prof.events() if e.name == entry]
    assert len(spans) == 5, [e.name for e in prof.events()][:20]
    ratio = statistics.median(e / s for e, s in zip(events, spans))
    assert 0.98 <= ratio <= 1.02, (events, spans)


HOSTILE_SIGNATURE = {"x_ptr": "*bf16", "scale_ptr": "*fp32", "shift_ptr": "*fp32", "y_ptr": "*bf16", "seq": "i32",
                     "eps": "fp32", "D": "constexpr", "BLOCK_D": "constexpr", "IS_BF16": "constexpr"}


def hostile(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("compiled_hostile", GALLERY / "compiled_hostile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return compiled(getattr(module, name), HOSTILE_SIGNATURE, {"D": 256, "BLOCK_D": 256, "IS_BF16": True}, 1)


def modln_plan(arch: str, entry: str, rows: int = 64, dim: int = 256) -> LaunchPlan:
    return LaunchPlan((BufferSpec("x", "input", "bfloat16", (1, rows, dim), (rows * dim, dim, 1), 2 * rows * dim, 16),
                       BufferSpec("scale", "input", "float32", (1, dim), (dim, 1), 4 * dim, 16),
                       BufferSpec("shift", "input", "float32", (1, dim), (dim, 1), 4 * dim, 16),
                       BufferSpec("y", "output", "bfloat16", (1, rows, dim), (rows * dim, dim, 1), 2 * rows * dim,
                                  16)),
                      (Launch("hostile", arch, entry, (rows, 1, 1), (32, 1, 1), 0,
                              (BufferArg("x"), BufferArg("scale"), BufferArg("shift"), BufferArg("y"),
                               ScalarArg("i32", rows), ScalarArg("fp32", 1e-6)), 2),), "bf16")


def hostile_inputs(rows: int = 64, dim: int = 256) -> dict[str, bytes]:
    return {"x": torch.randn(1, rows, dim, dtype=torch.bfloat16).view(torch.uint8).numpy().tobytes(),
            "scale": bytes(4 * dim), "shift": bytes(4 * dim)}


def run_hostile(name: str, deadline_s: float = 2.0):
    cubin, entry, _, arch = hostile(name)
    launcher = Launcher(cuda_driver())
    try:
        launcher.load({("hostile", arch): cubin})
        return launcher.call([(modln_plan(arch, entry), hostile_inputs())], deadline_s=deadline_s)
    finally:
        launcher.close()


def test_a_spinning_cubin_is_stopped_at_the_deadline():
    """In its own process, as the harness runs the launcher: the process's end is what stops the kernel."""
    import subprocess
    import sys

    code = (f"import sys; sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(SUPPORT)!r}]; import test_launcher_gpu as t; "
            "t.run_hostile('spin_kernel', 1.0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "LaunchDeadline" in done.stderr, done.stderr[-2000:]


def test_a_cubin_writing_past_its_output_is_seen_in_the_guard():
    outcome = run_hostile("overrun_kernel")
    assert any(v.startswith("case 0: y: ") and "after it changed" in v for v in outcome.violations())


def test_a_cubin_reading_an_unmapped_address_faults():
    with pytest.raises(DriverError):
        run_hostile("unmapped_read_kernel")


def test_a_cubin_scanning_for_a_marker_in_another_process_never_finds_it():
    """The marker sits in this test's own CUDA context (another process from the launcher's below); the
    scan either faults on an unmapped page or finds nothing."""
    import subprocess
    import sys

    marker = torch.full((1 << 20,), 0x5245474953545259, dtype=torch.int64, device="cuda")  # noqa: F841 - held
    code = (f"import sys; sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(SUPPORT)!r}]; import test_launcher_gpu as t; "
            "out = t.run_hostile('scan_kernel', 30.0); import torch; "
            "y = torch.frombuffer(bytearray(out.cases[0].outputs['y']), dtype=torch.bfloat16); "
            "print('found', float(y.float().max()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        assert done.stdout.strip() == "found 0.0", done.stdout
    else:
        assert "DriverError" in done.stderr or "LaunchDeadline" in done.stderr, done.stderr[-2000:]
