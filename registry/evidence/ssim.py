"""Structural similarity (SSIM), numpy only.

The index is that of Wang, Bovik, Sheikh and Simoncelli, "Image quality
assessment: from error visibility to structural similarity", IEEE TIP 13(4),
2004: local means, variances and covariance under an 11x11 circular-symmetric
Gaussian window with sigma 1.5 (normalised to unit sum), constants
C1 = (K1 L)^2 and C2 = (K2 L)^2 with K1 = 0.01, K2 = 0.03 and data range
L = 1, population (not sample) covariance, and the mean SSIM over the frame.

It reproduces ``skimage.metrics.structural_similarity(a, b,
gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=1.0, channel_axis=-1)``: scikit-image truncates the Gaussian at
3.5 sigma, so its radius is int(3.5 * 1.5 + 0.5) = 5 (11 taps); it filters the
whole image with mode 'reflect' and then averages only the valid region, the
pixels at least 5 from every edge ((win_size - 1) // 2), per channel, and
finally averages the channel means. At a valid pixel the 11x11 window lies
wholly inside the frame, so no border value ever reaches the average and the
border rule drops out: this module computes only the valid region.

How (and why it is fast): the window is separable, so the local moments
are two 1-D correlations, and filtering is linear, so four maps suffice:
x, y, x^2 + y^2 (whose filtered value gives vx + vy directly) and xy. Each
1-D pass is a batch of small banded matrix products: n outputs are an
(n x n+10) band of Gaussian taps times the n + 10 inputs they need, which
BLAS runs far faster than 11 shifted array additions. Each product is kept
small (M*N*K well under OpenBLAS's threading threshold): on a busy shared
CPU a multi-threaded call on a small matrix can stall on a descheduled
thread. The frame is streamed in strips of a few rows through buffers sized
for one strip, so the intermediate maps never leave the cache and memory
stays at a few MiB whatever the frame count (see _Workspace).

Identical frames score exactly 1.0: x and y pass through identical calls,
x^2 + y^2 = 2 x^2 is filtered to exactly twice the filtered x^2, and every
factor of the index then cancels exactly. Only floating-point overshoot above
1.0 is clamped.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from registry import __version__
from registry.evidence.frames import WINDOW, check_frames, check_pair, unit_float, validate_frame

BACKEND = f"registry-ssim {__version__}"

SIGMA = 1.5
K1 = 0.01
K2 = 0.03
DATA_RANGE = 1.0
_C1 = (K1 * DATA_RANGE) ** 2
_C2 = (K2 * DATA_RANGE) ** 2

_RADIUS = (WINDOW - 1) // 2
_SPAN = WINDOW - 1  # extra input pixels one output block needs

# Tile sizes: output rows per strip, output columns per block of the
# horizontal pass, and pixels per call of the vertical pass. Chosen by timing
# the benchmark frames (480x832x3) over 4..32; they change only the last ulp
# of the result, never which pixels are averaged.
_ROWS = 16
_COLS = 8
_CHUNK = 32


def _gaussian_taps() -> np.ndarray:
    offsets = np.arange(-_RADIUS, _RADIUS + 1, dtype=np.float64)
    taps = np.exp(-0.5 * offsets * offsets / (SIGMA * SIGMA))
    return taps / taps.sum()


def _band(outputs: int) -> np.ndarray:
    """(n, n + 10) matrix whose row i holds the 11 taps at columns i..i+10."""
    band = np.zeros((outputs, outputs + _SPAN))
    taps = _gaussian_taps()
    for i in range(outputs):
        band[i, i : i + WINDOW] = taps
    return band


_BAND_ROWS_T = np.ascontiguousarray(_band(_ROWS).T)
_BAND_COLS = _band(_COLS)


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


class _Workspace:
    """Buffers for frames of one shape, reused frame after frame.

    The frame is streamed in strips of R output rows, which need R + 10 input
    rows. Per strip, the four maps are built in the frame's own interleaved
    [row, column, channel] order (no transposing copy); the vertical pass
    turns each map's strip into [column, channel, row] order, in which the
    horizontal pass reads contiguous rows; the SSIM formula then runs on the
    strip and its valid pixels are summed per channel. Every buffer holds one
    strip (a few MiB at most), so intermediate results stay in cache.
    """

    def __init__(self, height: int, width: int, channels: int) -> None:
        self.height, self.width, self.channels = height, width, channels
        self.valid_h, self.valid_w = height - _SPAN, width - _SPAN
        self.strips = _ceil_div(self.valid_h, _ROWS)
        self.col_blocks = _ceil_div(self.valid_w, _COLS)
        chunks = _ceil_div(width, _CHUNK)
        pixels = chunks * _CHUNK
        columns = max(pixels, self.col_blocks * _COLS + _SPAN)
        depth = channels * _ROWS
        item = np.dtype(np.float64).itemsize
        # Padding (right of the frame) is never written and stays zero: the
        # bands' zero entries multiply it, so it must be finite.
        self.maps = np.zeros((4, _ROWS + _SPAN, pixels * channels))
        self._map_pixels = self.maps.reshape(4, _ROWS + _SPAN, pixels, channels)
        self.vertical = np.zeros((4, columns, depth))
        self.filtered = np.empty((4, self.col_blocks, _COLS, depth))
        self.scratch = [np.empty((self.col_blocks, _COLS, channels, _ROWS)) for _ in range(4)]
        self._map_window = as_strided(
            self.maps,
            (4, chunks, _CHUNK * channels, _ROWS + _SPAN),
            (self.maps.strides[0], _CHUNK * channels * item, item, self.maps.strides[1]),
            writeable=False,
        )
        self._vertical_out = self.vertical[:, :pixels].reshape(4, chunks, _CHUNK * channels, _ROWS)
        self._vertical_window = as_strided(
            self.vertical,
            (4, self.col_blocks, _COLS + _SPAN, depth),
            (self.vertical.strides[0], _COLS * depth * item, depth * item, item),
            writeable=False,
        )

    def _fill(self, x: np.ndarray, y: np.ndarray, strip: int) -> None:
        """Maps x, y, x^2 + y^2, xy for input rows strip*R .. strip*R+R+9.

        The first 10 rows carry over from the previous strip. Rows past the
        frame's bottom keep earlier (finite) values: they reach only output
        rows outside the valid region, which are never summed.
        """
        top = strip * _ROWS
        first = top
        if strip:
            for plane in self.maps:
                plane[:_SPAN] = plane[_ROWS:]
            first += _SPAN
        last = min(top + _ROWS + _SPAN, self.height)
        if first >= last:
            return
        local = slice(first - top, last - top)
        xm, ym, squares, cross = (self._map_pixels[k, local, : self.width] for k in range(4))
        xm[...] = x[first:last]
        ym[...] = y[first:last]
        np.multiply(xm, xm, out=squares)
        np.multiply(ym, ym, out=cross)
        squares += cross
        np.multiply(xm, ym, out=cross)

    def _strip_sums(self, strip: int) -> np.ndarray:
        """Per-channel sum of SSIM/4 over the strip's valid pixels.

        SSIM = (2 m + C1)(2 c + C2) / ((m' + C1)(v + C2)) with m = ux uy,
        c = uxy - m, m' = ux^2 + uy^2, v = vx + vy. Halving both numerator
        factors is exact in binary floating point, so the quotient computed
        here is exactly a quarter of the index and the 4 is applied once.
        """
        shape = (4, self.col_blocks, _COLS, self.channels, _ROWS)
        ux, uy, usq, uxy = self.filtered.reshape(shape)
        mean_product, squares, cov, var = self.scratch
        np.multiply(ux, uy, out=mean_product)
        np.multiply(ux, ux, out=squares)
        np.multiply(uy, uy, out=cov)
        squares += cov
        np.subtract(uxy, mean_product, out=cov)
        cov += _C2 / 2
        mean_product += _C1 / 2
        mean_product *= cov
        np.subtract(usq, squares, out=var)
        var += _C2
        squares += _C1
        squares *= var
        mean_product /= squares
        rows = min(_ROWS, self.valid_h - strip * _ROWS)
        last_cols = self.valid_w - (self.col_blocks - 1) * _COLS
        full = mean_product[:-1, :, :, :rows].sum(axis=(0, 1, 3))
        return full + mean_product[-1, :last_cols, :, :rows].sum(axis=(0, 2))

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        totals = np.zeros(self.channels)
        for strip in range(self.strips):
            self._fill(x, y, strip)
            np.matmul(self._map_window, _BAND_ROWS_T, out=self._vertical_out)
            np.matmul(_BAND_COLS, self._vertical_window, out=self.filtered)
            totals += self._strip_sums(strip)
        channel_means = 4.0 * totals / (self.valid_h * self.valid_w)
        return min(float(channel_means.mean()), 1.0)


def ssim(ref_frame: Any, cand_frame: Any) -> float:
    """Mean SSIM of one RGB frame pair ([height, width, 3], float in [0, 1] or unsigned ints)."""
    ref = validate_frame(ref_frame, "reference")
    cand = validate_frame(cand_frame, "candidate")
    check_pair(ref[np.newaxis], cand[np.newaxis])
    return _Workspace(*ref.shape).score(ref, cand)


def iter_ssim(ref_frames: Any, cand_frames: Any) -> Iterator[float]:
    """Validate both frame stacks now, then yield each frame's SSIM in order.

    Frames are converted to float64 and scored one pair at a time, so a
    caller can report progress, and the working memory beyond the inputs is
    one frame pair and one strip's buffers whatever the clip length.
    """
    ref = check_frames(ref_frames, "reference")
    cand = check_frames(cand_frames, "candidate")
    check_pair(ref, cand)
    workspace = _Workspace(*ref.shape[1:])
    return (workspace.score(unit_float(r), unit_float(c)) for r, c in zip(ref, cand))


def ssim_per_frame(ref_frames: Any, cand_frames: Any) -> list[float]:
    """SSIM of each frame pair of two ``[frames, height, width, 3]`` stacks."""
    return list(iter_ssim(ref_frames, cand_frames))
