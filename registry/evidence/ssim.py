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

How (and why it is fast): the window is separable, so the five local moments
are two 1-D correlations. Filtering is linear, so only four maps are needed:
x, y, x^2 + y^2 (which gives vx + vy directly) and xy. Each 1-D pass is a
batch of small banded matrix products: an output block of B pixels is a
(B x B+10) band of Gaussian taps times the B+10 input pixels it needs, which
BLAS runs far faster than 11 shifted array additions. The calls are kept
small (M*N*K well under OpenBLAS's threading threshold) because on a busy
shared CPU a multi-threaded call on a small matrix can stall on a
descheduled thread. Frames are processed one at a time in buffers sized for
one frame, and the SSIM formula runs per column block while the block is in
cache.

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
from registry.evidence.frames import WINDOW, check_pair, validate_frame, validate_frames

BACKEND = f"registry-ssim {__version__}"

SIGMA = 1.5
K1 = 0.01
K2 = 0.03
DATA_RANGE = 1.0
_C1 = (K1 * DATA_RANGE) ** 2
_C2 = (K2 * DATA_RANGE) ** 2

_RADIUS = (WINDOW - 1) // 2
_SPAN = WINDOW - 1  # extra input pixels one output block needs

# Output pixels per block of a 1-D pass, and columns per vertical-pass call.
# Measured on the benchmark frames (480x832x3): 24/96 was fastest among
# 16..40 / 64..192; the result does not depend on them beyond the last ulp.
_BLOCK = 24
_CHUNK = 96


def _gaussian_taps() -> np.ndarray:
    offsets = np.arange(-_RADIUS, _RADIUS + 1, dtype=np.float64)
    taps = np.exp(-0.5 * offsets * offsets / (SIGMA * SIGMA))
    return taps / taps.sum()


def _band() -> np.ndarray:
    """(B, B + 10) matrix: row i holds the 11 taps at columns i..i+10."""
    band = np.zeros((_BLOCK, _BLOCK + _SPAN))
    taps = _gaussian_taps()
    for i in range(_BLOCK):
        band[i, i : i + WINDOW] = taps
    return band


_BAND = _band()
_BAND_T = np.ascontiguousarray(_BAND.T)


def _blocks(n: int) -> int:
    return -(-n // _BLOCK)


class _Workspace:
    """Buffers for frames of one shape, reused frame after frame."""

    def __init__(self, height: int, width: int, channels: int) -> None:
        self.height, self.width, self.channels = height, width, channels
        self.valid_h, self.valid_w = height - _SPAN, width - _SPAN
        self.row_blocks = _blocks(self.valid_h)
        self.col_blocks = _blocks(self.valid_w)
        rows = self.row_blocks * _BLOCK
        self.padded_h = rows + _SPAN
        self.chunks = -(-(self.col_blocks * _BLOCK + _SPAN) // _CHUNK)
        self.padded_w = self.chunks * _CHUNK
        planes = 4 * channels
        # The padding must be finite zeros: the band's zero entries multiply it.
        self.maps = np.zeros((planes, self.padded_h, self.padded_w))
        self.vertical = np.empty((planes, rows, self.padded_w))
        self.block = np.empty((planes, self.row_blocks, _BLOCK, _BLOCK))
        self.scratch = [np.empty((channels, self.valid_h, _BLOCK)) for _ in range(4)]
        item = self.maps.itemsize
        self._map_strides = (
            self.padded_h * self.padded_w * item,
            _CHUNK * item,
            self.padded_w * item,
            item,
        )
        self._vertical_strides = (
            rows * self.padded_w * item,
            _BLOCK * self.padded_w * item,
            self.padded_w * item,
            item,
        )

    def _fill_rows(self, x: np.ndarray, y: np.ndarray, start: int) -> None:
        rows = slice(start, min(start + _BLOCK, self.height))
        maps = self.maps.reshape(4, self.channels, self.padded_h, self.padded_w)
        xm, ym = maps[0, :, rows, : self.width], maps[1, :, rows, : self.width]
        squares, cross = maps[2, :, rows, : self.width], maps[3, :, rows, : self.width]
        xm[...] = x[rows].transpose(2, 0, 1)
        ym[...] = y[rows].transpose(2, 0, 1)
        np.multiply(xm, xm, out=squares)
        np.multiply(ym, ym, out=cross)
        squares += cross
        np.multiply(xm, ym, out=cross)

    def _vertical_pass(self, block: int) -> None:
        """Filter rows block*B .. block*B+B-1 of every map, in chunks of columns."""
        start = self.maps[:, block * _BLOCK :]
        window = as_strided(
            start,
            (start.shape[0], self.chunks, _BLOCK + _SPAN, _CHUNK),
            self._map_strides,
            writeable=False,
        )
        out = self.vertical.reshape(
            self.maps.shape[0], self.row_blocks, _BLOCK, self.chunks, _CHUNK
        )[:, block].transpose(0, 2, 1, 3)
        np.matmul(_BAND, window, out=out)

    def _horizontal_pass(self, block: int) -> None:
        """Filter columns block*B .. block*B+B-1 of the vertically filtered maps."""
        start = self.vertical[:, :, block * _BLOCK :]
        window = as_strided(
            start,
            (start.shape[0], self.row_blocks, _BLOCK, _BLOCK + _SPAN),
            self._vertical_strides,
            writeable=False,
        )
        np.matmul(window, _BAND_T, out=self.block)

    def _block_sums(self, block: int) -> np.ndarray:
        """Per-channel sum of SSIM/4 over the valid pixels of one column block.

        SSIM = (2 m + C1)(2 c + C2) / ((m' + C1)(v + C2)) with m = ux uy,
        c = uxy - m, m' = ux^2 + uy^2, v = vx + vy. Halving both numerator
        factors is exact in binary floating point, so the quotient computed
        here is exactly a quarter of the index and the 4 is applied once.
        """
        cols = min(_BLOCK, self.valid_w - block * _BLOCK)
        moments = self.block.reshape(4, self.channels, -1, _BLOCK)[:, :, : self.valid_h, :cols]
        ux, uy, usq, uxy = moments
        mean_product, squares, cov, var = (s[:, :, :cols] for s in self.scratch)
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
        return mean_product.sum(axis=(1, 2))

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        for block in range(self.row_blocks + 1):
            if block * _BLOCK < self.height:
                self._fill_rows(x, y, block * _BLOCK)
            if block:
                self._vertical_pass(block - 1)
        totals = np.zeros(self.channels)
        for block in range(self.col_blocks):
            self._horizontal_pass(block)
            totals += self._block_sums(block)
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

    Frames are scored one at a time, so a caller can report progress and
    memory stays at one frame's buffers whatever the clip length.
    """
    ref = validate_frames(ref_frames, "reference")
    cand = validate_frames(cand_frames, "candidate")
    check_pair(ref, cand)
    workspace = _Workspace(*ref.shape[1:])
    return (workspace.score(r, c) for r, c in zip(ref, cand))


def ssim_per_frame(ref_frames: Any, cand_frames: Any) -> list[float]:
    """SSIM of each frame pair of two ``[frames, height, width, 3]`` stacks."""
    return list(iter_ssim(ref_frames, cand_frames))
