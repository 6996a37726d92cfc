"""Which lock files a runtime believes: signed by a trusted key, unexpired, and not older than one it has seen.

`open_trusted_lock` is the runtime's only way to read a lock. A lock in a
DSSE envelope must verify with one of the trusted public keys and must not
have expired (registry.bundles.signed_lock); an unsigned lock is refused
unless the caller passes the loudly named opt-in
`insecure_allow_unsigned_lock=True` (and each such load logs a warning). The
lock must be for the workload asked. Then `LockHistory` refuses a lock older
than the newest one this process already accepted for the same log and
workload: a rollback or a replay of a stale lock (The Update Framework's
rule for metadata versions). Every refusal is a LockRefused with a code from
LOCK_REFUSALS, raised before anything is resolved or imported.
"""
from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Iterable, Union

from registry.bundles import BundleError, Lock
from registry.bundles.dsse import is_envelope
from registry.bundles.keys import PublicKey, TrustedKeys, load_public_key
from registry.bundles.lock import lock_from_json, read_lock_json
from registry.bundles.signed_lock import LockRefused, authenticate, older_than

log = logging.getLogger("registry.runtime")
TrustedKeySource = Union[TrustedKeys, Iterable[Union[str, os.PathLike, PublicKey]], None]


class LockHistory:
    """The newest lock accepted per (log, workload) in this process; an older one is refused as a rollback."""

    def __init__(self) -> None:
        self._newest: dict[tuple[str | None, str], Lock] = {}
        self._guard = threading.Lock()

    def admit(self, lock: Lock, source: str) -> None:
        key = (lock.log_origin, lock.workload)
        with self._guard:
            newest = self._newest.get(key)
            why = None if newest is None else older_than(lock, newest)
            if why:
                raise LockRefused("rollback", f"{source}: older than a lock this process already accepted: {why}")
            self._newest[key] = lock


PROCESS_HISTORY = LockHistory()


def trusted_keys(source: TrustedKeySource) -> TrustedKeys | None:
    """The trusted keys given as a TrustedKeys, or as public key files and PublicKeys."""
    if source is None or isinstance(source, TrustedKeys):
        return source
    return TrustedKeys(tuple(k if isinstance(k, PublicKey) else load_public_key(k) for k in source))


def open_trusted_lock(path: str | Path, workload: str, keys: TrustedKeySource, *,
                      insecure_allow_unsigned_lock: bool = False, history: LockHistory = PROCESS_HISTORY,
                      now: datetime | None = None) -> Lock:
    """The lock at `path` if this runtime may believe it (see the module docstring); else LockRefused."""
    source = str(path)
    try:
        data = read_lock_json(path)
    except BundleError as exc:
        raise LockRefused("malformed", str(exc)) from None
    if is_envelope(data):
        trusted = trusted_keys(keys)
        if trusted is None:
            raise LockRefused("untrusted_key", f"{source}: the lock is signed, but no trusted key was given "
                                               "(trusted_keys=...)")
        lock = authenticate(data, trusted, source, now=now)
    elif insecure_allow_unsigned_lock:
        try:
            lock = lock_from_json(data, source)
        except BundleError as exc:
            raise LockRefused("malformed", str(exc)) from None
        log.warning("INSECURE: %s is an unsigned lock, loaded only because insecure_allow_unsigned_lock=True: "
                    "anyone who can write it chooses what this process runs", source)
    else:
        raise LockRefused("unsigned", f"{source}: the lock is not signed; a runtime loads only locks signed by a "
                                      "trusted key (insecure_allow_unsigned_lock=True opts in to unsigned ones)")
    if lock.workload != workload:
        raise LockRefused("wrong_workload", f"{source}: the lock is for workload {lock.workload!r}, not {workload!r}")
    history.admit(lock, source)
    return lock
