"""Signed webhook deliveries: how the registry signs one, and how a receiver checks it (docs/hooks.md).

A delivery is an HTTP POST whose body is canonical JSON, with three headers:

- `Registry-Webhook-Id`: the delivery's id, the same on every retry of it (a
  receiver that already handled it answers 2xx and does nothing);
- `Registry-Webhook-Timestamp`: when this attempt was signed, in Unix seconds;
- `Registry-Webhook-Signature`: `v1=` and the hex HMAC-SHA256, keyed by the
  hook's secret, of `<id>.<timestamp>.<body>`; several space-separated
  signatures may be sent (a receiver accepts any one that verifies).

Binding the id and the timestamp into what is signed means neither can be
changed without breaking the signature, so a receiver that refuses a
timestamp outside a short window (`DEFAULT_TOLERANCE_S`) refuses a captured
delivery replayed later, and one that remembers the ids it saw within that
window (`ReplayGuard`) refuses one replayed inside it. The scheme follows the
shape MLflow 3's webhooks and the Standard Webhooks specification use (id,
timestamp and body under one HMAC-SHA256; a version prefix on the signature).

Pure (the standard library only): a receiver can copy this one module.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError

ID_HEADER = "Registry-Webhook-Id"
TIMESTAMP_HEADER = "Registry-Webhook-Timestamp"
SIGNATURE_HEADER = "Registry-Webhook-Signature"
EVENT_HEADER = "Registry-Webhook-Event"
SIGNATURE_VERSION = "v1"
# How far a delivery's timestamp may be from the receiver's clock, either way, before it is refused as a replay.
DEFAULT_TOLERANCE_S = 300
# A secret shorter than this is refused: the HMAC is only as strong as its key.
MIN_SECRET_CHARACTERS = 32
BODY_FORMAT = "registry.webhook/1"


class DeliveryRefused(UserError):
    """A delivery a receiver must not act on: unsigned, signed with another key, altered, stale or replayed."""


class AlreadyReceived(DeliveryRefused):
    """A verified delivery whose id the receiver saw within the window: a replay, or the retry of a delivery it
    handled whose answer the sender never got. Do not act on it again; answering it 2xx ends the retries."""


def secret_bytes(secret: str | bytes) -> bytes:
    """The HMAC key: the secret file's text without surrounding whitespace, as UTF-8 bytes."""
    key = secret.strip() if isinstance(secret, bytes) else secret.strip().encode("utf-8")
    if len(key) < MIN_SECRET_CHARACTERS:
        raise DeliveryRefused(f"a webhook secret needs at least {MIN_SECRET_CHARACTERS} characters; "
                              f"this one has {len(key)}")
    return key


def secret_id(secret: str | bytes) -> str:
    """16 hex digits naming a secret without revealing it (a domain-separated SHA-256 of the key)."""
    return hashlib.sha256(b"registry-webhook-secret\x00" + secret_bytes(secret)).hexdigest()[:16]


def body_bytes(document: Mapping[str, Any]) -> bytes:
    """A delivery's body: canonical JSON (sorted keys, no spaces, UTF-8), so the bytes signed are the bytes sent."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def signature(secret: str | bytes, delivery_id: str, timestamp: int | str, body: bytes) -> str:
    """`v1=<hex HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`, the timestamp as the header writes it."""
    content = f"{delivery_id}.{timestamp}.".encode("utf-8") + body
    return f"{SIGNATURE_VERSION}=" + hmac.new(secret_bytes(secret), content, hashlib.sha256).hexdigest()


def signed_headers(secret: str | bytes, delivery_id: str, event: str, body: bytes,
                   now: float | None = None) -> dict[str, str]:
    """The headers of one attempt, signed at `now` (default: the clock)."""
    timestamp = int(time.time() if now is None else now)
    return {ID_HEADER: delivery_id, TIMESTAMP_HEADER: str(timestamp), EVENT_HEADER: event,
            SIGNATURE_HEADER: signature(secret, delivery_id, timestamp, body), "Content-Type": "application/json"}


@dataclass(frozen=True)
class Delivery:
    """A delivery that verified: its id, when it was signed, its event name and its body's document."""

    id: str
    timestamp: int
    event: str
    document: dict[str, Any]


def _header(headers: Mapping[str, str], name: str, required: bool = True) -> str:
    """A header's value, its name matched without regard to case (HTTP header names are case-insensitive)."""
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    if required:
        raise DeliveryRefused(f"no {name} header: not a registry webhook delivery")
    return ""


def verify_delivery(secret: str | bytes, headers: Mapping[str, str], body: bytes, *,
                    tolerance_s: float = DEFAULT_TOLERANCE_S, now: float | None = None,
                    guard: ReplayGuard | None = None) -> Delivery:
    """Check a delivery as received (`body` exactly as read, before any JSON parsing); raise DeliveryRefused.

    Refused: a missing header; a timestamp that is not an integer or lies
    more than `tolerance_s` from `now` (default: the clock) either way; no
    `v1=` signature that matches, compared in constant time; with `guard`,
    an id already seen within the window. The body is parsed only after the
    signature verified.
    """
    delivery_id = _header(headers, ID_HEADER)
    stamp = _header(headers, TIMESTAMP_HEADER)
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise DeliveryRefused(f"{TIMESTAMP_HEADER} {stamp!r} is not Unix seconds")
    timestamp = int(stamp)
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise DeliveryRefused(f"{TIMESTAMP_HEADER} {timestamp} is {abs(clock - timestamp):.0f} s from this clock, "
                              f"more than the {tolerance_s:g} s allowed: a replay, or a clock to set right")
    expected = signature(secret, delivery_id, stamp, body)  # the header's text: "00" does not sign as "0" does
    offered = _header(headers, SIGNATURE_HEADER).split()
    if not any(hmac.compare_digest(expected.encode("ascii"), candidate.encode("utf-8", "replace"))
               for candidate in offered):
        raise DeliveryRefused("no signature verifies with this secret: another sender or secret, or an altered "
                              "id, timestamp or body")
    if guard is not None:
        guard.admit(delivery_id, timestamp, clock)
    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DeliveryRefused(f"the signed body is not JSON: {exc}") from None
    return Delivery(delivery_id, timestamp, _header(headers, EVENT_HEADER, required=False), document)


@dataclass
class ReplayGuard:
    """The delivery ids a receiver saw within the tolerance window: a second copy of one inside it is a replay.

    Keep one per secret, in memory or wherever the receiver keeps state;
    ids older than the window are forgotten (the timestamp check refuses
    those). A retry of a delivery that was already handled also arrives
    under its id: answer it 2xx without acting on it again.
    """

    tolerance_s: float = DEFAULT_TOLERANCE_S
    seen: dict[str, int] = field(default_factory=dict)

    def admit(self, delivery_id: str, timestamp: int, now: float) -> None:
        for known, at in list(self.seen.items()):
            if now - at > self.tolerance_s:
                del self.seen[known]
        if delivery_id in self.seen:
            raise AlreadyReceived(f"delivery {delivery_id} was already received at {self.seen[delivery_id]}: "
                                  "a replay (or a retry of one already handled)")
        self.seen[delivery_id] = timestamp

    def forget(self, delivery_id: str) -> None:
        """A delivery the receiver admitted but failed to handle (it answered an error): its retry is welcome."""
        self.seen.pop(delivery_id, None)
