"""The fork server inside one sandbox: forks each worker of an evaluation from a process that has torch imported.

Pid 1 of the jail, after the new root is built and before any candidate
code exists, with the capabilities it needs to give each worker mounts of
its own (nothing else runs here: only the harness's modules, from
read-only binds). Either exec'd by :mod:`registry.kernels.sandbox_launch`
(it then imports the workers' modules itself), or, for a CPU evaluation's
jail, a fork of the harness process's warm zygote (``serve_jails``), which
imported them once for every jail that process builds. Starting an
evaluation's two workers (the candidate's and the baseline's) costs one
import of torch instead of two, and with the warm zygote none after the
first evaluation of a process (docs/kernels.md, docs/benchmarks.md).

For each worker in its config, in order: a new pid namespace for its next
child, so the worker is pid 1 there and names no other process of the jail
(not the other worker, not the zygote); fork; the child closes every
descriptor but its own three (requests in, answers out, stderr), is confined
(``sandbox_launch.confine``: its own /tmp and /dev/shm, limits, its own uid,
no capabilities, the syscall filter) and serves as
:mod:`registry.kernels.worker`. The zygote writes each worker's pid (in the
jail's pid namespace, the zygote's) and later its exit status to that worker's status
pipe, which no worker holds, then exits once every worker has: the kernel
then kills whatever they left in the namespace.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import socket
import sys
from typing import NoReturn

from registry.kernels.sandbox_launch import (SETUP_FAILED, SetupError, confine, launch,
                                             pid_namespace_for_next_worker)

WORKER_MODULES = {"worker": "registry.kernels.worker", "launcher": "registry.kernels.launcher_worker"}


def _serve(config: dict, worker: dict, worker_module) -> None:
    keep = {worker["fds"]["requests"]: 0, worker["fds"]["answers"]: 1, worker["fds"]["stderr"]: 2}
    for fd, target in keep.items():
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    confine(config, worker)
    worker_module.serve_stdio()


def main(argv: list[str]) -> None:
    if argv[1] == "--warm":
        serve_jails(argv[2])
    config = json.loads(argv[1])
    # what each worker of this jail serves: the evaluation worker (torch, Triton), or the trusted launcher's
    # (cuda.bindings, no torch): a name of WORKER_MODULES, imported before any worker exists
    worker_module = _imported_for_forking(WORKER_MODULES[config.get("serve", "worker")])
    fork_workers(config, worker_module)


def _imported_for_forking(module: str):
    """Import and preload a workers' module with the cyclic collector paused, then freeze what it made.

    Python's recipe for a process that forks without exec (the ``gc.freeze`` documentation): no collection
    while the imports build their objects, which are module state that lives as long as the process (the
    collections an import of torch and Triton sets off cost about 0.2 of its 1.2-1.4 CPU-s,
    docs/benchmarks.md); then everything imported goes to the permanent generation, so a worker's
    collections never walk it nor write to its pages, which stay shared with this process. The collector
    runs again, here and in every worker, over what is made afterwards.
    """
    gc.disable()
    try:
        worker_module = importlib.import_module(module)
        worker_module.preload()
    finally:
        gc.freeze()
        gc.enable()
    return worker_module


def fork_workers(config: dict, worker_module) -> None:
    """As pid 1 of a jail: fork and confine each worker of ``config``, report their pids and exit statuses on
    their status pipes, and exit once every worker has."""
    pids = {}
    for worker in config["workers"]:
        try:
            pid_namespace_for_next_worker()
        except SetupError as exc:  # no worker starts: each status pipe closes unwritten
            os.write(2, f"sandbox: {exc}\n".encode())
            os._exit(SETUP_FAILED)
        pid = os.fork()
        if pid == 0:
            try:
                _serve(config, worker, worker_module)
            except BaseException as exc:  # noqa: BLE001 - nothing but a confined worker may run past this
                os.write(2, f"sandbox: {exc}\n".encode("utf-8", "replace"))
            os._exit(SETUP_FAILED)
        status = worker["fds"]["status"]
        os.write(status, f"{pid}\n".encode())
        pids[pid] = status
    for worker in config["workers"]:
        for name, fd in worker["fds"].items():
            if name != "status":
                os.close(fd)
    while pids:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            break
        if pid in pids:  # a worker's orphans are its own (pid 1 of their namespace), never this one's
            status = pids.pop(pid)
            exit_code = os.waitstatus_to_exitcode(code)
            os.write(status, f"{exit_code if exit_code >= 0 else 128 - exit_code}\n".encode())
            os.close(status)
    os._exit(0)


FD_NAMES = ("requests", "answers", "stderr", "status")
"""The order a worker's descriptors travel in, to the warm zygote (one message per jail)."""

MESSAGE_BYTES = 1 << 20


def serve_jails(serve: str) -> NoReturn:
    """The warm zygote: import what ``serve``'s workers need once, then build one jail per request, for as
    long as the harness that started it holds the other end of its standard input (a Unix socket).

    It runs outside any jail, started by the harness (registry/kernels/isolation.py) with the workers'
    scrubbed environment and nothing else: no candidate code, no database, no key, no harness state ever
    exists in it, so what a jail's pid 1 inherits from it by fork is what an exec'd zygote would have
    imported. Each request is a launch config (registry/kernels/sandbox.py) with its workers' descriptors
    (FD_NAMES, in order, then the launcher's stderr) attached; for each, it forks a launcher
    (``sandbox_launch.launch``: cgroup, namespaces, root, pid 1), whose pid 1 runs ``fork_workers`` instead
    of exec'ing a fresh interpreter, and answers the launcher's pid with a pidfd of it attached (how the
    harness waits for it, though it is not the harness's child). The launcher leads a session of its own.
    """
    control = socket.socket(fileno=0)
    worker_module = _imported_for_forking(WORKER_MODULES[serve])
    # launchers that ended are reaped as they end, but never between a fork and its pidfd (SIGCHLD held there)
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, MESSAGE_BYTES, len(FD_NAMES) * 64 + 1)
        except OSError:
            os._exit(0)
        if not message:  # the harness has gone
            os._exit(0)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        passed: list[int] = []
        try:
            config = json.loads(message)
            pid = os.fork()
            if pid == 0:
                try:
                    _launcher(control, config, fds, worker_module)
                finally:
                    os._exit(SETUP_FAILED)
            passed.append(os.pidfd_open(pid))
            answer: dict = {"pid": pid}
        except (ValueError, OSError) as exc:
            answer = {"error": str(exc)}
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        try:
            socket.send_fds(control, [json.dumps(answer).encode()], passed)
        except OSError:
            os._exit(0)
        finally:
            for fd in fds + passed:
                os.close(fd)


def _reap(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _launcher(control: socket.socket, config: dict, fds: list[int], worker_module) -> NoReturn:
    """In a fork of the warm zygote: take the request's descriptors as the config names them, then launch."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        control.close()
        os.setsid()
        *theirs, stderr = fds
        if len(theirs) != len(FD_NAMES) * len(config["workers"]):
            raise SetupError("the harness sent the wrong number of descriptors")
        for at, worker in enumerate(config["workers"]):
            worker["fds"] = dict(zip(FD_NAMES, theirs[at * len(FD_NAMES):(at + 1) * len(FD_NAMES)]))
        if dict(os.environ) != config["env"]:
            raise SetupError("the warm zygote's environment is not the one this jail's workers get")
        os.dup2(stderr, 2)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        keep = {0, 1, 2, *theirs}
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the listing's own descriptor, gone already
    except BaseException as exc:  # noqa: BLE001 - no jail is built
        os.write(2, f"sandbox: {exc}\n".encode("utf-8", "replace"))
        os._exit(SETUP_FAILED)
    launch(config, lambda jail: fork_workers(jail, worker_module))


if __name__ == "__main__":
    main(sys.argv)
