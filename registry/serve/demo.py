"""`registry demo --server URL --token T`: the demo's campaign, all five candidates, carried through a server.

The campaign is app/campaign.py's, the same as the embedded demo's; only its
target differs: `ServerCampaign` sends each write to the server and reads
each verdict from it, so every event is by the token's `principal/key id`.
The workloads are declared (admin), each candidate's bundle registered by
its digest (decide), timed here in a session the server holds and its
evidence document posted (ingest), and judged (decide); the kernel is
evaluated as `registry evaluate --server` does (as its Python entry: the API
registers by digest, and a triton_kernel's files must be checked and its
cubins rebuilt where they are). The token must hold all four
scopes. What the API does not carry (docs/serve.md): the frame set's
registration (no route; the evidence names the frame set, which is what the
gate checks), the bundle manifests (a registration names its payload by
digest only, so nothing registered this way ships through `resolve` or a
lock), and the embedded demo's report, lock and runtime load.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from registry.contracts import Contract

from .client import RegistryClient, RemoteSession, evaluate_through


class ServerCampaign:
    """The campaign's target (app/campaign.py `Campaign`'s methods) over a server's API."""

    def __init__(self, client: RegistryClient):
        self.client = client

    def declare(self, contract: Contract) -> int:
        declared = self.client.request("POST", "/api/workloads", {"manifest": yaml.safe_dump(contract.canonical())})
        return declared["contract_version"]

    def frames(self, name: str, frames: np.ndarray, seed: int, source: str) -> dict[str, Any]:
        """The frame set as its registration would record it; the server has no route to record it."""
        from registry.app.frames import describe_frames

        return describe_frames(name, frames, seed, source).model_dump()

    def register(self, artifact: str, bundle: Path, *, workload: str, kind: str, backend: str | None = None,
                 op: str | None = None, entry: str | None = None) -> None:
        from registry.bundles import verify_directory

        self.client.request("POST", "/api/artifacts", {
            "artifact": artifact, "workload": workload, "kind": kind, "backend": backend, "op": op, "entry": entry,
            "payload_sha256": verify_directory(bundle).digest})

    def subject(self, artifact: str) -> None:
        """Nothing: the server binds a posted document to the registration it holds when the document lands."""
        return None

    def closed_summary(self, artifact: str) -> dict[str, Any] | None:
        from registry.app.bench import closed_record_summary

        record = self.client.request("GET", f"/api/artifacts/{artifact}/bench", retry=True)
        return closed_record_summary(record) if record["closed"] else None

    def open_batches(self, artifact: str, *, device: str, timer: str, arch: str) -> RemoteSession:
        return RemoteSession(self.client, artifact, device=device, timer=timer, limit=None, arch=arch)

    def record(self, _subject: None, document: dict[str, Any], _parsed: Any) -> None:
        self.client.record_document(document)

    def register_kernel(self, out_dir: Path) -> tuple[str, Path]:
        """The kernel artifact as its Python entry, a fused_kernel registered by digest: the API registers no
        bundle, and a triton_kernel's files must be checked (and its cubins rebuilt) where they are."""
        from registry.app.campaign import KERNEL_ARTIFACT, KERNEL_ENTRY, KERNEL_WORKLOAD
        from registry.app.demo_bundles import write_kernel_bundle

        bundle = write_kernel_bundle(out_dir, KERNEL_ARTIFACT)
        self.register(KERNEL_ARTIFACT, bundle, workload=KERNEL_WORKLOAD, kind="fused_kernel",
                      op="modulated_layernorm", entry=KERNEL_ENTRY)
        return "fused_kernel", bundle

    def evaluate_kernel(self, artifact: str, warmup: int, progress: Callable[[int, int], None],
                        bundle: Path) -> dict[str, Any]:
        return evaluate_through(self.client, artifact, corpus=None, runs=None, warmup=warmup, run=None,
                                progress=progress)["session"]

    def promote(self, artifact: str) -> dict[str, Any]:
        return self.client.request("POST", f"/api/artifacts/{artifact}/promote")


def demo_through(client: RegistryClient, *, runs: int, warmup: int, out_dir: str | Path,
                 lpips_backbone: str | None, progress_factory: Callable[[str], Any],
                 log: Callable[[str], None]) -> list:
    """The demo campaign through the server; one app.campaign.Row per candidate (bundles and strips in `out_dir`)."""
    from registry.app.campaign import run_campaign
    from registry.app.demo import check_demo_runs

    check_demo_runs(runs)
    return run_campaign(ServerCampaign(client), Path(out_dir), runs=runs, warmup=warmup,
                        lpips_backbone=lpips_backbone, progress_factory=progress_factory, log=log)
