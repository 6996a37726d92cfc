"""Reference frame sets and perceptual evidence measured against them.

`measure_frames` is the one use case that measures an artifact's frames and
records the result: it captures the artifact's registration before measuring
and records for exactly that registration (app/evidence.py), or not at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from registry.formats.errors import UserError
from registry.events.store import NewEvent
from registry.events.types import FrameSetRegistered
from registry.formats.names import check_name, check_seed, frameset_stream
from registry.formats.text import text_arguments

from .context import Registry
from .evidence import Recorded, capture_subject, record_evidence


@text_arguments
def register_frames(registry: Registry, name: str, frames: np.ndarray, seed: int, source: str | None = None) -> tuple[dict, bool]:
    """Record a named, seeded frame set by the hash of its pixels; the same name with other content is refused."""
    event = describe_frames(name, frames, seed, source)
    with registry.view() as view:
        existing = view.frameset(name)
        if existing is not None:
            payload = {key: value for key, value in existing.items() if key != "position"}
            if payload["sha256"] != event.sha256 or payload["seed"] != seed:
                raise UserError(
                    f"frame set {name} is already registered with other content "
                    f"(sha256 {payload['sha256'][:12]}, seed {payload['seed']}); choose a new name"
                )
            return payload, False
        view.append(frameset_stream(name), [NewEvent(event.type, event)], expected_version=0)
    return event.model_dump(), True


def describe_frames(name: str, frames: np.ndarray, seed: int, source: str | None = None) -> FrameSetRegistered:
    """A named, seeded frame set as its registration records it (the hash of its pixels), appending nothing."""
    check_name(name, "frame set name")
    check_seed(seed, "seed")
    digest = pixel_digest(frames)  # validates the frames before their shape is read
    count, height, width, channels = frames.shape
    return FrameSetRegistered(name=name, seed=seed, frames=count, height=height, width=width, channels=channels,
                              dtype=str(frames.dtype), sha256=digest, source=source)


def pixel_digest(frames: np.ndarray) -> str:
    """The hex sha256 of validated frames' decoded pixels, dtype and shape (see evidence.frames)."""
    from registry.evidence.frames import frames_digest

    return frames_digest(frames).removeprefix("sha256:")


def registered_frames(registry: Registry, name: str) -> dict:
    """The frame set as registered (its `FrameSetRegistered` payload), from its read model."""
    with registry.view() as view:
        found = view.frameset(name)
    if found is None:
        raise UserError(f"unknown frame set {name!r} (register it with `registry frames register`)")
    return {key: value for key, value in found.items() if key != "position"}


def load_reference(registry: Registry, name: str, path: str | Path) -> tuple[dict, np.ndarray]:
    """Load the reference frames from `path` and prove they are the registered ones."""
    from registry.evidence.frames import load_frames

    registered = registered_frames(registry, name)
    frames = load_frames(path)
    digest = pixel_digest(frames)
    if digest != registered["sha256"]:
        raise UserError(
            f"reference frames at {path} do not match frame set {name} "
            f"(sha256 {digest[:12]} != registered {registered['sha256'][:12]})"
        )
    return registered, frames


def measure_against_reference(
    registered: dict,
    reference: np.ndarray,
    candidate: np.ndarray,
    *,
    seed: int,
    vbench: float | None,
    lpips_backbone: str | None,
    lpips_sha256: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """A perceptual evidence item for `candidate` against the registered reference frames."""
    from registry.evidence.frames import check_pair
    from registry.evidence.lpips_backend import get_lpips_backend
    from registry.evidence.perceptual import measure_perceptual

    if seed != registered["seed"]:
        raise UserError(f"candidate seed {seed} differs from frame set {registered['name']}'s seed {registered['seed']}")
    check_pair(reference, candidate)
    backend = get_lpips_backend(backbone_path=lpips_backbone, expected_sha256=lpips_sha256)
    return measure_perceptual(reference, candidate, frame_set=registered["name"], seed=seed, vbench=vbench,
                              lpips=backend, progress=progress)


@dataclass(frozen=True)
class FramesEvidence:
    artifact: str
    item: dict[str, Any]
    recorded: Recorded


def measure_frames(
    registry: Registry,
    artifact: str,
    *,
    frame_set: str,
    candidate_path: str | Path,
    reference_path: str | Path | None,
    seed: int | None,
    vbench: float | None,
    lpips_backbone: str | None,
    lpips_sha256: str | None = None,
    run: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FramesEvidence:
    """Measure ARTIFACT's frames against a registered frame set and record the perceptual item."""
    from registry.evidence.frames import load_frames
    from registry.formats.evidence.items import parse_item

    subject = capture_subject(registry, artifact)
    registered = registered_frames(registry, frame_set)
    source = reference_path or registered["source"]
    if not source:
        raise UserError(f"frame set {frame_set} records no source path; give --reference-path")
    registered, reference = load_reference(registry, frame_set, source)
    candidate = load_frames(candidate_path)
    item = measure_against_reference(registered, reference, candidate,
                                     seed=registered["seed"] if seed is None else seed, vbench=vbench,
                                     lpips_backbone=lpips_backbone, lpips_sha256=lpips_sha256, progress=progress)
    recorded = record_evidence(registry, subject, [parse_item(item, "perceptual")], run)
    return FramesEvidence(artifact, item, recorded)
