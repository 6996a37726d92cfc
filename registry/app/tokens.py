"""API tokens for `registry serve`, kept as events: issued and revoked on the command line, checked per request.

A token is `rgt_<key id>_<secret>_<checksum>`: a fixed prefix and a CRC-32
checksum so that secret scanners recognise one that leaked (the shape of
GitHub's tokens), and a key id that names the stream `token:<key id>`
holding its `TokenIssued` and, once revoked, its `TokenRevoked`. The log
keeps the SHA-256 of the token, never the token. Every request reads that
stream (one indexed read of one or two events), so a revoked or expired
token is refused on the very next request, and compares digests in
constant time. Tokens are issued only here, by whoever holds the database:
the server has no route that issues one, so no token can issue a token.
"""
from __future__ import annotations

import fnmatch
import hashlib
import hmac
import re
import secrets
import string
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from registry.formats.errors import UserError
from registry.formats.names import check_name

from .context import Registry

TOKEN_PREFIX = "rgt_"
TOKEN_STREAM_PREFIX = "token:"
_ALPHABET = string.ascii_letters + string.digits
_SECRET_LENGTH = 43  # 43 characters of 62: 256 bits
TOKEN_PATTERN = re.compile(r"^rgt_([0-9a-f]{16})_([A-Za-z0-9]{43})_([0-9a-f]{8})$")
# Scopes: `ingest` and `decide` act on the workloads their token's glob matches; `read` and `admin` on the registry.
SCOPES = ("read", "ingest", "decide", "admin")
WORKLOAD_SCOPES = ("ingest", "decide")
DEFAULT_VALID_DAYS = 30
MOST_VALID_DAYS = 366
# An actor is `principal/key id` and a name of at most 128 characters (registry.formats.names).
MOST_PRINCIPAL_LENGTH = 128 - 1 - 16


class TokenRefused(UserError):
    """The request carries no token the registry accepts (absent, malformed, unknown, revoked, expired)."""


class NotPermitted(UserError):
    """The token is good but its scopes do not cover what the request asks."""


def token_stream(key_id: str) -> str:
    return TOKEN_STREAM_PREFIX + key_id


def _checksum(body: str) -> str:
    return f"{zlib.crc32(body.encode('ascii')):08x}"


def secret_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> tuple[str, str]:
    """(key id, token): a random key id and secret, with the checksum a scanner can verify offline."""
    key_id = secrets.token_hex(8)
    body = f"{TOKEN_PREFIX}{key_id}_{''.join(secrets.choice(_ALPHABET) for _ in range(_SECRET_LENGTH))}"
    return key_id, f"{body}_{_checksum(body)}"


def parse_scopes(scopes: tuple[str, ...] | list[str], workload: str | None) -> tuple[list[str], str | None]:
    """The scopes a token is issued with, and the workload glob (given as --workload or as `ingest:<glob>`)."""
    names: list[str] = []
    for scope in scopes:
        name, _, glob = scope.partition(":")
        if name not in SCOPES or (glob and name != "ingest"):
            raise UserError(f"--scope {scope!r}: expected one of read, ingest:<workload glob>, decide, admin")
        if glob:
            if workload is not None and workload != glob:
                raise UserError(f"--scope {scope} and --workload {workload} name two workload globs; give one")
            workload = glob
        if name not in names:
            names.append(name)
    if not names:
        raise UserError("a token needs at least one --scope (read, ingest:<workload glob>, decide, admin)")
    if workload is not None:
        check_glob(workload)
        if not any(name in WORKLOAD_SCOPES for name in names):
            raise UserError("--workload restricts the ingest and decide scopes; this token has neither")
    elif any(name in WORKLOAD_SCOPES for name in names):
        raise UserError("ingest and decide act on workloads: give the workloads' glob (--workload GLOB, "
                        "'*' for every one)")
    return sorted(names, key=SCOPES.index), workload


def check_glob(glob: str) -> str:
    if not isinstance(glob, str) or not 1 <= len(glob) <= 128 or any(c.isspace() or not c.isprintable() for c in glob):
        raise UserError(f"--workload {glob!r}: expected a glob of 1 to 128 printable characters without whitespace")
    return glob


@dataclass(frozen=True)
class Grant:
    """What one presented token may do: its principal and key, scopes, the workloads they reach, until when."""

    key_id: str
    principal: str
    person: bool
    scopes: tuple[str, ...]
    workload: str | None
    not_after: datetime

    @property
    def actor(self) -> str:
        """Who an event appended with this token is by: `principal/key id`."""
        return f"{self.principal}/{self.key_id}"

    def reaches(self, workload: str) -> bool:
        return self.workload is not None and fnmatch.fnmatchcase(workload, self.workload)

    def holds(self, scope: str, *, person: bool = False) -> None:
        """Refuse (NotPermitted) unless this token holds `scope` (and is a person's, when `person`)."""
        if scope not in self.scopes:
            raise NotPermitted(f"token {self.key_id} lacks the {scope} scope")
        if person and not self.person:
            raise NotPermitted(f"token {self.key_id} is not a person's token; approve and revoke are a person's "
                               "decision (issue one with --person)")

    def require(self, scope: str, workload: str | None = None, *, person: bool = False) -> None:
        """Refuse (NotPermitted) unless this token holds `scope`, for `workload` when the scope acts on workloads."""
        self.holds(scope, person=person)
        if scope in WORKLOAD_SCOPES and (workload is None or not self.reaches(workload)):
            raise NotPermitted(f"token {self.key_id} does not reach workload {workload} "
                               f"(its {scope} scope covers {self.workload})")

    def to_dict(self) -> dict:
        return {"key_id": self.key_id, "principal": self.principal, "person": self.person,
                "scopes": list(self.scopes), "workload": self.workload, "not_after": self.not_after.isoformat()}


def _now(now: datetime | None) -> datetime:
    return datetime.now(timezone.utc) if now is None else now


def issue_token(registry: Registry, principal: str, scopes: tuple[str, ...] | list[str], *,
                workload: str | None = None, valid_days: int = DEFAULT_VALID_DAYS, person: bool = False,
                now: datetime | None = None) -> tuple[str, Grant]:
    """Append a TokenIssued and return (the token, what it grants); the token is in no event and shown once.

    `now` is the moment the validity counts from (the clock, unless given).
    """
    from registry.events.store import NewEvent
    from registry.events.types import TokenIssued

    check_name(principal, "--principal")
    if len(principal) > MOST_PRINCIPAL_LENGTH:
        raise UserError(f"--principal: at most {MOST_PRINCIPAL_LENGTH} characters (the actor is principal/key id)")
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or not 1 <= valid_days <= MOST_VALID_DAYS:
        raise UserError(f"--valid-for {valid_days!r}: expected a whole number of days from 1 to {MOST_VALID_DAYS}")
    names, glob = parse_scopes(scopes, workload)
    key_id, token = new_token()
    not_after = _now(now) + timedelta(days=valid_days)
    payload = TokenIssued(key_id=key_id, secret_sha256=secret_digest(token), principal=principal, person=person,
                          scopes=names, workload=glob, not_after=not_after.isoformat(), issuer=registry.actor)
    registry.store.append(token_stream(key_id), [NewEvent(payload.type, payload)], expected_version=0,
                          actor=registry.actor)
    return token, Grant(key_id, principal, person, tuple(names), glob, not_after)


def revoke_token(registry: Registry, key_id: str, reason: str) -> int:
    """Append a TokenRevoked for a known, unrevoked key; returns its position."""
    from registry.events.store import NewEvent
    from registry.events.types import TokenRevoked

    if not isinstance(key_id, str) or not re.fullmatch(r"[0-9a-f]{16}", key_id):
        raise UserError(f"key id {key_id!r}: expected the 16 hex digits `token issue` printed")
    if not isinstance(reason, str) or not reason.strip():
        raise UserError("--reason: say why the token is revoked")
    events = registry.store.read_stream(token_stream(key_id))
    if not events:
        raise UserError(f"no token with key id {key_id}")
    if any(event.type == "TokenRevoked" for event in events):
        raise UserError(f"token {key_id} is already revoked")
    payload = TokenRevoked(key_id=key_id, reason=reason.strip())
    return registry.store.append(token_stream(key_id), [NewEvent(payload.type, payload)],
                                 expected_version=events[-1].version, actor=registry.actor)[0]


class KnownTokens:
    """The token streams a long-running server has read, each with the version it was read at.

    A stream is read again whenever its version has moved: a revocation is an
    event of the token's own stream, so the version read on every request
    (one indexed statement, no payload decoded) tells whether the events kept
    are still all there is. Events are never updated or deleted, so the same
    version means the same events. Only streams that exist are kept: one entry
    an issued token, however many unknown key ids are presented.
    """

    def __init__(self) -> None:
        self._read: dict[str, tuple[int, list]] = {}

    def events(self, registry: Registry, key_id: str) -> list:
        stream = token_stream(key_id)
        version = registry.store.stream_version(stream)
        kept = self._read.get(key_id)
        if kept is not None and kept[0] == version:
            return kept[1]
        events = registry.store.read_stream(stream)
        if events:
            self._read[key_id] = (events[-1].version, events)
        return events


def authenticate(registry: Registry, presented: str | None, now: datetime | None = None,
                 known: KnownTokens | None = None) -> Grant:
    """The grant of a presented token, read from its stream now; TokenRefused in one line otherwise.

    With `known` (a server's), the stream's events are read only when its version moved since they were last read.
    """
    if not presented:
        raise TokenRefused("no token: send `Authorization: Bearer rgt_...` (issued by `registry token issue`)")
    match = TOKEN_PATTERN.fullmatch(presented)
    if match is None or not hmac.compare_digest(_checksum(presented[:-9]), match.group(3)):
        raise TokenRefused("not a registry token (wrong form or checksum)")
    key_id = match.group(1)
    events = registry.store.read_stream(token_stream(key_id)) if known is None else known.events(registry, key_id)
    issued = next((event.payload for event in events if event.type == "TokenIssued"), None)
    if issued is None or not hmac.compare_digest(issued["secret_sha256"], secret_digest(presented)):
        raise TokenRefused("unknown token")
    if any(event.type == "TokenRevoked" for event in events):
        raise TokenRefused(f"token {key_id} is revoked")
    not_after = datetime.fromisoformat(issued["not_after"])
    if _now(now) >= not_after:
        raise TokenRefused(f"token {key_id} expired at {issued['not_after']}")
    return Grant(key_id, issued["principal"], issued["person"], tuple(issued["scopes"]), issued["workload"],
                 not_after)
