"""The one writer for files the registry creates: locks, attestations, reports, keys, bundles, emitted evidence.

A file is never written through a name that already exists. Its bytes go to
a temporary file the registry creates itself, in the target's directory, with
`mkstemp` (O_CREAT | O_EXCL, which follows no link: a planted link at any
name is a refusal to create, never a write through it), and it is then put
in place by `rename` (which replaces a name, never what a link at that name
points to) or, for a file that must never replace anything (a key), by
`link`, which fails when the name exists.

The guard ("no command overwrites a registry") is applied to the final name
as the name itself, not what it points to (lstat): a link there is refused,
even with --force, since replacing it would silently retarget what the user
named; anything but a regular file is refused; an SQLite database is refused
even with --force; any other existing file needs --force. It is checked
before anything is computed (one line, nothing written) and again just
before the rename, so a name that changed meanwhile is still held to it.
Pure: the standard library only (formats/ is the bottom layer).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import UserError

# The first bytes of every SQLite database file (https://www.sqlite.org/fileformat.html, 1.3).
SQLITE_HEADER = b"SQLite format 3\x00"


def check_output(path: str | os.PathLike, force: bool, option: str = "--out",
                 error: type[UserError] = UserError) -> Path:
    """Where a command may write a file: a new name, or with --force an existing regular file that is not a registry.

    Refused in one line (`error`): a link at the name (whatever it points
    to, dangling or not), anything that is not a regular file, an SQLite
    database (a registry, or the very one being read) even with --force,
    any other existing file without --force.
    """
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise error(f"{option} {path}: cannot be examined: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise error(f"{option} {path}: is a symbolic link, and the registry never writes through one; "
                    "name a new file")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{option} {path}: exists and is not a regular file; name a new file")
    if _is_sqlite(target):
        raise error(f"{option} {path}: is an SQLite database (a registry?), and no command overwrites one; "
                    "name another file")
    if not force:
        raise error(f"{option} {path}: exists; give --force to replace it")
    return target


def write_output(path: str | os.PathLike, data: str | bytes, *, force: bool, option: str = "--out",
                 error: type[UserError] = UserError) -> Path:
    """Write `data` (str as UTF-8) to `path` under the guard: a fresh temporary file there, then renamed into place."""
    target = check_output(path, force, option, error)
    temporary = _written_temporary(target, data, 0o666 & ~_umask(), option, error)
    try:
        check_output(target, force, option, error)
        os.replace(temporary, target)
    except BaseException:
        _discard(temporary)
        raise
    return target


def write_new(path: str | os.PathLike, data: str | bytes, *, mode: int, what: str = "file",
              error: type[UserError] = UserError) -> Path:
    """Create `path` holding `data`, never replacing anything at that name (link or file), with `mode` whatever the umask."""
    target = Path(path)
    if os.path.lexists(target):
        raise error(f"{target}: already exists; a {what} is never overwritten")
    temporary = _written_temporary(target, data, mode, str(target), error)
    try:
        os.link(temporary, target, follow_symlinks=False)
    except FileExistsError:
        raise error(f"{target}: already exists; a {what} is never overwritten") from None
    except OSError as exc:
        raise error(f"{target}: cannot create the {what}: {exc.strerror}") from None
    finally:
        _discard(temporary)
    return target


def _written_temporary(target: Path, data: str | bytes, mode: int, option: str,
                       error: type[UserError]) -> Path:
    """A new file beside `target` (created exclusively, no link followed) holding `data`, flushed to disk."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    except OSError as exc:
        raise error(f"{option} {target}: cannot create a file in {target.parent}: {exc.strerror}") from None
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _discard(temporary)
        raise
    return temporary


def _is_sqlite(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER


def _umask() -> int:
    """The process's umask (read by setting it and restoring it at once: the only way POSIX offers)."""
    current = os.umask(0o022)
    os.umask(current)
    return current


def _discard(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
