"""The fork server inside one sandbox: imports torch and Triton once, then forks each worker of an evaluation.

Exec'd by :mod:`registry.kernels.sandbox_launch` as pid 1 of the jail, after
the new root is built and before any candidate code exists, with the
capabilities it needs to give each worker mounts of its own (nothing else
runs here: it imports only the harness's modules, from read-only binds).
Starting an evaluation's two workers (the candidate's and the baseline's)
costs one import of torch instead of two, which is what keeps a sandboxed
evaluation's start near the unsandboxed one's (docs/benchmarks.md).

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

import importlib
import json
import os
import sys

from registry.kernels.sandbox_launch import SETUP_FAILED, SetupError, confine, pid_namespace_for_next_worker

WORKER_MODULES = {"worker": "registry.kernels.worker", "launcher": "registry.kernels.launcher_worker"}


def _serve(config: dict, worker: dict, worker_module) -> None:
    keep = {worker["fds"]["requests"]: 0, worker["fds"]["answers"]: 1, worker["fds"]["stderr"]: 2}
    for fd, target in keep.items():
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    confine(config, worker)
    worker_module.serve_stdio()


def main(argv: list[str]) -> None:
    config = json.loads(argv[1])
    # what each worker of this jail serves: the evaluation worker (torch, Triton), or the trusted launcher's
    # (cuda.bindings, no torch): a name of WORKER_MODULES, imported before any worker exists
    worker_module = importlib.import_module(WORKER_MODULES[config.get("serve", "worker")])
    worker_module.preload()
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


if __name__ == "__main__":
    main(sys.argv)
