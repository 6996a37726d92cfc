"""The trusted launcher as a worker in the jail, driven over the wire by the harness (registry/kernels/launcher_process.py).

The worker runs the simulated driver here (no GPU on this machine): what is
checked is the process boundary, not the device. The launcher's own process
imports no torch and loads exactly the cubins the harness sent; a launch
past its deadline gets the worker killed and a fresh one started for the
next call, the caller told (never a time); a fault likewise; a refused
plan launches nothing and keeps the worker. Each test starts a real jail
(about a second each: the zygote starts without torch).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import torch

from registry.kernels.launch_plan import BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg
from registry.kernels.launcher import DriverError, LaunchDeadline, PlanRefused, cubin_digests
from registry.kernels.launcher_process import LAUNCH_GRACE_S, HarnessLauncher
from compiled_fixtures import jail  # noqa: F401 - a fixture

CUBINS = {("copy", "sm_90a"): b"registry cubin: copy", ("spin", "sm_90a"): b"registry cubin: spin"}
N = 64
DATA = bytes(range(N))
SIMULATED = {"simulated": {"capability": [9, 0], "kernels": {
    "copy_kernel": {"params": [8, 8, 4, 8, 8], "seconds": 5e-5, "effects": [{"copy": [0, 1], "bytes": N}]},
    "spin_kernel": {"params": [8, 8, 4, 8, 8], "effects": [{"hang": True}]},
    "fault_kernel": {"params": [8, 8, 4, 8, 8], "effects": [{"fault": "CUDA_ERROR_ILLEGAL_ADDRESS"}]},
    "overrun_kernel": {"params": [8, 8, 4, 8, 8],
                       "effects": [{"copy": [0, 1], "bytes": N}, {"write": 1, "offset": N, "bytes": 16, "value": 9}]},
}}}


def plan(entry: str = "copy_kernel", kernel: str = "copy") -> LaunchPlan:
    return LaunchPlan((BufferSpec("x", "input", "uint8", (N,), (1,), N, 16),
                       BufferSpec("y", "output", "uint8", (N,), (1,), N, 16)),
                      (Launch(kernel, "sm_90a", entry, (1, 1, 1), (128, 1, 1), 0,
                              (BufferArg("x"), BufferArg("y"), ScalarArg("i32", N)), 2),), "rows")


def launcher() -> HarnessLauncher:
    return HarnessLauncher(torch.device("cpu"), CUBINS, driver=SIMULATED, flush_bytes=4096)


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def test_the_jailed_launcher_runs_a_plan_and_answers_outputs_launches_and_its_own_event_time(jail):
    with launcher() as harness:
        outcome = harness.call([(plan(), {"x": DATA}), (plan(), {"x": DATA[::-1]})], deadline_s=10)
        assert [case.outputs for case in outcome.cases] == [{"y": DATA}, {"y": DATA[::-1]}]
        assert [case.launches for case in outcome.cases] == [("copy@sm_90a",), ("copy@sm_90a",)]
        assert outcome.device_s == pytest.approx(1e-4)
        assert outcome.violations() == []
        assert harness.digests == cubin_digests(CUBINS)
        assert harness.confinement["identity"] in ("sandbox_uid", "user_namespace")
        maps = Path(f"/proc/{harness.worker.pid}/maps").read_text()
        assert "libtorch" not in maps and "triton" not in maps  # the launcher's process holds no torch, no Triton
        assert harness.started == 1


def test_a_write_past_the_output_is_reported_through_the_process(jail):
    with launcher() as harness:
        outcome = harness.call([(plan("overrun_kernel"), {"x": DATA})], deadline_s=10)
        assert outcome.cases[0].outputs == {"y": DATA}
        # 16 bytes written; each guard byte is random, so one may have held 9 already
        (violation,) = outcome.violations()
        assert re.fullmatch(r"case 0: y: 1[0-6] guard bytes after it changed", violation), violation


def test_a_launch_past_its_deadline_gets_the_launcher_killed_and_replaced_and_no_time_returned(jail):
    with launcher() as harness:
        harness.call([(plan(), {"x": DATA})], deadline_s=10)
        first = harness.worker.pid
        started = time.monotonic()
        with pytest.raises(LaunchDeadline, match="had not finished after 0.5 s"):
            harness.call([(plan("spin_kernel", "spin"), {"x": DATA})], deadline_s=0.5)
        # Answered by the worker's own deadline, not by the harness killing it after the grace: the bound is the
        # grace itself (60 s against the half second asked), so the machine's load does not decide it.
        assert time.monotonic() - started < LAUNCH_GRACE_S
        assert harness.worker is None and not _alive(first)
        outcome = harness.call([(plan(), {"x": DATA})], deadline_s=10)  # a fresh launcher, the same cubins
        assert outcome.cases[0].outputs == {"y": DATA}
        assert harness.started == 2 and harness.worker.pid != first


def test_a_faulting_kernel_loses_the_launcher_which_is_replaced(jail):
    with launcher() as harness:
        with pytest.raises(DriverError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            harness.call([(plan("fault_kernel"), {"x": DATA})], deadline_s=10)
        assert harness.worker is None
        assert harness.call([(plan(), {"x": DATA})], deadline_s=10).cases[0].outputs == {"y": DATA}
        assert harness.started == 2


def test_a_refused_plan_launches_nothing_and_keeps_the_launcher(jail):
    with launcher() as harness:
        harness.call([(plan(), {"x": DATA})], deadline_s=10)
        pid = harness.worker.pid
        with pytest.raises(PlanRefused, match="no cubin of the registry's"):
            harness.call([(plan(kernel="elsewhere"), {"x": DATA})], deadline_s=10)
        assert harness.worker.pid == pid and _alive(pid) and harness.started == 1


def test_the_launcher_worker_without_the_sandbox_serves_the_same_protocol():
    """--insecure-no-sandbox: the same worker as this user (its evidence says so and the gate holds it)."""
    harness = HarnessLauncher(torch.device("cpu"), CUBINS, driver=SIMULATED, flush_bytes=4096, sandboxed=False)
    with harness:
        assert harness.call([(plan(), {"x": DATA})], deadline_s=10).cases[0].outputs == {"y": DATA}
        assert harness.confinement == {"identity": "harness_user", "memory": "none"}
        assert os.getpid() != harness.worker.pid
