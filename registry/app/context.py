"""Opening a registry: the store plus who is acting."""
from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass

from sqlalchemy import Engine

from registry.events.database import check_schema, make_engine, resolve_url, upgrade
from registry.events.store import EventStore


def default_actor(explicit: str | None = None) -> str:
    """--actor, else REGISTRY_ACTOR, else user@host."""
    if explicit:
        return explicit
    if os.environ.get("REGISTRY_ACTOR"):
        return os.environ["REGISTRY_ACTOR"]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class Registry:
    engine: Engine
    store: EventStore
    actor: str


def open_registry(url: str | None = None, *, actor: str | None = None, create: bool = False) -> Registry:
    """Open (or, with create=True, create or upgrade) the registry at `url`."""
    engine = make_engine(resolve_url(url), must_exist=not create)
    if create:
        upgrade(engine)
    else:
        check_schema(engine)
    return Registry(engine=engine, store=EventStore(engine), actor=default_actor(actor))
