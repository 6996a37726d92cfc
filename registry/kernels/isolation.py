"""The harness side of an isolated evaluation: a worker process per candidate, driven call by call.

The candidate runs in :mod:`registry.kernels.worker`, a separate Python
process started here. This process keeps the expected outputs, the
comparator and the clock; the worker gets input bytes and returns output
bytes. A call is three steps: *stage* (inputs copied into fresh storage on the
worker's device, L2 evicted on a GPU; untimed), *run* (timed here, from the
moment the request is written until the worker's "done" arrives; the worker
synchronises its whole device before answering), *result* (copies of the
outputs and of the inputs as the call left them; untimed).

Between run and result this process looks at the worker from outside, in
/proc: a call that leaves more threads or child processes alive than it found
did work the clock did not see.
"""
from __future__ import annotations

import io
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from registry.kernels import wire

CALL_TIMEOUT_S = 600.0
"""Longest a worker may take to answer one request before it is killed and the stage fails."""

START_TIMEOUT_S = 300.0
"""Longest a worker may take to start and import the candidate."""

FLUSH_BYTES = 256 * 1024 * 1024  # the L2 eviction write on a GPU (an H200 has 60 MB of L2)


class WorkerDied(RuntimeError):
    """The worker ended, answered nonsense or did not answer in time."""


class CandidateError(RuntimeError):
    """The candidate raised inside the worker; carries its exception type name and message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


@dataclass
class CallResult:
    """One run of one arm: harness time, outputs per case, inputs as left, what the worker reported."""

    seconds: float
    outputs: list[list[torch.Tensor | str]]  # per case: a tensor, or why the output was refused
    inputs_after: list[tuple[torch.Tensor, ...]]
    launches: list[int]
    fallbacks: int
    interpreted: int
    kernels: dict[str, int]
    replaced: list[str]
    extra_tasks: int = 0
    extra_children: list[int] = field(default_factory=list)


def _tasks(pid: int) -> tuple[set[str], set[str]] | None:
    """Thread ids and child pids of ``pid`` from /proc; None where /proc does not exist."""
    task_dir = Path(f"/proc/{pid}/task")
    try:
        tids = set(os.listdir(task_dir))
        children: set[str] = set()
        for tid in tids:
            try:
                children.update((task_dir / tid / "children").read_text().split())
            except OSError:
                continue
        return tids, children
    except OSError:
        return None


class _DeadlineReader:
    """Reads a pipe, giving up (TimeoutError) once ``deadline`` (a monotonic time) has passed."""

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd, self.deadline = fd, deadline

    def read(self, size: int) -> bytes:
        # poll, not select: select() refuses descriptors past FD_SETSIZE (1024), which a long-lived
        # process holding many connections reaches, and would turn an honest evaluation into a failure.
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(max(1, math.ceil(left * 1000))):
            raise TimeoutError
        return os.read(self.fd, min(size, 1 << 24))


def worker_command() -> list[str]:
    """How a worker starts: isolated (``-I``: no PYTHONPATH, no working directory, no user site on its path).

    Its import path is the interpreter's own plus the one folder the running
    registry package was imported from, so the worker runs the same registry
    code as this process; nothing a candidate's folder, the working directory
    or an inherited PYTHONPATH holds is importable there.
    """
    import registry

    home = str(Path(registry.__file__).resolve().parent.parent)
    boot = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
            "runpy.run_module('registry.kernels.worker', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-I", "-c", boot, home]


def candidate_text(entry: str, expected_sha256: str | None = None) -> dict[str, str] | None:
    """A candidate file entry's text as the worker receives it (read here once, never imported); None for a
    registry-package entry, which the worker imports itself.

    With ``expected_sha256`` (the registered digest) the text read must be the
    text registered: one UserError line otherwise, so a file swapped (or a
    link repointed) since registration is never measured under its identity.
    """
    from registry.formats.errors import UserError
    from registry.kernels.entries import entry_sha256, entry_source, parse_entry

    parsed = parse_entry(entry)
    if parsed.path is None:
        return None
    source = entry_source(parsed)
    digest = entry_sha256(parsed, source)
    if expected_sha256 is not None and digest != expected_sha256:
        raise UserError(f"{parsed.path} no longer holds the candidate registered (sha256 {digest[:12]}, registered "
                        f"{expected_sha256[:12]}); nothing run: register it again")
    return {"name": parsed.path.name, "function": parsed.function, "source": source}


class CandidateWorker:
    """One worker process for one evaluation; use as a context manager so it always ends."""

    def __init__(self, entry: str, reference: str, device: torch.device, *, screen: bool,
                 candidate: dict[str, str] | None = None) -> None:
        self.entry, self.reference, self.device, self.screen = entry, reference, device, screen
        self.candidate = candidate  # a candidate file's text (candidate_text), or None for a built-in entry
        self.scratch = tempfile.mkdtemp(prefix="registry-candidate-")  # the worker's copy of it; removed at close
        self.source = ""
        self.device_name: str | None = None
        self.arch = "cpu"
        if device.type == "cuda":
            self.device_name = torch.cuda.get_device_name(device)
            major, minor = torch.cuda.get_device_capability(device)
            self.arch = f"sm{major}{minor}"
        self.process: subprocess.Popen | None = None
        self.stderr = tempfile.TemporaryFile()

    def start(self) -> None:
        self.process = subprocess.Popen(
            worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, start_new_session=True, bufsize=0)
        self.to_worker = io.BufferedWriter(self.process.stdin)  # writes whole frames; stdout stays raw

    def __enter__(self) -> "CandidateWorker":
        self.start()
        reply = self._request({"op": "hello", "entry": self.entry, "candidate": self.candidate,
                               "scratch": self.scratch, "reference": self.reference,
                               "device": str(self.device), "flush_bytes": FLUSH_BYTES, "screen": self.screen},
                              timeout=START_TIMEOUT_S)
        source = reply.get("source")
        self.source = source if isinstance(source, str) else ""
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._end()
        finally:  # after the worker (and its session) ended, so nothing writes into it any more
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _end(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.poll() is None:
                wire.write_frame(self.to_worker, {"op": "exit"})
                process.wait(timeout=5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        try:  # whatever the candidate started in the worker's session ends with it
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        for stream in (self.to_worker, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.stderr.close()

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            lines = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return f" (last words: {lines[-1][:300]})" if lines else ""

    def _died(self, why: str) -> WorkerDied:
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            process.wait()
        code = None if process is None else process.returncode
        return WorkerDied(f"the candidate's worker process {why} (exit status {code}){self._stderr_tail()}")

    def _send(self, header: dict[str, Any], tensors: Sequence[torch.Tensor] = ()) -> None:
        try:
            wire.write_frame(self.to_worker, header, tensors)
        except (OSError, ValueError) as exc:
            raise self._died(f"stopped reading ({exc.__class__.__name__})") from None

    def _receive(self, timeout: float, byte_budget: int = 0) -> tuple[dict[str, Any], list[torch.Tensor]]:
        reader = _DeadlineReader(self.process.stdout.fileno(), time.monotonic() + timeout)
        try:
            header, tensors = wire.read_frame(reader, byte_budget)
        except TimeoutError:
            raise self._died(f"did not answer within {timeout:.0f} s") from None
        except (wire.WireError, OSError, ValueError) as exc:
            raise self._died(f"sent no valid answer: {exc}") from None
        error = header.get("error")
        if error is not None:
            if not (isinstance(error, dict) and isinstance(error.get("type"), str)
                    and isinstance(error.get("message"), str)):
                raise self._died("sent a malformed error")
            raise CandidateError(error["type"][:200] or "Exception", error["message"])
        return header, tensors

    def _request(self, header: dict[str, Any], tensors: Sequence[torch.Tensor] = (),
                 timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        self._send(header, tensors)
        return self._receive(timeout)[0]

    def call(self, arm: str, cases: Sequence[Sequence[torch.Tensor]], output_bytes: int, *,
             ablate: bool = False) -> CallResult:
        """Stage ``cases`` (each a tuple of inputs), run ``arm`` ("C" or "B") on all of them, collect."""
        flat = [t.detach().to("cpu").contiguous() for args in cases for t in args]
        self._request({"op": "stage", "arm": arm, "counts": [len(args) for args in cases]}, flat)
        before = _tasks(self.process.pid)
        self._send({"op": "run", "ablate": ablate})
        start = time.perf_counter_ns()
        self._receive(CALL_TIMEOUT_S)
        seconds = (time.perf_counter_ns() - start) / 1e9
        after = _tasks(self.process.pid)
        input_bytes = sum(t.untyped_storage().nbytes() for t in flat)
        header, tensors = self._receive(CALL_TIMEOUT_S, byte_budget=output_bytes + input_bytes)
        return self._result(header, tensors, cases, seconds, before, after)

    def _result(self, header: dict[str, Any], tensors: list[torch.Tensor], cases: Sequence[Sequence[torch.Tensor]],
                seconds: float, before: Any, after: Any) -> CallResult:
        described, launches = header.get("outputs"), header.get("launches")
        if not (isinstance(described, list) and len(described) == len(cases) and isinstance(launches, list)
                and len(launches) == len(cases) and all(isinstance(row, list) for row in described)):
            raise self._died("sent a result that does not match the call")
        outputs: list[list[torch.Tensor | str]] = []
        at = 0
        for row in described:
            kept: list[torch.Tensor | str] = []
            for meta in row:
                if isinstance(meta, dict) and meta.get("plain") is True and at < len(tensors):
                    kept.append(tensors[at])
                    at += 1
                else:
                    kept.append(str(meta.get("why") if isinstance(meta, dict) else meta)[:300])
            outputs.append(kept)
        inputs_after, rest = [], tensors[at:]
        if header.get("inputs_after"):
            if len(rest) != sum(len(args) for args in cases):
                raise self._died("sent back the wrong number of inputs")
            for args in cases:
                inputs_after.append(tuple(rest[:len(args)]))
                rest = rest[len(args):]
        extra_tasks, extra_children = 0, []
        if before is not None and after is not None:
            extra_tasks = len(after[0] - before[0])
            extra_children = sorted(int(pid) for pid in after[1] - before[1])

        def count(value: Any) -> int:
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

        kernels = header.get("kernels") if isinstance(header.get("kernels"), dict) else {}
        replaced = header.get("replaced") if isinstance(header.get("replaced"), list) else ["<unreadable report>"]
        return CallResult(seconds, outputs, inputs_after, [count(n) for n in launches], count(header.get("fallbacks")),
                          count(header.get("interpreted")), {str(k): count(v) for k, v in kernels.items()},
                          [str(name) for name in replaced], extra_tasks, extra_children)
