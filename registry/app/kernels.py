"""Evaluating a registered fused-kernel artifact against its operation's reference."""
from __future__ import annotations

import os
from typing import Any, Callable

from .context import Registry
from .workloads import current_contract, registration


def prepare_triton() -> str:
    """Use Triton's interpreter when there is no GPU; must run before kernel modules import."""
    import torch

    if torch.cuda.is_available():
        return "gpu"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


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
    device = prepare_triton()
    from registry.kernels.evaluate import evaluate_kernel

    return evaluate_kernel(
        registered["op"], registered["entry"], corpus=corpus or device, runs=runs, warmup=warmup,
        policy=canonical["parity"]["policy"], tolerances_by_dtype=canonical["parity"]["tolerances"] or None,
        progress=progress,
    )
