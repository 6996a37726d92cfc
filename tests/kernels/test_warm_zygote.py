"""torch is imported once per harness process, not once per evaluation: every jail is forked from one warm zygote.

registry/kernels/zygote.py `serve_jails`: the first sandboxed evaluation of
a process starts a warm zygote (outside any jail, with the workers' scrubbed
environment) that imports torch and Triton; each evaluation's jail is then
built by a fork of it (a launcher of its own, namespaces, root, pid 1), whose
pid 1 forks the workers without exec'ing a new interpreter. Seen from
outside, in /proc: the launchers of two evaluations have one parent, and no
process of either jail was exec'd (each still carries the warm zygote's
command line). Two jails, about two seconds: the first evaluation of the run
may start the zygote, which imports torch.
"""
from __future__ import annotations

import os
import signal
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from registry.kernels.evaluate import open_workers
from registry.kernels.isolation import close_warm_zygotes
from registry.kernels.ops import get_operation
from registry.kernels.sandbox import require_sandbox

interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs under the interpreter")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def _command_line(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _one_jail() -> dict:
    """Start an evaluation's two workers in one jail and describe its processes, as this process sees them."""
    spec = get_operation("modulated_layernorm")
    with ExitStack() as stack:
        worker, baseline = open_workers(stack, "registry.kernels.modln:modulated_layernorm_triton", spec.reference,
                                        torch.device("cpu"), screen=False, sandboxed=True)
        launcher = worker.jail.process.pid
        assert baseline.jail is worker.jail
        pid_one = _parent(worker.pid)
        return {"launcher": launcher, "zygote": _parent(launcher), "pid_one": pid_one,
                "lines": {pid: _command_line(pid) for pid in (launcher, pid_one, worker.pid, baseline.pid)}}


@interpreted
def test_two_evaluations_jails_are_forked_from_one_warm_zygote_that_imported_torch_once():
    require_sandbox()
    first, second = _one_jail(), _one_jail()
    assert first["launcher"] != second["launcher"]  # a jail each: a launcher, namespaces and a root of its own
    assert first["zygote"] == second["zygote"] != os.getpid()
    warm = _command_line(first["zygote"])
    assert b"--warm" in warm.split(b"\0")
    for jail in (first, second):  # nothing in either jail exec'd an interpreter of its own (which imports torch)
        assert all(line == warm for line in jail["lines"].values()), jail["lines"]


@interpreted
def test_a_warm_zygote_killed_behind_the_harness_s_back_is_started_again():
    require_sandbox()
    before = _one_jail()["zygote"]
    os.kill(before, signal.SIGKILL)
    after = _one_jail()  # the request finds it gone, and the next one built the jail
    assert after["zygote"] != before and b"--warm" in _command_line(after["zygote"]).split(b"\0")
    close_warm_zygotes()  # and one ended by the harness is waited for: nothing of it is left
    assert not Path(f"/proc/{after['zygote']}").exists() and not Path(f"/proc/{before}").exists()


FORKING_IMPORT = """
import gc, sys, types
from registry.kernels.zygote import _imported_for_forking
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
module = types.ModuleType("many_objects")
module.preload = lambda: setattr(module, "state", [[n] for n in range(200_000)])
sys.modules["many_objects"] = module
gc.collect()
collections.clear()
frozen = gc.get_freeze_count()
_imported_for_forking("many_objects")
print(len(collections), gc.isenabled(), gc.get_freeze_count() - frozen)
"""


def test_the_zygote_imports_without_collections_and_freezes_what_the_import_made():
    """The fork server's recipe (zygote.py `_imported_for_forking`): no collection runs while the workers'
    module is imported and preloaded (200,000 new lists would set off hundreds at Python's thresholds), what
    they made is in the permanent generation, where no worker's collection walks it, and the collector is on
    again for what comes after."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORKING_IMPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ran, enabled, frozen = done.stdout.split()
    assert ran == "0" and enabled == "True" and int(frozen) >= 200_000, done.stdout
