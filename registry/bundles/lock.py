"""Lock files: the promoted, compatible set a deployment uses, checkable without a database. Pure.

A lock file (`registry.lock/1`, schema in docs/bundles.md) names, per artifact,
its identity, its bundle digest and full manifest (file digests, entry point,
compatibility window), the verdict that promoted it, and, for the whole
export, the log position and chain hash it was taken at. Reading one checks
it against itself: every manifest must hash to the digest recorded beside
it, so an edited file digest or window is refused rather than trusted.

Reading a lock file imports no torch and no database driver.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.formats.documents import DocumentError, load_json, read_document
from registry.formats.errors import first_line

from .dsse import SignatureRefused, is_envelope, parse_envelope
from .fields import FIELDS as f
from .fields import BundleFieldError
from .files import verify_directory
from .manifest import BundleError
from .manifests import Manifest, parse_manifest
from .resolution import Candidate

LOCK_FORMAT = "registry.lock/1"
MAX_LOCK_BYTES = 64 << 20
_TOP = ("format", "workload", "exported_at", "expires_at", "log_origin", "log_position", "chain_hash", "profile",
        "call_site", "artifacts")
IDENTITY_KEYS = ("artifact", "identity", "workload", "kind", "backend", "op", "entry", "payload_sha256")
_ENTRY = ("artifact", "identity", "bundle_sha256", "manifest", "verdict_event_id", "verdict_position",
          "contract_version", "speedup", "speedup_ci")


@dataclass(frozen=True)
class LockedArtifact:
    artifact: str
    identity: dict[str, Any]
    bundle_sha256: str
    manifest: Manifest
    verdict_event_id: str
    verdict_position: int
    contract_version: int | None
    speedup: float | None
    speedup_ci: tuple[float, float] | None

    def candidate(self) -> Candidate:
        """As a resolution candidate: promoted at export (a lock holds nothing else)."""
        return Candidate(self.artifact, "promoted", self.manifest, self.speedup, self.speedup_ci,
                         record={"bundle_sha256": self.bundle_sha256, "verdict_event_id": self.verdict_event_id})


@dataclass(frozen=True)
class Lock:
    workload: str
    log_position: int
    chain_hash: str
    exported_at: str
    artifacts: tuple[LockedArtifact, ...]
    document: dict[str, Any]
    expires_at: str | None = None  # set on a signed lock (signed_lock.py)
    log_origin: str | None = None  # the chain hash at position 1: which log (absent in older lock files)


def locked_entry(state: dict[str, Any], manifest: Manifest) -> dict[str, Any]:
    """The lock entry for a promoted artifact's projected state."""
    return {
        "artifact": state["artifact"],
        "identity": {key: state.get(key) for key in IDENTITY_KEYS},
        "bundle_sha256": manifest.digest,
        "manifest": manifest.canonical(),
        "verdict_event_id": state["verdict_event_id"],
        "verdict_position": state["verdict_position"],
        "contract_version": state.get("contract_version"),
        "speedup": state.get("speedup"),
        "speedup_ci": state.get("speedup_ci"),
    }


def parse_lock(data: Any, source: str = "lock file") -> Lock:
    """Validate a lock document; any problem is one BundleError line `source: field: problem`."""
    try:
        top = f.mapping(data, "")
        f.only_known(top, _TOP, "")
        if f.required(top, "format", "") != LOCK_FORMAT:
            raise BundleFieldError(f"format: {top['format']!r} is not {LOCK_FORMAT!r}")
        if not isinstance(top.get("artifacts"), list):
            raise BundleFieldError("artifacts: expected a list")
        workload = f.text(f.required(top, "workload", ""), "workload")
        entries = tuple(_entry(item, f"artifacts[{i}]", source, workload) for i, item in enumerate(top["artifacts"]))
        if len({e.artifact for e in entries}) != len(entries):
            raise BundleFieldError("artifacts: an artifact is locked twice")
        log_position = f.integer(f.required(top, "log_position", ""), "log_position", 0)
        late = next((e for e in entries if e.verdict_position > log_position), None)
        if late is not None:
            raise BundleFieldError(f"artifacts: {late.artifact}'s verdict_position {late.verdict_position} is after the "
                                f"lock's log_position {log_position} (an entry from another lock)")
        return Lock(
            workload=workload,
            log_position=log_position,
            chain_hash=f.text(f.required(top, "chain_hash", ""), "chain_hash"),
            exported_at=f.text(f.required(top, "exported_at", ""), "exported_at"),
            artifacts=entries, document=top,
            expires_at=None if top.get("expires_at") is None else f.text(top["expires_at"], "expires_at"),
            log_origin=None if top.get("log_origin") is None else f.text(top["log_origin"], "log_origin"),
        )
    except BundleFieldError as exc:
        raise BundleError(f"{source}: {exc}") from None


def _entry(item: Any, where: str, source: str, workload: str) -> LockedArtifact:
    entry = f.mapping(item, where)
    f.only_known(entry, _ENTRY, where)
    for key in _ENTRY:
        if key not in entry:
            raise BundleFieldError(f"{where}.{key}: required")
    artifact = f.text(entry["artifact"], f"{where}.artifact")
    manifest = parse_manifest(entry["manifest"], f"{source}: {where}.manifest")
    digest = f.text(entry["bundle_sha256"], f"{where}.bundle_sha256")
    if manifest.digest != digest:
        raise BundleFieldError(f"{where}.manifest: hashes to {manifest.digest[:12]}, not the recorded bundle_sha256 "
                            f"{digest[:12]} (the lock file was edited)")
    identity = f.mapping(entry["identity"], f"{where}.identity")
    f.only_known(identity, IDENTITY_KEYS, f"{where}.identity")
    missing = [key for key in IDENTITY_KEYS if key not in identity]
    if missing:
        raise BundleFieldError(f"{where}.identity.{missing[0]}: required")
    if identity.get("artifact") != artifact or identity.get("payload_sha256") != digest:
        raise BundleFieldError(f"{where}.identity: does not name {artifact} with payload {digest[:12]}")
    if identity.get("workload") != workload:
        raise BundleFieldError(f"{where}.identity.workload: {identity.get('workload')!r} is not the lock's workload "
                            f"{workload!r} (an entry of another workload's lock)")
    ci = entry["speedup_ci"]
    if ci is not None and (not isinstance(ci, list) or len(ci) != 2):
        raise BundleFieldError(f"{where}.speedup_ci: expected [low, high] or null")
    return LockedArtifact(
        artifact=artifact, identity=identity, bundle_sha256=digest, manifest=manifest,
        verdict_event_id=f.text(entry["verdict_event_id"], f"{where}.verdict_event_id"),
        verdict_position=f.integer(entry["verdict_position"], f"{where}.verdict_position", 1),
        contract_version=None if entry["contract_version"] is None
        else f.integer(entry["contract_version"], f"{where}.contract_version", 1),
        speedup=None if entry["speedup"] is None else f.number(entry["speedup"], f"{where}.speedup"),
        speedup_ci=None if ci is None else (f.number(ci[0], f"{where}.speedup_ci[0]"),
                                            f.number(ci[1], f"{where}.speedup_ci[1]")),
    )


def read_lock_json(path: str | Path) -> Any:
    """The parsed JSON of a lock file, read under the shared reader's rules (a regular file, at most MAX_LOCK_BYTES)."""
    try:
        return load_json(read_document(path, "lock file", MAX_LOCK_BYTES), str(path))
    except DocumentError as exc:
        raise BundleError(str(exc)) from None


def lock_from_json(data: Any, source: str) -> Lock:
    """The lock a parsed lock file holds, unsigned or inside a DSSE envelope whose signature is NOT checked here."""
    if not is_envelope(data):
        return parse_lock(data, source)
    try:
        envelope = parse_envelope(data)
    except SignatureRefused as exc:
        raise BundleError(f"{source}: {exc.detail}") from None
    return parse_lock(payload_json(envelope.payload, source), source)


def payload_json(payload: bytes, source: str) -> Any:
    """An envelope's payload as a strict JSON document."""
    try:
        return load_json(payload.decode("utf-8"), f"{source}: payload")
    except UnicodeDecodeError:
        raise BundleError(f"{source}: payload: not UTF-8 text") from None
    except DocumentError as exc:
        raise BundleError(str(exc)) from None


def read_lock(path: str | Path) -> Lock:
    """Read and validate a lock file, signed or not, WITHOUT checking a signature (signed_lock.open_lock does)."""
    return lock_from_json(read_lock_json(path), str(path))


@dataclass(frozen=True)
class LockProblem:
    """One way a lock no longer holds; `code` is stable (docs/runtime.md)."""

    artifact: str | None
    code: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "code": self.code, "detail": self.detail}


def bundle_directory(root: str | Path, artifact: str) -> Path:
    """Where a bundle lives under a bundles directory: one sub-directory named by the artifact id."""
    if not artifact or "/" in artifact or "\\" in artifact or artifact in (".", "..") or "\0" in artifact:
        raise BundleError(f"artifact id {artifact!r} cannot name a bundle directory")
    return Path(root) / artifact


def check_bundles(lock: Lock, root: str | Path) -> list[LockProblem]:
    """Every locked bundle under `root` must carry the locked manifest and match it byte for byte."""
    problems = []
    for locked in lock.artifacts:
        try:
            verify_directory(bundle_directory(root, locked.artifact), locked.manifest)
        except (BundleError, OSError) as exc:
            problems.append(LockProblem(locked.artifact, "bundle_mismatch", first_line(exc)))
    return problems
