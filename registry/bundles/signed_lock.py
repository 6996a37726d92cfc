"""Signed lock files: a lock nobody but the key holder could have written, valid for a bounded time. Pure.

`sign_lock` puts a lock document (with its issue time `exported_at` and an
expiry `expires_at`) into a DSSE envelope of type LOCK_PAYLOAD_TYPE signed
by the registry's key. `open_lock` is the only way a verifier takes a lock:
the envelope's signature must verify with a trusted key, over exactly the
payload bytes that are then parsed, and the lock must not have expired. Each
refusal is a `LockRefused` with a stable code from LOCK_REFUSALS.

Freshness follows The Update Framework's expiring metadata: a revocation
reaches a machine that never talks to the registry at the latest when the
lock it holds expires, so the expiry is the revocation window
(docs/bundles.md, "Freshness"). `older_than` orders two locks of a workload,
so a verifier that remembers the newest lock it accepted refuses one older
(a rollback or a replay).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from registry.formats.errors import UserError
from .dsse import SignatureRefused, is_envelope, parse_envelope, sign, verify
from .keys import SigningKey, TrustedKeys
from .lock import Lock, parse_lock, payload_json, read_lock_json
from .manifest import BundleError

LOCK_PAYLOAD_TYPE = "application/vnd.registry.lock+json"
DEFAULT_VALID_FOR = timedelta(days=7)
MAX_VALID_FOR = timedelta(days=366)

# Code -> meaning. Stable: verifiers log them, and they only ever gain members.
LOCK_REFUSALS: dict[str, str] = {
    "malformed": "the file is not a lock in a DSSE envelope, or its signed payload is not a valid lock",
    "unsigned": "the lock carries no signature (loading one needs an explicit opt-in)",
    "untrusted_key": "the lock is signed, but by no key the verifier trusts",
    "bad_signature": "a trusted key's signature does not verify: the lock was changed after signing, or the "
                     "signature is damaged",
    "expired": "the lock's expiry has passed: fetch a refreshed lock (`registry lock --refresh`)",
    "rollback": "the lock is older than one this verifier already accepted for the workload",
    "wrong_workload": "the lock is for another workload than the one asked",
}


class LockRefused(UserError):
    """A lock a verifier does not accept; `code` is one of LOCK_REFUSALS, `detail` one line."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


def timestamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def parse_time(text: str, field: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise LockRefused("malformed", f"{field}: {text!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise LockRefused("malformed", f"{field}: {text!r} names no time zone")
    return moment


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`7d`, `12h`, `30m`, `3600s`: a whole number and one unit; refused in one line otherwise."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isascii() or not number.isdigit() or len(number) > 9:
        raise BundleError(f"validity {text!r} is not a whole number of s, m, h or d (e.g. 7d, 12h)")
    return timedelta(seconds=int(number) * _UNITS[unit])


def sign_lock(document: dict[str, Any], key: SigningKey, *, valid_for: timedelta = DEFAULT_VALID_FOR,
              now: datetime | None = None) -> dict[str, Any]:
    """The DSSE envelope of `document` issued `now` and expiring `valid_for` later, signed by `key`."""
    if not timedelta(0) < valid_for <= MAX_VALID_FOR:
        raise BundleError(f"a lock's validity must be positive and at most {MAX_VALID_FOR.days} days, "
                          f"not {valid_for}")
    issued = now or datetime.now(timezone.utc)
    signed = {**document, "exported_at": timestamp(issued), "expires_at": timestamp(issued + valid_for)}
    parse_lock(signed, "signed lock")  # what is signed must read back
    payload = json.dumps(signed, sort_keys=True, ensure_ascii=False, allow_nan=False,
                         separators=(",", ":")).encode("utf-8")
    return sign(LOCK_PAYLOAD_TYPE, payload, key).to_dict()


def open_lock(path: str | Path, trusted: TrustedKeys, *, now: datetime | None = None) -> Lock:
    """The lock in `path` when a trusted key signed it and it has not expired; else LockRefused naming why."""
    try:
        data = read_lock_json(path)
    except BundleError as exc:
        raise LockRefused("malformed", str(exc)) from None
    return authenticate(data, trusted, str(path), now=now)


def authenticate(data: Any, trusted: TrustedKeys, source: str, *, now: datetime | None = None,
                 check_expiry: bool = True) -> Lock:
    """A parsed lock file checked: envelope, signature over the payload, then the payload, then the expiry.

    `check_expiry` False is for `lock --refresh`, which renews an expired lock
    but must still know that the registry's key signed every byte of it.
    """
    if not is_envelope(data):
        raise LockRefused("unsigned", f"{source}: the lock is not signed")
    try:
        payload = verify(parse_envelope(data), LOCK_PAYLOAD_TYPE, trusted)
    except SignatureRefused as exc:
        raise LockRefused(exc.code, f"{source}: {exc.detail}") from None
    try:
        lock = parse_lock(payload_json(payload, source), source)
    except BundleError as exc:
        raise LockRefused("malformed", str(exc)) from None
    if lock.expires_at is None:
        raise LockRefused("malformed", f"{source}: a signed lock must carry expires_at")
    if not check_expiry:
        return lock
    expires = parse_time(lock.expires_at, "expires_at")
    moment = now or datetime.now(timezone.utc)
    if moment >= expires:
        raise LockRefused("expired", f"{source}: expired at {lock.expires_at} (issued {lock.exported_at}); "
                                     "fetch a refreshed lock")
    return lock


def freshness(lock: Lock) -> tuple[int, datetime]:
    """What orders two locks of one workload: the log position read, then the issue time."""
    return lock.log_position, parse_time(lock.exported_at, "exported_at")


def older_than(lock: Lock, newest: Lock) -> str | None:
    """Why `lock` is older than `newest` (a rollback), or None when it is as new or newer in both respects."""
    (position, issued), (newest_position, newest_issued) = freshness(lock), freshness(newest)
    if position < newest_position:
        return f"it was read at log position {position}; a lock read at {newest_position} was already accepted"
    if issued < newest_issued:
        return f"it was issued {lock.exported_at}; a lock issued {newest.exported_at} was already accepted"
    return None
