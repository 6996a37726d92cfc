"""One read of the read models: a transaction that sees a single committed state, and its checkpoint.

Every question module reads through these, and so does the catch-up when it
reads where the read models stand; `replay --verify` compares in one.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import Connection, select
from sqlalchemy.exc import DBAPIError

from registry.events.errors import StoreError
from registry.formats.errors import first_line

from .read_models import CHECKPOINT

CHECKPOINT_NAME = "log"


@contextmanager
def snapshot(engine) -> Iterator[Connection]:
    """One read transaction that sees a single committed state of every table.

    SQLite's WAL readers already see one snapshot per transaction; Postgres
    needs REPEATABLE READ for that (READ COMMITTED re-snapshots per statement).
    """
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


@contextmanager
def reading(engine) -> Iterator[Connection]:
    """One snapshot for a lookup by a caller's key; a driver refusal (Postgres and a NUL) is one line."""
    try:
        with snapshot(engine) as conn:
            yield conn
    except DBAPIError as exc:
        cause = first_line(exc.orig)
        raise StoreError(f"could not read the projections: {cause}") from None


# Built once (as are the other statements a pair batch runs): building a Core statement costs more CPU than
# running it, about 0.2 ms each on the 2-core machine.
_CHECKPOINT = select(CHECKPOINT.c.position).where(CHECKPOINT.c.name == CHECKPOINT_NAME)


def read_checkpoint(conn: Connection) -> int | None:
    """The log position every read-model row is folded up to (None before the first catch-up)."""
    return conn.execute(_CHECKPOINT).scalar()
