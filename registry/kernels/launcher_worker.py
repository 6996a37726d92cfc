"""The trusted launcher's own process: loads the registry's cubins and runs launch plans, inside the jail.

Forked by the sandbox's zygote (:mod:`registry.kernels.zygote`, serving
``"launcher"``) or started as ``python -m registry.kernels.launcher_worker``
without the sandbox. It imports registry code and ``cuda.bindings`` only:
no torch, no Triton, nothing of a candidate's but the cubin bytes the
harness sends, which are the registry's own rebuild. It has a CUDA context
of its own (its own process), in which nothing but those cubins runs; the
expected outputs, the reference and the evaluation's secrets live in other
processes with other contexts.

Protocol (frames of :mod:`registry.kernels.wire`, plain bytes each way, on
stdin and the original stdout):

- ``hello {driver, device, flush_bytes, cubins: [[kernel, arch], ...]}`` + the
  cubin images -> ``{ok, arch, digests}``; ``driver`` is ``"cuda"`` (NVIDIA's
  bindings) or ``{"simulated": CONFIG}`` (registry/kernels/simulated_driver.py,
  for tests on machines without a GPU)
- ``call {cases: [{plan, inputs: [name, ...]}], deadline_s}`` + the input bytes
  in that order -> ``{device_s, cases: [{variant, launches, outputs: [name, ...],
  guard_violations, inputs_changed}]}`` + the output bytes in that order, or
  ``{error: {type, message}}``. After a ``LaunchDeadline`` (a kernel may still
  be running) or a ``DriverError`` (the context is lost) this process answers
  and exits: the harness starts another for the next call
- ``exit`` -> the process ends
"""
from __future__ import annotations

import os
from typing import Any, BinaryIO

from registry.kernels import wire
from registry.kernels.launch_plan import plan_from_json
from registry.kernels.launcher import DriverError, LaunchDeadline, Launcher, PlanRefused, cuda_driver

LOST = 3
"""Exit status after a launch past its deadline or a lost context."""


def _driver(choice: Any) -> Any:
    if choice == "cuda":
        return cuda_driver()
    if isinstance(choice, dict) and set(choice) == {"simulated"}:
        from registry.kernels.simulated_driver import SimulatedDriver

        return SimulatedDriver.from_config(choice["simulated"])
    raise ValueError(f"unknown driver {str(choice)[:100]!r}")


def _error(exc: BaseException) -> dict[str, Any]:
    return {"error": {"type": type(exc).__name__, "message": str(exc)[:wire.ERROR_TEXT_LIMIT]}}


class LauncherWorker:
    def __init__(self, answers: BinaryIO) -> None:
        self.answers = answers
        self.launcher: Launcher | None = None

    def hello(self, header: dict[str, Any], payloads: list[bytes]) -> dict[str, Any]:
        names = header["cubins"]
        if not (isinstance(names, list) and len(names) == len(payloads)
                and all(isinstance(n, list) and len(n) == 2 and all(isinstance(p, str) for p in n) for n in names)):
            raise ValueError("the hello's cubins do not match its payloads")
        self.launcher = Launcher(_driver(header["driver"]), header["device"], flush_bytes=header["flush_bytes"])
        digests = self.launcher.load({(kernel, arch): image for (kernel, arch), image in zip(names, payloads)})
        return {"ok": True, "arch": self.launcher.arch, "digests": digests}

    def call(self, header: dict[str, Any], payloads: list[bytes]) -> tuple[dict[str, Any], list[bytes]]:
        if self.launcher is None:
            raise ValueError("a call before the hello")
        cases, at = [], 0
        for case in header["cases"]:
            names = case["inputs"]
            cases.append((plan_from_json(case["plan"]), dict(zip(names, payloads[at:at + len(names)]))))
            at += len(names)
        if at != len(payloads):
            raise ValueError("the call's input bytes do not match its cases")
        outcome = self.launcher.call(cases, deadline_s=float(header["deadline_s"]))
        described, outputs = [], []
        for case in outcome.cases:
            described.append({"variant": case.variant, "launches": list(case.launches),
                              "outputs": list(case.outputs), "guard_violations": list(case.guard_violations),
                              "inputs_changed": list(case.inputs_changed)})
            outputs += list(case.outputs.values())
        return {"device_s": outcome.device_s, "cases": described}, outputs

    def serve(self, requests: BinaryIO) -> None:
        while True:
            header, payloads = wire.read_byte_frame(requests, byte_budget=1 << 62)
            op = header.get("op")
            if op == "exit":
                return
            try:
                if op == "hello":
                    wire.write_byte_frame(self.answers, self.hello(header, payloads))
                elif op == "call":
                    wire.write_byte_frame(self.answers, *self.call(header, payloads))
                else:
                    raise ValueError(f"unknown request {str(op)[:50]!r}")
            except PlanRefused as exc:  # nothing was launched: the context is as it was
                wire.write_byte_frame(self.answers, _error(exc))
            except BaseException as exc:  # noqa: BLE001 - a deadline, a lost context or a defect: this process ends
                wire.write_byte_frame(self.answers, _error(exc))
                if isinstance(exc, (LaunchDeadline, DriverError)):
                    os._exit(LOST)
                raise


def preload() -> None:
    """What the zygote imports before it forks (no driver call: a CUDA context never crosses a fork)."""
    from cuda.bindings import driver  # noqa: F401


def serve_stdio() -> None:
    """Be the launcher on stdin and stdout until told to exit; never returns."""
    answers = os.fdopen(os.dup(1), "wb")
    requests = os.fdopen(os.dup(0), "rb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    worker = LauncherWorker(answers)
    try:
        worker.serve(requests)
    finally:
        if worker.launcher is not None:
            worker.launcher.close()
    answers.flush()
    os._exit(0)


if __name__ == "__main__":
    serve_stdio()
