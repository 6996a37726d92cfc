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

import json
import shutil
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
from compiled_fixtures import (CUBINS, ENTRIES, PARAMS, ModlnBundle, built_modln,  # noqa: F401 - a fixture
                               simulated_images, simulated_modln)


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


MANIFEST = """
workload: wan-modln-op
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 16, protocol: paired, decision: point}
"""


def promoted_through_an_import(cli, bundle, cubins: dict) -> None:
    """Declare, register the built bundle, import a document claiming the harness launcher ran its cubins (what a
    GPU worker records), promote. On this machine no launcher can run them; the claim is an import's."""
    (cli.tmp / "op.yaml").write_text(MANIFEST)
    assert cli("workload", "declare", str(cli.tmp / "op.yaml")).exit_code == 0
    assert cli("artifact", "register", "modln-c", "--workload", "wan-modln-op", "--kind", "triton_kernel",
               "--bundle", str(bundle)).exit_code == 0
    leaf = {"name": "shape0.y", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16",
            "reference_shape": [1, 8, 128], "candidate_shape": [1, 8, 128], "reference_strides": [1024, 128, 1],
            "candidate_strides": [1024, 128, 1], "byte_equal": True, "max_abs_error": 0.0, "max_rel_error": 0.0,
            "has_nan": False, "has_inf": False, "reference_has_nan": False, "reference_has_inf": False,
            "nonfinite_mismatch": False}
    times = [1e-5 * (1 + 0.01 * (i % 3)) for i in range(16)]
    harness = {"sandbox": "linux-ns-seccomp/1", "harness_sha256": "ef" * 32,
               "confinement": {"identity": "sandbox_uid", "memory": "none"}}
    key = sorted(cubins)[0]
    document = {"format": "registry.evidence/1", "artifact": "modln-c", "run": "gpu-worker", **harness,
                "evidence": [
                    {"kind": "parity", "policy": "byte_equal", "leaves": [leaf]},
                    {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
                     "baseline_s": [2 * t for t in times], "candidate_s": times, "schedule": ["BC", "CB"] * 8},
                    {"kind": "execution", "candidate_calls": 16, "fallbacks": 0, "launch_signal": "harness_launcher",
                     "cubins": cubins, "launches": [[key]] * 16, **harness}]}
    (cli.tmp / "evidence.json").write_text(json.dumps(document))
    assert cli("evidence", "import", str(cli.tmp / "evidence.json")).exit_code == 0
    verdict = json.loads(cli("promote", "modln-c", "--json").output)
    assert verdict["decision"] == "promoted", verdict


def test_the_runtime_loads_the_promoted_bundle_from_a_signed_lock_and_launches_its_cubins(registry_cli,
                                                                                          built_modln):
    from registry.app.compiled import registered_cubins
    from registry.bundles import Profile
    from registry.runtime import LoadError, load, resolve

    directory, manifest = built_modln
    cubins = registered_cubins(manifest.canonical())
    promoted_through_an_import(registry_cli, directory, cubins)
    key = registry_cli.tmp / "signing.key"
    lock = registry_cli.tmp / "registry.lock.json"
    assert registry_cli("keys", "init", str(key)).exit_code == 0
    done = registry_cli("lock", "--workload", "wan-modln-op", "--key", str(key), "--out", str(lock), "--arch", "sm90",
                        "--torch", "2.13.0", "--cuda", "12.8", "--triton", "3.7.1")
    assert done.exit_code == 0, done.output
    root = registry_cli.tmp / "trusted"
    shutil.copytree(directory, root / "modln-c")
    answer = resolve("wan-modln-op", Profile("sm90", "2.13.0", "12.8", "3.7.1"), lock=lock,
                     trusted_keys=[f"{key}.pub"])
    assert answer.match is not None and answer.match.artifact == "modln-c", answer.reason_codes()
    from registry.app.compiled import read_bundle_kernel

    read = read_bundle_kernel(directory, manifest)
    driver = SimulatedDriver({}, images=simulated_images(read.cubins, read.spec))
    kernel = load(answer.match, trusted_root=root, driver=driver)
    for index in range(4):
        args = inputs(index)
        assert torch.equal(kernel(*args), modulated_layernorm(*args))
    assert {launch["entry"] for launch in driver.recorded.launches} == {"_modln_kernel"}
    assert sorted(kernel.digests) == sorted(cubins)  # what ran is what the lock names
    other = SimulatedDriver({}, capability=(10, 0))
    with pytest.raises(LoadError, match="built for sm_90a, and this device is sm100"):
        load(answer.match, trusted_root=root, driver=other)
    cubin = root / "modln-c" / "kernels" / sorted(cubins)[0].split("@")[0] / "sm_90a.cubin"
    data = cubin.read_bytes()
    cubin.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(LoadError, match="refused"):
        load(answer.match, trusted_root=root, driver=driver)
