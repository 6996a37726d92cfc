"""Evaluating a compiled kernel (a triton_kernel bundle): the harness launches the registry's cubins itself.

Nothing of the candidate's Python runs anywhere. Three processes take part:
this one (trusted: the inputs, their secret seeds, the comparator, the spot
checks, the launch plans it computes with the bundle's spec), the baseline's
worker (registry code alone: the torch reference, timed with CUDA events
inside it) and the trusted launcher's worker (the registry's cubins and
nothing else; registry/kernels/launcher.py). The launcher and the baseline
each have a jail and a CUDA context of their own, so a cubin sees neither
the reference's outputs nor anything of this process.

Stages, as for a Python entry (registry/kernels/evaluate.py), each failure
one failure item naming its stage:

- ``load``: the baseline's worker and the launcher started; the launcher
  loads the cubins built for this device's arch;
- ``parity``: every corpus case launched, its outputs compared with the
  reference the baseline's worker computed on the same inputs;
- ``benchmark``: paired ABBA timing, baseline (CUDA events in its worker)
  against candidate (the launcher's CUDA events around its launches, after
  its L2 flush); every call's inputs drawn fresh from a secret seed, every
  candidate call spot-checked against the reference on its inputs;
- ``integrity``: held-out shapes and value scales (those the spec accepts),
  run twice: both runs bitwise equal, and equal to the reference.

A candidate call is also refused when its kernels changed a guard region or
an input (``out-of-bounds write``), ran past the deadline (``launch
deadline``: the launcher is killed and replaced) or faulted (``kernel
fault``). The execution item says ``launch_signal: "harness_launcher"`` and
names the cubins' digests and every call's launches, as the launcher made
them.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from registry.evidence.parity import compare_outputs
from registry.evidence.timing import abba_schedule
from registry.formats.evidence.schemas import HARNESS_LAUNCHER
from registry.kernels.checks import (DEADLINE, FAULT, HELD_OUT, IMPOSSIBLE_SPEED, NON_FINITE, NONDETERMINISTIC,
                                     OUT_OF_BOUNDS, STALE, CandidateRefused, spot_check)
from registry.kernels.evaluate import (PairBatches, SessionRefused, _check_request, _floor_seconds, _held_out_cases,
                                       _rescaled, failure_item, fresh_inputs, paired_calls, run_batches, ticker)
from registry.kernels.isolation import CandidateError, CandidateWorker, start_workers
from registry.kernels.launch_plan import LaunchPlan
from registry.kernels.launcher import CallOutcome, DriverError, LaunchDeadline, PlanRefused, arch_capability
from registry.kernels.ops import get_operation
from registry.kernels.sandbox import PROFILE, UNSANDBOXED, harness_digest
from registry.kernels.tensor_bytes import input_bytes, output_tensor

LAUNCH_DEADLINE_S = 10.0
"""Longest one launcher call (every case's launches) may run before the launcher is killed: the gpu corpus's
calls take milliseconds; a spin loop never ends."""

TIMING_NOTE = ("candidate timed by the launcher's CUDA events around its cuLaunchKernel calls, baseline by CUDA "
               "events in its own worker; a 256 MB write evicts L2 before each call of either arm")


class CompiledKernel(Protocol):
    """What the evaluation reads of a registered triton_kernel bundle."""

    inputs: tuple[str, ...]  # the spec's input tensor names, in the op's argument order
    outputs: tuple[str, ...]  # its output tensor names, in the op's output order
    cubins: Mapping[tuple[str, str], bytes]  # (kernel, arch) -> the registry's own cubin bytes

    def plan(self, inputs: Sequence[torch.Tensor]) -> LaunchPlan:
        """The plan of one call on these tensors (the spec's variants); PlanRefused when none matches."""


class Launching(Protocol):
    """The launcher as the evaluation drives it (registry/kernels/launcher_process.py HarnessLauncher)."""

    timer: str
    device_name: str
    digests: dict[str, str]
    confinement: dict[str, str]

    def call(self, cases: Sequence[tuple[LaunchPlan, Mapping[str, bytes]]], *, deadline_s: float) -> CallOutcome:
        ...

    def close(self) -> None:
        ...


def device_cubins(kernel: CompiledKernel, capability: tuple[int, int]) -> dict[tuple[str, str], bytes]:
    """The cubins built for a device of this compute capability; a refusal when the bundle holds none."""
    found = {key: image for key, image in kernel.cubins.items() if arch_capability(key[1]) == capability}
    if not found:
        archs = ", ".join(sorted({arch for _, arch in kernel.cubins}))
        raise PlanRefused(f"the bundle holds cubins for {archs}, none for this device (sm_{capability[0]}"
                          f"{capability[1]})")
    return found


@dataclass
class _Run:
    """One evaluation's processes and what the launcher has made so far."""

    kernel: CompiledKernel
    launcher: Launching
    baseline: CandidateWorker
    spec: Any
    policy: str
    tolerances: Mapping[str, Mapping[str, float]] | None
    device: torch.device
    deadline_s: float
    launches: list[list[str]] = field(default_factory=list)  # per counted call, the kernel keys in order

    def reference(self, inputs: Sequence[tuple[torch.Tensor, ...]], *, timed: bool = False):
        """The reference's outputs on ``inputs``, computed in the baseline's worker (and its CUDA event time)."""
        output_bytes = sum(2 * t.numel() * t.element_size() * len(self.spec.outputs) for args in inputs for t in args)
        return self.baseline.call("B", inputs, output_bytes, events=timed and self.device.type == "cuda")

    def launch(self, labels: Sequence[str], inputs: Sequence[tuple[torch.Tensor, ...]], where: str, *,
               count: bool = True) -> tuple[list[list[torch.Tensor]], CallOutcome]:
        """One launcher call of these cases; refused when a plan is refused, a guard or input changed, the
        deadline passed or a kernel faulted. Returns each case's outputs in the op's order."""
        cases = [(self.kernel.plan(args), input_bytes(self.kernel.inputs, args)) for args in inputs]
        try:
            outcome = self.launcher.call(cases, deadline_s=self.deadline_s)
        except LaunchDeadline as exc:
            raise CandidateRefused(DEADLINE, f"{where}: {exc}; the launcher was killed and replaced") from None
        except DriverError as exc:
            raise CandidateRefused(FAULT, f"{where}: {exc}") from None
        violations = outcome.violations()
        if violations:
            label = labels[int(violations[0].split()[1].rstrip(":"))]
            raise CandidateRefused(OUT_OF_BOUNDS, f"{where} {label}: {violations[0].partition(': ')[2]}")
        if count:
            self.launches.append([key for case in outcome.cases for key in case.launches])
        outputs = [[output_tensor(plan, name, case.outputs[name]) for name in self.kernel.outputs]
                   for (plan, _), case in zip(cases, outcome.cases)]
        return outputs, outcome

    def tolerance(self, dtype: torch.dtype) -> Mapping[str, float] | None:
        from registry.evidence.parity import dtype_name

        return self.tolerances[dtype_name(dtype)] if self.policy == "tolerance" else None

    def spot_check(self, technique: str, where: str, labels: Sequence[str], inputs, outputs) -> None:
        expected = self.reference(inputs).outputs
        for label, ref_row, got_row in zip(labels, expected, outputs):
            for out_name, ref, got in zip(self.spec.outputs, ref_row, got_row):
                why = spot_check(f"{label}.{out_name}", ref, got, self.policy, self.tolerance(ref.dtype))
                if why is not None:
                    nonfinite = technique == STALE and "NaN or inf" in why
                    raise CandidateRefused(NON_FINITE if nonfinite else technique, f"{where}: {why}")


def _parity(run: _Run, cases: Sequence[Any], tick: Callable[[], None]) -> dict[str, Any]:
    leaves: list[dict[str, Any]] = []
    declared = run.tolerances if run.policy == "tolerance" else None
    for case in cases:
        args = run.spec.make_inputs(case, run.device)
        expected = run.reference([args]).outputs[0]
        got = run.launch([case.label], [args], f"parity call on {case.label}")[0][0]
        names = [f"{case.label}.{out}" for out in run.spec.outputs]
        leaves += compare_outputs(tuple(expected) if len(expected) != 1 else expected[0],
                                  tuple(got) if len(got) != 1 else got[0], names, run.policy, declared)["leaves"]
        tick()
    return {"kind": "parity", "policy": run.policy, "leaves": leaves}


def _time_pairs(run: _Run, cases: Sequence[Any], pairs: int, warmup: int, *, bytes_moved: int,
                tick: Callable[[], None], notes: str) -> dict[str, Any]:
    """``warmup`` untimed then ``pairs`` timed ABBA pairs: the baseline's CUDA event time in its worker against
    the launcher's CUDA event time; every call on fresh inputs, every candidate call spot-checked."""
    labels = [case.label for case in cases]
    floor = _floor_seconds(bytes_moved, run.launcher.device_name)
    times: dict[str, list[float]] = {"B": [], "C": []}
    waited: list[float | None] = []
    for arm, timed, where in paired_calls(pairs, warmup):
        inputs = fresh_inputs(run.spec, cases, run.device)
        if arm == "B":
            call = run.reference(inputs, timed=True)
            seconds = call.device_s if call.device_s is not None else call.seconds
            if timed:
                waited.append(call.waited_s)
        else:
            outputs, outcome = run.launch(labels, inputs, where)
            run.spot_check(STALE, where, labels, inputs, outputs)
            seconds = outcome.device_s
            if floor is not None and seconds < floor:
                raise CandidateRefused(IMPOSSIBLE_SPEED, (
                    f"{where} took {seconds:.3g} s by the launcher's events, below the {floor:.3g} s that moving "
                    f"{bytes_moved} bytes takes at {run.launcher.device_name}'s peak bandwidth"))
        if timed:
            times[arm].append(seconds)
        tick()
    item: dict[str, Any] = {
        "kind": "benchmark", "protocol": "paired", "device": run.launcher.device_name, "timer": run.launcher.timer,
        "baseline_s": times["B"], "candidate_s": times["C"], "baseline_waited_s": waited,
        "schedule": abba_schedule(pairs),
        "warmup": warmup, "arch": run.baseline.arch, "notes": f"{notes}; {TIMING_NOTE}"}
    if floor is not None and run.launcher.timer == "cuda_event":
        item["bandwidth_share"] = floor / statistics.median(times["C"])
    return item


def _integrity(run: _Run, cases: Sequence[Any]) -> None:
    """Held-out shapes the spec accepts, values rescaled by a power of two, each run twice: bitwise equal runs,
    and the reference's outputs. A shape no variant of the spec matches is one the runtime refuses too."""
    import secrets

    rng = secrets.SystemRandom()
    for held, exponent in zip(_held_out_cases(cases), (rng.randint(5, 7), -rng.randint(3, 6))):
        args = _rescaled(run.spec.make_inputs(held, run.device), exponent)
        try:
            run.kernel.plan(args)
        except PlanRefused:
            continue
        first = run.launch([held.label], [args], "held-out call", count=False)[0]
        run.spot_check(HELD_OUT, "held-out call", [held.label], [args], first)
        second = run.launch([held.label], [args], "held-out call (repeat)", count=False)[0]
        for out_name, a, b in zip(run.spec.outputs, first[0], second[0]):
            if not torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)):
                raise CandidateRefused(NONDETERMINISTIC, f"{held.label}.{out_name}: two runs on the same values differ")


def execution_item(run: _Run, profile: str) -> dict[str, Any]:
    """What the launcher made: every counted call's launches, the cubins it loaded, the jail it ran in."""
    return {"kind": "execution", "candidate_calls": sum(len(call) for call in run.launches), "fallbacks": 0,
            "sandbox": profile, "harness_sha256": harness_digest(), "confinement": dict(run.launcher.confinement),
            "launch_signal": HARNESS_LAUNCHER, "cubins": dict(run.launcher.digests),
            "launches": [list(call) for call in run.launches]}


def evaluate_compiled(op_name: str, kernel: CompiledKernel, launcher_for: Callable[[dict], Launching], *,
                      device: torch.device, capability: tuple[int, int], corpus: str, runs: int, warmup: int, policy: str,
                      tolerances_by_dtype: Mapping[str, Mapping[str, float]] | None,
                      progress: Callable[[int, int], None] | None = None,
                      open_batches: Callable[..., PairBatches] | None = None, sandboxed: bool = True,
                      observed: dict[str, Any] | None = None,
                      deadline_s: float = LAUNCH_DEADLINE_S) -> list[dict[str, Any]]:
    """Evidence items [parity, benchmark, execution] for ``kernel`` as an ``op_name`` kernel, or [failure].

    ``launcher_for(cubins)`` starts the launcher for the cubins of the
    launcher's device, whose compute ``capability`` is given
    (registry/kernels/launcher_process.py HarnessLauncher on a GPU);
    ``device`` is where the baseline's reference and the inputs live.
    With ``open_batches`` the pairs go to a benchmark session (the items are
    then [parity, execution]). ``observed["confinement"]`` receives what the
    launcher's jail reported.
    """
    spec = get_operation(op_name)
    cases = spec.corpus(corpus)
    _check_request(cases, runs, warmup, policy, tolerances_by_dtype)
    tick = ticker(len(cases) + 2 * (warmup + runs), progress)
    stage = "load"
    try:
        with ExitStack() as stack:
            baseline = CandidateWorker(spec.reference, device, screen=False, sandboxed=sandboxed)
            stack.callback(baseline.close)
            start_workers([baseline], sandboxed=sandboxed)
            baseline.begin().finish()
            launcher = launcher_for(device_cubins(kernel, tuple(capability)))
            stack.callback(launcher.close)
            if observed is not None:
                observed["confinement"] = launcher.confinement
            run = _Run(kernel, launcher, baseline, spec, policy, tolerances_by_dtype, device, deadline_s)
            stage = "parity"
            parity = _parity(run, cases, tick)
            stage = "benchmark"
            bytes_moved = sum(spec.cost(case).bytes for case in cases)
            notes = (f"{op_name} on the {corpus} corpus: each timed call runs all {len(cases)} cases; "
                     f"baseline {spec.reference}, candidate the bundle's cubins {sorted(launcher.digests)}")
            benchmark: list[dict[str, Any]] = []
            if open_batches is None:
                benchmark.append(_time_pairs(run, cases, runs, warmup, bytes_moved=bytes_moved, tick=tick,
                                             notes=notes))
            else:
                run_batches(lambda size, first: _time_pairs(run, cases, size, warmup if first else 0,
                                                            bytes_moved=bytes_moved, tick=tick, notes=notes),
                            (launcher.timer, launcher.device_name), baseline.arch, open_batches)
            stage = "integrity"
            _integrity(run, cases)
            item = execution_item(run, PROFILE if sandboxed else UNSANDBOXED)
    except SessionRefused as exc:
        raise exc.refusal from None
    except CandidateError as exc:
        return [{"kind": "failure", "stage": stage, "error": f"{exc.type_name}: {exc}"}]
    except Exception as exc:  # noqa: BLE001 - any failure of the candidate becomes evidence of failure
        return [failure_item(stage, exc)]
    return [parity, *benchmark, item]
