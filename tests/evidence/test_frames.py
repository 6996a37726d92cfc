"""Frame loading and validation: every refusal is one line naming the problem."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from skimage import data

from registry.evidence.frames import (
    FrameError,
    check_pair,
    frames_digest,
    load_frames,
    validate_frame,
    validate_frames,
)


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    """Four 40x56 uint8 RGB frames panning across the astronaut photograph."""
    image = data.astronaut()
    return np.stack([image[100:140, 150 + 6 * k : 206 + 6 * k] for k in range(4)])


def refused(data_, match: str, what: str = "candidate") -> str:
    with pytest.raises(FrameError, match=match) as info:
        validate_frames(data_, what)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_uint8_is_scaled_by_255(clip):
    out = validate_frames(clip)
    assert out.dtype == np.float64 and out.shape == clip.shape
    np.testing.assert_array_equal(out * 255.0, clip.astype(np.float64))


def test_uint16_is_scaled_by_its_maximum(clip):
    wide = clip.astype(np.uint16) * 257  # 255 * 257 == 65535
    np.testing.assert_array_equal(validate_frames(wide), validate_frames(clip))


def test_float64_in_range_is_returned_without_copy(clip):
    frames = clip / 255.0
    assert np.shares_memory(validate_frames(frames), frames)


def test_float32_and_nested_lists_are_accepted(clip):
    frames = (clip[:2, :12, :13] / 255.0).astype(np.float32)
    np.testing.assert_array_equal(validate_frames(frames.tolist()), frames.astype(np.float64))


@given(st.integers(0, 255))
@settings(max_examples=30, deadline=None)
def test_uint8_scaling_round_trips(value):
    frames = np.full((1, 11, 11, 3), value, dtype=np.uint8)
    assert validate_frames(frames)[0, 0, 0, 0] * 255.0 == value


def test_signed_integers_are_refused(clip):
    message = refused(clip.astype(np.int16), "signed integer dtype int16")
    assert message.startswith("candidate frames")


def test_float_outside_unit_range_is_refused(clip):
    refused(clip.astype(np.float32), r"outside \[0, 1\]")
    refused(clip / 255.0 - 0.5, r"outside \[0, 1\]")


def test_nan_and_inf_are_refused(clip):
    frames = clip / 255.0
    frames[2, 5, 7, 1] = np.nan
    message = refused(frames, "NaN", what="reference")
    assert "(2, 5, 7, 1)" in message and message.startswith("reference frames")
    frames[2, 5, 7, 1] = np.inf
    refused(frames, "inf")


def test_grey_frames_are_refused_as_grey(clip):
    grey = clip[..., 0]
    refused(grey, "grey frames")
    refused(grey[..., np.newaxis], r"grey \(1 channel\)")


def test_rgba_frames_are_refused_as_rgba(clip):
    rgba = np.concatenate([clip, np.full(clip.shape[:-1] + (1,), 255, np.uint8)], axis=-1)
    refused(rgba, r"RGBA \(4 channels\)")


def test_frames_smaller_than_the_window_are_refused(clip):
    refused(clip[:, :10], "10x56, smaller than the 11x11 SSIM window")
    refused(clip[:, :, :9], "40x9")


def test_zero_frames_are_refused(clip):
    refused(clip[:0], "zero frames")


def test_wrong_rank_is_refused(clip):
    refused(clip[0, :, :, 0], "rank 2")
    refused(clip[np.newaxis], "rank 5")


def test_other_dtypes_and_ragged_input_are_refused(clip):
    refused(clip > 128, "dtype bool")
    refused(clip.astype(np.complex64), "dtype complex64")
    refused([[[[0.0, 0.0, 0.0]]], [[[0.0, 0.0]]]], "not a rectangular array")


def test_single_frame_rules(clip):
    assert validate_frame(clip[0]).shape == clip[0].shape
    with pytest.raises(FrameError, match="2-D grey array"):
        validate_frame(clip[0, :, :, 0])
    with pytest.raises(FrameError, match=r"RGBA \(4 channels\)"):
        validate_frame(np.zeros((20, 20, 4)))
    with pytest.raises(FrameError, match="rank 4"):
        validate_frame(clip)


def test_pair_mismatches_name_both_sides(clip):
    with pytest.raises(FrameError, match=r"reference has 4 frames .* candidate has 3 frames"):
        check_pair(clip, clip[:3])
    with pytest.raises(FrameError, match=r"reference \(4, 40, 56, 3\), candidate \(4, 40, 50, 3\)"):
        check_pair(clip, clip[:, :, :50])
    check_pair(clip, clip.copy())


def test_digest_follows_its_documented_definition(clip):
    expected = hashlib.sha256(
        b"registry.frames-digest/1\n" + b"dtype=uint8 shape=4x40x56x3\n" + clip.tobytes()
    ).hexdigest()
    assert frames_digest(clip) == f"sha256:{expected}"


def test_digest_is_independent_of_layout_and_byte_order(clip):
    frames = (clip / 255.0).astype(np.float32)
    fortran = np.asfortranarray(frames)
    big_endian = frames.astype(">f4")
    assert frames_digest(frames) == frames_digest(fortran) == frames_digest(big_endian)


def test_digest_changes_with_pixels_dtype_and_shape(clip):
    base = frames_digest(clip)
    changed = clip.copy()
    changed[3, 39, 55, 2] ^= 1
    assert frames_digest(changed) != base
    assert frames_digest(clip.astype(np.uint16)) != base
    assert frames_digest(clip.reshape(2, 80, 56, 3)) != base


def test_digest_refuses_invalid_frames(clip):
    with pytest.raises(FrameError, match="grey"):
        frames_digest(clip[..., 0])


def test_load_npy_and_npz(tmp_path, clip):
    np.save(tmp_path / "clip.npy", clip)
    np.savez(tmp_path / "one.npz", clip)
    np.savez(tmp_path / "named.npz", frames=clip, other=np.zeros(3))
    np.savez(tmp_path / "ambiguous.npz", a=clip, b=clip)
    for name in ("clip.npy", "one.npz", "named.npz"):
        np.testing.assert_array_equal(load_frames(tmp_path / name), clip)
    with pytest.raises(FrameError, match=r"holds 2 arrays \(a, b\) and none is named 'frames'"):
        load_frames(tmp_path / "ambiguous.npz")


def test_load_png_directory_in_name_order(tmp_path, clip):
    for k in (2, 0, 3, 1):
        Image.fromarray(clip[k]).save(tmp_path / f"frame_{k:03d}.png")
    (tmp_path / "notes.txt").write_text("not a frame")
    loaded = load_frames(tmp_path)
    np.testing.assert_array_equal(loaded, clip)
    assert frames_digest(loaded) == frames_digest(clip)


def test_grey_and_rgba_pngs_are_refused_as_they_load(tmp_path, clip):
    grey_dir, rgba_dir = tmp_path / "grey", tmp_path / "rgba"
    grey_dir.mkdir()
    rgba_dir.mkdir()
    Image.fromarray(clip[0, :, :, 0]).save(grey_dir / "a.png")
    Image.fromarray(clip[0]).convert("RGBA").save(rgba_dir / "a.png")
    with pytest.raises(FrameError, match="grey: frames are a 3-D array .* grey frames"):
        load_frames(grey_dir)
    with pytest.raises(FrameError, match=r"rgba: frames are RGBA \(4 channels\)"):
        load_frames(rgba_dir)


def test_png_directory_errors(tmp_path, clip):
    Image.fromarray(clip[0]).save(tmp_path / "a.png")
    Image.fromarray(clip[1, :30]).save(tmp_path / "b.png")
    with pytest.raises(FrameError, match=r"a.png is \(40, 56, 3\) uint8, b.png is \(30, 56, 3\)"):
        load_frames(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FrameError, match="holds no .png files"):
        load_frames(empty)


def test_missing_and_unsupported_paths(tmp_path):
    with pytest.raises(FrameError, match="does not exist"):
        load_frames(tmp_path / "nope.npy")
    (tmp_path / "clip.mp4").write_bytes(b"\x00" * 16)
    with pytest.raises(FrameError, match=r"unsupported frames file clip.mp4"):
        load_frames(tmp_path / "clip.mp4")
    (tmp_path / "broken.npy").write_bytes(b"not numpy")
    with pytest.raises(FrameError, match="cannot read frames from broken.npy"):
        load_frames(tmp_path / "broken.npy")
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 truncated archive")
    with pytest.raises(FrameError, match="cannot read frames from broken.npz"):
        load_frames(tmp_path / "broken.npz")
    pngs = tmp_path / "pngs"
    pngs.mkdir()
    (pngs / "0.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(FrameError, match="cannot read PNG frame 0.png"):
        load_frames(pngs)
