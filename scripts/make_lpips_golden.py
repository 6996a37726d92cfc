"""Make the golden file that pins registry's LPIPS trunk to the reference implementation.

Run it in a throwaway environment that has the real thing (torch,
torchvision, and lpips 0.1.4 with its torchvision import working), never in
the project's own environment, e.g.::

    python3 -m venv <dir> && <dir>/bin/pip install torch==2.14.1 torchvision==0.29.1 numpy
    <dir>/bin/pip install --no-deps lpips==0.1.4 scipy tqdm
    <dir>/bin/python scripts/make_lpips_golden.py

No ImageNet weights are involved (so nothing is downloaded): the backbone is
a fixed random AlexNet drawn with numpy from SEED (He-uniform weights, so
every one of the five tapped layers carries signal), loaded into a real
``lpips.LPIPS(net='alex', version='0.1', pretrained=True, pnet_rand=True)``.
pretrained=True loads the calibrated heads shipped in the package;
pnet_rand=True skips the ImageNet download. The same numpy draw is repeated
by tests/evidence/test_lpips.py, which checks it against the weight digest stored here,
so the golden file holds only inputs, outputs and digests (a few hundred kB).
torch, torchvision and lpips are imported inside the functions that need
them, so that the tests can load ``random_backbone`` from this file in an
environment without torchvision.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

SEED = 20240615
OUT = Path(__file__).resolve().parents[1] / "registry" / "evidence" / "data" / "lpips_alex_golden.npz"

# torchvision alexnet().features conv layers: index -> (out, in, kernel).
CONVS = {0: (64, 3, 11), 3: (192, 64, 5), 6: (384, 192, 3), 8: (256, 384, 3), 10: (256, 256, 3)}
# lpips.pretrained_networks.alexnet copies features[0:2], [2:5], [5:8], [8:10], [10:12]
# into net.slice1..slice5 under their original indices.
SLICE_OF = {0: 1, 3: 2, 6: 3, 8: 4, 10: 5}


def random_backbone(seed: int) -> dict[str, np.ndarray]:
    """torchvision-style ``features.N.weight/bias`` float32 arrays, He-uniform, from one seed."""
    rng = np.random.default_rng(seed)
    state = {}
    for index, (out_ch, in_ch, kernel) in CONVS.items():
        bound = np.sqrt(6.0 / (in_ch * kernel * kernel))
        weight = rng.uniform(-bound, bound, (out_ch, in_ch, kernel, kernel))
        state[f"features.{index}.weight"] = weight.astype(np.float32)
        state[f"features.{index}.bias"] = rng.uniform(-0.1, 0.1, out_ch).astype(np.float32)
    return state


def weights_digest(state: dict[str, np.ndarray]) -> str:
    """SHA-256 over each array's name, shape and little-endian float32 bytes, in key order."""
    digest = hashlib.sha256()
    for name, array in state.items():
        digest.update(f"{name} {array.shape}\n".encode())
        digest.update(np.ascontiguousarray(array, dtype="<f4").tobytes())
    return digest.hexdigest()


def frame_pairs(rng: np.random.Generator, height: int, width: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """[count, height, width, 3] float32 pairs in [0, 1]: unrelated noise, small noise, identical, shifted."""
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    refs, cands = [], []
    for i in range(count):
        phase = rng.uniform(0, 2 * np.pi, 3)
        smooth = np.stack([0.5 + 0.4 * np.sin(6 * xx + 4 * yy * (c + 1) + phase[c]) for c in range(3)], -1)
        kind = i % 4
        if kind == 0:
            ref, cand = rng.random((height, width, 3)), rng.random((height, width, 3))
        elif kind == 1:
            ref, cand = smooth, np.clip(smooth + 0.05 * rng.standard_normal(smooth.shape), 0, 1)
        elif kind == 2:
            ref = np.clip(smooth + 0.1 * rng.standard_normal(smooth.shape), 0, 1)
            cand = ref.copy()
        else:
            ref, cand = smooth, np.roll(smooth, (2, 3), axis=(0, 1))
        refs.append(ref)
        cands.append(cand)
    return np.stack(refs).astype(np.float32), np.stack(cands).astype(np.float32)


def reference_distances(model: torch.nn.Module, ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """lpips.LPIPS on each pair alone (batch of one), inputs in [0, 1] via normalize=True."""
    import torch

    out = []
    with torch.no_grad():
        for r, c in zip(ref, cand):
            a = torch.from_numpy(np.ascontiguousarray(r.transpose(2, 0, 1)))[None]
            b = torch.from_numpy(np.ascontiguousarray(c.transpose(2, 0, 1)))[None]
            out.append(model(a, b, normalize=True).reshape(()).item())
    return np.array(out, dtype=np.float32)


def main() -> None:
    import lpips
    import torch
    import torchvision

    state = random_backbone(SEED)
    # Load through torchvision first: proves the dict is a torchvision AlexNet `features` state.
    alexnet = torchvision.models.alexnet(weights=None)
    alexnet.features.load_state_dict({k.removeprefix("features."): torch.from_numpy(v) for k, v in state.items()})

    model = lpips.LPIPS(net="alex", version="0.1", pretrained=True, pnet_rand=True, verbose=False)
    sliced = {}
    for name, array in state.items():
        _, index, kind = name.split(".")
        sliced[f"slice{SLICE_OF[int(index)]}.{index}.{kind}"] = torch.from_numpy(array)
    model.net.load_state_dict(sliced, strict=True)
    model.eval()

    heads = Path(lpips.__file__).parent / "weights" / "v0.1" / "alex.pth"
    rng = np.random.default_rng(SEED + 1)
    ref_square, cand_square = frame_pairs(rng, 64, 64, 4)
    ref_wide, cand_wide = frame_pairs(rng, 67, 101, 4)
    lpips_square = reference_distances(model, ref_square, cand_square)
    lpips_wide = reference_distances(model, ref_wide, cand_wide)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT,
        seed=np.int64(SEED),
        weights_sha256=np.str_(weights_digest(state)),
        heads_sha256=np.str_(hashlib.sha256(heads.read_bytes()).hexdigest()),
        made_with=np.str_(f"torch {torch.__version__}, torchvision {torchvision.__version__}, lpips 0.1.4"),
        ref_square=ref_square,
        cand_square=cand_square,
        lpips_square=lpips_square,
        ref_wide=ref_wide,
        cand_wide=cand_wide,
        lpips_wide=lpips_wide,
    )
    print(f"wrote {OUT.name}: square {lpips_square}, wide {lpips_wide}")


if __name__ == "__main__":
    main()
