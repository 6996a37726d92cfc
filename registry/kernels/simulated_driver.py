"""A stand-in for ``cuda.bindings.driver`` that records every call: the launcher's tests on machines without a GPU.

It answers the calls :class:`registry.kernels.launcher.Launcher` makes, with
the same shapes (a ``CUresult`` first in every returned tuple, enums of the
same names), over memory it keeps in byte arrays at made-up device
addresses. Its kernels are declared, not compiled: each entry symbol has the
byte sizes of its parameters (so the ``void**`` array a launch passes is read
exactly as the driver would read it from a cubin's parameter layout; kernels
may be declared per loaded image, for cubins that share an entry name), the
device time one launch takes, and its effects on memory, in order:

- ``{"copy": [SRC, DST], "bytes": N}``: N bytes from the pointer passed as
  parameter SRC to the one passed as DST;
- ``{"fill": DST, "bytes": N, "value": V}``: N bytes of V at pointer DST;
- ``{"write": DST, "offset": K, "bytes": N, "value": V}``: N bytes of V at
  DST + K (past the buffer's end, or before its start, is a guard region);
- ``{"hang": true}``: the stream never gets past this launch (a spin loop);
- ``{"fault": NAME}``: the context is lost with the sticky error NAME
  (``CUDA_ERROR_ILLEGAL_ADDRESS``), as after a faulting kernel.

A write outside every allocation is that fault too, as on a device. Tests
in one process may also give a kernel a Python function ``run(memory,
params, grid)`` (no JSON form). Nothing here is ever used to measure: a launcher
made with it runs on a made-up clock, and the registry's evaluation refuses
to record anything from a machine without a CUDA device.
"""
from __future__ import annotations

import ctypes
import enum
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719


class CUdevice_attribute(enum.IntEnum):  # noqa: N801 - the driver's names
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97


class CUfunction_attribute(enum.IntEnum):  # noqa: N801
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUstream_flags(enum.IntEnum):  # noqa: N801
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class CUstreamWaitValue_flags(enum.IntEnum):  # noqa: N801
    CU_STREAM_WAIT_VALUE_GEQ = 0x0
    CU_STREAM_WAIT_VALUE_EQ = 0x1


class CUevent_flags(enum.IntEnum):  # noqa: N801
    CU_EVENT_DEFAULT = 0


BASE_ADDRESS = 0x7F00_0000_0000
ALLOCATION_ALIGN = 256  # cuMemAlloc's guarantee
GAP = 1 << 20  # unmapped space between allocations: a write that leaves one faults


@dataclass
class FakeKernel:
    """One entry symbol: its parameter layout (bytes per parameter), the time one launch takes, its effects."""

    params: tuple[int, ...]
    seconds: float = 1e-5
    effects: tuple[Mapping[str, Any], ...] = ()
    run: Callable[["DeviceMemory", list[bytes], tuple[int, int, int]], None] | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "FakeKernel":
        return cls(tuple(config["params"]), float(config.get("seconds", 1e-5)), tuple(config.get("effects", ())))


class Fault(Exception):
    """A simulated kernel touched memory it may not: the context's sticky error."""

    def __init__(self, name: str = "CUDA_ERROR_ILLEGAL_ADDRESS") -> None:
        super().__init__(name)
        self.name = name


class DeviceMemory:
    """The simulated device's allocations, by base address."""

    def __init__(self) -> None:
        self.allocations: dict[int, bytearray] = {}
        self.next = BASE_ADDRESS

    def allocate(self, size: int) -> int:
        base = self.next
        self.allocations[base] = bytearray(size)
        self.next = -(-(base + size + GAP) // ALLOCATION_ALIGN) * ALLOCATION_ALIGN
        return base

    def free(self, base: int) -> bool:
        return self.allocations.pop(base, None) is not None

    def _find(self, address: int, size: int) -> tuple[bytearray, int]:
        for base, data in self.allocations.items():
            if base <= address and address + size <= base + len(data):
                return data, address - base
        raise Fault()

    def read(self, address: int, size: int) -> bytes:
        data, at = self._find(address, size)
        return bytes(data[at:at + size])

    def write(self, address: int, payload: bytes) -> None:
        data, at = self._find(address, len(payload))
        data[at:at + len(payload)] = payload


@dataclass
class _Event:
    time: float | None = None  # device time when the stream reached it; None: not reached (a hung stream)


@dataclass
class Recorded:
    """Every driver call in order (name, arguments as plain values) and every launch in detail."""

    calls: list[tuple[str, tuple]] = field(default_factory=list)
    launches: list[dict[str, Any]] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # sha256 of every image loaded
    waits: list[int] = field(default_factory=list)  # the gate word's value when each stream wait was enqueued


class SimulatedDriver:
    """The fake driver module: ``SimulatedDriver(kernels)`` has the attributes the launcher reads from
    ``cuda.bindings.driver``."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUfunction_attribute = CUfunction_attribute
    CUstream_flags = CUstream_flags
    CUevent_flags = CUevent_flags
    CUstreamWaitValue_flags = CUstreamWaitValue_flags

    def __init__(self, kernels: Mapping[str, FakeKernel], *, capability: tuple[int, int] = (9, 0),
                 shared_optin: int = 227 * 1024, devices: int = 1,
                 images: Mapping[str, Mapping[str, FakeKernel]] | None = None) -> None:
        self.kernels = dict(kernels)
        # kernels of one image (by its sha256), before ``kernels``: cubins of one entry name compiled apart
        self.images = {digest: dict(entries) for digest, entries in (images or {}).items()}
        self.functions: dict[int, tuple[str, FakeKernel]] = {}
        self.capability, self.shared_optin, self.devices = capability, shared_optin, devices
        self.memory = DeviceMemory()
        self.recorded = Recorded()
        self.clock = 0.0  # the device's time, advanced by each launch
        self.hung = False
        self.sticky: str | None = None
        self.initialised = False
        self.modules: dict[int, str] = {}
        self.events: dict[int, _Event] = {}
        self.streams: set[int] = set()
        self.shared_limits: dict[int, int] = {}
        self._handles = 1

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "SimulatedDriver":
        """The JSON form a jailed launcher worker is told to simulate (kernels with declarative effects only)."""
        kernels = {name: FakeKernel.from_config(kernel) for name, kernel in config.get("kernels", {}).items()}
        return cls(kernels, capability=tuple(config.get("capability", (9, 0))),
                   shared_optin=int(config.get("shared_optin", 227 * 1024)))

    def _handle(self) -> int:
        self._handles += 1
        return self._handles

    def _record(self, name: str, *args: Any) -> CUresult | None:
        """Log the call; the sticky error of a lost context answers every call after it."""
        self.recorded.calls.append((name, args))
        if name != "cuInit" and not self.initialised:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED
        return CUresult[self.sticky] if self.sticky else None

    def cuGetErrorName(self, status: Any) -> tuple[CUresult, bytes]:  # noqa: N802 - the driver's names
        return CUresult.CUDA_SUCCESS, CUresult(int(status)).name.encode()

    def cuInit(self, flags: int) -> tuple[CUresult]:  # noqa: N802
        self._record("cuInit", flags)
        self.initialised = True
        return (CUresult.CUDA_SUCCESS,)

    def cuDeviceGet(self, ordinal: int) -> tuple[CUresult, int]:  # noqa: N802
        failed = self._record("cuDeviceGet", ordinal)
        if failed or not 0 <= ordinal < self.devices:
            return failed or CUresult.CUDA_ERROR_INVALID_VALUE, 0
        return CUresult.CUDA_SUCCESS, ordinal

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple[CUresult, int]:  # noqa: N802
        return self._record("cuDevicePrimaryCtxRetain", device) or CUresult.CUDA_SUCCESS, 1

    def cuDevicePrimaryCtxRelease(self, device: int) -> tuple[CUresult]:  # noqa: N802
        return (self._record("cuDevicePrimaryCtxRelease", device) or CUresult.CUDA_SUCCESS,)

    def cuCtxSetCurrent(self, context: int) -> tuple[CUresult]:  # noqa: N802
        return (self._record("cuCtxSetCurrent", context) or CUresult.CUDA_SUCCESS,)

    def cuDeviceGetAttribute(self, attribute: CUdevice_attribute, device: int) -> tuple[CUresult, int]:  # noqa: N802
        failed = self._record("cuDeviceGetAttribute", int(attribute), device)
        values = {CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.capability[0],
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.capability[1],
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: self.shared_optin}
        return failed or CUresult.CUDA_SUCCESS, values[attribute]

    def cuStreamCreate(self, flags: int) -> tuple[CUresult, int]:  # noqa: N802
        failed = self._record("cuStreamCreate", int(flags))
        stream = self._handle()
        self.streams.add(stream)
        return failed or CUresult.CUDA_SUCCESS, stream

    def cuStreamDestroy(self, stream: int) -> tuple[CUresult]:  # noqa: N802
        self.streams.discard(stream)
        return (self._record("cuStreamDestroy", stream) or CUresult.CUDA_SUCCESS,)

    def cuStreamSynchronize(self, stream: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuStreamSynchronize", stream)
        return (failed or (CUresult.CUDA_SUCCESS if stream in self.streams else CUresult.CUDA_ERROR_INVALID_HANDLE),)

    def cuStreamWaitValue32(self, stream: int, address: int, value: int, flags: int) -> tuple[CUresult]:  # noqa: N802
        """Recorded with the word's value when the wait was enqueued (the simulated device runs each call as it
        is made, so a wait holds nothing back: the launcher's tests read the order of the calls instead)."""
        failed = self._record("cuStreamWaitValue32", stream, int(address), int(value), int(flags))
        if failed:
            return (failed,)
        try:
            self.recorded.waits.append(int.from_bytes(self.memory.read(int(address), 4), "little"))
        except Fault:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (CUresult.CUDA_SUCCESS if stream in self.streams else CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuEventCreate(self, flags: int) -> tuple[CUresult, int]:  # noqa: N802
        failed = self._record("cuEventCreate", int(flags))
        event = self._handle()
        self.events[event] = _Event()
        return failed or CUresult.CUDA_SUCCESS, event

    def cuEventDestroy(self, event: int) -> tuple[CUresult]:  # noqa: N802
        self.events.pop(event, None)
        return (self._record("cuEventDestroy", event) or CUresult.CUDA_SUCCESS,)

    def cuEventRecord(self, event: int, stream: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuEventRecord", event, stream)
        if failed:
            return (failed,)
        if stream not in self.streams or event not in self.events:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.events[event] = _Event(None if self.hung else self.clock)
        return (CUresult.CUDA_SUCCESS,)

    def cuEventQuery(self, event: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuEventQuery", event)
        if failed:
            return (failed,)
        return (CUresult.CUDA_SUCCESS if self.events[event].time is not None else CUresult.CUDA_ERROR_NOT_READY,)

    def cuEventElapsedTime(self, start: int, stop: int) -> tuple[CUresult, float]:  # noqa: N802
        failed = self._record("cuEventElapsedTime", start, stop)
        first, last = self.events[start].time, self.events[stop].time
        if failed or first is None or last is None:
            return failed or CUresult.CUDA_ERROR_NOT_READY, 0.0
        return CUresult.CUDA_SUCCESS, (last - first) * 1000.0

    def cuMemAlloc(self, size: int) -> tuple[CUresult, int]:  # noqa: N802
        failed = self._record("cuMemAlloc", size)
        return (failed, 0) if failed else (CUresult.CUDA_SUCCESS, self.memory.allocate(size))

    def cuMemFree(self, address: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuMemFree", int(address))
        freed = self.memory.free(int(address))
        return (failed or (CUresult.CUDA_SUCCESS if freed else CUresult.CUDA_ERROR_INVALID_VALUE),)

    def cuMemcpyHtoD(self, device: int, host: int, size: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuMemcpyHtoD", int(device), size)
        if failed:
            return (failed,)
        try:
            self.memory.write(int(device), ctypes.string_at(host, size))
        except Fault:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (CUresult.CUDA_SUCCESS,)

    def cuMemcpyDtoH(self, host: int, device: int, size: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuMemcpyDtoH", int(device), size)
        if failed:
            return (failed,)
        try:
            data = self.memory.read(int(device), size)
        except Fault:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        ctypes.memmove(host, data, size)
        return (CUresult.CUDA_SUCCESS,)

    def cuMemsetD32Async(self, device: int, value: int, count: int, stream: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuMemsetD32Async", int(device), value, count, stream)
        if failed:
            return (failed,)
        try:
            self.memory.write(int(device), int(value).to_bytes(4, "little") * count)
        except Fault:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (CUresult.CUDA_SUCCESS,)

    def cuModuleLoadData(self, image: bytes) -> tuple[CUresult, int]:  # noqa: N802
        digest = hashlib.sha256(image).hexdigest()
        failed = self._record("cuModuleLoadData", digest)
        if failed:
            return failed, 0
        module = self._handle()
        self.modules[module] = digest
        self.recorded.images.append(digest)
        return CUresult.CUDA_SUCCESS, module

    def cuModuleUnload(self, module: int) -> tuple[CUresult]:  # noqa: N802
        self.modules.pop(module, None)
        return (self._record("cuModuleUnload", module) or CUresult.CUDA_SUCCESS,)

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple[CUresult, int]:  # noqa: N802
        failed = self._record("cuModuleGetFunction", module, name)
        if failed:
            return failed, 0
        entry = name.decode("ascii")
        kernel = self.images.get(self.modules.get(module, ""), {}).get(entry, self.kernels.get(entry))
        if module not in self.modules or kernel is None:
            return CUresult.CUDA_ERROR_NOT_FOUND, 0
        function = self._handle()
        self.functions[function] = (entry, kernel)
        return CUresult.CUDA_SUCCESS, function

    def cuFuncSetAttribute(self, function: int, attribute: CUfunction_attribute, value: int) -> tuple[CUresult]:  # noqa: N802
        failed = self._record("cuFuncSetAttribute", self.functions[function][0], int(attribute), value)
        if failed:
            return (failed,)
        if value > self.shared_optin:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.shared_limits[function] = value
        return (CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,  # noqa: N802
                       shared: int, stream: int, params: int, extra: int) -> tuple[CUresult]:
        entry, kernel = self.functions[function]
        failed = self._record("cuLaunchKernel", entry, (gx, gy, gz), (bx, by, bz), shared, stream)
        if failed:
            return (failed,)
        if shared > self.shared_limits.get(function, 48 * 1024) or bx * by * bz > 1024 or extra:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        raw = [ctypes.string_at(slots[index], size) for index, size in enumerate(kernel.params)]
        self.recorded.launches.append({"entry": entry, "grid": (gx, gy, gz), "block": (bx, by, bz),
                                       "shared": shared, "stream": stream, "params": raw})
        if self.hung:
            return (CUresult.CUDA_SUCCESS,)  # queued behind the kernel that never ends
        try:
            self._effects(kernel, raw, (gx, gy, gz))
        except Fault as fault:
            self.sticky = fault.name
        self.clock += kernel.seconds
        return (CUresult.CUDA_SUCCESS,)

    def _effects(self, kernel: FakeKernel, raw: list[bytes], grid: tuple[int, int, int]) -> None:
        def pointer(index: int) -> int:
            return int.from_bytes(raw[index], "little")

        for effect in kernel.effects:
            if effect.get("hang"):
                self.hung = True
                return
            if "fault" in effect:
                raise Fault(effect["fault"])
            if "copy" in effect:
                source, target = effect["copy"]
                self.memory.write(pointer(target), self.memory.read(pointer(source), effect["bytes"]))
            elif "fill" in effect:
                self.memory.write(pointer(effect["fill"]), bytes([effect["value"]]) * effect["bytes"])
            elif "write" in effect:
                self.memory.write(pointer(effect["write"]) + effect["offset"],
                                  bytes([effect["value"]]) * effect["bytes"])
        if kernel.run is not None:
            kernel.run(self.memory, raw, grid)
