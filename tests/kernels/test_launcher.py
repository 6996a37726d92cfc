"""The trusted launcher (registry/kernels/launcher.py) against the simulated driver, which records every call.

What a GPU would show (real cubins launched, CUDA events against CUPTI) is
in the `device` tests of tests/kernels/test_launcher_gpu.py and benchmarks/gpu_kernels.sh;
here every decision the launcher makes itself is checked: what it refuses,
how it packs a launch's parameters, where buffers and guards lie, what it
pre-fills, how it times, and its deadline.
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from registry.kernels.launch_plan import BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg
from registry.kernels.launcher import (DEFAULT_SHARED_LIMIT, DriverError, LaunchDeadline, Launcher, PlanRefused,
                                       arch_capability, cubin_digests, pack_parameters)
from registry.kernels.simulated_driver import FakeKernel, SimulatedDriver

CUBIN = b"\x7fELF registry-rebuilt cubin bytes"
CUBINS = {("copy", "sm_90a"): CUBIN}
N = 256  # bytes of each test buffer


def buffer(name: str, role: str, nbytes: int = N, align: int = 16) -> BufferSpec:
    return BufferSpec(name, role, "uint8", (nbytes,), (1,), nbytes, align)


def launch(entry: str = "copy_kernel", *, args=(BufferArg("x"), BufferArg("y"), ScalarArg("i32", N)),
           grid=(4, 1, 1), warps: int = 4, shared: int = 0, kernel: str = "copy", arch: str = "sm_90a") -> Launch:
    return Launch(kernel, arch, entry, grid, (32 * warps, 1, 1), shared, tuple(args), 2)


def copy_plan(**launch_args) -> LaunchPlan:
    return LaunchPlan((buffer("x", "input"), buffer("y", "output")), (launch(**launch_args),), "rows")


def copy_kernel(**extra) -> FakeKernel:
    """x -> y, the parameter layout a Triton kernel (x_ptr, y_ptr, n: i32) compiles to: 8, 8, 4, then the
    global and profile scratch pointers, 8 and 8."""
    return FakeKernel((8, 8, 4, 8, 8), seconds=2e-5, effects=({"copy": [0, 1], "bytes": N},), **extra)


def make(kernels=None, **driver_args) -> tuple[Launcher, SimulatedDriver]:
    driver = SimulatedDriver(kernels or {"copy_kernel": copy_kernel()}, **driver_args)
    launcher = Launcher(driver, flush_bytes=4096)
    launcher.load(CUBINS)
    return launcher, driver


DATA = bytes(range(256))


def test_the_launcher_imports_neither_cuda_nor_torch_and_the_bindings_import_without_a_driver():
    """Importing the launcher loads no CUDA; importing NVIDIA's bindings needs no driver (this machine has none).

    (The bindings' own start-up hook, a .pth file, makes the empty `cuda` namespace in every interpreter;
    `cuda.bindings` is what loads the driver's bindings.)"""
    code = ("import sys, registry.kernels.launcher as l; assert not any(m.startswith(('cuda.', 'torch')) for m in "
            "sys.modules), sorted(m for m in sys.modules if m.startswith(('cuda', 'torch'))); "
            "d = l.cuda_driver(); print(d.CUresult.CUDA_SUCCESS.name)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "CUDA_SUCCESS"


def test_a_call_launches_what_the_plan_declares_in_order_with_its_block_shared_memory_and_stream():
    launcher, driver = make()
    plan = LaunchPlan((buffer("x", "input"), buffer("y", "output")),
                      (launch(grid=(4, 1, 1), warps=4), launch(grid=(2, 3, 1), warps=8, shared=1024)), "two-pass")
    outcome = launcher.call([(plan, {"x": DATA})], deadline_s=5)
    assert [(made["entry"], made["grid"], made["block"], made["shared"], made["stream"])
            for made in driver.recorded.launches] == [
        ("copy_kernel", (4, 1, 1), (128, 1, 1), 0, launcher.stream),
        ("copy_kernel", (2, 3, 1), (256, 1, 1), 1024, launcher.stream)]
    assert outcome.cases[0].launches == ("copy@sm_90a", "copy@sm_90a")
    assert outcome.cases[0].variant == "two-pass"
    assert outcome.launches == 2
    assert outcome.cases[0].outputs == {"y": DATA}
    # after the gate's first value (set when the launcher was made): the output's pre-fill; the stream held at
    # the gate; behind it the flush, the start event, the launches and the stop event, on the launcher's one
    # stream; and only then the gate opened from the other stream, so no host latency falls between the events
    def named(args):
        return {launcher.flush: "flush", launcher.gate: "gate"}.get(args[0], "buffer")

    order = [(name, named(args) if name.startswith("cuMemset") else None)
             for name, args in driver.recorded.calls
             if name in ("cuMemsetD32Async", "cuEventRecord", "cuLaunchKernel", "cuStreamWaitValue32")]
    assert order == [("cuMemsetD32Async", "gate"), ("cuMemsetD32Async", "buffer"), ("cuStreamWaitValue32", None),
                     ("cuMemsetD32Async", "flush"), ("cuEventRecord", None), ("cuLaunchKernel", None),
                     ("cuLaunchKernel", None), ("cuEventRecord", None), ("cuMemsetD32Async", "gate")]
    fills = [args for name, args in driver.recorded.calls if name == "cuMemsetD32Async"]
    assert [(args[2], args[3]) for args in fills] == [(1, launcher.opener), (N // 4, launcher.stream),
                                                      (4096 // 4, launcher.stream), (1, launcher.opener)]
    waits = [args for name, args in driver.recorded.calls if name == "cuStreamWaitValue32"]
    assert waits == [(launcher.stream, launcher.gate, 1, int(driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ))]
    assert driver.recorded.waits == [0]  # the gate was closed when the stream began to wait on it
    assert fills[-1][1] == 1  # and its opening reaches the value waited for


def test_each_call_waits_for_a_gate_value_no_earlier_call_reached_and_a_refused_launch_still_opens_it():
    """The gate is never closed again (a close racing the last call's open could hold the stream for ever):
    each call waits for one more than the last value written. A launch the driver refuses after the wait was
    enqueued still opens the gate, or the held stream would hang every free that follows."""
    faulting = FakeKernel((8, 8, 4, 8, 8), effects=({"fault": "CUDA_ERROR_ILLEGAL_ADDRESS"},))
    launcher, driver = make({"copy_kernel": copy_kernel(), "fault_kernel": faulting})
    plan = LaunchPlan((buffer("x", "input"), buffer("y", "output")), (launch(),), "v")
    for _ in range(3):
        launcher.call([(plan, {"x": DATA})], deadline_s=5)
    assert [args[2] for name, args in driver.recorded.calls if name == "cuStreamWaitValue32"] == [1, 2, 3]
    assert driver.recorded.waits == [0, 1, 2]
    # the first launch faults and the second is refused with the lost context's error, behind the gate
    faults = LaunchPlan(plan.buffers, (launch("fault_kernel"), launch()), "v")
    with pytest.raises(DriverError, match="cuLaunchKernel.*CUDA_ERROR_ILLEGAL_ADDRESS"):
        launcher.call([(faults, {"x": DATA})], deadline_s=5)
    tried = [name if name != "cuMemsetD32Async" or args[0] != launcher.gate else f"gate {args[1]}"
             for name, args in driver.recorded.calls if name in ("cuStreamWaitValue32", "cuMemsetD32Async",
                                                                 "cuLaunchKernel")]
    assert tried[-5:] == ["cuStreamWaitValue32", "cuMemsetD32Async", "cuLaunchKernel", "cuLaunchKernel", "gate 4"]
    assert launcher.opened == 4


def test_parameters_are_the_declared_arguments_then_two_null_scratch_pointers_in_the_cubins_layout():
    kernel = FakeKernel((8, 4, 8, 8, 4, 8, 4, 8, 8, 8))
    launcher, driver = make({"all_types": kernel})
    plan = LaunchPlan((buffer("x", "input"), buffer("y", "output")), (launch(
        "all_types", args=(BufferArg("x"), ScalarArg("i32", -7), ScalarArg("i64", 2**40), BufferArg("y"),
                           ScalarArg("u32", 2**32 - 1), ScalarArg("u64", 2**64 - 1), ScalarArg("fp32", 0.5),
                           ScalarArg("fp64", -1.25))),), "v")
    launcher.call([(plan, {"x": DATA})], deadline_s=5)
    params = driver.recorded.launches[0]["params"]
    x_ptr, y_ptr = (int.from_bytes(params[i], "little") for i in (0, 3))
    assert x_ptr % 16 == 0 and y_ptr % 16 == 0 and x_ptr != y_ptr
    assert params[1:3] == [struct.pack("<i", -7), struct.pack("<q", 2**40)]
    assert params[4:8] == [struct.pack("<I", 2**32 - 1), struct.pack("<Q", 2**64 - 1), struct.pack("<f", 0.5),
                           struct.pack("<d", -1.25)]
    assert params[8:] == [bytes(8), bytes(8)]  # global and profile scratch: NULL


def test_pack_parameters_gives_one_slot_per_argument_and_scratch_pointer():
    slots, values = pack_parameters(launch(), {"x": 0x1000, "y": 0x2000})
    assert len(values) == 5
    read = [ctypes.string_at(slots[i], ctypes.sizeof(values[i])) for i in range(5)]
    assert read == [struct.pack("<Q", 0x1000), struct.pack("<Q", 0x2000), struct.pack("<i", N), bytes(8), bytes(8)]


@pytest.mark.parametrize("plan, inputs, refusal", [
    (copy_plan(args=(BufferArg("x"), BufferArg("z"), ScalarArg("i32", 1))), {"x": DATA}, "undeclared buffer 'z'"),
    (copy_plan(), {}, "no input bytes for x"),
    (copy_plan(), {"x": DATA, "y": DATA}, "input bytes for ['y'] that the plan does not read"),
    (copy_plan(), {"x": DATA[:-1]}, "buffer x: 255 input bytes for 256 declared"),
    (copy_plan(kernel="other"), {"x": DATA}, "no cubin of the registry's for it"),
    (copy_plan(arch="sm_100a"), {"x": DATA}, "launch of copy@sm_100a: no cubin"),
    (copy_plan(grid=(0, 1, 1)), {"x": DATA}, "grid (0, 1, 1) is outside"),
    (copy_plan(grid=(1, 65536, 1)), {"x": DATA}, "is outside"),
    (LaunchPlan((buffer("x", "input"), buffer("y", "output")),
                (Launch("copy", "sm_90a", "copy_kernel", (1, 1, 1), (100, 1, 1), 0, (), 2),), "v"),
     {"x": DATA}, "block (100, 1, 1) is not (32 * num_warps, 1, 1)"),
    (copy_plan(warps=64), {"x": DATA}, "block (2048, 1, 1)"),
    (copy_plan(args=(BufferArg("x"), BufferArg("y"), ScalarArg("i32", 2**31))), {"x": DATA}, "is not an i32"),
    (copy_plan(args=(BufferArg("x"), BufferArg("y"), ScalarArg("i8", 1))), {"x": DATA}, "type 'i8' is not one of"),
    (copy_plan(args=(BufferArg("x"), BufferArg("y"), ScalarArg("u32", True))), {"x": DATA}, "is not an u32"),
    (copy_plan(args=(BufferArg("x"), "y")), {"x": DATA}, "argument 1 is a str"),
    (LaunchPlan((buffer("x", "input"), buffer("y", "output")), (), "empty"), {"x": DATA}, "launches nothing"),
    (LaunchPlan((buffer("x", "input"), buffer("x", "output")), (launch(),), "v"), {"x": DATA}, "declared twice"),
    (LaunchPlan((buffer("x", "input"), buffer("y", "scratch")), (launch(),), "v"), {"x": DATA}, "role 'scratch'"),
    (LaunchPlan((buffer("x", "input", align=8), buffer("y", "output")), (launch(),), "v"), {"x": DATA},
     "alignment 8"),
    (LaunchPlan((buffer("x", "input", align=48), buffer("y", "output")), (launch(),), "v"), {"x": DATA},
     "alignment 48"),
])
def test_anything_the_plan_does_not_declare_or_declares_wrongly_is_refused_before_any_allocation(plan, inputs,
                                                                                                 refusal):
    launcher, driver = make()
    allocations = len(driver.memory.allocations)
    with pytest.raises(PlanRefused, match=re.escape(refusal)):
        launcher.call([(plan, inputs)], deadline_s=5)
    assert driver.recorded.launches == []
    assert len(driver.memory.allocations) == allocations


def test_a_cubin_for_another_arch_than_the_device_is_refused_at_load():
    driver = SimulatedDriver({"copy_kernel": copy_kernel()}, capability=(10, 0))
    launcher = Launcher(driver, flush_bytes=0)
    with pytest.raises(PlanRefused, match="built for sm_90a, and this device is sm100"):
        launcher.load(CUBINS)
    assert driver.recorded.images == []
    assert launcher.load({("copy", "sm_100a"): CUBIN}) == {"copy@sm_100a": hashlib.sha256(CUBIN).hexdigest()}


def test_arch_capability_reads_cuda_targets_only():
    assert arch_capability("sm_90a") == (9, 0) and arch_capability("sm_100a") == (10, 0)
    assert arch_capability("sm_80") == (8, 0) and arch_capability("sm_120f") == (12, 0)
    for bad in ("sm90", "compute_90", "sm_9", "sm_90b", "", None):
        with pytest.raises(PlanRefused):
            arch_capability(bad)


def test_only_the_registrys_cubins_are_loaded_and_their_digests_are_what_evidence_names():
    launcher, driver = make()
    assert driver.recorded.images == [hashlib.sha256(CUBIN).hexdigest()]
    assert launcher.digests == cubin_digests(CUBINS) == {"copy@sm_90a": hashlib.sha256(CUBIN).hexdigest()}
    with pytest.raises(PlanRefused, match="loaded already"):
        launcher.load(CUBINS)


def test_a_write_past_a_buffer_or_before_it_lands_in_a_guard_and_is_named():
    kernels = {"copy_kernel": FakeKernel((8, 8, 4, 8, 8), effects=(
        {"copy": [0, 1], "bytes": N}, {"write": 1, "offset": N, "bytes": 16, "value": 0},
        {"write": 0, "offset": -16, "bytes": 16, "value": 0}))}  # 16 bytes: a random guard never holds them all
    launcher, _ = make(kernels, )
    outcome = launcher.call([(copy_plan(), {"x": DATA})], deadline_s=5)
    violations = outcome.cases[0].guard_violations
    assert any(v.startswith("y: ") and "after it changed" in v for v in violations), violations
    assert any(v.startswith("x: ") and "before it changed" in v for v in violations), violations
    assert outcome.violations() and all(v.startswith("case 0: ") for v in outcome.violations())


def test_a_kernel_that_writes_its_input_is_seen_after_the_call():
    kernels = {"copy_kernel": FakeKernel((8, 8, 4, 8, 8), effects=(
        {"copy": [0, 1], "bytes": N}, {"fill": 0, "bytes": 8, "value": 0xAB}))}
    launcher, _ = make(kernels)
    outcome = launcher.call([(copy_plan(), {"x": DATA})], deadline_s=5)
    assert outcome.cases[0].inputs_changed == ("x",)
    assert outcome.cases[0].guard_violations == ()
    assert "case 0: wrote to its input x" in outcome.violations()


def test_an_output_the_kernel_never_writes_holds_fresh_random_bits_each_call_never_zeros_or_a_stale_answer():
    launcher, _ = make({"copy_kernel": FakeKernel((8, 8, 4, 8, 8))})  # launches, writes nothing
    first = launcher.call([(copy_plan(), {"x": DATA})], deadline_s=5).cases[0].outputs["y"]
    second = launcher.call([(copy_plan(), {"x": DATA})], deadline_s=5).cases[0].outputs["y"]
    assert first != second and first != bytes(N) and first != DATA
    # a 32-bit word drawn for this buffer and call, repeated (the device writes it at its bandwidth)
    assert first == first[:4] * (N // 4) and second == second[:4] * (N // 4)


@pytest.mark.parametrize("nbytes", [1, 2, 3, 5, 6, 7, 13, 255])
def test_a_body_that_is_not_whole_words_is_filled_and_checked_to_its_last_byte(nbytes):
    """The pre-fill covers whole 32-bit words; the last 0-3 bytes are random from the host, and the guard starts
    right after the body: a kernel writing exactly the body touches no guard, one byte more does."""
    exact = FakeKernel((8, 8, 4, 8, 8), effects=({"copy": [0, 1], "bytes": nbytes},))
    over = FakeKernel((8, 8, 4, 8, 8), effects=({"copy": [0, 1], "bytes": nbytes},
                                                {"write": 1, "offset": nbytes, "bytes": 8, "value": 0}))
    launcher, _ = make({"copy_kernel": exact, "over_kernel": over})
    plan = LaunchPlan((buffer("x", "input", nbytes), buffer("y", "output", nbytes)), (launch(),), "v")
    outcome = launcher.call([(plan, {"x": DATA[:nbytes]})], deadline_s=5)
    assert outcome.cases[0].outputs == {"y": DATA[:nbytes]} and outcome.violations() == []
    plan = LaunchPlan((buffer("x", "input", nbytes), buffer("y", "output", nbytes)), (launch("over_kernel"),), "v")
    (violation,) = launcher.call([(plan, {"x": DATA[:nbytes]})], deadline_s=5).violations()
    assert re.fullmatch(r"case 0: y: [1-8] guard bytes after it changed", violation), violation


def test_an_honest_call_leaves_guards_and_inputs_alone_and_frees_every_buffer():
    launcher, driver = make()
    before = set(driver.memory.allocations)
    outcome = launcher.call([(copy_plan(), {"x": DATA}), (copy_plan(), {"x": DATA[::-1]})], deadline_s=5)
    assert outcome.violations() == []
    assert [case.outputs["y"] for case in outcome.cases] == [DATA, DATA[::-1]]
    assert set(driver.memory.allocations) == before
    launcher.close()
    assert driver.memory.allocations == {} and driver.modules == {} and driver.streams == set()


@pytest.mark.parametrize("align", [16, 128, 1024, 8192])
def test_every_buffer_starts_at_its_declared_alignment(align):
    kernels = {"copy_kernel": FakeKernel((8, 8, 4, 8, 8), effects=({"copy": [0, 1], "bytes": 100},))}
    launcher, driver = make(kernels)
    plan = LaunchPlan((buffer("x", "input", 100, align), buffer("y", "output", 100, align)), (launch(),), "v")
    outcome = launcher.call([(plan, {"x": DATA[:100]})], deadline_s=5)
    params = driver.recorded.launches[0]["params"]
    assert all(int.from_bytes(params[i], "little") % align == 0 for i in (0, 1))
    assert outcome.cases[0].outputs == {"y": DATA[:100]} and outcome.violations() == []


def test_the_device_time_is_the_launchers_own_events_around_the_launches_only():
    kernels = {"copy_kernel": copy_kernel(), "slow": FakeKernel((8, 8, 4, 8, 8), seconds=3e-3)}
    launcher, _ = make(kernels)
    plan = LaunchPlan((buffer("x", "input"), buffer("y", "output")),
                      (launch(), launch("slow"), launch("slow")), "v")
    outcome = launcher.call([(plan, {"x": DATA}), (copy_plan(), {"x": DATA})], deadline_s=5)
    assert outcome.device_s == pytest.approx(2e-5 + 2 * 3e-3 + 2e-5)


def test_dynamic_shared_memory_past_48_kib_is_opted_into_and_past_the_device_limit_refused():
    launcher, driver = make(shared_optin=100 * 1024)
    launcher.call([(copy_plan(shared=DEFAULT_SHARED_LIMIT), {"x": DATA})], deadline_s=5)
    assert not [c for c in driver.recorded.calls if c[0] == "cuFuncSetAttribute"]
    launcher.call([(copy_plan(shared=64 * 1024), {"x": DATA})], deadline_s=5)
    assert [args for name, args in driver.recorded.calls if name == "cuFuncSetAttribute"] == [
        ("copy_kernel", 8, 64 * 1024)]
    assert driver.recorded.launches[-1]["shared"] == 64 * 1024
    with pytest.raises(PlanRefused, match="this device allows 102400"):
        launcher.call([(copy_plan(shared=101 * 1024), {"x": DATA})], deadline_s=5)


class SteppingClock:
    """A clock that moves 1/16 s at each reading (exact in binary), so a deadline falls on a known reading whatever
    the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.0625
        return self.now


def test_a_spinning_kernel_raises_at_the_deadline_and_no_time_is_reported():
    driver = SimulatedDriver({"copy_kernel": FakeKernel((8, 8, 4, 8, 8), effects=({"hang": True},))})
    clock = SteppingClock()
    launcher = Launcher(driver, flush_bytes=4096, clock=clock)
    launcher.load(CUBINS)
    with pytest.raises(LaunchDeadline, match="had not finished after 0.25 s"):
        launcher.call([(copy_plan(), {"x": DATA})], deadline_s=0.25)
    # Raised at the first reading at or past the deadline: the one that set it (0.0625) plus 0.25, neither sooner
    # nor later.
    assert clock.now == 0.0625 + 0.25
    assert not [c for c in driver.recorded.calls if c[0] == "cuEventElapsedTime"]
    # nothing may wait for the kernel still running: no free now, none at close, and no further launch
    frees = [c for c in driver.recorded.calls if c[0] == "cuMemFree"]
    launcher.close()
    assert [c for c in driver.recorded.calls if c[0] == "cuMemFree"] == frees == []
    with pytest.raises(LaunchDeadline, match="may still be running"):
        launcher.call([(copy_plan(), {"x": DATA})], deadline_s=0.2)


@pytest.mark.parametrize("effects", [({"fault": "CUDA_ERROR_ILLEGAL_ADDRESS"},),
                                     ({"write": 1, "offset": 1 << 19, "bytes": 4, "value": 1},)])
def test_a_faulting_kernel_is_a_driver_error_naming_the_fault(effects):
    """A write far outside every allocation faults as on a device; the context is lost (every later call fails)."""
    launcher, driver = make({"copy_kernel": FakeKernel((8, 8, 4, 8, 8), effects=effects)})
    with pytest.raises(DriverError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        launcher.call([(copy_plan(), {"x": DATA})], deadline_s=5)
    assert driver.sticky == "CUDA_ERROR_ILLEGAL_ADDRESS"
    launcher.close()  # frees what it can; the lost context's failures are not raised


def test_a_call_of_no_case_is_refused():
    launcher, _ = make()
    with pytest.raises(PlanRefused, match="no case"):
        launcher.call([], deadline_s=5)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 700), st.sampled_from([16, 32, 256, 4096])), min_size=2, max_size=5),
       data=st.data())
def test_any_plan_of_buffers_copied_honestly_comes_back_exact_with_guards_and_inputs_intact(sizes, data):
    """Buffers of any size and alignment: a kernel that copies each input to its output touches no guard."""
    buffers, kernels, launches, inputs = [], {}, [], {}
    for index, (nbytes, align) in enumerate(sizes):
        source, target = f"in{index}", f"out{index}"
        buffers += [BufferSpec(source, "input", "uint8", (nbytes,), (1,), nbytes, align),
                    BufferSpec(target, "output", "uint8", (nbytes,), (1,), nbytes, align)]
        inputs[source] = data.draw(st.binary(min_size=nbytes, max_size=nbytes))
        kernels[f"k{index}"] = FakeKernel((8, 8, 8, 8), effects=({"copy": [0, 1], "bytes": nbytes},))
        launches.append(Launch("copy", "sm_90a", f"k{index}", (1, 1, 1), (32, 1, 1), 0,
                               (BufferArg(source), BufferArg(target)), 2))
    launcher, _ = make(kernels)
    outcome = launcher.call([(LaunchPlan(tuple(buffers), tuple(launches), "v"), inputs)], deadline_s=5)
    assert outcome.violations() == []
    assert outcome.cases[0].outputs == {f"out{i}": inputs[f"in{i}"] for i in range(len(sizes))}
