"""SSIM against scikit-image on real photographs, perturbed copies and video frames."""
from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from skimage import data
from skimage.metrics import structural_similarity
from skimage.util import img_as_float

from registry.evidence.frames import FrameError
from registry.evidence.ssim import iter_ssim, ssim, ssim_per_frame

AGREEMENT = 1e-12  # the tolerance the task declares for agreement with scikit-image


def skimage_ssim(a: np.ndarray, b: np.ndarray) -> float:
    return structural_similarity(
        a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0, channel_axis=-1
    )


def real_image(name: str) -> np.ndarray:
    image = img_as_float(getattr(data, name)())
    return np.stack([image] * 3, axis=-1) if image.ndim == 2 else image


def data_uint8(name: str) -> np.ndarray:
    image = getattr(data, name)()
    return np.stack([image] * 3, axis=-1) if image.ndim == 2 else image


def jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(np.round(image * 255).astype(np.uint8)).save(buffer, format="JPEG", quality=quality)
    return img_as_float(np.asarray(Image.open(buffer)))


def gaussian_filter(image: np.ndarray, sigma: tuple[float, ...]) -> np.ndarray:
    """scipy's Gaussian filter, imported when a test blurs (not by every test process that collects this file)."""
    from scipy import ndimage

    return ndimage.gaussian_filter(image, sigma=sigma)


def perturbed(image: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    if kind == "noise":
        return image, np.clip(image + rng.normal(0.0, 0.05, image.shape), 0.0, 1.0)
    if kind == "blur":
        return image, gaussian_filter(image, sigma=(2.0, 2.0, 0.0))
    if kind == "jpeg":
        return image, jpeg(image, quality=30)
    if kind == "shifted-crop":
        return image[:-7, :-5], image[7:, 5:]
    raise AssertionError(kind)


@pytest.mark.parametrize("name", ["astronaut", "coffee", "chelsea", "camera"])
@pytest.mark.parametrize("kind", ["noise", "blur", "jpeg", "shifted-crop"])
def test_agrees_with_scikit_image_on_real_images(name, kind):
    ref, cand = perturbed(real_image(name), kind)
    expected = skimage_ssim(ref, cand)
    assert abs(ssim(ref, cand) - expected) <= AGREEMENT
    assert 0.0 < expected < 1.0  # the perturbation really changed the picture


def moving_clip(frames: int = 6, height: int = 72, width: int = 104) -> np.ndarray:
    """A synthetic video: a textured disc drifting over a graded, rippling background."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    clip = []
    for t in range(frames):
        background = 0.3 + 0.2 * np.sin(xx / 7.0 + t / 2.0) * np.cos(yy / 11.0)
        disc = (xx - 20 - 9 * t) ** 2 + (yy - 36 - 3 * t) ** 2 < 15**2
        frame = np.stack([background, background * 0.8 + 0.1, 1.0 - background], axis=-1)
        frame[disc] = [0.9, 0.2 + 0.05 * t, 0.1]
        clip.append(frame)
    return np.clip(np.stack(clip), 0.0, 1.0)


def test_agrees_with_scikit_image_on_video_frames():
    ref = moving_clip()
    rng = np.random.default_rng(3)
    cand = np.clip(gaussian_filter(ref, sigma=(0, 1.2, 1.2, 0)) + rng.normal(0, 0.02, ref.shape), 0, 1)
    ours = ssim_per_frame(ref, cand)
    theirs = [skimage_ssim(r, c) for r, c in zip(ref, cand)]
    assert len(ours) == len(ref)
    assert max(abs(a - b) for a, b in zip(ours, theirs)) <= AGREEMENT


@given(
    height=st.integers(11, 40),
    width=st.integers(11, 40),
    seed=st.integers(0, 2**32 - 1),
    noise=st.floats(0.0, 0.5),
)
@settings(max_examples=40, deadline=None)
def test_agrees_with_scikit_image_on_any_valid_shape(height, width, seed, noise):
    rng = np.random.default_rng(seed)
    ref = rng.random((height, width, 3))
    cand = np.clip(ref + noise * rng.standard_normal(ref.shape), 0.0, 1.0)
    assert abs(ssim(ref, cand) - skimage_ssim(ref, cand)) <= AGREEMENT


@pytest.mark.parametrize("name", ["astronaut", "coffee", "chelsea", "camera"])
def test_identical_frames_score_exactly_one(name):
    image = real_image(name)
    assert ssim(image, image.copy()) == 1.0
    assert ssim(data_uint8(name), data_uint8(name)) == 1.0


def test_identical_video_frames_score_exactly_one():
    assert ssim_per_frame(moving_clip(), moving_clip()) == [1.0] * 6


def test_symmetric_and_at_most_one():
    ref, cand = perturbed(real_image("chelsea"), "jpeg")
    assert ssim(ref, cand) == ssim(cand, ref) <= 1.0


def test_uint8_frames_equal_their_float_scaling_and_lists_equal_arrays():
    image = data.coffee()[::4, ::4]
    rng = np.random.default_rng(1)
    noisy = np.clip(image.astype(np.int16) + rng.integers(-20, 21, image.shape), 0, 255).astype(np.uint8)
    as_float = ssim(image / 255.0, noisy / 255.0)
    assert ssim(image, noisy) == as_float
    assert ssim((image / 255.0).tolist(), (noisy / 255.0).tolist()) == as_float
    with pytest.raises(FrameError, match="signed integer dtype int64"):
        ssim(image.tolist(), noisy.tolist())  # Python ints carry no declared data range
    assert ssim_per_frame([image / 255.0], [noisy / 255.0]) == [as_float]


def test_one_destroyed_frame_is_the_worst_frame():
    image = real_image("astronaut")
    clip = np.stack([image[60:188, 40 + 12 * k : 232 + 12 * k] for k in range(8)])
    candidate = np.stack([jpeg(frame, quality=75) for frame in clip])
    candidate[5] = np.random.default_rng(11).random(candidate[5].shape)
    scores = ssim_per_frame(clip, candidate)
    assert int(np.argmin(scores)) == 5
    assert scores[5] < 0.5
    assert min(s for i, s in enumerate(scores) if i != 5) > 0.85


def test_iter_ssim_validates_before_yielding():
    clip = moving_clip()
    with pytest.raises(FrameError, match="frame count mismatch"):
        iter_ssim(clip, clip[:5])
    assert list(iter_ssim(clip[:2], clip[:2])) == [1.0, 1.0]


def test_invalid_frames_are_errors_not_scores():
    image = real_image("chelsea")[:64, :64]
    with pytest.raises(FrameError, match=r"reference \(1, 64, 64, 3\), candidate \(1, 64, 60, 3\)"):
        ssim(image, image[:, :60])
    with pytest.raises(FrameError, match="2-D grey array"):
        ssim(image[..., 0], image[..., 0])
    broken = image.copy()
    broken[3, 3, 0] = np.nan
    with pytest.raises(FrameError, match="candidate frame.* NaN"):
        ssim(image, broken)
    with pytest.raises(FrameError, match="smaller than the 11x11 SSIM window"):
        ssim_per_frame(image[np.newaxis, :10], image[np.newaxis, :10])
