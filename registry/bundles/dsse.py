"""DSSE envelopes: how locks and attestations are signed. Pure (no database, no torch).

The Dead Simple Signing Envelope (secure-systems-lab/dsse, protocol v1), the
envelope in-toto attestations, SLSA provenance and Sigstore use:

    {"payloadType": TYPE, "payload": base64(BODY), "signatures": [{"keyid": ID, "sig": base64(SIG)}]}

A signature covers the pre-authentication encoding, never the JSON around it:

    PAE(TYPE, BODY) = "DSSEv1" SP LEN(TYPE) SP TYPE SP LEN(BODY) SP BODY

(LEN: the byte length in ASCII decimal, no leading zeros; SP: one space), so
the payload type is signed too and a payload cannot be re-read as another
kind of document. Signatures here are Ed25519 (keys.py), `keyid` the key's id.

`verify` returns the payload only when a trusted key's signature verifies,
and otherwise raises `SignatureRefused` with a stable code (docs/bundles.md):
`malformed`, `unsigned`, `untrusted_key`, `bad_signature`.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from registry.formats.errors import UserError
from .keys import SigningKey, TrustedKeys

ED25519_SIGNATURE_BYTES = 64


class SignatureRefused(UserError):
    """A signed document that is not accepted; `code` is stable, `detail` says why in one line."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of a payload and its type."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, str], ...]  # (keyid, sig as written, base64)

    def to_dict(self) -> dict[str, Any]:
        return {"payloadType": self.payload_type, "payload": base64.b64encode(self.payload).decode("ascii"),
                "signatures": [{"keyid": keyid, "sig": sig} for keyid, sig in self.signatures]}


def sign(payload_type: str, payload: bytes, key: SigningKey) -> Envelope:
    """An envelope holding `payload`, signed by `key`."""
    signature = base64.b64encode(key.sign(pae(payload_type, payload))).decode("ascii")
    return Envelope(payload_type, payload, ((key.key_id, signature),))


def is_envelope(data: Any) -> bool:
    """Whether a parsed JSON document is shaped as a DSSE envelope (checked fully by parse_envelope)."""
    return isinstance(data, dict) and "payloadType" in data


def parse_envelope(data: Any) -> Envelope:
    """An envelope from parsed JSON; anything else is refused as `malformed` (its signatures not yet checked)."""
    if not isinstance(data, dict) or set(data) != {"payloadType", "payload", "signatures"}:
        raise SignatureRefused("malformed", "not a DSSE envelope (payloadType, payload, signatures)")
    kind, body, signatures = data["payloadType"], data["payload"], data["signatures"]
    if not isinstance(kind, str) or not isinstance(body, str) or not isinstance(signatures, list):
        raise SignatureRefused("malformed", "payloadType and payload must be strings, signatures a list")
    try:
        payload = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureRefused("malformed", "the payload is not base64") from None
    found = []
    for index, item in enumerate(signatures):
        if not isinstance(item, dict) or not isinstance(item.get("sig"), str) \
                or not isinstance(item.get("keyid", ""), str) or set(item) - {"keyid", "sig"}:
            raise SignatureRefused("malformed", f"signatures[{index}]: expected {{keyid, sig}} strings")
        found.append((item.get("keyid", ""), item["sig"]))
    return Envelope(kind, payload, tuple(found))


def _decoded(signature: str) -> bytes | None:
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == ED25519_SIGNATURE_BYTES else None


def verify(envelope: Envelope, payload_type: str, trusted: TrustedKeys) -> bytes:
    """The payload, when the envelope is of `payload_type` and a trusted key's signature verifies over it."""
    if envelope.payload_type != payload_type:
        raise SignatureRefused("malformed", f"payload type {envelope.payload_type!r}, not {payload_type!r}")
    if not envelope.signatures:
        raise SignatureRefused("unsigned", "the envelope carries no signature")
    message = pae(envelope.payload_type, envelope.payload)
    failed = []
    for keyid, signature in envelope.signatures:
        key = trusted.by_id(keyid)
        if key is None:
            continue
        raw = _decoded(signature)
        if raw is not None and key.verifies(raw, message):
            return envelope.payload
        failed.append(keyid)
    if failed:
        raise SignatureRefused("bad_signature", f"the signature of trusted key {failed[0][:16]} does not verify: "
                                                "the document was changed after signing, or the signature is damaged")
    named = ", ".join(sorted({keyid[:16] or "(no keyid)" for keyid, _ in envelope.signatures}))
    raise SignatureRefused("untrusted_key", f"signed by key {named}, which is not among the trusted keys")
