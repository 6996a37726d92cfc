"""Child processes forked from one server that has imported what every such child imports.

Some tests start many processes that each import the same heavy modules before any work:
tests/suite/test_suite_guards.py runs tests/conftest.py's guards in pytest runs of their own (torch: 1.3-2 s of
CPU an interpreter), tests/app/test_jobs.py starts dozens of `registry worker` processes, and
tests/support/serve_helpers.py every `registry serve` the tests start. The server imports
the modules it is given once; each child is forked from it, takes its request's environment, working
directory, command line and output files, and runs its module as `python -m MODULE ARGS` would from that
directory. The server is a fresh interpreter that has done nothing but import those modules: it holds no
connection, thread or open file but its own pipes (a child closes the one that wakes the server when a child
ends), so a child inherits nothing a fresh interpreter would not have, and everything a child does ends with it. What a child does not get is the interpreter's own start-up
(`site`, and with it `sitecustomize` or `.pth` files found from the child's directory): a test whose point
is that start-up starts a fresh interpreter.

A server started with ``--host`` forks nothing: it runs each request's command (a click command's
``main``) in itself, one after another, so what one command leaves in the process (a warm zygote, say) is there
for the next, as in any process that runs one command after another. That is for a test whose point is a
long-lived harness: the escape gallery evaluates every escape in one harness process, so every escape's jail is
forked from the same warm zygote.

A child can also be started and left running (`start`): the queue's tests start, kill and restart worker
processes by the dozen.

    python tests/support/process_forks.py MODULE...           # preload MODULEs; one JSON request a line on stdin;
                                                              # answers its child's pid, then its exit status
                                                              # (or writes it to the request's status file)
    python tests/support/process_forks.py --host MODULE...    # the same, each request run in the server itself
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


def _take_request(request: dict) -> None:
    """Take the request's environment, working directory and output files, as `python -m` started there would."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # what `python -m` started there puts first
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)


def _exit_status(run) -> int:
    """The exit status of ``run()`` as an interpreter that ran it would end with: its SystemExit's, else 0."""
    try:
        run()
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def _run_in_child(request: dict) -> None:
    """In the forked child: become `python -m MODULE ARGS` (environment, directory, output files); never returns."""
    status = 70
    try:
        _take_request(request)
        sys.stdin, sys.stdout, sys.stderr = (open(0, closefd=False), open(1, "w", closefd=False),
                                             open(2, "w", closefd=False))
        sys.argv = [request["module"], *request["args"]]
        status = _exit_status(lambda: runpy.run_module(request["module"], run_name="__main__", alter_sys=True))
    except BaseException:  # noqa: BLE001 - whatever stopped the child is its stderr, and the child ends here either way
        traceback.print_exc()
    finally:
        os._exit(status)


def _run_here(request: dict) -> int:
    """In a ``--host`` server: call the click command ``request["command"]`` (MODULE:NAME) on the request's
    arguments, with its environment, directory and output files; then take this process's own back. A command
    that raises is a crash report on its stderr and exit status 70, as an uncaught exception would end it."""
    own = [os.dup(fd) for fd in (0, 1, 2)]
    directory, path = os.getcwd(), sys.path[0]
    try:
        _take_request(request)
        module, _, name = request["command"].partition(":")
        command = getattr(importlib.import_module(module), name)
        return _exit_status(lambda: command.main(request["args"], prog_name=request["module"]))
    except Exception:  # noqa: BLE001 - a command's own defect is its crash report; the server serves the next
        traceback.print_exc()
        sys.stderr.flush()
        return 70
    finally:
        for fd, saved in zip((0, 1, 2), own):
            os.dup2(saved, fd)
            os.close(saved)
        os.chdir(directory)
        sys.path[0] = path


def _reap(status_files: dict[int, str | None]) -> None:
    """Answer the exit status of every child that has ended, then reap it: on this server's output for a child run
    to its end, in its status file for a child left running. The status is written before the child is reaped, so
    while the file is missing its pid still names the child (a zombie at worst), never another process."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None:
            return
        status = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status
        path = status_files.pop(ended.si_pid, None)
        if path is None:
            print(status, flush=True)
        else:
            Path(path + ".part").write_text(str(status))
            os.replace(path + ".part", path)
        os.waitpid(ended.si_pid, 0)


def _serve_forks() -> None:
    """Fork one child per request and answer its pid at once; answer each child's exit status when it ends (see
    `_reap`). When the requests end, whatever is still running is killed and reaped before the server exits."""
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child's end wakes the select below through `woken`
    status_files: dict[int, str | None] = {}
    pending, reading = b"", True
    while reading or status_files:
        ready, _, _ = select.select([0, wake] if reading else [wake], [], [])
        if wake in ready:
            os.read(wake, 4096)
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            reading = bool(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake)
                    os.close(woken)
                    _run_in_child(request)
                status_files[pid] = request.get("status")
                print(pid, flush=True)
            if not reading:
                for pid in status_files:
                    os.kill(pid, signal.SIGKILL)
        _reap(status_files)


def _serve_here() -> None:
    """As a host: run each request in this process, one after another; answer this pid, then its exit status."""
    for line in sys.stdin:
        print(os.getpid(), flush=True)
        print(_run_here(json.loads(line)), flush=True)


def serve(preloaded: list[str], host: bool) -> None:
    """Import ``preloaded``, then fork one child per request line (or, as a host, run it here)."""
    for name in preloaded:
        importlib.import_module(name)
    if host:
        _serve_here()
    else:
        _serve_forks()


class Started:
    """A child the fork server started and left running (`ProcessForks.start`), as much of a `subprocess.Popen` as
    the tests use: signalled by its pid, its exit status read from the file the server writes as it ends."""

    def __init__(self, command: list[str], pid: int, folder: tempfile.TemporaryDirectory) -> None:
        self.args, self.pid, self.folder = command, pid, folder
        self.files = Path(folder.name)

    def poll(self) -> int | None:
        try:
            return int((self.files / "status").read_text())
        except FileNotFoundError:
            return None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (status := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.005)
        return status

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _written(self, name: str) -> str:
        try:
            return (self.files / name).read_text()
        except FileNotFoundError:  # the child has not opened it yet
            return ""

    def output(self) -> str:
        """What it has written to its standard output so far."""
        return self._written("stdout")

    def errors(self) -> str:
        """What it has written to its standard error so far."""
        return self._written("stderr")


class ProcessForks:
    """The test side: a server started now (the preloads' CPU, once), then `run(...)` per child process."""

    HOST: tuple[str, ...] = ()

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]) -> None:
        self.server = subprocess.Popen([sys.executable, __file__, *self.HOST, *preload], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, env=env)

    def _answer(self, deadline: float) -> int | None:
        """The server's next line, or None when the deadline passes first."""
        line = b""
        poller = select.poll()  # not select(): a worker that has run many tests may hold descriptors past 1024
        poller.register(self.server.stdout.fileno(), select.POLLIN | select.POLLHUP)
        while not line.endswith(b"\n"):
            if not poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                return None
            chunk = os.read(self.server.stdout.fileno(), 1)
            if not chunk:
                raise RuntimeError(f"the fork server ended (exit status {self.server.wait()})")
            line += chunk
        return int(line)

    def start(self, module: str, args: list[str], cwd: Path, env: dict[str, str]) -> Started:
        """`python -m module *args` started in `cwd` with `env` in a forked child, and left running."""
        folder = tempfile.TemporaryDirectory(prefix="process-fork-")
        files = Path(folder.name)
        request = {"module": module, "args": args, "cwd": str(cwd), "env": env, "stdout": str(files / "stdout"),
                   "stderr": str(files / "stderr"), "status": str(files / "status")}
        self.server.stdin.write(json.dumps(request).encode() + b"\n")
        self.server.stdin.flush()
        pid = self._answer(time.monotonic() + 60)
        if pid is None:
            raise RuntimeError("the fork server answered no pid within 60 s")
        return Started([sys.executable, "-m", module, *args], pid, folder)

    def run(self, module: str, args: list[str], cwd: Path, env: dict[str, str],
            timeout: float, **more: str) -> subprocess.CompletedProcess:
        """`python -m module *args` run in `cwd` with `env` (nothing else of this process's), in a forked child
        (``more`` goes into the request as it is)."""
        deadline = time.monotonic() + timeout
        command = [sys.executable, "-m", module, *args]
        with tempfile.TemporaryDirectory(prefix="process-fork-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"module": module, "args": args, "cwd": str(cwd), "env": env, "stdout": str(out),
                       "stderr": str(err), **more}
            self.server.stdin.write(json.dumps(request).encode() + b"\n")
            self.server.stdin.flush()
            pid = self._answer(deadline)
            status = None if pid is None else self._answer(deadline)
            if status is None:
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    if pid != self.server.pid:  # a host killed with its command has no answer left to give
                        self._answer(time.monotonic() + 60)
                raise subprocess.TimeoutExpired(command, timeout)
            return subprocess.CompletedProcess(command, status, out.read_text(), err.read_text())

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(timeout=60)


class CommandHost(ProcessForks):
    """A ``--host`` server: each `run(...)` calls a click command in the one server process, one after another."""

    HOST = ("--host",)

    def run_command(self, command: str, prog_name: str, args: list[str], cwd: Path, env: dict[str, str],
                    timeout: float) -> subprocess.CompletedProcess:
        """`prog_name *args` as the click command ``command`` (MODULE:NAME) of the host runs it, in `cwd` with
        `env`; what earlier commands left in the host is still there."""
        return self.run(prog_name, args, cwd, env, timeout, command=command)


if __name__ == "__main__":
    hosting = sys.argv[1:2] == ["--host"]
    serve(sys.argv[1 + hosting:], hosting)
