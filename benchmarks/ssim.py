"""SSIM speed and memory: registry's numpy SSIM beside scikit-image's, in the same run.

Both score the same 8 frames of 480x832x3 float64 (a clip panning across an
upsampled photograph, against a noisy copy) with the Wang et al. settings
(gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=1.0, channel_axis=-1). The two run alternately in ABBA rounds so
drift on a shared machine falls on both alike; the median round is reported.
Peak memory is measured in separate runs under tracemalloc (numpy reports its
buffers to it), so the timings carry no tracing overhead. Prints both times,
the ratio, the largest absolute difference of any frame's SSIM and the peaks.

    .venv/bin/python benchmarks/ssim.py [--rounds R]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from skimage import data
from skimage.metrics import structural_similarity
from skimage.util import img_as_float

from registry.evidence.ssim import ssim_per_frame

FRAMES, HEIGHT, WIDTH = 8, 480, 832


def clip() -> tuple[np.ndarray, np.ndarray]:
    photo = np.repeat(np.repeat(img_as_float(data.astronaut()), 2, axis=0), 2, axis=1)
    reference = np.stack([photo[200 : 200 + HEIGHT, 16 * k : 16 * k + WIDTH] for k in range(FRAMES)])
    noise = np.random.default_rng(0).normal(0.0, 0.05, reference.shape)
    return reference, np.clip(reference + noise, 0.0, 1.0)


def skimage_per_frame(reference: np.ndarray, candidate: np.ndarray) -> list[float]:
    return [
        structural_similarity(
            r, c, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0, channel_axis=-1
        )
        for r, c in zip(reference, candidate)
    ]


def timed(run: Callable[[], list[float]]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def peak_bytes(run: Callable[[], list[float]]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="ABBA rounds (each times both twice)")
    args = parser.parse_args()
    reference, candidate = clip()
    ours_run = lambda: ssim_per_frame(reference, candidate)  # noqa: E731
    theirs_run = lambda: skimage_per_frame(reference, candidate)  # noqa: E731
    ours_run()  # first call pays for page faults and BLAS start-up; not what we measure
    ours_times, theirs_times = [], []
    for _ in range(args.rounds):
        for run, times in ((ours_run, ours_times), (theirs_run, theirs_times),
                           (theirs_run, theirs_times), (ours_run, ours_times)):
            times.append(timed(run))
    ours_values, theirs_values = ours_run(), theirs_run()
    ours_s, theirs_s = statistics.median(ours_times), statistics.median(theirs_times)
    max_diff = max(abs(a - b) for a, b in zip(ours_values, theirs_values))
    print(f"frames: {FRAMES} x {HEIGHT}x{WIDTH}x3 float64, {args.rounds} ABBA rounds, median of {len(ours_times)}")
    print(f"registry ssim:      {ours_s:.3f} s  (min {min(ours_times):.3f}, max {max(ours_times):.3f})")
    print(f"scikit-image ssim:  {theirs_s:.3f} s  (min {min(theirs_times):.3f}, max {max(theirs_times):.3f})")
    print(f"speed-up:           {theirs_s / ours_s:.2f}x")
    print(f"max |difference|:   {max_diff:.3e}  (SSIM values {min(ours_values):.4f} .. {max(ours_values):.4f})")
    print(f"input frames:       {(reference.nbytes + candidate.nbytes) / 2**20:.0f} MiB (both clips, float64)")
    print(f"peak traced memory: registry {peak_bytes(ours_run) / 2**20:.1f} MiB, "
          f"scikit-image {peak_bytes(theirs_run) / 2**20:.1f} MiB (beyond the inputs)")
    print(f"process max RSS:    {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB")


if __name__ == "__main__":
    main()
