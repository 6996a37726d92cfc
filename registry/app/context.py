"""Opening a registry: the store, its units of work on the read side, who is acting, and closing it all.

A `Registry` owns what `open_registry` built (the engine and its pool of
connections) and disposes of it when closed (`close`, or leaving a `with`
block): a command closes what it opened (registry/cli/session.py), a server
closes its one registry when it stops. `acting(actor)` is the same registry
for another actor (a server's request), owning nothing.
"""
from __future__ import annotations

import dataclasses
import getpass
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from registry.events.database import make_engine, open_existing, release_engine, resolve_url, upgrade
from registry.events.store import EventStore
from registry.formats.names import check_name

if TYPE_CHECKING:
    from registry.projections.view import View


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
    owns_engine: bool = True
    closed: bool = field(default=False, init=False, repr=False)

    def view(self, as_of: int | None = None) -> View:
        """One unit of work (registry/projections/view.py), to enter with `with`: one catch-up, one snapshot,
        the answers of the read models, and appends as this registry's actor. As of an earlier position it
        folds the log up to it instead, and writes nothing."""
        from registry.projections.view import View

        return View(self.store, actor=self.actor, as_of=as_of)

    def acting(self, actor: str) -> Registry:
        """This registry, for another actor (a server's request): the same engine and store, owning neither."""
        return dataclasses.replace(self, actor=actor, owns_engine=False)

    def close(self) -> None:
        """Close every connection this registry opened (the engine's pool; this thread's append connection).

        On SQLite the last connection to close checkpoints the write-ahead log
        into the database file, so a registry closed here leaves no change to
        that file for a garbage collector to make later. The engine, its pool
        empty, is kept for the next open of the same database in this process
        (`release_engine`), so closing twice closes once.
        """
        if self.owns_engine and not self.closed:
            self.closed = True
            self.store.close()
            release_engine(self.engine)

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


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
    engine = make_engine(resolved) if create else open_existing(resolved, upgrading=upgrading, read_only=read_only)
    try:
        store = EventStore(engine)
        if create or upgrading:
            upgrade(engine)
            _restore_read_models(store)
    except BaseException:  # a refused upgrade, say: nothing opened is left open
        release_engine(engine)
        raise
    return Registry(engine=engine, store=store, actor=actor)


def _restore_read_models(store: EventStore) -> None:
    """`init` and `db upgrade` create a dropped read-model table again and fold the log into all of them.

    A missing table leaves the checkpoint describing rows that are gone, so
    the read models are rebuilt whole (`ReadModels.reset`), never caught up.
    """
    from registry.projections.catchup import ReadModels, create_missing_tables

    if create_missing_tables(store.engine):
        ReadModels(store).reset()
