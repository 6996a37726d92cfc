"""Opening a registry: the store, its read side and who is acting."""
from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from registry.events.database import make_engine, open_existing, resolve_url, upgrade
from registry.events.store import EventStore
from registry.formats.names import check_name

if TYPE_CHECKING:
    from registry.projections import Projections


def default_actor(explicit: str | None = None) -> str:
    """--actor, else REGISTRY_ACTOR, else user@host; whichever it is must be a name (registry.formats.names)."""
    if explicit is not None:
        return check_name(explicit, "--actor")
    if os.environ.get("REGISTRY_ACTOR"):
        return check_name(os.environ["REGISTRY_ACTOR"], "REGISTRY_ACTOR")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return check_name(f"{user}@{socket.gethostname()}", "actor from the login and host names (give --actor)")


@dataclass
class Registry:
    engine: Engine
    store: EventStore
    actor: str

    @cached_property
    def reads(self) -> Projections:
        """The registry's read side (registry.projections.live), composed once per registry, on first use.

        Every use case asks its questions here: the live read models, caught
        up before each answer, and the as-of answers folded from the log.
        """
        from registry.projections import Projections

        return Projections(self.store)


def open_registry(url: str | None = None, *, actor: str | None = None, create: bool = False,
                  upgrading: bool = False, read_only: bool = False) -> Registry:
    """Open the registry at `url`.

    Only `create` (`registry init`) makes a registry, or upgrades one; without
    it anything that is not a registry is refused and left untouched, and a
    registry this process may not write is opened read-only (see
    `open_existing`). `upgrading` (`db upgrade`) brings an existing registry's
    older schema to this code's head; either also recreates a dropped read-model
    table and rebuilds the read models from the log. `read_only` opens a SQLite registry
    read-only even where it could be written, for commands that only read the
    log. The actor is checked first, so a refused name leaves no database
    created.
    """
    actor = default_actor(actor)
    resolved = resolve_url(url)
    if create:
        engine = make_engine(resolved)
        upgrade(engine)
    else:
        engine = open_existing(resolved, upgrading=upgrading, read_only=read_only)
        if upgrading:
            upgrade(engine)
    store = EventStore(engine)
    if create or upgrading:
        _restore_read_models(store)
    return Registry(engine=engine, store=store, actor=actor)


def _restore_read_models(store: EventStore) -> None:
    """`init` and `db upgrade` create a dropped read-model table again and fold the log into all of them.

    A missing table leaves the checkpoint describing rows that are gone, so
    the read models are rebuilt whole (`Projections.reset`), never caught up.
    """
    from registry.projections import Projections
    from registry.projections.catchup import create_missing_tables

    if create_missing_tables(store.engine):
        Projections(store).reset()
