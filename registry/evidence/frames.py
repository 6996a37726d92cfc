"""Loading and validating the video frames that perceptual metrics compare.

Frames are ``[frames, height, width, 3]`` RGB arrays. A metric is only as
good as its inputs, so anything that is not unambiguously an RGB picture with
values in a known range is refused with a one-line :class:`FrameError` instead
of being scored (docs/architecture.md, "Perceptual harness": bad frames are an error, not
a score). In particular nothing is rescaled by guesswork: floats must already
lie in ``[0, 1]`` and unsigned integers are scaled by their dtype's maximum
(``uint8`` by 255), the only two conventions with a declared data range.
"""
from __future__ import annotations

import hashlib
import math
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from registry.formats.errors import UserError, first_line

# Wang et al. (2004) use an 11x11 Gaussian window; a frame smaller than the
# window has no valid region to average SSIM over.
WINDOW = 11

# Declared maxima of what a frames file may hold, checked from headers before
# any pixel is read: the decoded pixels of one clip (a 121-frame 1080p clip
# in float32 is 2.8 GiB), and the pixels of one PNG frame (8192x8192, below
# the size at which Pillow itself warns of a decompression bomb).
MAX_FRAMES_BYTES = 4 * 2**30
MAX_FRAME_SIDE = 8192
MAX_FRAME_PIXELS = MAX_FRAME_SIDE * MAX_FRAME_SIDE

# Version tag hashed into every frames digest, so that a change to the
# digest's definition can never collide with digests made under the old one.
_DIGEST_TAG = b"registry.frames-digest/1"


class FrameError(UserError):
    """Frames that cannot be measured; the message names the problem in one line."""


def _as_array(data: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(data)
    except ValueError as exc:  # ragged nested lists
        raise FrameError(f"{what} frames are not a rectangular array: {exc}") from None


def _check_dtype(arr: np.ndarray, what: str) -> None:
    if np.issubdtype(arr.dtype, np.unsignedinteger) or np.issubdtype(arr.dtype, np.floating):
        return
    if np.issubdtype(arr.dtype, np.signedinteger):
        raise FrameError(
            f"{what} frames have signed integer dtype {arr.dtype}; expected float in [0, 1] "
            "or an unsigned integer dtype (no data range is declared for signed pixels)"
        )
    raise FrameError(
        f"{what} frames have dtype {arr.dtype}; expected float in [0, 1] or an unsigned integer dtype"
    )


def _describe_channels(channels: int) -> str:
    if channels == 1:
        return "grey (1 channel)"
    if channels == 4:
        return "RGBA (4 channels)"
    return f"{channels} channels"


def _check_values(arr: np.ndarray, what: str) -> None:
    """Floats must be finite and inside [0, 1]; unsigned integers always are."""
    if not np.issubdtype(arr.dtype, np.floating):
        return
    # Fast path, two reductions and no temporaries: NaN propagates through
    # min and max and fails both comparisons, and +-inf fails the range test.
    if 0.0 <= arr.min() and arr.max() <= 1.0:
        return
    finite = np.isfinite(arr)
    if not finite.all():
        bad = np.argwhere(~finite)[0]
        value = arr[tuple(bad)]
        kind = "NaN" if np.isnan(value) else "inf"
        raise FrameError(
            f"{what} frames contain {kind} ({int((~finite).sum())} non-finite values; "
            f"first at index {tuple(int(i) for i in bad)})"
        )
    low, high = float(arr.min()), float(arr.max())
    if low < 0.0 or high > 1.0:
        raise FrameError(
            f"{what} frames have float values in [{low!r}, {high!r}], outside [0, 1] "
            "(float frames must already be scaled to [0, 1])"
        )


def _check_size(height: int, width: int, what: str, unit: str) -> None:
    if height < WINDOW or width < WINDOW:
        raise FrameError(
            f"{what} {unit} are {height}x{width}, smaller than the {WINDOW}x{WINDOW} SSIM window"
        )


def check_frames(data: Any, what: str = "candidate") -> np.ndarray:
    """All of the rules for a ``[frames, height, width, 3]`` array; return it as stored, without converting it.

    Measuring converts one frame at a time (:func:`unit_float`), so a clip
    never exists as a whole in float64: its working memory is a frame or
    two, whatever the clip's length.
    """
    arr = _as_array(data, what)
    _check_dtype(arr, what)
    if arr.ndim == 3:
        raise FrameError(
            f"{what} frames are a 3-D array {arr.shape}: grey frames [frames, height, width] "
            "(or one frame) where RGB frames [frames, height, width, 3] are expected"
        )
    if arr.ndim != 4:
        raise FrameError(
            f"{what} frames have rank {arr.ndim} {arr.shape}; expected 4-D [frames, height, width, 3]"
        )
    if arr.shape[-1] != 3:
        raise FrameError(
            f"{what} frames are {_describe_channels(arr.shape[-1])} {arr.shape} where RGB (3 channels) is expected"
        )
    if arr.shape[0] == 0:
        raise FrameError(f"{what} frames: zero frames {arr.shape}")
    _check_size(arr.shape[1], arr.shape[2], what, "frames")
    _check_values(arr, what)
    return arr


def unit_float(arr: np.ndarray) -> np.ndarray:
    """Checked pixels (a frame, or frames) as float64 in [0, 1]: unsigned integers over their maximum."""
    if np.issubdtype(arr.dtype, np.unsignedinteger):
        return arr.astype(np.float64) / float(np.iinfo(arr.dtype).max)
    return np.asarray(arr, dtype=np.float64)


def validate_frames(data: Any, what: str = "candidate") -> np.ndarray:
    """Return ``[frames, height, width, 3]`` float64 frames in [0, 1], or raise :class:`FrameError`.

    Accepts arrays and nested lists. ``what`` names the input in the message
    ("reference", "candidate"). A float64 input is returned without a copy.
    """
    return unit_float(check_frames(data, what))


def validate_frame(data: Any, what: str = "candidate") -> np.ndarray:
    """Return one ``[height, width, 3]`` frame as float64 in [0, 1], or raise :class:`FrameError`."""
    arr = _as_array(data, what)
    _check_dtype(arr, what)
    if arr.ndim == 2:
        raise FrameError(
            f"{what} frame is a 2-D grey array {arr.shape} where an RGB frame [height, width, 3] is expected"
        )
    if arr.ndim != 3:
        raise FrameError(f"{what} frame has rank {arr.ndim} {arr.shape}; expected 3-D [height, width, 3]")
    if arr.shape[-1] != 3:
        raise FrameError(
            f"{what} frame is {_describe_channels(arr.shape[-1])} {arr.shape} where RGB (3 channels) is expected"
        )
    _check_size(arr.shape[0], arr.shape[1], what, "frame")
    _check_values(arr, what)
    return unit_float(arr)


def check_pair(reference: np.ndarray, candidate: np.ndarray) -> None:
    """Refuse a reference/candidate pair whose frame count or frame shape differ, naming both."""
    ref_shape, cand_shape = tuple(np.shape(reference)), tuple(np.shape(candidate))
    if ref_shape[:1] != cand_shape[:1]:
        raise FrameError(
            f"frame count mismatch: reference has {ref_shape[0]} frames {ref_shape}, "
            f"candidate has {cand_shape[0]} frames {cand_shape}"
        )
    if ref_shape != cand_shape:
        raise FrameError(f"frame shape mismatch: reference {ref_shape}, candidate {cand_shape}")


def frames_digest(data: Any) -> str:
    """SHA-256 of the decoded pixels, their dtype and their shape, as ``sha256:<hex>``.

    The hash covers, in order: the tag ``registry.frames-digest/1``, a newline,
    ``dtype=<numpy dtype name> shape=<d0>x<d1>x<d2>x<d3>``, a newline, then the
    pixels in C order as little-endian bytes. The pixels are hashed as given
    (e.g. the uint8 values decoded from PNG), not after scaling to [0, 1], so
    the digest names exactly the data that was measured and does not depend
    on the machine's byte order or the array's memory layout. The frames must
    pass :func:`validate_frames`.
    """
    arr = check_frames(data, "the")
    little = arr.dtype.newbyteorder("<")
    digest = hashlib.sha256()
    digest.update(_DIGEST_TAG + b"\n")
    shape = "x".join(str(d) for d in arr.shape)
    digest.update(f"dtype={little.name} shape={shape}\n".encode("ascii"))
    for frame in arr:
        digest.update(np.ascontiguousarray(frame, dtype=little).tobytes())
    return f"sha256:{digest.hexdigest()}"


def _size(nbytes: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def _unreadable(label: str, exc: OSError) -> FrameError:
    """An OSError in the user's terms: the file, and what the system said (not a traceback, not a path dump)."""
    return FrameError(f"cannot read frames from {label}: {exc.strerror or exc}")


def _check_declared(label: str, shape: tuple[int, ...], dtype: np.dtype, available: int) -> None:
    """Refuse, from an .npy header alone, what is not pixels, too large to load, or not in the file."""
    if dtype.hasobject:
        raise FrameError(f"{label} holds Python objects, not pixels "
                         "(frames are a numeric array of unsigned integers or floats)")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_FRAMES_BYTES:
        raise FrameError(f"{label} declares a {shape} {dtype} array ({_size(nbytes)}); "
                         f"frames are at most {_size(MAX_FRAMES_BYTES)} of pixels")
    if nbytes > available:
        raise FrameError(f"{label} is truncated: its header declares {nbytes} bytes of pixels, "
                         f"the file holds {available}")


def _npy_header(handle: BinaryIO, label: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an .npy header declares, read without reading the array."""
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise FrameError(f"{label} is .npy format version {version[0]}.{version[1]}; "
                             "frames are saved in version 1.0 or 2.0 (numpy.save's)")
    except ValueError as exc:
        raise FrameError(f"cannot read frames from {label}: {first_line(exc)}") from None
    return shape, dtype


def _load_npy(path: Path) -> np.ndarray:
    with path.open("rb") as handle:
        shape, dtype = _npy_header(handle, path.name)
        _check_declared(path.name, shape, dtype, path.stat().st_size - handle.tell())
    return np.load(path, allow_pickle=False)


def _load_npz(path: Path) -> np.ndarray:
    with zipfile.ZipFile(path) as archive:
        members = {name.removesuffix(".npy"): name for name in archive.namelist()}
        if "frames" in members:
            chosen = "frames"
        elif len(members) == 1:
            [chosen] = members
        else:
            raise FrameError(
                f"{path.name} holds {len(members)} arrays ({', '.join(members)}) and none is named 'frames'"
            )
        info = archive.getinfo(members[chosen])
        with archive.open(info) as handle:
            shape, dtype = _npy_header(handle, path.name)
            # The archive's directory gives the member's uncompressed size, and
            # reading stops there: no more than that can come out of it.
            _check_declared(path.name, shape, dtype, info.file_size - handle.tell())
    with np.load(path, allow_pickle=False) as loaded:
        return loaded[chosen]


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, which by the format's rules comes first."""
    with path.open("rb") as handle:
        head = handle.read(24)
    if len(head) < 24 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        raise FrameError(f"cannot read PNG frame {path.name}: not a PNG file")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _load_png(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        width, height = _png_size(path)
        if width * height > MAX_FRAME_PIXELS:
            raise FrameError(f"PNG frame {path.name} is {width}x{height}; a frame has at most "
                             f"{MAX_FRAME_PIXELS} pixels ({MAX_FRAME_SIDE}x{MAX_FRAME_SIDE})")
        with Image.open(path) as image:
            if image.mode == "P":
                # A palette image stores RGB(A) colours by index; expanding the
                # palette is the lossless decode, not a conversion.
                image = image.convert("RGBA" if "transparency" in image.info else "RGB")
            elif image.mode not in ("RGB", "RGBA", "L", "LA", "I;16"):
                raise FrameError(f"PNG frame {path.name} has unsupported mode {image.mode}")
            return np.asarray(image)
    except OSError as exc:  # includes PIL.UnidentifiedImageError and truncated files
        reason = exc.strerror if exc.strerror else str(exc)
        raise FrameError(f"cannot read PNG frame {path.name}: {reason}") from None


def _load_png_directory(directory: Path) -> np.ndarray:
    files = sorted(p for p in directory.iterdir() if p.suffix.lower() == ".png")
    if not files:
        raise FrameError(f"frames directory {directory} holds no .png files")
    for path in files:
        if not path.is_file():
            raise FrameError(f"{path.name} in frames directory {directory.name} is not a regular file")
    first = _load_png(files[0])
    total = first.nbytes * len(files)
    if total > MAX_FRAMES_BYTES:
        raise FrameError(f"frames directory {directory.name} holds {len(files)} frames of {first.shape} {first.dtype} "
                         f"({_size(total)}); frames are at most {_size(MAX_FRAMES_BYTES)} of pixels")
    frames = np.empty((len(files), *first.shape), dtype=first.dtype)
    frames[0] = first
    for index, path in enumerate(files[1:], start=1):
        frame = _load_png(path)
        if frame.shape != first.shape or frame.dtype != first.dtype:
            raise FrameError(
                f"PNG frames differ: {files[0].name} is {first.shape} {first.dtype}, "
                f"{path.name} is {frame.shape} {frame.dtype}"
            )
        frames[index] = frame
    return frames


def load_frames(path: str | Path) -> np.ndarray:
    """Load frames from ``.npy``, ``.npz`` (one array, or one named ``frames``) or a directory of PNGs.

    PNG files are read in name order with Pillow. Before any pixel is read,
    what the headers declare is checked: a regular file, numbers rather than
    Python objects, at most MAX_FRAMES_BYTES of pixels (MAX_FRAME_PIXELS per
    PNG frame), and no more than the file holds. The frames are then checked
    (:func:`check_frames`, messages naming the file) and returned as stored
    (no scaling); :func:`frames_digest` identifies them.
    """
    path = Path(path)
    if path.is_dir():
        return check_frames(_load_png_directory(path), f"{path.name}:")
    if not path.exists():
        raise FrameError(f"frames path {path} does not exist")
    if not path.is_file():
        raise FrameError(f"frames path {path.name} is not a regular file")
    loaders = {".npy": _load_npy, ".npz": _load_npz}
    loader = loaders.get(path.suffix.lower())
    if loader is None:
        raise FrameError(
            f"unsupported frames file {path.name} (expected .npy, .npz or a directory of .png files)"
        )
    try:
        frames = loader(path)
    except FrameError:
        raise
    except OSError as exc:
        raise _unreadable(path.name, exc) from None
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise FrameError(f"cannot read frames from {path.name}: {first_line(exc)}") from None
    return check_frames(frames, f"{path.name}:")
