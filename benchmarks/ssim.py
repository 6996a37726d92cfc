"""SSIM speed and memory: registry's numpy SSIM beside scikit-image's, and a long 720p clip's peak memory.

1. Both score the same 8 frames of 480x832x3 float64 (a clip panning across an
upsampled photograph, against a noisy copy) with the Wang et al. settings
(gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=1.0, channel_axis=-1). The two run alternately in ABBA rounds so
drift on a shared machine falls on both alike; the median round is reported.
Peak memory is measured in separate runs under tracemalloc (numpy reports its
buffers to it), so the timings carry no tracing overhead. Prints both times,
the ratio, the largest absolute difference of any frame's SSIM and the peaks.

2. A Wan 720p clip pair, 81 frames of 720x1280x3 uint8 (427 MiB for both
clips), measured through `measure_perceptual`, the API `registry evidence
frames` uses, in a fresh child process: its time and its peak RSS beyond the
RSS it had holding the two clips. Converting whole stacks to float64 before
scoring costs 16x the uint8 inputs (6.8 GiB for this pair); frame by frame it
costs a frame pair and SSIM's strip buffers.

    .venv/bin/python benchmarks/ssim.py [--rounds R] [--clip-frames N]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from skimage import data
from skimage.metrics import structural_similarity
from skimage.util import img_as_float

from registry.evidence.ssim import ssim_per_frame

FRAMES, HEIGHT, WIDTH = 8, 480, 832
# Wan 2.1's 720p sampling: 81 frames of 1280x720.
CLIP_FRAMES, CLIP_HEIGHT, CLIP_WIDTH = 81, 720, 1280


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


def long_clip(frames: int) -> dict[str, float]:
    """Measure a 720p uint8 clip pair as `registry evidence frames` does; run in a child process by main."""
    from registry.evidence.perceptual import measure_perceptual

    rng = np.random.default_rng(0)
    reference = rng.integers(0, 256, (frames, CLIP_HEIGHT, CLIP_WIDTH, 3), dtype=np.uint8)
    candidate = reference.copy()
    candidate[:, ::3] ^= 5  # every third row slightly off: a realistic, imperfect candidate
    holding = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    item = measure_perceptual(reference, candidate, frame_set="wan-720p", seed=0)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"frames": len(item["ssim"]), "inputs_mib": (reference.nbytes + candidate.nbytes) / 2**20,
            "seconds": seconds, "rss_holding_mib": holding / 2**20, "peak_rss_mib": peak / 2**20,
            "beyond_mib": (peak - holding) / 2**20, "worst_ssim": min(item["ssim"])}


def report_long_clip(frames: int) -> None:
    child = subprocess.run([sys.executable, __file__, "--long-clip-child", str(frames)], capture_output=True,
                           text=True, check=True)
    found = json.loads(child.stdout)
    print(f"\nclip: {found['frames']} x {CLIP_HEIGHT}x{CLIP_WIDTH}x3 uint8 through measure_perceptual "
          f"(SSIM; LPIPS not requested), a fresh process")
    print(f"input frames:       {found['inputs_mib']:.0f} MiB (both clips, uint8)")
    print(f"time:               {found['seconds']:.2f} s  (worst SSIM {found['worst_ssim']:.4f})")
    print(f"peak RSS:           {found['peak_rss_mib']:.0f} MiB; holding the clips {found['rss_holding_mib']:.0f} MiB; "
          f"the measurement added {found['beyond_mib']:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="ABBA rounds (each times both twice)")
    parser.add_argument("--clip-frames", type=int, default=CLIP_FRAMES, help="frames of the 720p clip pair")
    parser.add_argument("--long-clip-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.long_clip_child is not None:
        print(json.dumps(long_clip(args.long_clip_child)))
        return
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
    report_long_clip(args.clip_frames)


if __name__ == "__main__":
    main()
