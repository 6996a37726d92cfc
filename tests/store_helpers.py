"""Helpers for tests that act on a registry database the way an attacker with file access would."""
from __future__ import annotations

from sqlalchemy import Engine

from registry.events.store import NewEvent

SHA = "ab" * 32


def frame_event(name: str = "f", seed: int = 1) -> NewEvent:
    return NewEvent(
        "FrameSetRegistered",
        {"name": name, "seed": seed, "frames": 2, "height": 16, "width": 16, "channels": 3, "dtype": "uint8", "sha256": SHA},
    )


def raw(engine: Engine, *statements: str) -> None:
    """Run SQL outside the store, in one transaction."""
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def drop_immutability(engine: Engine) -> None:
    if engine.dialect.name == "postgresql":
        raw(engine, "DROP TRIGGER events_immutable ON events")
    else:
        raw(engine, "DROP TRIGGER events_no_update", "DROP TRIGGER events_no_delete")
