"""Child processes forked from one server that has imported what every such child imports.

Some tests start many short processes that each import torch: tests/suite/test_suite_guards.py runs
tests/conftest.py's guards in pytest runs of their own, and the escape gallery
(tests/kernels/test_escape_gallery.py) runs each escape's `registry evaluate`. A fresh interpreter spends
1.3-2 s of CPU importing torch and what comes with it before its first line of work. The server imports
the modules it is given once; each child is forked from it, takes its request's environment, working
directory, command line and output files, and runs its module as `python -m MODULE ARGS` would from that
directory. The server is a fresh interpreter that has done nothing but import those modules: it holds no
connection, thread or open file but its own pipes, so a child inherits nothing a fresh interpreter would not
have, and everything a child does ends with it. What a child does not get is the interpreter's own start-up
(`site`, and with it `sitecustomize` or `.pth` files found from the child's directory): a test whose point
is that start-up starts a fresh interpreter.

A server started with ``--host`` forks nothing: it runs each request's command (a click command's
``main``) in itself, one after another, so what one command leaves in the process (a warm zygote, say) is there
for the next, as in any process that runs one command after another. That is for a test whose point is a
long-lived harness: the escape gallery evaluates every escape in one harness process, so every escape's jail is
forked from the same warm zygote.

    python tests/support/process_forks.py MODULE...           # preload MODULEs; one JSON request a line on stdin;
                                                              # answers its child's pid, then its exit status
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


def serve(preloaded: list[str], host: bool) -> None:
    """Import ``preloaded``, then fork one child per request line (or, as a host, run it here); answer the pid
    that runs it, then its exit status."""
    for name in preloaded:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        if host:
            print(os.getpid(), flush=True)
            print(_run_here(request), flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            _run_in_child(request)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


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
