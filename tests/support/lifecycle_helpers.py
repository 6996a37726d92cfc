"""Evidence items as a user's harness writes them, imported one document at a time, and the answers read back.

The lifecycle's tests and the identity-history tests drive a registry through the CLI with these.
"""
from __future__ import annotations

import json


def advisory_workload(min_ssim: float) -> str:
    """Workload `ltx`: an advisory fidelity tier at `min_ssim` on frame set wan-8, and a paired point speed rule."""
    return ("workload: ltx\n"
            f"fidelity: {{tier: advisory, min_ssim: {min_ssim}, frame_set: wan-8}}\n"
            "speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}\n")

def execution(backend="SAGE_ATTN"):
    return {"kind": "execution", "candidate_calls": 40, "fallbacks": 0,
            "requested_backend": backend, "effective_backend": backend}


def benchmark(ratio=1.4):
    return {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
            "baseline_s": [2.0, 2.02], "candidate_s": [2.0 / ratio, 2.02 / ratio], "schedule": ["BC", "CB"]}


def perceptual(worst_ssim=0.991, status="ok"):
    return {"kind": "perceptual", "frame_set": "wan-8", "seed": 1024, "ssim": [0.999, worst_ssim], "lpips": None,
            "vbench": None, "stage_status": status}


def failure(stage):
    return {"kind": "failure", "stage": stage, "error": f"the {stage} stage crashed"}


def evidence_loader(invoke, tmp_path, counter):
    """`load(artifact, items, **top)`: import one evidence document written to a fresh file."""
    def load(artifact, items, **top):
        path = tmp_path / f"evidence-{next(counter)}.json"
        path.write_text(json.dumps({"format": "registry.evidence/1", "artifact": artifact, "evidence": items, **top}))
        return invoke("evidence", "import", str(path))
    return load


def loading(registry_cli, tmp_path):
    """(the CLI, a counter for fresh file names, `load` importing one evidence document a call through it)."""
    counter = iter(range(10_000))
    return registry_cli, counter, evidence_loader(registry_cli, tmp_path, counter)


def show(cli, artifact):
    result = cli("show", artifact, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def promote(cli, artifact):
    result = cli("promote", artifact, "--json")
    assert result.exit_code in (0, 3), result.output
    return json.loads(result.output)
