"""A promoted triton_kernel in a serving process (registry/runtime/compiled.py), on the simulated driver.

The runtime launches the promoted cubins through the same launcher the
registry measured them with: inputs checked against the spec (a call no
variant matches is refused, nothing launched), only cubins of this
device's arch loaded (a bundle built only for another arch is refused), a
kernel that writes outside its outputs raised, not returned. What only a
GPU shows (the outputs byte-equal to the Triton-JIT path, from a signed
lock) is in the `device` tests and benchmarks/gpu_kernels.sh.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from registry.kernels.corpus import corpus_cases
from registry.kernels.launcher import PlanRefused
from registry.kernels.ops import get_operation
from registry.kernels.reference import modulated_layernorm
from registry.kernels.simulated_driver import FakeKernel, SimulatedDriver
from registry.runtime.compiled import KernelCallError, ShippedKernel
from compiled_fixtures import CUBINS, ENTRIES, PARAMS, ModlnBundle, simulated_modln


def shipped(kernels=None, *, capability=(9, 0), bundle=None, cubins=CUBINS):
    bundle = bundle or ModlnBundle()
    driver = SimulatedDriver(kernels or {entry: simulated_modln(dtype) for dtype, entry in ENTRIES.items()},
                             capability=capability)
    bundle.cubins = cubins
    return ShippedKernel(bundle, driver=driver), driver


def inputs(index: int = 0):
    case = corpus_cases("cpu")[index]
    return get_operation("modulated_layernorm").make_inputs(case, "cpu")


def test_the_shipped_kernel_launches_the_promoted_cubin_of_this_devices_arch_and_returns_its_output():
    kernel, driver = shipped()
    for index in range(4):
        args = inputs(index)
        got = kernel(*args)
        expected = modulated_layernorm(*args)
        assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected)
    assert kernel.digests == {"modln@sm_90a": __import__("hashlib").sha256(CUBINS[("modln", "sm_90a")]).hexdigest()}
    assert len(driver.recorded.images) == 1  # the sm_100a cubin is never handed to this device
    kernel.close()


def test_a_bundle_built_only_for_another_arch_is_refused_before_anything_loads():
    with pytest.raises(PlanRefused, match="built for sm_100a, sm_90a, and this device is sm80"):
        shipped(capability=(8, 0))


def test_a_call_no_variant_matches_is_refused_and_nothing_is_launched():
    kernel, driver = shipped(bundle=ModlnBundle(max_dim=150))
    with pytest.raises(KernelCallError, match=r"refused: no variant matches x torch.bfloat16 \(2, 5, 200\)"):
        kernel(*inputs(1))
    with pytest.raises(KernelCallError, match="2 inputs given; the kernel takes x, scale, shift"):
        kernel(*inputs(0)[:2])
    assert driver.recorded.launches == []


def test_a_kernel_writing_outside_its_output_is_raised_not_returned():
    overrun = FakeKernel(PARAMS, effects=({"write": 3, "offset": -16, "bytes": 16, "value": 1},))
    kernel, _ = shipped({entry: overrun for entry in ENTRIES.values()})
    with pytest.raises(KernelCallError, match=r"wrote outside its outputs: case 0: y: 1[0-6] guard bytes before it"):
        kernel(*inputs(0))


def test_importing_the_shipped_kernel_imports_neither_torch_nor_the_cuda_bindings():
    code = ("import sys, registry.runtime.compiled; "
            "assert not any(m.startswith(('torch', 'cuda.')) for m in sys.modules), "
            "sorted(m for m in sys.modules if m.startswith(('torch', 'cuda.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
