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
did work the clock did not see. Around a baseline call's run it also reads
how long the worker's threads and this process's timing thread waited for a
CPU while runnable (`run_delay`, the second field of
/proc/<pid>/task/<tid>/schedstat and of /proc/thread-self/schedstat): time
the clock counted while the call was held up, which the monitor may use to
leave out a preempted pair (docs/monitor.md; `_waits`, `_waited_s`). It is
never read for the candidate's calls.
"""
from __future__ import annotations

import atexit
import functools
import io
import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from registry.formats.evidence.schemas import IDENTITIES, MEMORY_BOUNDS, UNREPORTED
from registry.kernels import wire
from registry.kernels.sandbox import Sandbox, make_harness_undumpable, setup_failure
from registry.kernels.zygote import FD_NAMES

CALL_TIMEOUT_S = 600.0
"""Longest a worker may take to answer one request before it is killed and the stage fails."""

START_TIMEOUT_S = 300.0
"""Longest a worker may take to start and import the candidate."""

EXIT_GRACE_S = 1.0
"""How long a worker that stopped answering, or was told to exit, gets to finish exiting before it is killed
(so its own exit status is reported)."""

STDERR_TAIL_BYTES = 64 * 1024
"""How much of the end of a worker's stderr the harness reads back to quote its last words."""

FLUSH_BYTES = 256 * 1024 * 1024  # the L2 eviction write on a GPU (an H200 has 60 MB of L2)

SETTLE_TRIES = 200
"""How many times the harness yields its CPU, before a run, for the worker to go to sleep on its next request."""


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
    waited_s: float | None = None  # a baseline call's wait for a CPU (`_waits`); None: unreported or a candidate's
    device_s: float | None = None  # CUDA event time the worker measured, when asked (`events`; the baseline only)


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


def _schedstat(path: Path | str) -> tuple[int, int, int] | None:
    """(ns on a CPU, ns runnable but waiting, timeslices) from a schedstat file; None where unreadable."""
    try:
        fields = Path(path).read_text().split()
    except OSError:
        return None
    if len(fields) != 3 or not all(value.isdigit() for value in fields):
        return None
    return int(fields[0]), int(fields[1]), int(fields[2])


def _settle(pid: int, tries: int = SETTLE_TRIES) -> None:
    """Yield this CPU until no thread of ``pid`` is runnable (at most ``tries`` times).

    A thread's wait is added to its count only when it next runs, whole: a
    worker still queued to finish its last answer when the first reading is
    taken would add that wait, from before the clock, to the call. Once every
    thread sleeps (the worker blocked on its next request) nothing is
    pending. A worker that never settles (the CPU is that contended) is read
    as it is, which can only count more wait, never less.
    """
    task_dir = Path(f"/proc/{pid}/task")
    for _ in range(tries):
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return
        if not any(_state(task_dir / tid / "stat") == "R" for tid in tids):
            return
        os.sched_yield()


def _state(path: Path) -> str | None:
    """A thread's scheduler state letter from its /proc stat (R: running or runnable); None once it is gone."""
    try:
        return path.read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def _waits(pid: int) -> dict[str, tuple[int, int]] | None:
    """(ns run, ns waited runnable for a CPU) of each thread of ``pid``, and of this thread (key "harness").

    None where the signal is unreported: no schedstat (a kernel without
    scheduler statistics, or /proc unreadable), the worker's main thread not
    readable, or this thread's counts all zero (a kernel that prints "0 0 0"
    for statistics it does not keep: this thread has certainly run).
    """
    own = _schedstat("/proc/thread-self/schedstat")
    task_dir = Path(f"/proc/{pid}/task")
    if own is None or own[2] == 0:
        return None
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    waits = {"harness": own[:2]}
    for tid in tids:
        found = _schedstat(task_dir / tid / "schedstat")
        if found is not None:  # a thread that ended between the listing and the read is not counted
            waits[tid] = found[:2]
    return waits if str(pid) in waits else None


def _waited_s(before: dict[str, tuple[int, int]] | None, after: dict[str, tuple[int, int]] | None) -> float | None:
    """Seconds a call was held up waiting for a CPU, between two `_waits` readings.

    The worker's threads' waits (every thread alive at the second reading,
    one born since from 0; one that ended in between is not counted), plus
    this thread's wait less the time the worker's threads ran meanwhile: on a
    shared CPU the worker woken by the request takes this thread's place,
    and that wait is the call running, not the call held up. So the figure
    can fall short, never over.
    """
    if before is None or after is None:
        return None
    delta = {key: (run - before.get(key, (0, 0))[0], wait - before.get(key, (0, 0))[1])
             for key, (run, wait) in after.items()}
    worker_run = sum(max(0, run) for key, (run, _) in delta.items() if key != "harness")
    worker_wait = sum(max(0, wait) for key, (_, wait) in delta.items() if key != "harness")
    return (worker_wait + max(0, delta["harness"][1] - worker_run)) / 1e9


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


class _Jail:
    """One sandbox holding the workers of one evaluation: the launcher, its zygote (pid 1 of the jail, which
    forks each worker from a process that has torch imported), and a status pipe per worker that only the
    zygote writes. A CPU evaluation's launcher is forked by this process's warm zygote (``warm_launch``);
    any other is a process this one starts.

    Ends when its last worker is closed: the launcher's session is killed if it has not ended by then,
    and with the zygote the kernel kills everything left in the jail's pid namespace.
    """

    def __init__(self, workers: Sequence["CandidateWorker"], serve: str = "worker") -> None:
        self.sandbox = Sandbox(workers[0].device.type)
        self.open = len(workers)
        theirs: list[dict[str, int]] = []
        try:
            for worker in workers:
                requests, answers, status = os.pipe(), os.pipe(), os.pipe()
                worker.attach(self, requests[1], answers[0], status[0])
                theirs.append({"requests": requests[0], "answers": answers[1], "stderr": worker.stderr.fileno(),
                               "status": status[1]})
            make_harness_undumpable()
            if serve == "worker" and self.sandbox.device_type == "cpu" and _pidfds():
                self.process = warm_launch(self.sandbox.jail_config(theirs, serve), theirs, workers[0].stderr)
            else:
                self.process = subprocess.Popen(
                    self.sandbox.command(theirs, serve), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=workers[0].stderr, env={}, pass_fds=[fd for fds in theirs for fd in fds.values()],
                    start_new_session=True)
        except BaseException:
            self.sandbox.close()
            raise
        finally:
            for fds in theirs:
                for name, fd in fds.items():
                    if name != "stderr":
                        os.close(fd)
        for worker in workers:  # the launcher's first line, written before the jail existed
            worker.confinement = confinement_reported(worker._status_text(START_TIMEOUT_S))

    def host_pid(self, jail_pid: int) -> int | None:
        """The pid this process sees for the worker the zygote forked as ``jail_pid`` (NSpid in /proc)."""
        zygotes = _tasks(self.process.pid)
        for zygote in sorted(zygotes[1]) if zygotes else []:
            children = _tasks(int(zygote))
            for child in sorted(children[1]) if children else []:
                try:
                    status = Path(f"/proc/{child}/status").read_text()
                except OSError:
                    continue
                nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
                if len(nspid) > 1 and nspid[1] == str(jail_pid):  # this namespace's, the jail's, its own
                    return int(child)
        return None

    def release(self) -> None:
        self.open -= 1
        if self.open > 0:
            return
        try:
            self.process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
        self.sandbox.close()
        if isinstance(self.process, _Launched):
            self.process.close()


class _Launched:
    """A jail's launcher forked by the warm zygote: not this process's child, so waited for through a pidfd;
    it leads a session of its own (its pid is its process group's), as a launcher this process starts does."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self.pidfd = pid, pidfd

    def wait(self, timeout: float | None = None) -> None:
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        if not poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))):
            raise subprocess.TimeoutExpired(f"the launcher {self.pid}", timeout or 0)

    def close(self) -> None:
        os.close(self.pidfd)


class _WarmZygote:
    """The warm zygote of one environment (registry/kernels/zygote.py ``serve_jails``): started once, it
    imports torch and Triton for every evaluation jail this process builds afterwards, instead of once a jail.

    It starts as an unsandboxed worker does (``worker_command``: isolated, from /, the registry package's
    folder alone added to its path) with the workers' scrubbed environment, and ends when this process does
    (its control socket closes). One request at a time.
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(worker_command("registry.kernels.zygote") + ["--warm", "worker"],
                                            stdin=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            env=env, cwd="/", start_new_session=True)
        finally:
            theirs.close()
        self.lock = threading.Lock()

    def launch(self, config: dict, fds: list[int]) -> _Launched:
        with self.lock:
            self.control.settimeout(START_TIMEOUT_S)
            socket.send_fds(self.control, [json.dumps(config).encode()], fds)
            message, passed, _, _ = socket.recv_fds(self.control, 1 << 16, 1)
        answer = json.loads(message) if message else {"error": "the warm zygote ended"}
        if not (isinstance(answer, dict) and isinstance(answer.get("pid"), int) and len(passed) == 1):
            for fd in passed:
                os.close(fd)
            raise OSError(f"the warm zygote did not launch the jail: {answer}")
        return _Launched(answer["pid"], passed[0])

    def close(self) -> None:
        self.control.close()
        try:
            self.process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@functools.cache
def _pidfds() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3 on), which waiting for a warm zygote's launcher needs; without
    them each jail is built by a launcher process, as before the warm zygote."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


_WARM: dict[tuple[int, str], _WarmZygote] = {}
_WARM_GUARD = threading.Lock()


def warm_launch(config: dict, workers: list[dict[str, int]], stderr: Any) -> _Launched:
    """Build the jail of ``config`` through this process's warm zygote for the jail's environment (started on
    the first call; started again, once, when it no longer answers)."""
    fds = [given[name] for given in workers for name in FD_NAMES] + [stderr.fileno()]
    key = (os.getpid(), json.dumps(config["env"], sort_keys=True))
    for attempt in range(2):
        with _WARM_GUARD:
            zygote = _WARM.get(key)
            if zygote is None:
                zygote = _WARM[key] = _WarmZygote(config["env"])
        try:
            return zygote.launch(config, fds)
        except (OSError, ValueError):
            with _WARM_GUARD:
                if _WARM.get(key) is zygote:
                    del _WARM[key]
            zygote.close()
            if attempt:
                raise
    raise AssertionError("unreachable")


def close_warm_zygotes() -> None:
    """End this process's warm zygotes and wait for them (at exit: their time is counted as this process's)."""
    with _WARM_GUARD:
        mine = [zygote for (pid, _), zygote in _WARM.items() if pid == os.getpid()]
        _WARM.clear()
    for zygote in mine:
        zygote.close()


atexit.register(close_warm_zygotes)


def confinement_reported(line: str | None) -> dict[str, str]:
    """The launcher's report of what it achieved ({identity, memory}), or both unreported when it wrote none
    (it failed before the jail existed: the worker's start fails the same way) or not one it could write."""
    try:
        report = json.loads(line) if line is not None else None
    except ValueError:
        report = None
    if (isinstance(report, dict) and set(report) == {"identity", "memory"} and report["identity"] in IDENTITIES
            and report["memory"] in MEMORY_BOUNDS):
        return report
    return {"identity": UNREPORTED, "memory": UNREPORTED}


def worker_command(module: str = "registry.kernels.worker") -> list[str]:
    """How an unsandboxed worker starts: isolated (``-I``: no PYTHONPATH, no working directory, no user site
    on its path, ``-B``: no bytecode written).

    Its import path is the interpreter's own plus the one folder the running
    registry package was imported from, so the worker runs the same registry
    code as this process; nothing a candidate's folder, the working directory
    or an inherited PYTHONPATH holds is importable there.
    """
    import registry

    home = str(Path(registry.__file__).resolve().parent.parent)
    boot = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-I", "-B", "-c", boot, home]


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


def start_workers(workers: Sequence["CandidateWorker"], *, sandboxed: bool, serve: str = "worker") -> None:
    """Start ``workers`` together: one jail whose zygote forks each (sandboxed), else a process each; each
    serves ``serve`` (the evaluation worker, or the trusted launcher's: zygote.WORKER_MODULES)."""
    if sandboxed:
        _Jail(workers, serve)
    else:
        for worker in workers:
            worker.start_unsandboxed(serve)


class CandidateWorker:
    """One worker process running one entry (the candidate, or the reference as the baseline arm);
    use as a context manager so it always ends.

    Sandboxed (the default), it is forked inside a jail (:mod:`registry.kernels.sandbox`) by a zygote
    that imported torch before any candidate code, under a uid of its own. ``sandboxed=False``
    (``--insecure-no-sandbox``) runs it as this process's user, as before the sandbox.
    """

    def __init__(self, entry: str, device: torch.device, *, screen: bool, sandboxed: bool = True,
                 candidate: dict[str, str] | None = None) -> None:
        self.entry, self.device, self.screen, self.sandboxed = entry, device, screen, sandboxed
        self.candidate = candidate  # a candidate file's text (candidate_text), or None for a built-in entry
        self.scratch: str | None = None  # unsandboxed: the folder the worker copies the candidate into
        self.source = ""
        self.device_name: str | None = None
        self.arch = "cpu"
        if device.type == "cuda":
            self.device_name = torch.cuda.get_device_name(device)
            major, minor = torch.cuda.get_device_capability(device)
            self.arch = f"sm{major}{minor}"
        self.jail: _Jail | None = None
        self.process: subprocess.Popen | None = None  # unsandboxed only
        self.answers = self.status = -1
        self.started = False
        self.exit_code: int | None = None
        self.pid: int | None = None  # the worker's own pid, as this process sees it
        self.stderr = tempfile.TemporaryFile()
        self.confinement = confinement_reported(None)  # what its jail's launcher reported (sandboxed)

    def attach(self, jail: _Jail, requests: int, answers: int, status: int) -> None:
        """Take this worker's ends of its pipes in ``jail``: requests written here, answers and status read."""
        self.jail, self.answers, self.status, self.started = jail, answers, status, True
        self.to_worker = io.BufferedWriter(io.FileIO(requests, "wb"))  # writes whole frames; answers stay raw

    def start_unsandboxed(self, serve: str = "worker") -> None:
        from registry.kernels.zygote import WORKER_MODULES

        self.scratch = tempfile.mkdtemp(prefix="registry-candidate-")
        self.process = subprocess.Popen(worker_command(WORKER_MODULES[serve]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, start_new_session=True, bufsize=0)
        self.to_worker = io.BufferedWriter(self.process.stdin)
        self.answers, self.pid, self.started = self.process.stdout.fileno(), self.process.pid, True
        self.confinement = {"identity": "harness_user", "memory": "none"}

    def start(self) -> None:
        """Start this worker alone; the entry is loaded only by the hello that follows."""
        start_workers([self], sandboxed=self.sandboxed)

    def begin(self) -> "CandidateWorker":
        """Send the hello (import the entry in the worker); the answer comes with ``finish``."""
        if not self.started:
            self.start()
        self._send({"op": "hello", "entry": self.entry, "candidate": self.candidate, "scratch": self.scratch,
                    "device": str(self.device), "flush_bytes": FLUSH_BYTES, "screen": self.screen})
        return self

    def finish(self) -> "CandidateWorker":
        """Wait for the hello's answer: the entry imported in the worker, its source when screened."""
        source = self._receive(START_TIMEOUT_S)[0].get("source")
        self.source = source if isinstance(source, str) else ""
        return self.locate()

    def locate(self) -> "CandidateWorker":
        """After the hello's answer: find the worker's pid as this process sees it (its threads and children
        are counted by it)."""
        if self.jail is not None:
            jail_pid = self._status_line(EXIT_GRACE_S)
            self.pid = self.jail.host_pid(jail_pid) if jail_pid is not None else None
            if self.pid is None:  # without it no call's threads and children could be counted
                raise self._died("cannot be found in /proc")
        return self

    def __enter__(self) -> "CandidateWorker":
        return self.begin().finish()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _status_text(self, timeout: float) -> str | None:
        """The next line on this worker's status pipe: the launcher's report, then the zygote's numbers."""
        reader, line = _DeadlineReader(self.status, time.monotonic() + timeout), b""
        try:
            while not line.endswith(b"\n") and len(line) < 4096:
                data = reader.read(1)
                if not data:
                    return None
                line += data
        except (TimeoutError, OSError):
            return None
        return line.decode("ascii", "replace")

    def _status_line(self, timeout: float) -> int | None:
        """The next number the zygote wrote on this worker's status pipe (its pid, then its exit status)."""
        line = self._status_text(timeout)
        return int(line) if line is not None and line.strip().isdigit() else None

    def _ended(self, timeout: float) -> bool:
        """Whether the worker has exited within ``timeout`` seconds; its exit status is kept."""
        if self.exit_code is not None:
            return True
        if self.process is not None:
            try:
                self.exit_code = self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        if self.jail is None:
            return True
        if self.pid is None:  # its pid line not read yet: it comes first
            jail_pid = self._status_line(timeout)
            if jail_pid is None:
                return False
            self.pid = self.jail.host_pid(jail_pid)
        self.exit_code = self._status_line(timeout)
        return self.exit_code is not None

    def _kill(self) -> None:
        """SIGKILL the worker (unsandboxed: its whole session; sandboxed: the worker, whose jail ends with its
        last worker) and keep its exit status."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif self.pid is not None and self.exit_code is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif self.jail is not None and self.exit_code is None:  # not yet known by pid: the whole jail goes
            try:
                os.killpg(self.jail.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._ended(CALL_TIMEOUT_S)

    def close(self) -> None:
        if not self.started:
            return
        self.started = False
        try:
            if not self._ended(0):
                wire.write_frame(self.to_worker, {"op": "exit"})
        except (OSError, ValueError):
            pass
        if not self._ended(EXIT_GRACE_S):  # told to exit, it exits at once; one that does not is killed
            self._kill()
        for fd in (self.status,):
            if fd >= 0:
                os.close(fd)
        for stream in (self.to_worker, self.process.stdout if self.process else None):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self.jail is not None:
            os.close(self.answers)
            self.jail.release()
        self.stderr.close()
        if self.scratch is not None:  # after the worker (and its session) ended: nothing writes there now
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _stderr_tail(self) -> str:
        try:  # its end only: the file holds whatever the candidate wrote, up to the sandbox's file-size limit
            self.stderr.seek(max(0, os.fstat(self.stderr.fileno()).st_size - STDERR_TAIL_BYTES))
            lines = self.stderr.read(STDERR_TAIL_BYTES).decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return f" (last words: {lines[-1][:300]})" if lines else ""

    def _died(self, why: str) -> WorkerDied:
        if not self._ended(EXIT_GRACE_S):  # a worker that stopped answering gets a moment to report its status
            self._kill()
        code = self.exit_code
        if self.sandboxed and setup_failure(code):
            return WorkerDied(f"the sandbox for the candidate could not be built{self._stderr_tail()}")
        return WorkerDied(f"the candidate's worker process {why} (exit status {code}){self._stderr_tail()}")

    def _send(self, header: dict[str, Any], tensors: Sequence[torch.Tensor] = (), *, plain: bool = False) -> None:
        """Send a frame: tensors, or (``plain``) byte strings as uint8 tensors' storage, without a copy."""
        try:
            (wire.write_byte_frame if plain else wire.write_frame)(self.to_worker, header, tensors)
        except (OSError, ValueError) as exc:
            raise self._died(f"stopped reading ({exc.__class__.__name__})") from None

    def _receive(self, timeout: float, byte_budget: int = 0, *, plain: bool = False) -> tuple[dict[str, Any], list]:
        """The next frame: its header and tensors, or (``plain``) byte strings, for a worker that sends bytes."""
        reader = _DeadlineReader(self.answers, time.monotonic() + timeout)
        try:
            header, tensors = (wire.read_byte_frame if plain else wire.read_frame)(reader, byte_budget)
        except TimeoutError:
            raise self._died(f"did not answer within {timeout:.0f} s") from None
        except (wire.WireError, OSError, ValueError) as exc:
            raise self._died(f"sent no valid answer: {exc}") from None
        error = header.get("error")
        if error is not None:
            if not (isinstance(error, dict) and isinstance(error.get("type"), str)
                    and isinstance(error.get("message"), str)):
                raise self._died("sent a malformed error")
            raise CandidateError(error["type"][:200] or "Exception", error["message"][:wire.ERROR_TEXT_LIMIT])
        return header, tensors

    def _request(self, header: dict[str, Any], tensors: Sequence[torch.Tensor] = (),
                 timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        self._send(header, tensors)
        return self._receive(timeout)[0]

    def call(self, arm: str, cases: Sequence[Sequence[torch.Tensor]], output_bytes: int, *,
             ablate: bool = False, events: bool = False) -> CallResult:
        """Stage ``cases`` (each a tuple of inputs), run this worker's entry on all of them, collect.

        ``arm`` "C" (the candidate) also brings the inputs back as the call left them; "B" does not, and
        its result carries the time the run waited for a CPU (`_waits`, read just outside the clock).
        ``events`` (asked only of a worker that runs registry code) brings back the CUDA event time of its
        calls, on a GPU, as ``device_s``.
        """
        flat = [t.detach().to("cpu").contiguous() for args in cases for t in args]
        self._request({"op": "stage", "arm": arm, "counts": [len(args) for args in cases]}, flat)
        watched = self.pid if self.pid is not None else -1
        before = _tasks(watched)
        _settle(watched)  # both arms alike: each clock starts with its worker asleep on the request
        waits = _waits(watched) if arm == "B" else None
        start = time.perf_counter_ns()  # before the write: a worker woken by it may run before the write returns
        self._send({"op": "run", "ablate": ablate, "events": events})
        self._receive(CALL_TIMEOUT_S)
        seconds = (time.perf_counter_ns() - start) / 1e9
        waited = _waited_s(waits, _waits(watched) if waits is not None else None)
        after = _tasks(watched)
        input_bytes = sum(t.untyped_storage().nbytes() for t in flat)
        header, tensors = self._receive(CALL_TIMEOUT_S, byte_budget=output_bytes + input_bytes)
        result = self._result(header, tensors, cases, seconds, before, after)
        result.waited_s = waited
        reported = header.get("device_s")
        if events and (isinstance(reported, float) and math.isfinite(reported) and reported > 0):
            result.device_s = reported
        return result

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
