"""Which shippable artifact a runtime may use, and a stable reason for every other one. Pure.

A runtime states where it runs (a `Profile`: GPU architecture, torch, CUDA and
Triton versions, execution and distributed mode) and, optionally, the call
site it would replace (a `CallSite`: model, graph fingerprint, input tensor
signatures). Each candidate either matches or gets a reason code from
`REASON_CODES`; runtimes log these codes, so they are a contract (documented
in docs/runtime.md) and only ever gain members.

Machine facts are checked fail-closed: a version range that is bounded is
met only by a version that is given and parses. Call-site facts are checked
when the caller states them: a query that names no fingerprint asks about
the whole workload.

Among the matches the best is the highest recorded speedup, then the higher
lower bound of its confidence interval, then the artifact id, so the same
registry and profile always give the same answer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from .manifest import ANY, DEVICE_TYPES, DTYPES, BundleError, TensorSignature, VersionRange, check_token, parse_version
from .manifests import Manifest

# Code -> what it means. Order is the order of the checks: an artifact gets the first code that applies.
REASON_CODES: dict[str, str] = {
    "revoked": "a person revoked its promotion (the detail names who and why)",
    "not_promoted": "its current decision is not promoted (held, rejected, quarantined, recorded or registered)",
    "regressed": "its monitor detected a regression of the promoted speed in its re-measurements (the detail "
                 "names the alarm); it stays skipped until a person revokes it and it is promoted again on new "
                 "evidence (docs/monitor.md)",
    "stale_contract": "it was promoted under an older contract than the workload's current one: judge it again "
                      "(`registry rejudge WORKLOAD`)",
    "no_bundle": "it was registered without a bundle (a --payload, --entry or no payload), so there is nothing to "
                 "ship: make one with `registry bundle create` and register it with --bundle",
    "model_mismatch": "the bundle's window names another model id or revision",
    "fingerprint_mismatch": "the bundle replaces an operation with another graph fingerprint",
    "input_signature_mismatch": "the call's input tensors differ from the bundle's declared inputs",
    "gpu_architecture_mismatch": "the GPU architecture is not in the bundle's window",
    "torch_version_unsupported": "torch is missing, unparseable or outside the bundle's range",
    "cuda_version_unsupported": "CUDA is missing, unparseable or outside the bundle's range",
    "triton_version_unsupported": "Triton is missing, unparseable or outside the bundle's range",
    "execution_mode_mismatch": "the execution mode is not in the bundle's window",
    "distributed_mode_mismatch": "the distributed mode is not in the bundle's window",
    "not_selected": "it matches, but another match ranks higher (speedup, then CI lower bound, then id)",
}
SELECTED = "selected"


@dataclass(frozen=True)
class Profile:
    """Where the runtime runs. Versions are PEP 440 text as the libraries report them; None when absent."""

    gpu_architecture: str
    torch: str | None
    cuda: str | None = None
    triton: str | None = None
    execution_mode: str = "inference"
    distributed_mode: str = "single"

    def __post_init__(self) -> None:
        check_token(self.gpu_architecture, "architecture")
        check_token(self.execution_mode, "execution mode")
        check_token(self.distributed_mode, "distributed mode")
        for name in ("torch", "cuda", "triton"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise BundleError(f"{name} version {value!r} is not a version string")

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_architecture": self.gpu_architecture, "torch": self.torch, "cuda": self.cuda,
                "triton": self.triton, "execution_mode": self.execution_mode,
                "distributed_mode": self.distributed_mode}


@dataclass(frozen=True)
class CallSite:
    """What the runtime would replace; each fact is checked only when given."""

    model_id: str | None = None
    model_revision: str | None = None
    fingerprint: str | None = None
    inputs: tuple[TensorSignature, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "model_revision": self.model_revision, "fingerprint": self.fingerprint,
                "inputs": None if self.inputs is None else [s.canonical() for s in self.inputs]}


@dataclass(frozen=True)
class Candidate:
    """One artifact of the workload as the registry (or a lock file) knows it."""

    artifact: str
    decision: str
    manifest: Manifest | None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    revoked_by: dict[str, Any] | None = None  # {"person", "reason", "event_id"} of a standing revocation
    record: dict[str, Any] = field(default_factory=dict)  # what callers report beside the code
    stale_contract: str | None = None  # set when promoted under an older contract than the current one: why
    regressed: str | None = None  # set when its monitor detected a regression: which alarm, at which pair
    speedup_ci_level: float | None = None  # the two-sided level `speedup_ci` holds at, when recorded

    def rank(self) -> tuple[float, float, str]:
        """Sort key, best first: speedup, CI lower bound (both descending; unknown last), id."""
        low = self.speedup_ci[0] if self.speedup_ci else None
        return (-_known(self.speedup), -_known(low), self.artifact)


def _known(value: float | None) -> float:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else -math.inf


@dataclass(frozen=True)
class Outcome:
    artifact: str
    code: str
    detail: str
    candidate: Candidate

    def to_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "code": self.code, "detail": self.detail, **self.candidate.record}


@dataclass(frozen=True)
class Resolution:
    """The chosen candidate (or None) and, for every other one, why not."""

    chosen: Candidate | None
    outcomes: tuple[Outcome, ...]

    @property
    def others(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.code != SELECTED)

    def to_dict(self) -> dict[str, Any]:
        chosen = next((o for o in self.outcomes if o.code == SELECTED), None)
        return {"match": chosen.to_dict() if chosen else None, "others": [o.to_dict() for o in self.others]}


def _version_problem(name: str, have: str | None, wanted: VersionRange) -> str | None:
    if wanted.contains(have):
        return None
    if have is None:
        return f"{name} is not present; the bundle needs {wanted.describe()}"
    if parse_version(have) is None:
        return f"{name} {have!r} does not parse as a version; the bundle needs {wanted.describe()}"
    return f"{name} {have} is outside the bundle's range {wanted.describe()}"


def mismatches(manifest: Manifest, profile: Profile, site: CallSite) -> list[tuple[str, str]]:
    """Every (code, detail) by which this bundle does not fit; empty when it fits."""
    window = manifest.window
    found: list[tuple[str, str]] = []
    if site.model_id is not None and window.model_id not in (ANY, site.model_id):
        found.append(("model_mismatch", f"model {site.model_id}; the bundle is for {window.model_id}"))
    elif site.model_id is not None and window.model_revision != ANY and site.model_revision != window.model_revision:
        found.append(("model_mismatch", f"model revision {site.model_revision or 'not given'}; the bundle is for "
                                        f"revision {window.model_revision}"))
    if site.fingerprint is not None and site.fingerprint != manifest.fingerprint:
        found.append(("fingerprint_mismatch", f"fingerprint {site.fingerprint}; the bundle replaces "
                                              f"{manifest.fingerprint}"))
    if site.inputs is not None:
        problem = manifest.input_problem(site.inputs)
        if problem:
            found.append(("input_signature_mismatch", problem))
    if profile.gpu_architecture not in window.gpu_architectures:
        found.append(("gpu_architecture_mismatch", f"architecture {profile.gpu_architecture}; the bundle runs on "
                                                   f"{', '.join(window.gpu_architectures)}"))
    for name in ("torch", "cuda", "triton"):
        problem = _version_problem(name, getattr(profile, name), window.versions[name])
        if problem:
            found.append((f"{name}_version_unsupported", problem))
    if profile.execution_mode not in window.execution_modes:
        found.append(("execution_mode_mismatch", f"execution mode {profile.execution_mode}; the bundle supports "
                                                 f"{', '.join(window.execution_modes)}"))
    if profile.distributed_mode not in window.distributed_modes:
        found.append(("distributed_mode_mismatch", f"distributed mode {profile.distributed_mode}; the bundle "
                                                   f"supports {', '.join(window.distributed_modes)}"))
    return found


# The detail of `no_bundle`: what the artifact is, and the commands that make it shippable.
NO_BUNDLE = ("registered without a bundle, so there is nothing to ship: make one with `registry bundle create DIR "
             "--entry FILE:SYMBOL --replaces ... --compatibility ...`, register it with --bundle DIR "
             "--new-identity, and import its evidence under the bundle's digest")


def registry_problem(candidate: Candidate) -> tuple[str, str] | None:
    """Why the registry itself keeps this candidate from shipping anywhere (code, detail), or None.

    The checks that need no runtime: its decision, revocation, monitor,
    contract version and bundle. `resolve` applies them first; `lock`
    without a profile applies only them.
    """
    if candidate.decision != "promoted":
        if candidate.revoked_by is not None:
            by = candidate.revoked_by
            return "revoked", f"revoked by {by['person']}: {by['reason']}"
        rule = candidate.record.get("rule")
        return "not_promoted", f"decision is {candidate.decision}" + (f" ({rule})" if rule else "")
    if candidate.regressed is not None:
        return "regressed", candidate.regressed
    if candidate.stale_contract is not None:
        return "stale_contract", candidate.stale_contract
    if candidate.manifest is None:
        return "no_bundle", NO_BUNDLE
    return None


def _why_not(candidate: Candidate, profile: Profile, site: CallSite) -> tuple[str, str] | None:
    problem = registry_problem(candidate)
    if problem is not None:
        return problem
    found = mismatches(candidate.manifest, profile, site)
    return found[0] if found else None


def left_out(outcomes: tuple[Outcome, ...] | list[Outcome]) -> list[Outcome]:
    """The outcomes of artifacts that a person would expect to ship and that do not: promoted (or a promotion
    revoked), yet skipped for a reason other than ranking below the one chosen."""
    return [o for o in outcomes if o.code not in (SELECTED, "not_selected")
            and (o.candidate.decision == "promoted" or o.code == "revoked")]


def resolve(candidates: list[Candidate], profile: Profile, site: CallSite = CallSite()) -> Resolution:
    """The best matching promoted bundle and a reason code for every other candidate (sorted by id)."""
    matches, outcomes = [], {}
    for candidate in candidates:
        reason = _why_not(candidate, profile, site)
        if reason is None:
            matches.append(candidate)
        else:
            outcomes[candidate.artifact] = Outcome(candidate.artifact, reason[0], reason[1], candidate)
    matches.sort(key=Candidate.rank)
    chosen = matches[0] if matches else None
    for candidate in matches:
        if candidate is chosen:
            outcomes[candidate.artifact] = Outcome(candidate.artifact, SELECTED, _ranking(candidate), candidate)
        else:
            outcomes[candidate.artifact] = Outcome(
                candidate.artifact, "not_selected", f"matches, but {chosen.artifact} ranks higher "
                f"({_ranking(chosen)} against {_ranking(candidate)})", candidate)
    return Resolution(chosen, tuple(outcomes[key] for key in sorted(outcomes)))


def _ranking(candidate: Candidate) -> str:
    speed = "speedup unknown" if candidate.speedup is None else f"speedup {candidate.speedup:.4g}x"
    if candidate.speedup_ci:
        level = candidate.speedup_ci_level
        # The interval's level, as every other interval the registry prints states it.
        speed += (f", CI lower bound {candidate.speedup_ci[0]:.4g} "
                  f"({f'{level:.0%} two-sided' if level else 'level not recorded'})")
    return speed


_DIMS = re.compile(r"([0-9]+(x[0-9]+)*)?")


def parse_input_spec(text: str) -> TensorSignature:
    """`DTYPE:SHAPE:STRIDE:DEVICE`, sizes joined by `x` (e.g. `float32:2x8x64:512x64x1:cuda`); one line on error."""
    parts = text.split(":")
    if len(parts) != 4:
        raise BundleError(f"input {text!r}: expected DTYPE:SHAPE:STRIDE:DEVICE, e.g. float32:2x8x64:512x64x1:cuda")
    dtype, shape, stride, device = parts
    if dtype not in DTYPES:
        raise BundleError(f"input {text!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if device not in DEVICE_TYPES:
        raise BundleError(f"input {text!r}: device {device!r} is not one of {', '.join(DEVICE_TYPES)}")
    dims = []
    for what, value in (("shape", shape), ("stride", stride)):
        if not _DIMS.fullmatch(value) or len(value) > 200:
            raise BundleError(f"input {text!r}: {what} {value!r} is not sizes joined by x (e.g. 2x8x64)")
        dims.append(tuple(int(d) for d in value.split("x")) if value else ())
    if len(dims[0]) != len(dims[1]):
        raise BundleError(f"input {text!r}: {len(dims[1])} strides for {len(dims[0])} dimensions")
    return TensorSignature(shape=dims[0], stride=dims[1], dtype=dtype, device=device)
