"""A promoted triton_kernel in a serving process: its cubins launched by the same launcher that timed them.

What shipped is what ran: the runtime does not import the bundle's Python
(it holds the ``@triton.jit`` source for review only), and does not let
Triton compile anything. It loads the promoted bundle's cubins (the bytes
the registry rebuilt from their TTIR at registration, re-hashed by the
loader against the lock's manifest) into :class:`registry.kernels.launcher.Launcher`
in this process, on this process's device, refusing a cubin built for
another arch than the device's. Each call's inputs are checked against the
bundle's launch spec (its planner: ``plan_call``), which names the variant
and the launches; a call no variant matches is refused, never launched with
nothing. The launcher allocates, guards, launches and copies as it did when
the registry measured it: a guard region or an input changed by a kernel is
raised as :class:`KernelCallError`, not returned.

This runs in the runtime's own process, which trusts the bytes: they were
promoted, and the loader checked every one against the signed lock.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from registry.kernels.launch_plan import LaunchPlan
from registry.kernels.launcher import Launcher, PlanRefused, arch_capability, cuda_driver

CALL_DEADLINE_S = 60.0
"""Longest one call's launches may run before the call raises (the kernel may still be running: the process's
context is then unusable, as after any kernel fault)."""


class KernelCallError(RuntimeError):
    """A call the shipped kernel refused (no variant matched its inputs) or that went wrong on the device."""


class ShippedKernel:
    """The callable a runtime gets for a promoted triton_kernel: ``kernel(*inputs) -> output(s)``.

    ``bundle`` is the promoted bundle as read (registry/app/compiled.py
    ``BundleKernel``): its cubins for every arch (only those of this device
    are loaded), its spec's input and output names in the op's order, and
    ``plan`` (``plan_call`` for the device's arch). ``driver`` is
    ``cuda.bindings.driver`` unless a test passes the simulated one.
    """

    def __init__(self, bundle: Any, *, driver: Any = None, device: int = 0,
                 deadline_s: float = CALL_DEADLINE_S) -> None:
        self.launcher = Launcher(driver if driver is not None else cuda_driver(), device)
        cubins: Mapping[tuple[str, str], bytes] = bundle.cubins
        mine = {key: image for key, image in cubins.items() if arch_capability(key[1]) == self.launcher.capability}
        if not mine:
            archs = ", ".join(sorted({arch for _, arch in cubins}))
            self.launcher.close()
            raise PlanRefused(f"the bundle's cubins are built for {archs}, and this device is {self.launcher.arch}")
        self.digests = self.launcher.load(mine)
        self.planner: Callable[[Sequence[Any]], LaunchPlan] = bundle.for_device(self.launcher.capability).plan
        self.inputs, self.outputs, self.deadline_s = tuple(bundle.inputs), tuple(bundle.outputs), deadline_s

    def __call__(self, *tensors: Any) -> Any:
        import torch

        from registry.kernels.tensor_bytes import input_bytes, output_tensor

        if len(tensors) != len(self.inputs):
            raise KernelCallError(f"{len(tensors)} inputs given; the kernel takes {', '.join(self.inputs)}")
        try:
            plan = self.planner(tensors)
        except (PlanRefused, ValueError) as exc:
            raise KernelCallError(f"refused: {exc}") from None
        outcome = self.launcher.call([(plan, input_bytes(self.inputs, tensors))], deadline_s=self.deadline_s)
        if outcome.violations():
            raise KernelCallError(f"the kernel wrote outside its outputs: {outcome.violations()[0]}")
        device = tensors[0].device if isinstance(tensors[0], torch.Tensor) else torch.device("cpu")
        results = tuple(output_tensor(plan, name, outcome.cases[0].outputs[name]).to(device) for name in self.outputs)
        return results[0] if len(results) == 1 else results

    def close(self) -> None:
        self.launcher.close()
