"""Building bundles and promoting them through the CLI, for the shipping tests."""
from __future__ import annotations

import json
from pathlib import Path

from registry.bundles import write_manifest

WORKLOAD = "wan"
MANIFEST = """
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""
FINGERPRINT = "sha256:modln-b-s-d"
SOURCE = "def replacement(x):\n    return ('replaced', x)\n"
INPUT = {"name": "x", "shape": ["*", "*", 64], "stride": ["*", 64, 1], "dtype": "float32", "device": "cuda"}


def window(**overrides) -> dict:
    base = {
        "model": {"id": "*", "revision": "*"},
        "gpu_architectures": ["sm90", "sm100"],
        "torch": {"min": "2.4", "max_exclusive": "3.0"},
        "cuda": {"min": "12.4"},
        "triton": {},
        "execution_modes": ["inference"],
        "distributed_modes": ["single"],
    }
    base.update(overrides)
    return base


def make_bundle(root: Path, artifact: str, *, source: str = SOURCE, fingerprint: str = FINGERPRINT,
                inputs: list | None = None, extra_files: dict | None = None, entry_symbol: str = "replacement",
                **window_overrides) -> Path:
    """A bundle directory `root/artifact` with an entry file `op.py` (symbol `replacement`) and a written manifest."""
    directory = root / artifact
    directory.mkdir(parents=True)
    (directory / "op.py").write_text(source)
    for name, text in (extra_files or {}).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    write_manifest(directory, entry_point={"file": "op.py", "symbol": entry_symbol},
                   replaces={"fingerprint": fingerprint, "inputs": inputs or [INPUT], "outputs": [INPUT]},
                   compatibility=window(**window_overrides))
    return directory


def evidence(artifact: str, ratio: float, worst_ssim: float = 0.99) -> dict:
    return {"format": "registry.evidence/1", "artifact": artifact, "evidence": [
        {"kind": "execution", "candidate_calls": 40, "fallbacks": 0},
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
         "baseline_s": [2.0, 2.02], "candidate_s": [2.0 / ratio, 2.02 / ratio], "schedule": ["BC", "CB"]},
        {"kind": "perceptual", "frame_set": "wan-8", "seed": 1024, "ssim": [0.999, worst_ssim], "lpips": None,
         "vbench": None, "stage_status": "ok"}]}


def declare(cli) -> None:
    path = cli.tmp / "wan.yaml"
    path.write_text(MANIFEST)
    assert cli("workload", "declare", str(path)).exit_code == 0


def register(cli, artifact: str, directory: Path, *, new_identity: bool = False):
    return cli("artifact", "register", artifact, "--workload", WORKLOAD, "--kind", "step_cache",
               "--bundle", str(directory), *(["--new-identity"] if new_identity else []))


def measure_and_promote(cli, artifact: str, ratio: float, worst_ssim: float = 0.99) -> str:
    """Import evidence and promote; returns the decision."""
    path = cli.tmp / f"{artifact}-{ratio}-{worst_ssim}.json"
    path.write_text(json.dumps(evidence(artifact, ratio, worst_ssim)))
    imported = cli("evidence", "import", str(path))
    assert imported.exit_code == 0, imported.output
    return json.loads(cli("promote", artifact, "--json").output)["decision"]


def ship(cli, root: Path, artifact: str, ratio: float, worst_ssim: float = 0.99, **bundle) -> Path:
    directory = make_bundle(root, artifact, **bundle)
    registered = register(cli, artifact, directory)
    assert registered.exit_code == 0, registered.output
    measure_and_promote(cli, artifact, ratio, worst_ssim)
    return directory


# -- a promoted artifact's monitor

PROFILE = ("--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
MONITORED = MANIFEST + "monitor: {alpha: 0.001, reference: gate, margin: 0.0}\n"
SOFTWARE = ("--software", "torch=2.13.0", "--software", "triton=3.5.0")


def declare_monitored(cli) -> None:
    """The workload `wan` declared with a monitor (alpha 0.001 against the gate)."""
    path = cli.tmp / "wan.yaml"
    path.write_text(MONITORED)
    assert cli("workload", "declare", str(path)).exit_code == 0


def remeasure(cli, artifact, ratio, batch, pairs=2, waited=None):
    baseline = ",".join(["2.0"] * pairs)
    candidate = ",".join([repr(2.0 / ratio)] * pairs)
    waits = () if waited is None else ("--baseline-waited", waited)
    result = cli("monitor", "record", artifact, "--batch", batch, "--baseline", baseline, "--candidate", candidate,
                 "--device", "NVIDIA H200", *SOFTWARE, *waits, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def sign_lock_file(cli) -> Path:
    """Export the workload's lock signed by a key made for the test; `cli.trusted` names its public key."""
    key, lock = cli.tmp / "signing.key", cli.tmp / "registry.lock.json"
    assert cli("keys", "init", str(key)).exit_code == 0
    assert cli("lock", "--workload", "wan", "--key", str(key), "--out", str(lock)).exit_code == 0
    cli.trusted = [str(key) + ".pub"]
    return lock


FASTER = "def replacement(x):\n    return ('faster', x)\n"


def ship_fast_and_faster(cli, *, faster_source: str = FASTER) -> Path:
    """The workload declared, and two bundles shipped under cli.tmp/bundles: `fast` (1.5x) and `faster` (1.8x, its
    own source); the bundles' folder."""
    declare(cli)
    root = cli.tmp / "bundles"
    ship(cli, root, "fast", 1.5)
    ship(cli, root, "faster", 1.8, source=faster_source)
    return root
