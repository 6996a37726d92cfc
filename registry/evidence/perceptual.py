"""Measure a candidate's frames against the reference frames: one ``perceptual`` evidence item.

The item carries per-frame values only (SSIM and LPIPS per frame pair); the
registry picks the worst frame itself (min SSIM, max LPIPS), so a single
broken frame cannot hide behind a good average (docs/architecture.md, "Perceptual
harness"). VBench is never computed here: a score produced elsewhere may be
passed in and is only range-checked. A metric that could not be measured is
``null`` with its reason under ``absent`` (the gate holds on it), never a
substituted number.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from registry.formats.errors import UserError, first_line
from registry.evidence.frames import check_frames, check_pair
from registry.evidence.lpips_backend import Absent
from registry.evidence.ssim import BACKEND as SSIM_BACKEND
from registry.evidence.ssim import iter_ssim
from registry.formats.fields import is_finite_number


class LpipsScorer(Protocol):
    """What :func:`measure_perceptual` needs of an LPIPS backend."""

    name: str
    version: str

    def distance_per_frame(self, ref_frames: Any, cand_frames: Any) -> list[float]: ...


def _checked_vbench(vbench: float | None) -> float | None:
    if vbench is None:
        return None
    if isinstance(vbench, bool) or not isinstance(vbench, (int, float)):
        raise UserError(f"vbench must be a number in [0, 1] or None, got {type(vbench).__name__}")
    value = float(vbench)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise UserError(f"vbench must be a finite score in [0, 1], got {value!r}")
    return value


def _score_one(scorer: LpipsScorer, ref: Any, cand: Any, index: int) -> float | Absent:
    """One frame pair's LPIPS, or why there is none (a failed or nonsensical scorer)."""
    try:
        values = scorer.distance_per_frame(ref, cand)
    except (RuntimeError, MemoryError) as exc:
        return Absent(f"LPIPS scorer failed at frame {index}: {type(exc).__name__}: {first_line(exc)}")
    value = values[0] if isinstance(values, list) and len(values) == 1 else None
    if not is_finite_number(value) or value < 0.0:
        return Absent(f"LPIPS scorer returned {values!r} for frame {index}; expected one finite distance >= 0")
    return float(value)


def _checked_labels(frame_set: str, seed: int) -> None:
    if not isinstance(frame_set, str) or not frame_set.strip():
        raise UserError(f"frame_set must be a non-empty name, got {frame_set!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UserError(f"seed must be an integer, got {seed!r}")


def measure_perceptual(
    reference: Any,
    candidate: Any,
    *,
    frame_set: str,
    seed: int,
    vbench: float | None = None,
    lpips: LpipsScorer | Absent | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Score every frame pair and return a ``perceptual`` evidence item (docs/evidence-format.md).

    ``lpips`` is a backend from :func:`registry.evidence.lpips_backend.get_lpips_backend`,
    the :class:`Absent` it returned, or None when no LPIPS was requested. A
    backend that fails while scoring (``RuntimeError`` such as out of memory,
    or ``MemoryError``) makes LPIPS absent with the reason; SSIM is still
    measured on every frame. ``progress(done, total)`` is called after each
    frame pair.
    """
    _checked_labels(frame_set, seed)
    vbench_value = _checked_vbench(vbench)
    # Checked but not converted: SSIM and LPIPS convert one frame pair at a time.
    ref = check_frames(reference, "reference")
    cand = check_frames(candidate, "candidate")
    check_pair(ref, cand)
    total = len(ref)

    absent: dict[str, str] = {}
    backends = {"ssim": SSIM_BACKEND}
    scorer: LpipsScorer | None = None
    if lpips is None:
        absent["lpips"] = "no LPIPS backend was supplied to the measurement"
    elif isinstance(lpips, Absent):
        absent["lpips"] = lpips.reason
    else:
        scorer = lpips
    if vbench_value is None:
        absent["vbench"] = "no VBench score was passed in (VBench is measured outside the registry)"

    ssim_values: list[float] = []
    lpips_values: list[float] = []
    for index, value in enumerate(iter_ssim(ref, cand)):
        ssim_values.append(value)
        if scorer is not None:
            distance = _score_one(scorer, ref[index : index + 1], cand[index : index + 1], index)
            if isinstance(distance, Absent):
                absent["lpips"] = distance.reason
                scorer = None
            else:
                lpips_values.append(distance)
        if progress is not None:
            progress(index + 1, total)

    item: dict[str, Any] = {
        "kind": "perceptual",
        "frame_set": frame_set,
        "seed": seed,
        "frames": total,
        "ssim": ssim_values,
        "lpips": None if "lpips" in absent else lpips_values,
        "vbench": vbench_value,
        "stage_status": "ok",
    }
    if scorer is not None:
        backends["lpips"] = f"{scorer.name} {scorer.version}"
    item["backends"] = backends
    if absent:
        item["absent"] = absent
    return item
