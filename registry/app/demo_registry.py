"""The demo's own database: created by the demo, marked as such, and the only one it ever deletes.

`registry demo --fresh` starts over by deleting a database, so it must know
the database is its own. A registry is never deleted by any command, and a
shell that exports REGISTRY_DATABASE_URL must not turn `make demo` into the
deletion of a production registry. Hence:

- the demo's database is `demo.db` in the current directory, or the SQLite
  file named by `--db`; REGISTRY_DATABASE_URL is never consulted;
- a database the demo creates is marked in its SQLite header: the
  `application_id` field (offset 68, the field SQLite reserves for telling
  which application a file belongs to) is set to DEMO_APPLICATION_ID;
- the demo writes only to a database it creates now or one that carries the
  mark, and `--fresh` deletes only a marked one. Anything else is refused
  before a byte is read through SQLite or written.

The mark is read from the file's first 100 bytes with an ordinary read, so
checking a database that is not the demo's changes nothing in it.
"""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from registry.formats.errors import UserError
from .context import Registry, open_registry

DEMO_FILE = "demo.db"
# "RgDm": what SQLite's header field application_id holds in a database the demo created.
DEMO_APPLICATION_ID = int.from_bytes(b"RgDm", "big")
SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100
APPLICATION_ID_OFFSET = 68
# The files SQLite keeps beside a database in WAL or rollback-journal mode.
SIDE_FILES = ("-wal", "-shm", "-journal")


def demo_database_path(url: str | None) -> Path:
    """The demo's SQLite file: `url` when given (it must name an SQLite file), else demo.db here."""
    if url is None:
        return Path(DEMO_FILE)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"--db {url!r} is not a database URL") from None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        raise UserError(
            f"--db {parsed.render_as_string(hide_password=True)}: the demo runs only on an SQLite file of its own "
            "(--db sqlite:///PATH, default demo.db); it never writes to another database")
    return Path(parsed.database)


def is_demo_database(path: Path) -> bool:
    """Whether the regular file at `path` is an SQLite database that carries the demo's mark."""
    if not path.is_file():
        return False
    with path.open("rb") as handle:
        header = handle.read(HEADER_BYTES)
    if len(header) < HEADER_BYTES or not header.startswith(SQLITE_MAGIC):
        return False
    return int.from_bytes(header[APPLICATION_ID_OFFSET:APPLICATION_ID_OFFSET + 4], "big") == DEMO_APPLICATION_ID


def open_demo_registry(url: str | None, *, actor: str | None, fresh: bool) -> tuple[Registry, str]:
    """Open the demo's registry (creating and marking it when absent; with `fresh`, deleting a marked one first).

    Returns the registry and its URL. Refuses, changing nothing, a path that
    holds anything but a database the demo created.
    """
    path = demo_database_path(url)
    if path.exists() or path.is_symlink():
        if not is_demo_database(path):
            raise UserError(
                f"{path} was not created by `registry demo` (it lacks the demo's mark); the demo never writes to "
                "or deletes it: move it away or pass --db sqlite:///NEW_FILE")
        if fresh:
            _delete(path)
    url = f"sqlite:///{path}"
    created = not path.exists()
    registry = open_registry(url, actor=actor, create=True)
    if created:
        _mark(registry, path)
    return registry, url


def remove_if_demo(path: str | Path) -> bool:
    """Delete the database at `path` (and SQLite's side files) only if the demo created it (`make clean`)."""
    path = Path(path)
    if not is_demo_database(path):
        return False
    _delete(path)
    return True


def _delete(path: Path) -> None:
    for suffix in ("", *SIDE_FILES):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _mark(registry: Registry, path: Path) -> None:
    """Set the demo's application_id and checkpoint, so the mark is in the main file's header on disk."""
    registry.engine.dispose()
    with closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA application_id = {DEMO_APPLICATION_ID}")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if not is_demo_database(path):
        raise OSError(f"could not mark {path} as the demo's database")
