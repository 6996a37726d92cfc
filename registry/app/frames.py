"""Reference frame sets and perceptual evidence measured against them."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from registry.contracts.names import check_name, check_seed
from registry.events.store import NewEvent
from registry.events.types import FrameSetRegistered

from .context import Registry
from .evidence import Recorded, record_evidence


def frameset_stream(name: str) -> str:
    return f"frameset:{name}"


def register_frames(registry: Registry, name: str, frames: np.ndarray, seed: int, source: str | None = None) -> tuple[dict, bool]:
    """Record a named, seeded frame set by the hash of its pixels; the same name with other content is refused."""
    check_name(name, "frame set name")
    check_seed(seed, "seed")
    digest = pixel_digest(frames)
    stream = frameset_stream(name)
    existing = registry.store.read_stream(stream)
    if existing:
        payload = existing[-1].payload
        if payload["sha256"] != digest or payload["seed"] != seed:
            raise ValueError(
                f"frame set {name} is already registered with other content "
                f"(sha256 {payload['sha256'][:12]}, seed {payload['seed']}); choose a new name"
            )
        return payload, False
    count, height, width, channels = frames.shape
    event = FrameSetRegistered(name=name, seed=seed, frames=count, height=height, width=width, channels=channels,
                               dtype=str(frames.dtype), sha256=digest, source=source)
    registry.store.append(stream, [NewEvent(event.type, event)], expected_version=0, actor=registry.actor)
    return event.model_dump(), True


def pixel_digest(frames: np.ndarray) -> str:
    """The hex sha256 of validated frames' decoded pixels, dtype and shape (see evidence.frames)."""
    from registry.evidence.frames import frames_digest

    return frames_digest(frames).removeprefix("sha256:")


def registered_frames(registry: Registry, name: str) -> dict:
    events = registry.store.read_stream(frameset_stream(name))
    if not events:
        raise ValueError(f"unknown frame set {name!r} (register it with `registry frames register`)")
    return events[-1].payload


def load_reference(registry: Registry, name: str, path: str | Path) -> tuple[dict, np.ndarray]:
    """Load the reference frames from `path` and prove they are the registered ones."""
    from registry.evidence.frames import load_frames

    registered = registered_frames(registry, name)
    frames = load_frames(path)
    digest = pixel_digest(frames)
    if digest != registered["sha256"]:
        raise ValueError(
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
        raise ValueError(f"candidate seed {seed} differs from frame set {registered['name']}'s seed {registered['seed']}")
    check_pair(reference, candidate)
    backend = get_lpips_backend(backbone_path=lpips_backbone, expected_sha256=lpips_sha256)
    return measure_perceptual(reference, candidate, frame_set=registered["name"], seed=seed, vbench=vbench,
                              lpips=backend, progress=progress)


def record_frames_evidence(registry: Registry, artifact: str, item: dict[str, Any], run: str | None = None) -> Recorded:
    """Validate the measured item like any imported evidence, then append it."""
    from registry.evidence.document import parse_item

    return record_evidence(registry, artifact, [parse_item(item, "perceptual")], run)
