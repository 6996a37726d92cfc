"""The harness side of the trusted launcher: its worker in a jail of its own, driven call by call, replaced after a
deadline or a fault.

:class:`JailedLauncher` is one launcher worker (registry/kernels/launcher_worker.py)
started by the sandbox's zygote like an evaluation's workers, serving the
launcher instead: it gets the registry's cubins once (its hello) and then
plans and input bytes; it answers output bytes, its own CUDA event time and
the launches it made. :class:`HarnessLauncher` holds one at a time: a call
past its deadline (the worker says so, or does not answer within the
deadline and a grace) gets the worker killed, and the next call starts a
fresh one; the caller gets :class:`~registry.kernels.launcher.LaunchDeadline`
(or the fault) and records a failure, never a number.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from registry.kernels.isolation import START_TIMEOUT_S, CandidateError, CandidateWorker, WorkerDied, start_workers
from registry.kernels.launch_plan import LaunchPlan, plan_to_json
from registry.kernels.launcher import (FLUSH_BYTES, CallOutcome, CaseOutcome, DriverError, LaunchDeadline,
                                       PlanRefused, cubin_digests)

SIMULATED_DEVICE = "simulated CUDA driver (emulator)"

LAUNCH_GRACE_S = 60.0
"""How long past a call's deadline the harness waits for the launcher's answer (copies, guard checks) before it
kills the worker."""


class JailedLauncher(CandidateWorker):
    """One launcher worker process; ``driver`` is ``"cuda"`` or ``{"simulated": CONFIG}`` (tests only)."""

    def __init__(self, device: torch.device, cubins: Mapping[tuple[str, str], bytes], *, sandboxed: bool = True,
                 driver: Any = "cuda", flush_bytes: int = FLUSH_BYTES) -> None:
        super().__init__("registry.kernels.launcher_worker", device, screen=False, sandboxed=sandboxed)
        self.cubins, self.driver, self.flush_bytes = dict(cubins), driver, flush_bytes
        self.digests: dict[str, str] = {}

    def start(self) -> None:
        start_workers([self], sandboxed=self.sandboxed, serve="launcher")

    def begin(self) -> "JailedLauncher":
        if not self.started:
            self.start()
        names = sorted(self.cubins)
        self._send({"op": "hello", "driver": self.driver, "device": self.device.index or 0,
                    "flush_bytes": self.flush_bytes, "cubins": [list(name) for name in names]},
                   [bytes(self.cubins[name]) for name in names], plain=True)
        return self

    def finish(self) -> "JailedLauncher":
        """The hello's answer: the device's arch, and the digests of what it loaded, which must be what was sent."""
        try:
            header = self._receive(START_TIMEOUT_S, plain=True)[0]
        except CandidateError as exc:
            raise _raised(exc) from None
        expected = cubin_digests(self.cubins)
        if header.get("digests") != expected:
            raise self._died(f"loaded cubins other than the registry's ({header.get('digests')!r:.200})")
        self.digests = expected
        self.arch = str(header.get("arch"))
        return self.locate()

    def launch(self, cases: Sequence[tuple[LaunchPlan, Mapping[str, bytes]]], *, deadline_s: float) -> CallOutcome:
        """One timed call of ``cases`` (plan, input bytes by buffer name) in the worker."""
        header: dict[str, Any] = {"op": "call", "deadline_s": deadline_s, "cases": []}
        payloads: list[bytes] = []
        expected = 0
        for plan, inputs in cases:
            names = sorted(inputs)
            header["cases"].append({"plan": plan_to_json(plan), "inputs": names})
            payloads += [bytes(inputs[name]) for name in names]
            expected += sum(b.nbytes for b in plan.buffers if b.role != "input")
        self._send(header, payloads, plain=True)
        try:
            answer, tensors = self._receive(deadline_s + LAUNCH_GRACE_S, byte_budget=expected, plain=True)
        except CandidateError as exc:
            raise _raised(exc) from None
        except WorkerDied as exc:
            raise LaunchDeadline(f"the launcher did not answer within {deadline_s:g} s and a grace ({exc})") from None
        return self._outcome(answer, tensors, cases)

    def _outcome(self, answer: dict[str, Any], tensors: list[bytes],
                 cases: Sequence[tuple[LaunchPlan, Mapping[str, bytes]]]) -> CallOutcome:
        described, device_s = answer.get("cases"), answer.get("device_s")
        if not (isinstance(described, list) and len(described) == len(cases) and isinstance(device_s, float)):
            raise self._died("sent an answer that does not match the call")
        outcomes, at = [], 0
        for (plan, _), case in zip(cases, described):
            names = case.get("outputs") if isinstance(case, dict) else None
            declared = [b.name for b in plan.buffers if b.role != "input"]
            if names != declared or at + len(names) > len(tensors):
                raise self._died(f"sent outputs {names!r:.200} for buffers {declared}")
            outputs = dict(zip(names, tensors[at:at + len(names)]))
            at += len(names)
            outcomes.append(CaseOutcome(plan.variant, outputs, tuple(map(str, case.get("launches", ()))),
                                        tuple(map(str, case.get("guard_violations", ()))),
                                        tuple(map(str, case.get("inputs_changed", ())))))
        return CallOutcome(device_s, tuple(outcomes))


def _raised(exc: CandidateError) -> Exception:
    """The launcher's own error, as the type it raised there."""
    kinds = {"LaunchDeadline": LaunchDeadline, "PlanRefused": PlanRefused}
    if exc.type_name == "DriverError":
        return DriverError("the launch", str(exc).rpartition("failed: ")[2] or str(exc))
    return kinds.get(exc.type_name, RuntimeError)(f"{exc.type_name}: {exc}" if exc.type_name not in kinds else str(exc))


class HarnessLauncher:
    """The evaluation's launcher: one :class:`JailedLauncher` at a time, killed after a deadline or a fault and
    replaced by a fresh one (with the same cubins) at the next call. Use as a context manager."""

    def __init__(self, device: torch.device, cubins: Mapping[tuple[str, str], bytes], *, sandboxed: bool = True,
                 driver: Any = "cuda", flush_bytes: int = FLUSH_BYTES) -> None:
        self.settings = dict(device=device, cubins=cubins, sandboxed=sandboxed, driver=driver,
                             flush_bytes=flush_bytes)
        self.worker: JailedLauncher | None = None
        self.started = 0  # workers started so far: 1 + the replacements
        simulated = driver != "cuda"
        # how benchmarks name this launcher's clock: a simulated driver's is never speed evidence (the gate holds
        # a timer or device naming an emulator)
        self.timer = "emulator" if simulated else "cuda_event"
        self.device_name = SIMULATED_DEVICE if simulated else torch.cuda.get_device_name(device)

    def current(self) -> JailedLauncher:
        if self.worker is None:
            worker = JailedLauncher(**self.settings)
            try:
                worker.begin().finish()
            except BaseException:
                worker.close()
                raise
            self.worker, self.started = worker, self.started + 1
        return self.worker

    @property
    def digests(self) -> dict[str, str]:
        return self.current().digests

    @property
    def confinement(self) -> dict[str, str]:
        return self.current().confinement

    def call(self, cases: Sequence[tuple[LaunchPlan, Mapping[str, bytes]]], *, deadline_s: float) -> CallOutcome:
        worker = self.current()
        try:
            return worker.launch(cases, deadline_s=deadline_s)
        except (LaunchDeadline, DriverError, WorkerDied):
            self.replace()
            raise

    def replace(self) -> None:
        """Kill the current worker (a kernel may still spin in its context); the next call starts another."""
        if self.worker is not None:
            self.worker._kill()
            self.worker.close()
            self.worker = None

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def __enter__(self) -> "HarnessLauncher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
