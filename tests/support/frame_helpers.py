"""A small perceptual workload and the frames it is measured on: a disc moving across a gradient."""
from __future__ import annotations

import numpy as np

MANIFEST = """
workload: clip
fidelity: {tier: perceptual, min_ssim: 0.98, max_lpips: 0.05, frame_set: moving-disc, seed: 7, frames: 4}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""


def moving_disc(frames: int = 4, size: int = 48) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size]
    out = np.zeros((frames, size, size, 3), dtype=np.uint8)
    for index in range(frames):
        disc = (yy - 24) ** 2 + (xx - 10 - 8 * index) ** 2 < 64
        out[index, ..., 0] = np.where(disc, 230, 30)
        out[index, ..., 1] = (xx * 4).astype(np.uint8)
        out[index, ..., 2] = 90
    return out


def clip_registry(registry_cli, tmp_path, monkeypatch):
    """`registry_cli` with workload `clip` declared, artifact `cache-v1` registered and the frames written to
    tmp_path/reference.npz (not registered); LPIPS kept from any backbone a developer's environment names."""
    monkeypatch.delenv("REGISTRY_LPIPS_BACKBONE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "no-torch-home"))
    (tmp_path / "clip.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(tmp_path / "clip.yaml")).exit_code == 0
    assert registry_cli("artifact", "register", "cache-v1", "--workload", "clip", "--kind", "step_cache").exit_code == 0
    np.savez(tmp_path / "reference.npz", frames=moving_disc())
    return registry_cli
