"""Helpers for tests that act on a registry database: opening one the test's teardown closes, and acting on it
the way an attacker with file access would."""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy import Engine

from registry.app import Registry, open_registry
from registry.events.database import make_engine, upgrade
from registry.events.store import EventStore, NewEvent

# What the helpers below opened during the current test; tests/conftest.py closes them at its end.
_OPENED: list[Callable[[], None]] = []


def opened(url: str, **options: Any) -> Registry:
    """`open_registry(url, **options)`, closed when the test ends."""
    registry = open_registry(url, **options)
    _OPENED.append(registry.close)
    return registry


def made_engine(url: str, **options: Any) -> Engine:
    """`make_engine(url, **options)`, disposed of when the test ends."""
    engine = make_engine(url, **options)
    _OPENED.append(engine.dispose)
    return engine


def opened_store(url: str, *, migrate: bool = False) -> EventStore:
    """A store on a new engine for `url` (its schema upgraded first with `migrate`), disposed of when the test
    ends."""
    engine = made_engine(url)
    if migrate:
        upgrade(engine)
    return EventStore(engine)


def head_of(url: str) -> int:
    """The log's head position of the registry at `url`, read and closed."""
    with open_registry(url) as registry:
        return registry.store.head_position()


def close_opened() -> None:
    while _OPENED:
        _OPENED.pop()()

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
