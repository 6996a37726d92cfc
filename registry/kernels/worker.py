"""The candidate's own process: runs a kernel entry on inputs the harness sends, and nothing else.

Forked by the sandbox's zygote (:mod:`registry.kernels.zygote`), or started by
:mod:`registry.kernels.isolation` as ``python -m registry.kernels.worker``
when run without the sandbox. It never sees an expected output, a comparator
verdict or the clock that decides: it receives input bytes, copies them into
fresh storage on its device, runs the requested arm when told to, waits for
the whole device, answers "done", then sends back copies of the outputs and of
the inputs as the call left them. The harness compares.

What this process measures itself (kernel launches, harness functions
replaced, the candidate's source) is reported, not trusted blindly: the
candidate shares the process and could lie about it, so every decision that
matters also rests on something the harness checks from outside (outputs on
inputs the worker could not predict, launch ablation, threads seen in
/proc, the harness's own clock).

Protocol (frames of :mod:`registry.kernels.wire`, on stdin and the original
stdout; the candidate's prints go to stderr):

- ``hello {entry, candidate?, scratch?, device}`` -> ``{ok, source}`` or ``{error}`` (the one entry this
  process runs: the candidate, or in the baseline's own worker the reference; never both). ``candidate``
  (``{name, function, source}``) is the text of a candidate file entry, read and sent by the harness; the
  worker writes it into ``scratch`` (an empty folder the harness removes) or, in the sandbox, a fresh
  folder of its private /tmp
- ``stage {arm, counts}`` + tensors -> ``{ok}`` (arm "C" also sends the inputs back after the run)
- ``run {ablate, events?}`` -> ``{done}`` or ``{error}``, then ``{outputs, launches, device_s, ...}`` + tensors
  (``device_s``: the time between CUDA events recorded around the calls, when ``events`` was asked on a GPU;
  the harness asks it only of the baseline's worker, which runs registry code alone)
- ``exit`` -> the process ends
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, BinaryIO

import time

import torch

from registry.formats.errors import first_line
from registry.kernels import wire
from registry.kernels.launches import counting

_PROTOCOL_OUT: BinaryIO | None = None  # set by _take_protocol_streams() when run as the worker
_PROTOCOL_IN: BinaryIO | None = None


def _take_protocol_streams() -> None:
    """Keep stdin/stdout for the protocol; the candidate gets stderr as stdout and nothing to read."""
    global _PROTOCOL_OUT, _PROTOCOL_IN
    _PROTOCOL_OUT = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a candidate's print() must not corrupt the protocol stream
    _PROTOCOL_IN = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # nor read it
    os.close(null)


class LaunchWatch:
    """Triton launches seen by hooks installed before the candidate is imported.

    Under the interpreter every launch goes through ``GridExecutor.__call__``;
    compiled kernels go through ``JITFunction.run``. Both are wrapped here so
    a launch is counted whoever makes it (the candidate need not use
    ``registry.kernels.launches``), and so that an *ablated* call can turn
    every launch into a no-op: a result that survives ablation did not come
    from the kernels.
    """

    def __init__(self) -> None:
        self.launches = 0
        self.interpreted = 0
        self.kernels: dict[str, int] = {}
        self.ablate = False
        self._lock = threading.Lock()
        from triton.runtime import interpreter, jit

        self.wrapped = {}
        for owner, attr, interpreted in ((interpreter.GridExecutor, "__call__", True), (jit.JITFunction, "run", False)):
            original = getattr(owner, attr)
            wrapper = self._wrap(original, interpreted)
            setattr(owner, attr, wrapper)
            self.wrapped[f"{owner.__module__}.{owner.__name__}.{attr}"] = (owner, attr, wrapper)

    def _wrap(self, original: Any, interpreted: bool) -> Any:
        watch = self

        def launch(this: Any, *args: Any, **kwargs: Any) -> Any:
            if not interpreted and kwargs.get("warmup"):
                return original(this, *args, **kwargs)
            name = getattr(getattr(this, "fn", None), "__name__", type(this).__name__)
            with watch._lock:
                watch.launches += 1
                watch.interpreted += int(interpreted)
                watch.kernels[name] = watch.kernels.get(name, 0) + 1
            if watch.ablate:
                return None
            return original(this, *args, **kwargs)

        return launch

    def reset(self) -> None:
        with self._lock:
            self.launches, self.interpreted, self.kernels = 0, 0, {}


def _protected() -> dict[str, Any]:
    """Functions a cheat would replace to fool an in-process harness, by name."""
    import registry.evidence.parity as parity
    import registry.evidence.timing as timing
    import registry.kernels.launches as launches

    found: dict[str, Any] = {f"time.{name}": getattr(time, name) for name in
                             ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                              "process_time", "thread_time")}
    found.update({"torch.cuda.synchronize": torch.cuda.synchronize,
                  "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
                  "torch.cuda.Event.record": torch.cuda.Event.record,
                  "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
                  "registry.evidence.parity.compare_outputs": parity.compare_outputs,
                  "registry.evidence.parity.compare_leaf": parity.compare_leaf,
                  "registry.evidence.timing.time_paired": timing.time_paired,
                  "registry.kernels.launches.launch": launches.launch,
                  "registry.kernels.launches.record_fallback": launches.record_fallback,
                  "registry.kernels.launches.LaunchCounter._add": launches.LaunchCounter._add})
    if hasattr(torch._C, "_cuda_synchronize"):
        found["torch._C._cuda_synchronize"] = torch._C._cuda_synchronize
    return found


def _current(name: str) -> Any:
    module_name, _, attr = name.rpartition(".")
    parts = module_name.split(".")
    target: Any = sys.modules.get(parts[0])
    for part in parts[1:]:
        target = getattr(target, part, None)
    return getattr(target, attr, None)


def _error(exc: BaseException) -> dict[str, str]:
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a hostile __str__ is still an error to report
        message = "<the exception's message could not be read>"
    return {"type": type(exc).__name__, "message": message[:wire.ERROR_TEXT_LIMIT]}


def _outputs(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy with the same layout, made from the tensor's own storage only."""
    copy = torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="cpu")
    copy.copy_(t.detach())
    return copy


def _describe(out: Any) -> tuple[dict[str, Any], torch.Tensor | None]:
    """Whether ``out`` is a plain tensor holding its own storage, and a copy of it if so."""
    if type(out) is not torch.Tensor:
        kind = f"{type(out).__module__}.{type(out).__qualname__}"
        return {"plain": False, "why": f"a {kind}, not a plain torch.Tensor"}, None
    numel_bytes = out.numel() * out.element_size()
    if out.storage_offset() != 0 or out.untyped_storage().nbytes() != numel_bytes:
        return {"plain": False, "why": (f"a view: {numel_bytes} bytes of elements at offset {out.storage_offset()} "
                                        f"in a storage of {out.untyped_storage().nbytes()} bytes")}, None
    if not wire._dense(list(out.shape), list(out.stride())):
        return {"plain": False, "why": f"strides {list(out.stride())} do not address each element once"}, None
    return {"plain": True}, _snapshot(out)


CANDIDATE_MODULE = "_registry_candidate"
"""The private name a candidate file is loaded under: on no import path, shadowing nothing."""


def _load_candidate(entry: str, candidate: dict[str, Any], scratch: str | None) -> Any:
    """Write the candidate's text into an empty private folder and load that one file (never the candidate's
    own folder, which this process never sees).

    The copy lives on disk because Triton reads a kernel's source through
    ``inspect``; its folder is never put on ``sys.path``, so only the file
    itself runs, and whatever sat beside the original is never imported.
    """
    import importlib.util
    import tempfile

    from registry.kernels.ops import EntryError, entry_function

    name, function, source = candidate["name"], candidate["function"], candidate["source"]
    if not (isinstance(name, str) and name.endswith(".py") and "/" not in name and isinstance(source, str)):
        raise ValueError("the harness sent a malformed candidate")
    copy = os.path.join(scratch or tempfile.mkdtemp(prefix="candidate-"), name)
    with open(copy, "x", encoding="utf-8") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, copy)
    module = importlib.util.module_from_spec(spec)
    sys.modules[CANDIDATE_MODULE] = module  # decorators (dataclasses, triton) look their module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the candidate's own top-level code failed
        reason = first_line(exc)  # the type's name alone when the message is empty
        said = reason if reason == type(exc).__name__ else f"{type(exc).__name__}: {reason}"
        raise EntryError(f"entry {entry!r}: loading {name} failed: {said}") from None
    return entry_function(module, entry, function)


class Worker:
    def __init__(self) -> None:
        torch.set_num_threads(1)
        self.watch = LaunchWatch()
        self.protected = _protected()
        self.device = torch.device("cpu")
        self.candidate: Any = None
        self.staged: list[tuple[torch.Tensor, ...]] = []
        self.arm = "C"
        self.flush: torch.Tensor | None = None

    def replaced(self) -> list[str]:
        names = [name for name, fn in self.protected.items() if _current(name) is not fn]
        names += [name for name, (owner, attr, wrapper) in self.watch.wrapped.items()
                  if getattr(owner, attr) is not wrapper]
        return sorted(names)

    def hello(self, header: dict[str, Any]) -> dict[str, Any]:
        from registry.kernels.evaluate import candidate_source
        from registry.kernels.ops import resolve_entry

        self.device = torch.device(header["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            self.flush = torch.empty(header["flush_bytes"] // 4, dtype=torch.int32, device=self.device)
        candidate = header.get("candidate")
        self.candidate = (_load_candidate(header["entry"], candidate, header.get("scratch")) if candidate
                          else resolve_entry(header["entry"]))
        source = candidate_source(self.candidate) if header.get("screen") else ""
        return {"ok": True, "source": source}

    def stage(self, header: dict[str, Any], tensors: list[torch.Tensor]) -> dict[str, Any]:
        self.arm = header["arm"]
        self.staged, at = [], 0
        for count in header["counts"]:
            self.staged.append(tuple(t.to(self.device, copy=True) for t in tensors[at:at + count]))
            at += count
        if self.flush is not None:
            self.flush.zero_()  # evict L2 so no call reads inputs a previous one left cached
            torch.cuda.synchronize(self.device)
        return {"ok": True}

    def run(self, header: dict[str, Any]) -> None:
        fn = self.candidate
        self.watch.reset()
        self.watch.ablate = bool(header.get("ablate"))
        results, per_call, error = [], [], None
        # CUDA events around the arm's calls, on its current stream, asked for only of the baseline's worker
        # (registry code alone): a candidate's worker could report any number
        events = ([torch.cuda.Event(enable_timing=True) for _ in range(2)]
                  if header.get("events") and self.device.type == "cuda" else None)
        device_s = None
        with counting() as tally:
            try:
                if events:
                    events[0].record()
                for args in self.staged:
                    before = self.watch.launches
                    results.append(_outputs(fn(*args)))
                    per_call.append(self.watch.launches - before)
                if events:
                    events[1].record()
                if self.device.type == "cuda":
                    torch._C._cuda_synchronize()  # the whole device: side streams included
                if events:
                    device_s = events[0].elapsed_time(events[1]) / 1000.0
            except BaseException as exc:  # noqa: BLE001 - the candidate's failure is the answer
                error = _error(exc)
        self.watch.ablate = False
        wire.write_frame(_PROTOCOL_OUT, {"error": error} if error else {"done": True})
        if error:
            return
        described, copies = [], []
        for outputs in results:
            row = []
            for out in outputs:
                meta, copy = _describe(out)
                row.append(meta)
                if copy is not None:
                    copies.append(copy)
            described.append(row)
        inputs_after = [_snapshot(t) for args in self.staged for t in args] if self.arm == "C" else []
        wire.write_frame(_PROTOCOL_OUT, {
            "outputs": described, "launches": per_call, "interpreted": self.watch.interpreted,
            "kernels": self.watch.kernels, "fallbacks": tally.fallbacks, "replaced": self.replaced(),
            "inputs_after": len(inputs_after), "device_s": device_s}, copies + inputs_after)

    def serve(self) -> None:
        while True:
            header, tensors = wire.read_frame(_PROTOCOL_IN, byte_budget=1 << 62)
            op = header.get("op")
            if op == "exit":
                return
            if op == "run":
                self.run(header)
                continue
            try:
                handler = {"hello": self.hello}.get(op)
                reply = handler(header) if handler else self.stage(header, tensors)
            except BaseException as exc:  # noqa: BLE001
                reply = {"error": _error(exc)}
            wire.write_frame(_PROTOCOL_OUT, reply)


def preload() -> None:
    """Import what every worker needs before any candidate code (the sandbox's zygote forks from here)."""
    from triton.runtime import interpreter, jit  # noqa: F401 - the launch hooks' targets

    _protected()


def serve_stdio() -> None:
    """Be the worker on stdin and stdout until told to exit; never returns."""
    _take_protocol_streams()
    Worker().serve()
    _PROTOCOL_OUT.flush()
    os._exit(0)  # no candidate atexit hook or lingering thread decides how this process ends


if __name__ == "__main__":
    serve_stdio()
