"""The frame sets read model: one row per frame set, its `FrameSetRegistered` payload and where it was registered.

A frame set is the fixed-seed frames a perceptual contract names
(docs/perceptual.md); registering the same name again replaces the row with
the later payload.
"""
# No `from __future__ import annotations`: TypedDict reads its annotations evaluated.
from typing import Protocol, TypedDict

from sqlalchemy import BigInteger, Column

from registry.formats.names import FRAMESET_PREFIX, frameset_stream

from ..log import LogEvent
from .declaration import ReadModel, same_subject, state_table

VERSION = 1


class FrameSetState(TypedDict):
    """A frame set: its `FrameSetRegistered` payload, and where it was registered."""

    name: str
    seed: int
    frames: int
    height: int
    width: int
    channels: int
    dtype: str
    sha256: str
    source: str | None
    position: int


class FrameSets(Protocol):
    """What this model's handler folds into (RegistryState): the frame sets by name."""

    framesets: dict[str, FrameSetState]


FRAMESETS = state_table("projection_framesets", "name", Column("position", BigInteger, nullable=False))


def _registered(state: FrameSets, event: LogEvent) -> None:
    payload = event.payload
    same_subject(event, frameset_stream(payload["name"]), event.stream)
    state.framesets[payload["name"]] = {**payload, "position": event.position}  # type: ignore[typeddict-item]


DECLARATION = ReadModel(
    name="framesets", version=VERSION, row_type=FrameSetState, singular="frame set",
    folds={"FrameSetRegistered": _registered},
    table=FRAMESETS, key=("name",),
    stream_prefix=FRAMESET_PREFIX,
)
