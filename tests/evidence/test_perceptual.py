"""measure_perceptual: the perceptual evidence item, from real frames, with real backends."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data
from skimage.util import img_as_float

from registry.evidence.frames import FrameError
from registry.evidence.lpips_backend import Absent, LpipsBackend, get_lpips_backend
from registry.evidence.perceptual import measure_perceptual
from registry.evidence.ssim import ssim_per_frame
from paths import ROOT

ITEM_KEYS = {"kind", "frame_set", "seed", "frames", "ssim", "lpips", "vbench", "stage_status", "backends", "absent"}
DESTROYED = 3


def jpeg(frame: np.ndarray, quality: int) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(np.round(frame * 255).astype(np.uint8)).save(buffer, format="JPEG", quality=quality)
    return img_as_float(np.asarray(Image.open(buffer)))


@pytest.fixture(scope="module")
def clip() -> tuple[np.ndarray, np.ndarray]:
    """Eight 96x128 frames panning across a photograph, and JPEG copies with one frame destroyed."""
    image = img_as_float(data.chelsea())
    reference = np.stack([image[80:176, 60 + 10 * k : 188 + 10 * k] for k in range(8)])
    candidate = np.stack([jpeg(frame, quality=70) for frame in reference])
    candidate[DESTROYED] = np.random.default_rng(5).random(candidate[DESTROYED].shape)
    return reference, candidate


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> LpipsBackend:
    """A real LPIPS-Alex backend over the golden file's random backbone (no ImageNet weights here)."""
    spec = importlib.util.spec_from_file_location("make_lpips_golden", ROOT / "scripts" / "make_lpips_golden.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    path = tmp_path_factory.mktemp("backbone") / "random-alexnet.pth"
    torch.save({k: torch.from_numpy(v) for k, v in script.random_backbone(script.SEED).items()}, path)
    result = get_lpips_backend(path, expected_sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    assert isinstance(result, LpipsBackend), result
    return result


def test_full_item_from_real_frames(clip, backend):
    reference, candidate = clip
    calls = []
    item = measure_perceptual(
        reference, candidate, frame_set="chelsea-pan-8", seed=1024, vbench=0.81,
        lpips=backend, progress=lambda done, total: calls.append((done, total)),
    )
    assert set(item) == ITEM_KEYS - {"absent"}
    assert item["kind"] == "perceptual" and item["stage_status"] == "ok"
    assert (item["frame_set"], item["seed"], item["frames"], item["vbench"]) == ("chelsea-pan-8", 1024, 8, 0.81)
    assert item["ssim"] == ssim_per_frame(reference, candidate)
    assert item["lpips"] == backend.distance_per_frame(reference, candidate)
    assert item["backends"] == {"ssim": "registry-ssim 0.1.0", "lpips": f"lpips-alex {backend.version}"}
    assert calls == [(k, 8) for k in range(1, 9)]
    assert json.loads(json.dumps(item)) == item


def test_worst_frame_is_the_destroyed_one(clip, backend):
    item = measure_perceptual(*clip, frame_set="chelsea-pan-8", seed=1, lpips=backend)
    ssim_values, lpips_values = item["ssim"], item["lpips"]
    assert int(np.argmin(ssim_values)) == DESTROYED and ssim_values[DESTROYED] < 0.5
    assert min(v for i, v in enumerate(ssim_values) if i != DESTROYED) > 0.85
    assert int(np.argmax(lpips_values)) == DESTROYED
    assert all(math.isfinite(v) and v >= 0.0 for v in lpips_values)


def test_identical_clip_scores_perfectly(clip, backend):
    reference = clip[0]
    item = measure_perceptual(reference, reference.copy(), frame_set="same", seed=0, lpips=backend)
    assert item["ssim"] == [1.0] * 8 and item["lpips"] == [0.0] * 8


def test_missing_lpips_and_vbench_are_absent_with_reasons(clip):
    item = measure_perceptual(*clip, frame_set="chelsea-pan-8", seed=1)
    assert item["lpips"] is None and item["vbench"] is None
    assert item["absent"] == {
        "lpips": "no LPIPS backend was supplied to the measurement",
        "vbench": "no VBench score was passed in (VBench is measured outside the registry)",
    }
    assert item["backends"] == {"ssim": "registry-ssim 0.1.0"}
    assert len(item["ssim"]) == 8


def test_absent_backend_carries_its_reason(clip, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.delenv("REGISTRY_LPIPS_BACKBONE", raising=False)
    absent = get_lpips_backend()
    assert isinstance(absent, Absent)
    item = measure_perceptual(*clip, frame_set="chelsea-pan-8", seed=1, vbench=0.5, lpips=absent)
    assert item["lpips"] is None and item["absent"] == {"lpips": absent.reason}


def test_real_scorer_failure_makes_lpips_absent_and_ssim_survives(backend):
    """24x24 frames are valid for SSIM but too small for AlexNet's pooling: torch raises RuntimeError."""
    frames = img_as_float(data.astronaut())[200:224, 200:224][np.newaxis].repeat(3, axis=0)
    item = measure_perceptual(frames, frames[::-1].copy(), frame_set="tiny", seed=2, lpips=backend)
    assert item["lpips"] is None
    assert item["absent"]["lpips"].startswith("LPIPS scorer failed at frame 0: RuntimeError: ")
    assert len(item["ssim"]) == 3 and item["stage_status"] == "ok"
    assert "lpips" not in item["backends"]


class OutOfMemoryAtFrame:
    """An LPIPS scorer (the protocol is open to any backend) that runs out of memory mid-clip."""

    name = "oom-scorer"
    version = "1"

    def __init__(self, fail_at: int) -> None:
        self.fail_at, self.calls = fail_at, 0

    def distance_per_frame(self, ref_frames, cand_frames):
        self.calls += 1
        if self.calls > self.fail_at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return [0.01] * len(ref_frames)


def test_scorer_failing_mid_measurement_makes_lpips_absent(clip):
    scorer = OutOfMemoryAtFrame(fail_at=2)
    calls = []
    item = measure_perceptual(
        *clip, frame_set="chelsea-pan-8", seed=1, lpips=scorer, progress=lambda d, t: calls.append(d)
    )
    assert item["lpips"] is None
    assert item["absent"]["lpips"] == (
        "LPIPS scorer failed at frame 2: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert scorer.calls == 3 and calls == list(range(1, 9)) and len(item["ssim"]) == 8


class Returns:
    name, version = "fixed", "1"

    def __init__(self, values) -> None:
        self.values = values

    def distance_per_frame(self, ref_frames, cand_frames):
        return self.values


@pytest.mark.parametrize("values", [[float("nan")], [-0.1], [0.1, 0.2], [], ["0.1"]])
def test_nonsensical_scorer_output_makes_lpips_absent(clip, values):
    item = measure_perceptual(*clip, frame_set="chelsea-pan-8", seed=1, lpips=Returns(values))
    assert item["lpips"] is None and "expected one finite distance >= 0" in item["absent"]["lpips"]


@pytest.mark.parametrize("vbench", [1.5, -0.01, float("nan"), float("inf"), True, "0.5"])
def test_vbench_outside_its_range_is_refused(clip, vbench):
    with pytest.raises(ValueError, match="vbench"):
        measure_perceptual(*clip, frame_set="chelsea-pan-8", seed=1, vbench=vbench)


def test_vbench_bounds_are_accepted(clip):
    for value in (0, 1, 0.0, 1.0):
        assert measure_perceptual(*clip, frame_set="s", seed=1, vbench=value)["vbench"] == float(value)


def test_labels_are_checked(clip):
    with pytest.raises(ValueError, match="frame_set"):
        measure_perceptual(*clip, frame_set=" ", seed=1)
    with pytest.raises(ValueError, match="seed"):
        measure_perceptual(*clip, frame_set="s", seed=True)


def test_frame_problems_are_errors_not_items(clip):
    reference, candidate = clip
    with pytest.raises(FrameError, match="reference has 8 frames .* candidate has 7 frames"):
        measure_perceptual(reference, candidate[:7], frame_set="s", seed=1)
    with pytest.raises(FrameError, match="candidate frames have float values"):
        measure_perceptual(reference, candidate * 2.0, frame_set="s", seed=1)
