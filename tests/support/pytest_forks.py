"""Child pytest runs forked from one server that has imported what every such run imports.

tests/suite/test_suite_guards.py runs tests/conftest.py's guards on a
small suite of their own, each time in a pytest run of its own, in a
process of its own. A fresh interpreter spends about 2 s of CPU on such a
run before its first test, importing torch, pytest, Hypothesis and
SQLAlchemy (tests/conftest.py imports them), and 0.3 s on the run itself.
The server imports them once; each run is a child forked from it that takes
the run's environment, working directory and output files, and calls pytest
as `python -m pytest` would from that directory. The server is a fresh
interpreter that has done nothing but import those modules: it holds no
connection, thread or open file but its own pipes, so a child inherits
nothing a fresh interpreter would not have, and everything a run does
(the conftest it loads, the state its probes leak) ends with its child. A
run that starts workers of its own (`-n 2`) starts them as fresh
interpreters, as pytest-xdist always does.

    python tests/support/pytest_forks.py   # one JSON request a line on stdin; its child's pid, then its exit status
"""
from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

PRELOADED = ("torch", "pytest", "registry.events.database")
"""What tests/conftest.py imports (torch alone is about 1.5 s of CPU an interpreter), but the modules of plugins a
run may load: pytest rewrites the asserts of those as it imports them, which it cannot do once they are imported."""


def _run_in_child(request: dict) -> None:
    """In the forked child: become the run (environment, directory, output files, `python -m pytest`); never returns."""
    status = 70
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]  # what `python -m pytest` started there puts first
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin, sys.stdout, sys.stderr = (open(0, closefd=False), open(1, "w", closefd=False),
                                             open(2, "w", closefd=False))
        import pytest

        status = int(pytest.main(request["args"]))
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - whatever stopped the run is its stderr, and the child ends here either way
        traceback.print_exc()
    finally:
        os._exit(status)


def serve() -> None:
    """Import PRELOADED, then fork one child per request line; answer its pid, then its exit status."""
    for name in PRELOADED:
        importlib.import_module(name)
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            _run_in_child(json.loads(line))
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


class PytestForks:
    """The test side: a server started now (about 2 s of CPU, once), then `run(...)` per child pytest run."""

    def __init__(self, env: dict[str, str]) -> None:
        self.server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       env=env)

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
                raise RuntimeError(f"the pytest fork server ended (exit status {self.server.wait()})")
            line += chunk
        return int(line)

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """`python -m pytest *args` run in `cwd` with `env` (nothing else of this process's), in a forked child."""
        deadline = time.monotonic() + timeout
        with tempfile.TemporaryDirectory(prefix="pytest-fork-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            self.server.stdin.write(json.dumps(request).encode() + b"\n")
            self.server.stdin.flush()
            pid = self._answer(deadline)
            status = None if pid is None else self._answer(deadline)
            if status is None:
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    self._answer(time.monotonic() + 60)
                raise subprocess.TimeoutExpired(["pytest", *args], timeout)
            return subprocess.CompletedProcess(["pytest", *args], status, out.read_text(), err.read_text())

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(timeout=60)


if __name__ == "__main__":
    serve()
