"""Evaluating a compiled kernel through the trusted launcher (registry/kernels/launch_evaluate.py), on CPU.

No GPU here, so the launcher runs the simulated driver: its timings are an
emulator's (the benchmark says so and the gate never reads them as speed),
and what is shown is the evaluation's own logic. The honest run uses a
launcher in this process whose simulated kernel computes the modulated
LayerNorm with the torch reference (nothing of that kind can cross into a
jail), against the real baseline worker in its jail: parity byte-equal, every
call's launches counted by the launcher, the cubins' digests in the
execution item, a document the registry accepts. The hostile runs use the
real jailed launcher with kernels whose effects are declared: a spin loop,
a write before the output, an output never written; each ends as the one
failure naming its class. How every outcome of a launcher call is named (a
fault, a deadline, a guard, an input written) is checked on the call itself,
without a jail. Each test starts a jail (a few
seconds: the baseline's zygote imports torch).
"""
from __future__ import annotations

import re

import pytest
import torch

from registry.formats.evidence.document import parse_document
from registry.gate import ArtifactFacts
from registry.gate.execution import check_execution
from registry.gate.ledger import Ledger
from registry.gate.model import Recorded
from registry.kernels.corpus import corpus_cases
from registry.kernels.evaluate import evidence_document
from registry.kernels.launch_evaluate import evaluate_compiled
from registry.kernels.launcher import (CallOutcome, CaseOutcome, DriverError, LaunchDeadline, Launcher,
                                       cubin_digests)
from registry.kernels.launcher_process import SIMULATED_DEVICE, HarnessLauncher
from registry.kernels.simulated_driver import SimulatedDriver
from compiled_fixtures import (CUBINS, ENTRIES, PARAMS, BuiltinSpecKernel, ModlnBundle, jail,  # noqa: F401 - jail
                               simulated_modln)

def test_the_built_in_specs_plans_dispatch_each_case_to_its_variant_and_the_launcher_runs_them(jail):
    """Plans from plan_call on the built-in modulated LayerNorm's spec: each corpus case launches its own
    (D, dtype) kernel, byte-equal to the reference; held-out shapes (no variant) are never launched."""
    kernel = BuiltinSpecKernel()
    made = []

    def launcher_for(cubins):
        made.append(InProcessLauncher(cubins, images=kernel.images))
        return made[-1]

    items = evaluate(launcher_for, sandboxed=False, bundle=kernel)
    assert [item["kind"] for item in items] == ["parity", "benchmark", "execution"], items
    parity, _, execution = items
    assert all(leaf["byte_equal"] for leaf in parity["leaves"])
    per_case = [f"modln_d{case.dim}_{case.dtype}@sm_90a" for case in corpus_cases("cpu")]
    assert execution["launches"] == [[key] for key in per_case] + [per_case] * 2
    assert set(execution["cubins"]) == {f"{key}@sm_90a" for key, _ in kernel.cubins}
    assert len(made[0].driver.recorded.launches) == len(per_case) + 2 * len(per_case)  # held-out: none launched


class InProcessLauncher:
    """The Launcher itself on the simulated driver, in this process (a simulated kernel that runs Python cannot
    cross into a jail); it names no jail, and the evaluation is run unsandboxed to match."""

    timer, device_name = "emulator", SIMULATED_DEVICE
    confinement = {"identity": "harness_user", "memory": "none"}

    def __init__(self, cubins, images=None):
        self.driver = SimulatedDriver({entry: simulated_modln(dtype) for dtype, entry in ENTRIES.items()},
                                      images=images)
        self.launcher = Launcher(self.driver, flush_bytes=4096)
        self.digests = self.launcher.load(cubins)
        self.calls = 0

    def call(self, cases, *, deadline_s):
        self.calls += 1
        return self.launcher.call(cases, deadline_s=deadline_s)

    def close(self):
        self.launcher.close()


def evaluate(launcher_for, *, sandboxed=True, bundle=None, runs=2, warmup=0, deadline_s=10.0):
    return evaluate_compiled("modulated_layernorm", bundle or ModlnBundle(), launcher_for, device=torch.device("cpu"),
                             capability=(9, 0), corpus="cpu", runs=runs, warmup=warmup, policy="byte_equal",
                             tolerances_by_dtype=None, sandboxed=sandboxed, deadline_s=deadline_s)


def test_an_honest_compiled_kernel_is_launched_compared_and_timed_by_the_harness_alone(jail):
    made = []
    items = evaluate(lambda cubins: made.append(InProcessLauncher(cubins)) or made[-1], sandboxed=False, warmup=1)
    assert [item["kind"] for item in items] == ["parity", "benchmark", "execution"], items
    parity, benchmark, execution = items
    assert all(leaf["byte_equal"] for leaf in parity["leaves"]) and len(parity["leaves"]) == 4
    assert (benchmark["timer"], benchmark["device"]) == ("emulator", SIMULATED_DEVICE)
    assert len(benchmark["candidate_s"]) == 2
    # parity launches each case alone; each warm-up and timed call (one and two) runs all four corpus cases,
    # one launch each, of the sm_90a cubin only
    assert execution["launches"] == [["modln@sm_90a"]] * 4 + [["modln@sm_90a"] * 4] * 3
    assert execution["candidate_calls"] == 4 + 3 * 4
    assert execution["cubins"] == cubin_digests({("modln", "sm_90a"): CUBINS[("modln", "sm_90a")]})
    assert execution["launch_signal"] == "harness_launcher" and execution["fallbacks"] == 0
    # the launches the simulated driver saw are the ones the execution item lists (held-out calls are not counted)
    entries = [launch["entry"] for launch in made[0].driver.recorded.launches]
    assert len(entries) >= execution["candidate_calls"] and set(entries) <= set(ENTRIES.values())
    document = evidence_document("modln-compiled", items, sandbox="none",
                                 confinement={"identity": "harness_user", "memory": "none"})
    parsed = parse_document(document)  # the registry accepts what the evaluation wrote
    ledger = Ledger()
    facts = ArtifactFacts("modln-compiled", "triton_kernel", cubins=execution["cubins"])
    check_execution(Recorded("ev", parsed.items[2]), facts, ledger)
    assert [finding.rule for finding in ledger.findings] == ["execution.unsandboxed"]


def jailed(kernel: dict):
    """A jailed launcher whose modln kernels (both dtypes) have the declared effects."""
    config = {"simulated": {"capability": [9, 0],
                            "kernels": {entry: {"params": list(PARAMS), **kernel} for entry in ENTRIES.values()}}}
    return lambda cubins: HarnessLauncher(torch.device("cpu"), cubins, driver=config, flush_bytes=4096)


@pytest.mark.parametrize("kernel, stage, error", [
    ({"effects": [{"hang": True}]}, "parity", re.escape(
        "CandidateRefused: launch deadline: parity call on shape0: the launches had not finished after 0.5 s; "
        "the launcher was killed and replaced")),
    # 16 bytes written before y: each guard byte is random, so one may have held 7 already
    ({"effects": [{"write": 3, "offset": -16, "bytes": 16, "value": 7}]}, "parity",
     r"CandidateRefused: out-of-bounds write: parity call on shape0 shape0: y: 1[0-6] guard bytes before it changed"),
    # never written: the launcher's pre-fill of random bits comes back (NaN among them, nearly always)
    ({"effects": []}, "benchmark", r"CandidateRefused: (stale result|non-finite output): timed call 1: shape0\.y: "),
])
def test_a_hostile_compiled_kernel_ends_as_the_one_failure_naming_its_class(jail, kernel, stage, error):
    items = evaluate(jailed(kernel), deadline_s=0.5)
    assert len(items) == 1 and items[0]["kind"] == "failure", items
    assert items[0]["stage"] == stage
    assert re.match(error, items[0]["error"]), items[0]["error"]


def test_no_cubin_for_this_device_is_a_load_failure_naming_what_the_bundle_holds(jail):
    items = evaluate_compiled("modulated_layernorm", ModlnBundle(), jailed({"effects": []}),
                              device=torch.device("cpu"), capability=(8, 0), corpus="cpu", runs=2, warmup=0,
                              policy="byte_equal", tolerances_by_dtype=None)
    assert items == [{"kind": "failure", "stage": "load", "error": (
        "PlanRefused: the bundle holds cubins for sm_100a, sm_90a, none for this device (sm_80)")}]


def test_a_call_no_variant_matches_is_a_parity_failure_never_a_launch(jail):
    made = []
    items = evaluate(lambda cubins: made.append(InProcessLauncher(cubins)) or made[-1], sandboxed=False,
                     bundle=ModlnBundle(max_dim=150))
    assert items[0]["kind"] == "failure" and items[0]["stage"] == "parity"
    assert "no variant matches x torch.bfloat16 (2, 5, 200)" in items[0]["error"]


class Scripted:
    """A launcher whose one call ends as scripted: an exception, or an outcome with violations."""

    def __init__(self, result):
        self.result = result

    def call(self, cases, *, deadline_s):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize("result, refusal", [
    (DriverError("cuEventQuery", "CUDA_ERROR_ILLEGAL_ADDRESS"),
     "kernel fault: parity call: cuEventQuery failed: CUDA_ERROR_ILLEGAL_ADDRESS"),
    (LaunchDeadline("the launches had not finished after 10 s"),
     "launch deadline: parity call: the launches had not finished after 10 s; the launcher was killed and replaced"),
    (CallOutcome(1e-5, (CaseOutcome("v", {"y": b""}, ("modln@sm_90a",), (), ("x",)),)),
     "out-of-bounds write: parity call shape0: wrote to its input x"),
    (CallOutcome(1e-5, (CaseOutcome("v", {"y": b""}, ("modln@sm_90a",), ("y: 3 guard bytes after it changed",), ()),)),
     "out-of-bounds write: parity call shape0: y: 3 guard bytes after it changed"),
])
def test_every_way_a_launcher_call_goes_wrong_is_refused_by_its_class(result, refusal):
    from registry.kernels.checks import CandidateRefused
    from registry.kernels.launch_evaluate import _Run
    from registry.kernels.ops import get_operation

    spec = get_operation("modulated_layernorm")
    run = _Run(ModlnBundle(), Scripted(result), None, spec, "byte_equal", None, torch.device("cpu"), 10.0)
    args = spec.make_inputs(corpus_cases("cpu")[0], "cpu")
    with pytest.raises(CandidateRefused) as caught:
        run.launch(["shape0"], [args], "parity call")
    assert str(caught.value) == refusal
    assert run.launches == []  # a refused call is never counted
