"""`registry demo --server URL --token T`: the demo's kernel candidate carried through a server, end to end.

What a team does with one server and one GPU worker, in one command: the
kernel workload's contract is declared (admin), the fused modulated
LayerNorm registered (decide), evaluated on this host with its pairs and
evidence recorded through the server (ingest), and judged (decide). The
token must hold all four scopes; every event is by its `principal/key id`.
The rest of the demo campaign (the video workload's candidates, bundles,
locks) runs on its own SQLite file only (`registry demo`).
"""
from __future__ import annotations

from typing import Any, Callable

import yaml

from .client import RegistryClient, evaluate_through


def demo_through(client: RegistryClient, *, runs: int, warmup: int,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    from registry.app.campaign import KERNEL_ARTIFACT, KERNEL_ENTRY, KERNEL_WORKLOAD, kernel_contract

    declared = client.request("POST", "/api/workloads", {"manifest": yaml.safe_dump(kernel_contract(runs).canonical())})
    registered = client.request("POST", "/api/artifacts", {
        "artifact": KERNEL_ARTIFACT, "workload": KERNEL_WORKLOAD, "kind": "fused_kernel",
        "op": "modulated_layernorm", "entry": KERNEL_ENTRY})
    record = client.request("GET", f"/api/artifacts/{KERNEL_ARTIFACT}/bench")
    evaluation = None
    if not record["closed"]:
        evaluation = evaluate_through(client, KERNEL_ARTIFACT, corpus=None, runs=None, warmup=warmup, run=None,
                                      progress=progress)
    verdict = client.request("POST", f"/api/artifacts/{KERNEL_ARTIFACT}/promote")
    return {"workload": declared, "artifact": registered, "session": None if evaluation is None else
            evaluation["session"], "verdict": verdict}
