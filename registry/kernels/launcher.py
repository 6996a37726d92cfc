"""The trusted launcher: runs the registry's own cubins on buffers it allocated, as a launch plan says, and times them.

Nothing of a candidate runs here but its compiled kernel: the launcher takes a
:class:`~registry.kernels.launch_plan.LaunchPlan` (the bundle's launch spec
already evaluated for one call by the registry), the cubin bytes per
``(kernel, arch)`` that the registry rebuilt itself, and the input bytes per
input buffer. It parses no spec, evaluates no expression and imports no
candidate code, so what it reports (outputs, the device time between its own
CUDA events, the launches it made) is the harness's own observation.

For each call it:

- allocates every buffer itself (``cuMemAlloc``), each inside an allocation
  with a guard region of random bytes before and after it, the body aligned
  as the plan says; inputs and inouts are filled with the caller's bytes,
  outputs pre-filled with a 32-bit pattern drawn at random for each buffer
  and call (a kernel that writes nothing returns noise, never zeros or a
  stale answer);
- holds its stream at a gate (``cuStreamWaitValue32`` on a word of device
  memory), then enqueues behind it: 256 MB written on the stream (an L2
  eviction), its start event, each of the plan's launches with
  ``cuLaunchKernel`` (block = 32 * num_warps, the declared dynamic shared
  memory, raised past 48 KiB with ``cuFuncSetAttribute``; parameters packed
  as the cubin's layout: the declared arguments, then Triton's trailing
  scratch pointers as NULL), its stop event; and only then opens the gate
  from a second stream. The GPU so never waits for the host between the two
  events: without the gate, a host slower to enqueue a launch than the GPU
  to finish the eviction (Python's launch path; a profiler hooked into it)
  put its latency inside the timed span, which an H200 showed as 3-30 us
  over the kernels' CUPTI spans;
- waits for the stop event until the deadline (a launch past it raises
  :class:`LaunchDeadline`: the process must then be ended, which is the only
  way to stop a kernel), then copies every allocation back and checks the
  guards, and the inputs' bytes (the CUDA driver offers no read-only mapping
  of ordinary device memory to the kernel that owns the context: see
  docs/kernels.md, "The launcher's boundary"; a changed input is reported,
  and the harness refuses the call).

The driver is passed in (``cuda.bindings.driver``, or a fake that records
every call for tests on machines without a GPU), so this module imports
neither CUDA nor torch at import time.
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from registry.kernels.launch_plan import BUFFER_ROLES, SCALAR_TYPES, BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg

FLUSH_BYTES = 256 * 1024 * 1024
"""The L2 eviction written on the launcher's stream before each timed call (an H200 has 60 MB of L2)."""

GUARD_BYTES = 4096
"""Random bytes before and after every buffer (rounded up to the buffer's alignment)."""

DEFAULT_SHARED_LIMIT = 48 * 1024
"""Dynamic shared memory a kernel gets without opting in (``cuFuncSetAttribute``)."""

MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
POLL_S = 0.0002
"""How often the launcher asks whether its stop event has completed while it waits for the deadline."""

_CTYPES: dict[str, Any] = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32,
                           "u64": ctypes.c_uint64, "fp32": ctypes.c_float, "fp64": ctypes.c_double}
_INT_RANGES = {"i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1), "u32": (0, 2**32 - 1), "u64": (0, 2**64 - 1)}
_ARCH = re.compile(r"sm_(\d+)(\d)([af]?)")


class PlanRefused(ValueError):
    """A plan, cubin set or input the launcher will not launch: something it does not declare, or declares wrongly."""


class DriverError(RuntimeError):
    """A CUDA driver call failed; ``name`` is the driver's error name (CUDA_ERROR_ILLEGAL_ADDRESS, ...).

    After a kernel fault the context is unusable: the launcher must be replaced."""

    def __init__(self, call: str, name: str) -> None:
        super().__init__(f"{call} failed: {name}")
        self.call, self.name = call, name


class LaunchDeadline(RuntimeError):
    """The launches of a call had not finished by the deadline; the kernel may still be running."""


@dataclass(frozen=True)
class CaseOutcome:
    """One plan's launches within a call: what came back and what the launcher saw."""

    variant: str
    outputs: dict[str, bytes]  # every output and inout buffer's bytes after the call
    launches: tuple[str, ...]  # the kernel keys launched, in order ("kernel@arch")
    guard_violations: tuple[str, ...]  # "buffer: N bytes before/after it changed"
    inputs_changed: tuple[str, ...]  # input buffers whose bytes differ from what was sent


@dataclass(frozen=True)
class CallOutcome:
    """One timed call: the device time between the launcher's own events around every launch of its cases."""

    device_s: float
    cases: tuple[CaseOutcome, ...]

    @property
    def launches(self) -> int:
        return sum(len(case.launches) for case in self.cases)

    def violations(self) -> list[str]:
        """Every guard region and input the call's kernels changed, named by case."""
        found = []
        for index, case in enumerate(self.cases):
            found += [f"case {index}: {what}" for what in case.guard_violations]
            found += [f"case {index}: wrote to its input {name}" for name in case.inputs_changed]
        return found


def arch_capability(arch: str) -> tuple[int, int]:
    """(major, minor) of a cubin target (``sm_90a`` -> (9, 0), ``sm_100a`` -> (10, 0)); PlanRefused otherwise."""
    found = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if found is None:
        raise PlanRefused(f"arch {arch!r} is not a CUDA target such as sm_90a")
    return int(found.group(1)), int(found.group(2))


def kernel_key(kernel: str, arch: str) -> str:
    """How evidence names one cubin: ``kernel@arch``."""
    return f"{kernel}@{arch}"


def cubin_digests(cubins: Mapping[tuple[str, str], bytes]) -> dict[str, str]:
    """sha256 of each cubin, keyed ``kernel@arch``: what evidence names, and what the gate compares."""
    return {kernel_key(kernel, arch): hashlib.sha256(image).hexdigest()
            for (kernel, arch), image in sorted(cubins.items())}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def check_plan(plan: LaunchPlan, inputs: Mapping[str, bytes], cubins: Mapping[tuple[str, str], Any]) -> None:
    """Refuse (PlanRefused, one line) anything the plan does not declare, or declares inconsistently."""
    names: dict[str, BufferSpec] = {}
    for buffer in plan.buffers:
        if not isinstance(buffer.name, str) or not buffer.name or buffer.name in names:
            raise PlanRefused(f"buffer name {buffer.name!r} is empty or declared twice")
        if buffer.role not in BUFFER_ROLES:
            raise PlanRefused(f"buffer {buffer.name}: role {buffer.role!r} is not one of {', '.join(BUFFER_ROLES)}")
        if not _count(buffer.nbytes):
            raise PlanRefused(f"buffer {buffer.name}: nbytes {buffer.nbytes!r} is not a byte count")
        if not (_count(buffer.align) and buffer.align >= 16 and buffer.align & (buffer.align - 1) == 0):
            raise PlanRefused(f"buffer {buffer.name}: alignment {buffer.align!r} is not a power of two >= 16")
        names[buffer.name] = buffer
    filled = {name for name, buffer in names.items() if buffer.role != "output"}
    if set(inputs) != filled:
        missing, extra = sorted(filled - set(inputs)), sorted(set(inputs) - filled)
        raise PlanRefused(f"input bytes for {extra or 'no buffer'} that the plan does not read; missing {missing or 'none'}"
                          if extra else f"no input bytes for {', '.join(missing)}")
    for name in sorted(filled):
        data = inputs[name]
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) != names[name].nbytes:
            size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else type(data).__name__
            raise PlanRefused(f"buffer {name}: {size} input bytes for {names[name].nbytes} declared")
    if not plan.launches:
        raise PlanRefused(f"variant {plan.variant!r} launches nothing")
    for launch in plan.launches:
        _check_launch(launch, names, cubins)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_launch(launch: Launch, names: Mapping[str, BufferSpec], cubins: Mapping[tuple[str, str], Any]) -> None:
    key = kernel_key(launch.kernel, launch.arch)
    if (launch.kernel, launch.arch) not in cubins:
        raise PlanRefused(f"launch of {key}: no cubin of the registry's for it")
    if not isinstance(launch.entry, str) or not launch.entry.isascii() or not launch.entry.isprintable() or \
            not launch.entry:
        raise PlanRefused(f"launch of {key}: entry {launch.entry!r} is not a symbol name")
    if len(launch.grid) != 3 or not all(_count(n) and 1 <= n <= top for n, top in zip(launch.grid, MAX_GRID)):
        raise PlanRefused(f"launch of {key}: grid {launch.grid!r} is outside (1..{MAX_GRID})")
    x, y, z = launch.block if len(launch.block) == 3 else (0, 0, 0)
    if not (_count(x) and x % 32 == 0 and 32 <= x <= MAX_THREADS_PER_BLOCK and (y, z) == (1, 1)):
        raise PlanRefused(f"launch of {key}: block {launch.block!r} is not (32 * num_warps, 1, 1)")
    if not _count(launch.shared_bytes):
        raise PlanRefused(f"launch of {key}: shared memory {launch.shared_bytes!r} is not a byte count")
    if not _count(launch.scratch_args):
        raise PlanRefused(f"launch of {key}: scratch_args {launch.scratch_args!r} is not a count")
    for position, arg in enumerate(launch.args):
        if isinstance(arg, BufferArg):
            if arg.buffer not in names:
                raise PlanRefused(f"launch of {key}: argument {position} names undeclared buffer {arg.buffer!r}")
        elif isinstance(arg, ScalarArg):
            _check_scalar(arg, f"launch of {key}: argument {position}")
        else:
            raise PlanRefused(f"launch of {key}: argument {position} is a {type(arg).__name__}, not a buffer or scalar")


def _check_scalar(arg: ScalarArg, where: str) -> None:
    if arg.ctype not in SCALAR_TYPES:
        raise PlanRefused(f"{where}: type {arg.ctype!r} is not one of {', '.join(SCALAR_TYPES)}")
    if arg.ctype in _INT_RANGES:
        low, high = _INT_RANGES[arg.ctype]
        if isinstance(arg.value, bool) or not isinstance(arg.value, int) or not low <= arg.value <= high:
            raise PlanRefused(f"{where}: {arg.value!r} is not an {arg.ctype}")
    elif isinstance(arg.value, bool) or not isinstance(arg.value, (int, float)):
        raise PlanRefused(f"{where}: {arg.value!r} is not a number for {arg.ctype}")


def pack_parameters(launch: Launch, pointers: Mapping[str, int]) -> tuple[ctypes.Array, list[Any]]:
    """The ``void**`` array ``cuLaunchKernel`` reads, and the values it points at (kept alive by the caller).

    One slot per declared argument in order (a buffer's device address as a
    64-bit pointer, a scalar as its C type), then ``scratch_args`` NULL
    pointers: Triton's compiled kernels take a global and a profile scratch
    pointer after the declared ones, unused when the scratch size is 0.
    """
    values: list[Any] = []
    for arg in launch.args:
        if isinstance(arg, BufferArg):
            values.append(ctypes.c_uint64(pointers[arg.buffer]))
        else:
            values.append(_CTYPES[arg.ctype](arg.value))
    values += [ctypes.c_uint64(0) for _ in range(launch.scratch_args)]
    slots = (ctypes.c_void_p * max(1, len(values)))()
    for index, value in enumerate(values):
        slots[index] = ctypes.addressof(value)
    return slots, values


@dataclass
class _Staged:
    """One buffer as allocated for a call: the allocation, where its body starts, what was written around it.

    ``front`` is the guard from the allocation's start to the body; ``tail``
    starts at the body's last whole 4-byte word (``offset + words * 4``): the
    body's last 0-3 bytes, then the guard to the allocation's end, all random.
    Between them the body holds the input's bytes, or an output's pre-fill."""

    spec: BufferSpec
    allocation: int
    offset: int
    front: bytes
    tail: bytes
    sent: bytes | None  # the input's bytes (input and inout), compared after the call for an input

    @property
    def pointer(self) -> int:
        return self.allocation + self.offset

    @property
    def words(self) -> int:
        return self.spec.nbytes // 4


class Launcher:
    """One device context's launcher: its stream, events, flush buffer and the registry's loaded cubins.

    ``driver`` is ``cuda.bindings.driver`` (:func:`cuda_driver`) or a fake
    with the same calls. ``random_bytes`` fills guards and outputs (secret
    by default: a kernel cannot predict them).
    """

    def __init__(self, driver: Any, device: int = 0, *, flush_bytes: int = FLUSH_BYTES,
                 random_bytes: Callable[[int], bytes] = secrets.token_bytes,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.driver, self.random_bytes, self.clock = driver, random_bytes, clock
        self.modules: dict[tuple[str, str], Any] = {}
        self.functions: dict[tuple[str, str, str], Any] = {}
        self.digests: dict[str, str] = {}
        self.spinning = False  # a call passed its deadline: a kernel may still run, and nothing may wait for it
        self._resources: list[tuple[str, Any]] = []
        self._call("cuInit", 0)
        self.device = self._call("cuDeviceGet", device)
        self.context = self._call("cuDevicePrimaryCtxRetain", self.device)
        self._resources.append(("cuDevicePrimaryCtxRelease", self.device))
        self._call("cuCtxSetCurrent", self.context)
        attribute = driver.CUdevice_attribute
        self.capability = (self._call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                      self.device),
                           self._call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                      self.device))
        self.shared_optin = self._call("cuDeviceGetAttribute",
                                       attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.device)
        self.stream = self._call("cuStreamCreate", driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self._resources.append(("cuStreamDestroy", self.stream))
        self.start, self.stop = (self._call("cuEventCreate", driver.CUevent_flags.CU_EVENT_DEFAULT) for _ in range(2))
        self._resources += [("cuEventDestroy", self.start), ("cuEventDestroy", self.stop)]
        self.flush_bytes = flush_bytes
        self.flush = self._call("cuMemAlloc", flush_bytes) if flush_bytes else None
        if self.flush is not None:
            self._resources.append(("cuMemFree", self.flush))
        # the gate: a word the stream waits on before each call's timed work, and the stream that opens it
        self.opener = self._call("cuStreamCreate", driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self._resources.append(("cuStreamDestroy", self.opener))
        self.gate = self._call("cuMemAlloc", 4)
        self._resources.append(("cuMemFree", self.gate))
        self.opened = 0  # the gate's value: each call waits for one more than the last, so it is never closed
        self._call("cuMemsetD32Async", self.gate, self.opened, 1, self.opener)
        self._call("cuStreamSynchronize", self.opener)

    @property
    def arch(self) -> str:
        """The device's architecture as the registry names it in evidence (``sm90``)."""
        return f"sm{self.capability[0]}{self.capability[1]}"

    def _call(self, name: str, *args: Any) -> Any:
        result = getattr(self.driver, name)(*args)
        status, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if status != self.driver.CUresult.CUDA_SUCCESS:
            raise DriverError(name, self._error_name(status))
        return rest[0] if len(rest) == 1 else rest or None

    def _error_name(self, status: Any) -> str:
        try:
            found = self.driver.cuGetErrorName(status)
            text = found[1] if isinstance(found, tuple) and len(found) > 1 else None
            return text.decode("ascii", "replace") if isinstance(text, bytes) else str(getattr(status, "name", status))
        except Exception:  # noqa: BLE001 - the name is for the message; the failure is raised either way
            return str(getattr(status, "name", status))

    def load(self, cubins: Mapping[tuple[str, str], bytes]) -> dict[str, str]:
        """Load the registry's cubins (``cuModuleLoadData``); refuse one built for another arch than this device.

        Returns their digests by ``kernel@arch``. Only cubins loaded here are
        ever launched; a launch naming another is refused.
        """
        for (kernel, arch), image in sorted(cubins.items()):
            if arch_capability(arch) != self.capability:
                raise PlanRefused(f"cubin {kernel_key(kernel, arch)} is built for {arch}, and this device is "
                                  f"{self.arch}")
            if not isinstance(image, (bytes, bytearray)) or not image:
                raise PlanRefused(f"cubin {kernel_key(kernel, arch)} is empty or not bytes")
            if (kernel, arch) in self.modules:
                raise PlanRefused(f"cubin {kernel_key(kernel, arch)} is loaded already")
            self.modules[(kernel, arch)] = self._call("cuModuleLoadData", bytes(image))
            self._resources.append(("cuModuleUnload", self.modules[(kernel, arch)]))
        self.digests.update(cubin_digests(cubins))
        return dict(self.digests)

    def _function(self, launch: Launch) -> Any:
        key = (launch.kernel, launch.arch, launch.entry)
        if key not in self.functions:
            function = self._call("cuModuleGetFunction", self.modules[(launch.kernel, launch.arch)],
                                  launch.entry.encode("ascii"))
            self.functions[key] = function
        function = self.functions[key]
        if launch.shared_bytes > DEFAULT_SHARED_LIMIT:
            if launch.shared_bytes > self.shared_optin:
                raise PlanRefused(f"launch of {kernel_key(launch.kernel, launch.arch)}: {launch.shared_bytes} bytes "
                                  f"of shared memory, this device allows {self.shared_optin}")
            self._call("cuFuncSetAttribute", function,
                       self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                       launch.shared_bytes)
        return function

    def call(self, cases: Sequence[tuple[LaunchPlan, Mapping[str, bytes]]], *, deadline_s: float) -> CallOutcome:
        """Run every case's launches as one timed call (one L2 flush, one pair of events around all of them).

        Each case is a plan and its input bytes. Raises PlanRefused before
        anything is allocated when a plan is not launchable as declared,
        LaunchDeadline when the launches outlive ``deadline_s`` seconds, and
        DriverError when the driver reports a failure (a kernel fault among
        them).
        """
        if not cases:
            raise PlanRefused("a call with no case launches nothing")
        if self.spinning:
            raise LaunchDeadline("an earlier call's kernel may still be running: this launcher launches nothing more")
        for plan, inputs in cases:
            check_plan(plan, inputs, self.modules)
        staged: list[list[_Staged]] = []
        try:
            for plan, inputs in cases:
                staged.append(self._stage(plan, inputs))
            functions = [[self._function(launch) for launch in plan.launches] for plan, _ in cases]
            self._hold()
            try:
                if self.flush is not None:
                    self._call("cuMemsetD32Async", self.flush, secrets.randbits(32), self.flush_bytes // 4,
                               self.stream)
                self._call("cuEventRecord", self.start, self.stream)
                for (plan, _), buffers, launched in zip(cases, staged, functions):
                    pointers = {item.spec.name: item.pointer for item in buffers}
                    for launch, function in zip(plan.launches, launched):
                        self._launch(launch, function, pointers)
                self._call("cuEventRecord", self.stop, self.stream)
            except BaseException:
                self._open(quiet=True)  # a stream left waiting would hang every free; the first failure is raised
                raise
            self._open()
            self._wait(deadline_s)
            device_s = self._call("cuEventElapsedTime", self.start, self.stop) / 1000.0
            outcomes = tuple(self._collect(plan, buffers) for (plan, _), buffers in zip(cases, staged))
        except LaunchDeadline:
            # a kernel may still be running: freeing its memory would wait for it (cuMemFree synchronises), so
            # nothing is freed, and this launcher's process must end (the harness kills it)
            self.spinning = True
            raise
        except BaseException:
            self._free([item for buffers in staged for item in buffers], quiet=True)
            raise
        self._free([item for buffers in staged for item in buffers])
        return CallOutcome(device_s, outcomes)

    def _hold(self) -> None:
        """Make the stream wait until the gate reaches one more than its value now (see the module's docstring)."""
        self._call("cuStreamWaitValue32", self.stream, self.gate, self.opened + 1,
                   self.driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)

    def _open(self, *, quiet: bool = False) -> None:
        """Let the held stream run what was enqueued behind the gate (``quiet``: while another failure is on its
        way out, as a lost context fails this call too)."""
        self.opened += 1
        try:
            self._call("cuMemsetD32Async", self.gate, self.opened, 1, self.opener)
        except DriverError:
            if not quiet:
                raise

    def _stage(self, plan: LaunchPlan, inputs: Mapping[str, bytes]) -> list[_Staged]:
        """Allocate each buffer with its guards; write random guards, the inputs' bytes, outputs' random pre-fill.

        An output's body is filled on the launcher's stream with a 32-bit
        pattern drawn at random for this buffer and call (a GPU writes it at
        its bandwidth; hundreds of megabytes of host randomness would not be),
        its last 0-3 bytes with the random tail; the guards come from the host.
        The regions do not overlap, so the stream's fill and the host's
        synchronous copies never race.
        """
        staged: list[_Staged] = []
        try:
            for spec in plan.buffers:
                guard = _round_up(GUARD_BYTES, spec.align)
                body = _round_up(max(spec.nbytes, 1), spec.align)
                total = guard + body + guard + spec.align  # + align: room to align the body however cuMemAlloc aligns
                address = int(self._call("cuMemAlloc", total))
                self._resources.append(("cuMemFree", address))
                offset = _round_up(address + guard, spec.align) - address
                tail_start = offset + (spec.nbytes // 4) * 4
                sent = bytes(inputs[spec.name]) if spec.role != "output" else None
                item = _Staged(spec, address, offset, self.random_bytes(offset),
                               self.random_bytes(total - tail_start), sent)
                staged.append(item)
                self._copy_in(address, item.front)
                if sent is not None:
                    self._copy_in(item.pointer, sent[:item.words * 4])
                    item.tail = sent[item.words * 4:] + item.tail[spec.nbytes - item.words * 4:]
                elif item.words:
                    self._call("cuMemsetD32Async", item.pointer, secrets.randbits(32), item.words, self.stream)
                self._copy_in(address + tail_start, item.tail)
        except BaseException:
            self._free(staged, quiet=True)
            raise
        return staged

    def _copy_in(self, address: int, data: bytes) -> None:
        """A synchronous host-to-device copy straight from ``data``'s own buffer (no staging copy)."""
        if data:
            self._call("cuMemcpyHtoD", address, ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value,
                       len(data))

    def _copy_out(self, address: int, size: int) -> bytes:
        target = bytearray(size)
        if size:
            self._call("cuMemcpyDtoH", ctypes.addressof((ctypes.c_char * size).from_buffer(target)), address, size)
        return bytes(target)

    def _free(self, staged: Sequence[_Staged], *, quiet: bool = False) -> None:
        """Free a call's allocations; ``quiet`` while another failure is on its way out (a lost context fails
        every call after the fault, and that failure is the one to report)."""
        for item in staged:
            entry = ("cuMemFree", item.allocation)
            if entry not in self._resources:
                continue
            self._resources.remove(entry)
            try:
                self._call("cuMemFree", item.allocation)
            except DriverError:
                if not quiet:
                    raise

    def _launch(self, launch: Launch, function: Any, pointers: Mapping[str, int]) -> None:
        slots, values = pack_parameters(launch, pointers)
        self._call("cuLaunchKernel", function, *launch.grid, *launch.block, launch.shared_bytes, self.stream,
                   ctypes.addressof(slots), 0)
        del values  # the driver copied the parameters when the launch was enqueued

    def _wait(self, deadline_s: float) -> None:
        """Poll the stop event until it completes or ``deadline_s`` passes (a spinning kernel never completes)."""
        not_ready = self.driver.CUresult.CUDA_ERROR_NOT_READY
        ends = self.clock() + deadline_s
        while True:
            result = self.driver.cuEventQuery(self.stop)
            status = result[0] if isinstance(result, tuple) else result
            if status == self.driver.CUresult.CUDA_SUCCESS:
                return
            if status != not_ready:
                raise DriverError("cuEventQuery", self._error_name(status))
            if self.clock() >= ends:
                raise LaunchDeadline(f"the launches had not finished after {deadline_s:g} s")
            time.sleep(POLL_S)

    def _collect(self, plan: LaunchPlan, staged: list[_Staged]) -> CaseOutcome:
        outputs: dict[str, bytes] = {}
        violations: list[str] = []
        changed: list[str] = []
        for item in staged:
            nbytes, tail_start = item.spec.nbytes, item.offset + item.words * 4
            front = self._copy_out(item.allocation, item.offset)
            body = self._copy_out(item.pointer, nbytes)
            tail = self._copy_out(item.allocation + tail_start, len(item.tail))
            body_in_tail = nbytes - item.words * 4
            before_guard = _changed(item.front, front)
            after_guard = _changed(item.tail[body_in_tail:], tail[body_in_tail:])
            if before_guard:
                violations.append(f"{item.spec.name}: {before_guard} guard bytes before it changed")
            if after_guard:
                violations.append(f"{item.spec.name}: {after_guard} guard bytes after it changed")
            if item.spec.role == "input":
                if body != item.sent:
                    changed.append(item.spec.name)
            else:
                outputs[item.spec.name] = body
        return CaseOutcome(plan.variant, outputs, tuple(kernel_key(launch.kernel, launch.arch)
                                                        for launch in plan.launches),
                           tuple(violations), tuple(changed))

    def close(self) -> None:
        """Free what this launcher holds, newest first; after a kernel fault some calls fail, which is expected.
        After a missed deadline it frees nothing (that would wait for the kernel): only the process's end does."""
        if self.spinning:
            return
        while self._resources:
            name, handle = self._resources.pop()
            try:
                getattr(self.driver, name)(handle)
            except Exception:  # noqa: BLE001 - a poisoned context frees nothing; the process ends next
                pass


def _changed(before: bytes, after: bytes) -> int:
    """How many bytes differ between two equal-length byte strings."""
    if before == after:
        return 0
    return sum(a != b for a, b in zip(before, after))


def cuda_driver() -> Any:
    """NVIDIA's driver bindings (``cuda.bindings.driver``), imported only when a launcher is made."""
    from cuda.bindings import driver

    return driver
