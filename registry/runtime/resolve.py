"""Resolving for a runtime: against a registry (a database URL) or a lock file, same rules either way."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from registry.bundles import BundleManifest, CallSite, Profile, Resolution, TensorSignature
from registry.bundles import resolve as resolve_candidates
from registry.formats.errors import UserError

from .trust import TrustedKeySource, open_trusted_lock


@dataclass(frozen=True)
class Match:
    """A bundle the runtime may load: its manifest as the registry (or lock) recorded it."""

    artifact: str
    bundle_sha256: str
    manifest: BundleManifest
    verdict_event_id: str | None


@dataclass(frozen=True)
class RuntimeResolution:
    """The match (or None), every other artifact's reason code, and where the answer came from."""

    workload: str
    source: str
    match: Match | None
    resolution: Resolution

    def reason_codes(self) -> dict[str, str]:
        """artifact -> reason code for every artifact not chosen (what a runtime logs)."""
        return {o.artifact: o.code for o in self.resolution.others}


def signature_of(tensor: Any) -> TensorSignature:
    """A tensor's signature, read from its attributes (no torch import): dtype, shape, stride, device type."""
    if isinstance(tensor, TensorSignature):
        return tensor
    dtype = str(tensor.dtype).removeprefix("torch.")
    return TensorSignature(shape=tuple(tensor.shape), stride=tuple(tensor.stride()), dtype=dtype,
                           device=tensor.device.type)


def resolve(workload: str, profile: Profile, *, database: str | None = None, lock: str | Path | None = None,
            trusted_keys: TrustedKeySource = None, insecure_allow_unsigned_lock: bool = False,
            model: str | None = None, revision: str | None = None, fingerprint: str | None = None,
            inputs: Iterable[Any] | None = None, as_of: int | None = None) -> RuntimeResolution:
    """Which bundle of `workload` this runtime may load, from exactly one of a database URL or a lock file.

    `inputs` are the call's tensors (or TensorSignatures), in order. A lock
    file must be signed by one of `trusted_keys` (public key files or
    PublicKeys), unexpired and not older than one this process already
    accepted (trust.py); otherwise LockRefused names the reason code and
    nothing is resolved. A database answers from its projections, optionally
    as of a log position.
    """
    if (database is None) == (lock is None):
        raise UserError("resolve needs exactly one source: database=URL or lock=PATH")
    site = CallSite(model, revision, fingerprint, None if inputs is None else tuple(signature_of(t) for t in inputs))
    if lock is not None:
        if as_of is not None:
            raise UserError("as_of applies to a database; a lock file is already fixed at its export position")
        parsed = open_trusted_lock(lock, workload, trusted_keys,
                                   insecure_allow_unsigned_lock=insecure_allow_unsigned_lock)
        resolution = resolve_candidates([a.candidate() for a in parsed.artifacts], profile, site)
        source = f"lock {lock} (log position {parsed.log_position})"
        verdicts = {a.artifact: a.verdict_event_id for a in parsed.artifacts}
    else:
        from registry.app import open_registry
        from registry.app.resolve import resolve_workload

        with open_registry(database) as registry:
            found = resolve_workload(registry, workload, profile, site, as_of)
        resolution = found.resolution
        source = f"registry at log position {found.position}"
        verdicts = {c.artifact: c.record.get("verdict_event_id") for c in
                    (o.candidate for o in resolution.outcomes)}
    chosen = resolution.chosen
    match = None if chosen is None else Match(chosen.artifact, chosen.manifest.digest, chosen.manifest,
                                              verdicts.get(chosen.artifact))
    return RuntimeResolution(workload, source, match, resolution)
