"""Ed25519 signing keys for locks and attestations: creating, reading and naming them. Pure (no database, no torch).

A private key is a PKCS#8 PEM file that only its owner may read: `create_key`
makes it with mode 0600 through the registry's one writer (formats/output_files.py:
a fresh temporary file put in place by a link, so an existing file or a link
at either name is never overwritten or written through),
and `load_signing_key` refuses one that its group or others could read, as
ssh does. A secret store that hands secrets over as environment variables
can give the PEM text itself in `REGISTRY_SIGNING_KEY` instead of a file.

A public key is a SubjectPublicKeyInfo PEM file; its id is the SHA-256 of
its 32 raw bytes (hex), which DSSE signatures carry as `keyid`. Verifiers
trust a set of public keys (`TrustedKeys`), so a new key can be trusted
before the old one is retired (docs/bundles.md, "Keys").

Every refusal is one line: a `SigningKeyError` (a ValueError).
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from registry.formats.documents import DocumentError, read_document
from registry.formats.errors import UserError
from registry.formats.output_files import write_new

SIGNING_KEY_ENV = "REGISTRY_SIGNING_KEY"
MAX_KEY_BYTES = 16 * 1024


class SigningKeyError(UserError):
    """A key that cannot be created, read or used; one line naming it and why."""


def key_id(public: Ed25519PublicKey) -> str:
    """The key's id: SHA-256 (hex) of its raw 32-byte public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class PublicKey:
    """A public key a verifier trusts, with its id."""

    key: Ed25519PublicKey
    key_id: str

    @classmethod
    def of(cls, key: Ed25519PublicKey) -> "PublicKey":
        return cls(key, key_id(key))

    def pem(self) -> str:
        return self.key.public_bytes(serialization.Encoding.PEM,
                                     serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")

    def verifies(self, signature: bytes, message: bytes) -> bool:
        try:
            self.key.verify(signature, message)
            return True
        except InvalidSignature:
            return False


@dataclass(frozen=True)
class SigningKey:
    """A private key and the public key (with id) it signs for."""

    key: Ed25519PrivateKey
    public: PublicKey

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys a verifier accepts signatures from, by id (several at once during a rotation)."""

    keys: tuple[PublicKey, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise SigningKeyError("no trusted public key given: name at least one (--key PUB)")

    def by_id(self, wanted: str) -> PublicKey | None:
        return next((k for k in self.keys if k.key_id == wanted), None)

    @classmethod
    def from_files(cls, paths: Iterable[str | os.PathLike]) -> "TrustedKeys":
        return cls(tuple(load_public_key(path) for path in paths))


def _signing_key(private: Ed25519PrivateKey) -> SigningKey:
    return SigningKey(private, PublicKey.of(private.public_key()))


def create_key(path: str | Path) -> SigningKey:
    """A new Ed25519 key written to `path` (0600, refusing an existing file) and its public key to `path`.pub."""
    path = Path(path)
    public_path = path.with_name(path.name + ".pub")
    for target in (path, public_path):
        if os.path.lexists(target):
            raise SigningKeyError(f"{target}: already exists; a key file is never overwritten")
    private = Ed25519PrivateKey.generate()
    key = _signing_key(private)
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    write_new(path, pem, mode=0o600, what="key file", error=SigningKeyError)
    write_new(public_path, key.public.pem().encode("ascii"), mode=0o644, what="key file", error=SigningKeyError)
    return key


def load_signing_key(path: str | os.PathLike | None = None) -> SigningKey:
    """The private key in `path`, else the PEM text in $REGISTRY_SIGNING_KEY; refused when neither names one."""
    if path is None:
        text = os.environ.get(SIGNING_KEY_ENV)
        if not text:
            raise SigningKeyError(f"no signing key: give --key FILE or set {SIGNING_KEY_ENV} to the key's PEM text "
                                  "(create one with `registry keys init FILE`)")
        return _signing_key(_private_from_pem(text, f"${SIGNING_KEY_ENV}"))
    try:
        info = os.stat(path)
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read the signing key: {exc.strerror}") from None
    if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077:
        raise SigningKeyError(f"{path}: the signing key is readable by others (mode {stat.S_IMODE(info.st_mode):04o});"
                              f" make it owner-only (chmod 600)")
    return _signing_key(_private_from_pem(_read(path, "signing key"), str(path)))


def load_public_key(path: str | os.PathLike) -> PublicKey:
    """A trusted public key (SubjectPublicKeyInfo PEM) from `path`."""
    text = _read(path, "public key")
    try:
        key = serialization.load_pem_public_key(text.encode("ascii", "replace"))
    except (ValueError, TypeError):
        raise SigningKeyError(f"{path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: not an Ed25519 public key")
    return PublicKey.of(key)


def _read(path: str | os.PathLike, what: str) -> str:
    try:
        return read_document(path, what, MAX_KEY_BYTES)
    except DocumentError as exc:
        raise SigningKeyError(str(exc)) from None


def _private_from_pem(text: str, source: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(text.encode("ascii", "replace"), password=None)
    except (ValueError, TypeError):
        raise SigningKeyError(f"{source}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{source}: not an Ed25519 private key")
    return key
