"""Declaring workload contracts and registering artifacts against them.

Each reads what it decides on through one unit of work (registry.view():
the workload's row, the artifact's row) and appends expecting the stream
version that row holds, so a declaration or registration that landed
meanwhile makes the append fail and the use case decide again. The payload
models (pydantic) load where an event is built, not when this module does.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from registry.formats.errors import UserError
from registry.formats.documents import sha256_file
from registry.events.identity import artifact_identity
from registry.events.store import NewEvent
from registry.formats.digests import is_sha256
from registry.formats.kinds import ARTIFACT_KINDS, TRITON_KERNEL_FORMAT
from registry.formats.names import artifact_stream, check_name, workload_stream
from registry.projections.view import DeclaredContract, View
from registry.formats.text import text_arguments

from .context import Registry
from .retries import decided_on_a_still_stream

if TYPE_CHECKING:
    from registry.contracts import Contract
    from registry.events.types import ArtifactRegistered
    from registry.projections.read_models import ArtifactState

# How many times a declaration reads the workload again when another declaration landed meanwhile.
DECLARE_TRIES = 8


def declare_workload(registry: Registry, contract: Contract) -> DeclaredContract:
    """Append a new contract version, or return the current one when the content is unchanged."""
    return decided_on_a_still_stream(
        lambda: _declare_once(registry, contract), DECLARE_TRIES,
        f"workload {contract.workload} kept changing while it was declared ({DECLARE_TRIES} tries); "
        "nothing recorded: declare it again")


def _declare_once(registry: Registry, contract: Contract) -> DeclaredContract:
    from registry.events.types import WorkloadDeclared

    digest = contract.content_hash()
    with registry.view() as view:
        current = view.workload(contract.workload)
        if current is not None and current["contract_hash"] == digest:
            return DeclaredContract(contract, current["contract_version"], digest)
        version = current["contract_version"] + 1 if current is not None else 1
        payload = WorkloadDeclared(workload=contract.workload, contract_version=version, contract_hash=digest,
                                   contract=contract.canonical())
        # The workload's stream holds one event per version: its version is the number of versions declared.
        view.append(workload_stream(contract.workload), [NewEvent(payload.type, payload)],
                    expected_version=0 if current is None else len(current["versions"]))
    return DeclaredContract(contract, version, digest, True)


def current_contract(registry: Registry, workload: str) -> DeclaredContract:
    """The workload's current contract from its read model, rebuilt and re-validated (refused when undeclared)."""
    with registry.view() as view:
        return declared_contract(view, workload)


def declared_contract(view: View, workload: str) -> DeclaredContract:
    """The workload's current contract as `view` reads it; an undeclared workload is refused in one line."""
    declared = view.contract(workload)
    if declared is None:
        raise UserError(f"unknown workload {workload!r} (declare it with `registry workload declare`)")
    return declared


# The largest payload file `artifact register --payload` hashes (a compiled kernel, never a model's weights).
MAX_PAYLOAD_BYTES = 1 << 30


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a payload file, read under the shared reader's rules (regular, at most MAX_PAYLOAD_BYTES)."""
    return sha256_file(path, "payload", MAX_PAYLOAD_BYTES)[0]


@dataclass(frozen=True)
class Registration:
    artifact: str
    payload_sha256: str | None
    appended: bool


# How many times a registration reads its artifact again when another writer appended to it meanwhile.
REGISTER_TRIES = 8


@text_arguments
def register_artifact(
    registry: Registry,
    artifact: str,
    *,
    workload: str,
    kind: str,
    backend: str | None = None,
    payload: str | None = None,
    op: str | None = None,
    entry: str | None = None,
    payload_sha256: str | None = None,
    bundle: dict | None = None,
    require_contract: bool = True,
    origin: dict | None = None,
    new_identity: bool | None = None,
) -> Registration:
    """Register (or re-register with new claims) an artifact; validates everything first.

    A re-registration that changes any identity field (payload, backend,
    operation, entry point) starts a new decision; the same claims again
    append nothing. `bundle` (a verified manifest, see app/bundles.py) comes
    with its digest as `payload_sha256`.
    Only an import passes `require_contract=False`: a document may name a
    workload nobody has declared yet, and no contract is invented for it, so
    its artifacts hold until one is declared. `origin` names that document.
    Registrations racing on one artifact end as if they had run one after the
    other: each reads the artifact's row again when another landed first.
    `new_identity=False` (the CLI without `--new-identity`) refuses claims
    that would change a registered artifact's identity, naming what would
    stop counting: a mistyped `--payload` must not quietly set an artifact's
    evidence and verdict aside. None (the API, the demo, imports) and True
    register them.
    """
    from registry.events.types import ArtifactRegistered

    entry_read = check_claims(artifact, workload=workload, kind=kind, backend=backend, op=op, entry=entry)
    if (kind == "triton_kernel") != (bundle is not None and bundle.get("format") == TRITON_KERNEL_FORMAT):
        raise UserError(f"a triton_kernel artifact is registered from a {TRITON_KERNEL_FORMAT} bundle (--bundle), "
                        "and such a bundle only as a triton_kernel")
    if entry_read is not None and entry_read.candidate and (payload is not None or payload_sha256 is not None):
        raise UserError("a candidate file entry is its own payload: give --entry path/to/kernel.py:function "
                        "without --payload or --bundle")
    if payload_sha256 is not None:
        if payload is not None or not is_sha256(payload_sha256):
            raise UserError("payload_sha256 must be 64 lowercase hex digits, given instead of a payload file")
        digest = payload_sha256
    elif payload is not None:
        digest = file_sha256(payload)
    elif entry_read is not None:
        digest = entry_read.digest
    else:
        digest = None
    event = ArtifactRegistered(artifact=artifact, kind=kind, workload=workload, payload_sha256=digest,
                               backend=backend, op=op, entry=None if entry_read is None else entry_read.entry,
                               bundle=bundle, origin=origin)
    return decided_on_a_still_stream(
        lambda: _register_once(registry, event, require_contract, new_identity), REGISTER_TRIES,
        f"artifact {artifact} kept changing while it was registered ({REGISTER_TRIES} tries); "
        "nothing recorded: register it again")


def _register_once(registry: Registry, event: ArtifactRegistered, require_contract: bool,
                   new_identity: bool | None = None) -> Registration:
    """Append `event` unless the artifact already holds these claims; refused for another workload or kind.

    Reads the artifact's read-model row, never its stream: the row holds the
    latest registration's workload, kind and identity, and the stream's
    version. The append expects that version, so a registration (or any
    event) that reached the stream after the row was read makes it fail with
    ConcurrencyError, and the caller decides again on the newer row.
    """
    with registry.view() as view:
        if require_contract:
            declared_contract(view, event.workload)
        current = view.artifact(event.artifact)
        if current is not None and (current["workload"] != event.workload or current["kind"] != event.kind):
            raise UserError(
                f"artifact {event.artifact} is registered as a {current['kind']} of workload {current['workload']}; "
                "register a new id instead"
            )
        if current is not None and current["identity"] == artifact_identity(event.model_dump()):
            return Registration(event.artifact, event.payload_sha256, False)  # the same claims: the same decision
        if current is not None and new_identity is False:
            raise UserError(identity_change_text(current, event.model_dump()))
        if current is None:
            _refuse_look_alike(view, event.artifact, event.workload)
        view.append(artifact_stream(event.artifact), [NewEvent(event.type, event)],
                    expected_version=0 if current is None else current["stream_version"])
    return Registration(event.artifact, event.payload_sha256, True)


def identity_change_text(current: ArtifactState, claims: dict) -> str:
    """One line: these claims are a new identity of the artifact, what changes, what stops counting, the flag."""
    from registry.events.identity import IDENTITY_FIELDS

    changed = "; ".join(f"{key} {current.get(key)} -> {claims.get(key)}" for key in IDENTITY_FIELDS
                        if current.get(key) != claims.get(key))
    counted = [f"{count} {kind} item{'' if count == 1 else 's'}"
               for kind, count in sorted((current.get("evidence_counts") or {}).items()) if count]
    verdict = current.get("decision") or "registered"
    stops = ", ".join(counted) or "none yet"
    return (f"artifact {current['artifact']} is registered with other claims ({changed}): these are a new identity, "
            f"so its evidence ({stops}), its benchmark attempts and its decision ({verdict}) would stop counting "
            "and stay in its history; if the new claims are meant, register again with --new-identity "
            "(\"new_identity\": true over the API); nothing recorded")


def _refuse_look_alike(view: View, artifact: str, workload: str) -> None:
    """A new id that looks like an existing id of its workload (one confusable skeleton, Unicode TS #39) is refused.

    Two artifacts that print alike could not be told apart in a listing, a
    lock or a review (docs/names.md, "One name, one look").
    """
    from registry.formats.confusables import skeleton

    look = skeleton(artifact)
    for other in view.artifact_ids(workload):
        if other != artifact and skeleton(other) == look:
            raise UserError(f"artifact id {artifact!r} looks like {other!r}, already an artifact of workload "
                            f"{workload} (the same confusable skeleton, Unicode TS #39); choose an id that reads "
                            "differently")


@dataclass(frozen=True)
class EntryRead:
    """A kernel entry as registration records it: the stored form (a file by its absolute path) and its digest."""

    entry: str
    digest: str
    candidate: bool  # a candidate's file, not a built-in kernel of the registry package


def check_claims(artifact: str, *, workload: str, kind: str, backend: str | None = None, op: str | None = None,
                 entry: str | None = None) -> EntryRead | None:
    """What a registration claims, checked before anything is read or appended (one line for the first problem).

    Returns the kernel entry read as text and hashed (registry.kernels.entries:
    nothing of it is imported or run, here or anywhere but the evaluation
    worker), or None when the artifact names no entry.
    """
    check_name(artifact, "artifact id")
    check_name(workload, "workload")
    if kind not in ARTIFACT_KINDS:
        raise UserError(f"kind {kind!r} is not one of {', '.join(ARTIFACT_KINDS)}")
    if kind == "attention_backend" and not backend:
        raise UserError("an attention_backend artifact must name its backend (--backend)")
    if (op is None) != (entry is None):
        raise UserError("--op and --entry go together: the operation and the kernel entry that implements it")
    if op is None:
        return None
    from registry.kernels.entries import entry_sha256, entry_source, parse_entry
    from registry.kernels.operation_names import check_operation

    check_operation(op)
    parsed = parse_entry(entry)
    return EntryRead(parsed.text, entry_sha256(parsed, entry_source(parsed)), parsed.path is not None)
