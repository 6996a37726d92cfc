"""The trusted launcher's process boundary on this machine: its start-up, and what a call's bytes cost on the wire.

    python benchmarks/launcher.py [--starts N] [--calls N] [--megabytes M]

Start-up: a jailed launcher worker (zygote without torch, cuda.bindings
imported, the registry's cubins loaded, answering its hello) against a
jailed evaluation worker (zygote importing torch and Triton, answering its
hello), started alternately (ABBA), median of each and their ratio.

A call: one launcher call whose input and output buffers hold M megabytes
each, on the simulated driver (its kernel copies input to output), timed
from the harness's request to the answer, jailed against the same launcher
in this process (ABBA): the difference is the process boundary (the pipe
and the frames), per megabyte. On a GPU the driver's copies replace the
simulated device's; the boundary is the same.

No GPU is used: the simulated driver's device time is not reported.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from registry.evidence.timing import abba_schedule
from registry.kernels.isolation import CandidateWorker
from registry.kernels.launch_plan import BufferArg, BufferSpec, Launch, LaunchPlan, ScalarArg
from registry.kernels.launcher import Launcher
from registry.kernels.launcher_process import HarnessLauncher
from registry.kernels.sandbox import require_sandbox
from registry.kernels.simulated_driver import SimulatedDriver

CUBINS = {("copy", "sm_90a"): b"stand-in cubin"}


def simulated(nbytes: int) -> dict:
    return {"simulated": {"capability": [9, 0], "kernels": {
        "copy_kernel": {"params": [8, 8, 4, 8, 8], "effects": [{"copy": [0, 1], "bytes": nbytes}]}}}}


def start_launcher() -> float:
    started = time.perf_counter()
    with HarnessLauncher(torch.device("cpu"), CUBINS, driver=simulated(16), flush_bytes=4096) as launcher:
        launcher.current()
        return time.perf_counter() - started


def start_worker() -> float:
    started = time.perf_counter()
    with CandidateWorker("registry.kernels.reference:modulated_layernorm", torch.device("cpu"), screen=False):
        return time.perf_counter() - started


def plan(nbytes: int) -> LaunchPlan:
    return LaunchPlan((BufferSpec("x", "input", "uint8", (nbytes,), (1,), nbytes, 16),
                       BufferSpec("y", "output", "uint8", (nbytes,), (1,), nbytes, 16)),
                      (Launch("copy", "sm_90a", "copy_kernel", (1, 1, 1), (32, 1, 1), 0,
                              (BufferArg("x"), BufferArg("y"), ScalarArg("i32", 0)), 2),), "copy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=6, help="start-ups per kind (even)")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    require_sandbox()
    times: dict[str, list[float]] = {"launcher": [], "worker": []}
    for order in abba_schedule(args.starts):
        for arm in order:
            times["launcher" if arm == "C" else "worker"].append(start_launcher() if arm == "C" else start_worker())
    launcher, worker = (statistics.median(times[k]) for k in ("launcher", "worker"))
    print(f"start-up, median of {args.starts} each (ABBA): launcher {launcher:.3f} s, evaluation worker "
          f"{worker:.3f} s, launcher / worker {launcher / worker:.2f}")
    nbytes = args.megabytes << 20
    data = bytes(range(256)) * (nbytes // 256)
    local = Launcher(SimulatedDriver.from_config(simulated(nbytes)["simulated"]), flush_bytes=4096)
    local.load(CUBINS)
    spent: dict[str, list[float]] = {"jailed": [], "in-process": []}
    with HarnessLauncher(torch.device("cpu"), CUBINS, driver=simulated(nbytes), flush_bytes=4096) as harness:
        harness.call([(plan(nbytes), {"x": data})], deadline_s=60)  # warm
        for order in abba_schedule(args.calls):
            for arm in order:
                where = harness if arm == "C" else local
                started = time.perf_counter()
                outcome = where.call([(plan(nbytes), {"x": data})], deadline_s=60)
                spent["jailed" if arm == "C" else "in-process"].append(time.perf_counter() - started)
                assert outcome.cases[0].outputs["y"] == data
    jailed, here = (statistics.median(spent[k]) for k in ("jailed", "in-process"))
    print(f"a call of {args.megabytes} MB in and {args.megabytes} MB out, median of {args.calls} each (ABBA): "
          f"jailed {jailed:.3f} s, the same launcher in this process {here:.3f} s (the simulated device's copies); "
          f"the process boundary {1000 * (jailed - here) / args.megabytes:.1f} ms per MB each way")


if __name__ == "__main__":
    main()
