"""Evaluating a registered fused-kernel artifact against its operation's reference."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .context import Registry
from .workloads import current_contract, registration


@contextmanager
def triton_runtime() -> Iterator[str]:
    """Yield "gpu" or "cpu"; on a machine without a GPU, Triton's interpreter is on inside the block.

    Kernel modules must first be imported inside the block (Triton decides at
    decoration time) and timed inside it too (the timing harness reads the
    variable to mark interpreter timings). The variable is restored on exit,
    so a caller's process is left as it was found.
    """
    import torch

    if torch.cuda.is_available():
        yield "gpu"
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        yield "cpu"
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def evaluate_artifact(
    registry: Registry,
    artifact: str,
    *,
    corpus: str | None,
    runs: int | None,
    warmup: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Run the artifact's kernel entry on the corpus; evidence items, or one failure item."""
    registered = registration(registry, artifact)
    if registered["kind"] != "fused_kernel" or not registered["entry"]:
        raise ValueError(f"artifact {artifact} has no kernel entry to evaluate (register it with --op and --entry)")
    contract = current_contract(registry, registered["workload"]).contract
    canonical = contract.canonical()
    if runs is None:
        if contract.speed is None:
            raise ValueError(f"no --runs given and workload {registered['workload']} declares no speed.runs_per_arm")
        runs = canonical["speed"]["runs_per_arm"]
    with triton_runtime() as device:
        from registry.kernels.evaluate import evaluate_kernel

        return evaluate_kernel(
            registered["op"], registered["entry"], corpus=corpus or device, runs=runs, warmup=warmup,
            policy=canonical["parity"]["policy"], tolerances_by_dtype=canonical["parity"]["tolerances"] or None,
            progress=progress,
        )
