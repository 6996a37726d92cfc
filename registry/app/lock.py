"""Lock files: export what a deployment will use, and check later that it still holds.

`export_lock` takes the workload's promoted, unrevoked bundles promoted under
its current contract (those matching a profile when one is given) as of one
log position, best first, and records that position and the chain hash
there, so the lock names exactly which log it was read from. `signed_lock`
signs it (docs/bundles.md, "Signed locks"); `refresh_lock` re-issues a lock
at the log's head with the artifacts of it that still ship.

`registry_problems` checks a lock against a registry: the chain still has
that hash at that position, and every field of every entry that a runtime
reads equals the registry's: the workload, the identity, the verdict (it
must be the artifact's current, promoting verdict, at the locked position,
under the workload's current contract) and the speedup and its bounds, with
no revocation recorded since. A mismatch is named by its field.

`verify_lock` is `registry lock verify`: the signature and expiry against
trusted keys (and a rollback against the newest lock already accepted), the
lock file itself, the bundles on disk and, when a database is named (the
one URL precedence, registry.events.database.configured_url), the registry.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from registry.bundles import CallSite, Candidate, Lock, LockProblem, Profile, TensorSignature, resolve
from registry.bundles.keys import SigningKey
from registry.bundles.lock import LOCK_FORMAT, locked_entry
from registry.bundles.signed_lock import sign_lock
from registry.bundles.resolution import SELECTED, Outcome, left_out, registry_problem
from registry.formats.names import artifact_stream
from registry.formats.errors import UserError, first_line
from registry.projections.view import View
from registry.formats.text import text_arguments

from .context import Registry, open_registry
from .resolve import candidates_at, regression_detail


def chain_hash_at(registry: Registry, position: int) -> str:
    found = registry.store.read_all(after_position=position - 1, up_to_position=position)
    if not found:
        raise UserError(f"the log has no event at position {position}")
    return found[0].hash


@dataclass(frozen=True)
class ExportedLock:
    """A lock document, and every promoted artifact of its workload it leaves out, each with its reason code."""

    document: dict[str, Any]
    left_out: list[Outcome]

    def left_out_dicts(self) -> list[dict[str, str]]:
        return [{"artifact": o.artifact, "code": o.code, "detail": o.detail} for o in self.left_out]


@text_arguments
def export_lock(registry: Registry, workload: str, profile: Profile | None = None, site: CallSite = CallSite(),
                as_of: int | None = None) -> dict[str, Any]:
    """The lock document; its `artifacts` list is empty when nothing promoted (and matching) has a bundle."""
    return export(registry, workload, profile, site, as_of).document


@text_arguments
def export(registry: Registry, workload: str, profile: Profile | None = None, site: CallSite = CallSite(),
           as_of: int | None = None) -> ExportedLock:
    """The lock document and the promoted artifacts it leaves out (`lock` names each, with why)."""
    if as_of == 0 or registry.store.head_position() == 0:
        raise UserError("the log is empty: there is nothing to lock")
    position, found = candidates_at(registry, workload, as_of)
    states = {candidate.artifact: state for state, candidate in found}
    candidates = [candidate for _, candidate in found]
    if profile is None:
        outcomes = [Outcome(c.artifact, *problem, c) if (problem := registry_problem(c)) else
                    Outcome(c.artifact, SELECTED, "", c) for c in candidates]
    else:
        outcomes = list(resolve(candidates, profile, site).outcomes)
    shippable = [o.candidate for o in outcomes if o.code in (SELECTED, "not_selected")]
    chosen = sorted(shippable, key=Candidate.rank)
    document = {
        "format": LOCK_FORMAT, "workload": workload,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "log_origin": chain_hash_at(registry, 1),
        "log_position": position, "chain_hash": chain_hash_at(registry, position),
        "profile": None if profile is None else profile.to_dict(), "call_site": site.to_dict(),
        "artifacts": [locked_entry(states[c.artifact], c.manifest) for c in chosen],
    }
    return ExportedLock(document, left_out(outcomes))


def registry_problems(registry: Registry, lock: Lock) -> list[LockProblem]:
    """How the registry now disagrees with the lock (empty when every locked artifact still stands)."""
    head = registry.store.head_position()
    if lock.log_position > head:
        return [LockProblem(None, "chain_mismatch", f"the lock was taken at position {lock.log_position}; "
                                                     f"this registry's log ends at {head}")]
    if chain_hash_at(registry, lock.log_position) != lock.chain_hash or \
            lock.log_origin not in (None, chain_hash_at(registry, 1)):
        return [LockProblem(None, "chain_mismatch", f"the chain hash at position {lock.log_position} differs from "
                                                     "the lock's: another registry, or a rewritten log")]
    problems = []
    with registry.view() as view:
        for locked in lock.artifacts:
            problems.extend(_artifact_problems(registry, view, lock, locked))
    return problems


@dataclass
class LockVerification:
    lock: Lock | None  # None when its signature or expiry was refused: nothing else of it is read
    checked: list[str] = field(default_factory=list)
    problems: list[LockProblem] = field(default_factory=list)


def verify_lock(lock_file: str, *, public_keys: Sequence[str] = (), seen_file: str | None = None,
                bundles_dir: str | None = None, database: str | None = None,
                actor: str | None = None) -> LockVerification:
    """Every check `lock verify` makes of `lock_file`, in order; a file that cannot be read at all is refused.

    `database` is the --db value: with it or REGISTRY_DATABASE_URL the
    registry is checked too, and offline nothing but the files is read.
    """
    from registry.bundles import check_bundles, read_lock
    from registry.bundles.keys import TrustedKeys
    from registry.bundles.signed_lock import LockRefused, older_than, open_lock
    from registry.events.database import configured_url

    url = configured_url(database)
    if not public_keys:
        parsed = read_lock(lock_file)
        outcome = LockVerification(parsed)
    else:
        seen = read_lock(seen_file) if seen_file is not None else None
        try:
            outcome = LockVerification(open_lock(lock_file, TrustedKeys.from_files(public_keys)),
                                       ["signature and expiry"])
        except LockRefused as refused:
            return LockVerification(None, [], [LockProblem(None, refused.code, refused.detail)])
        why = older_than(outcome.lock, seen) if seen is not None else None
        if why:
            outcome.problems.append(LockProblem(None, "rollback", f"older than {seen_file}: {why}"))
    outcome.checked.insert(0, "lock file")
    if bundles_dir is not None:
        outcome.problems += check_bundles(outcome.lock, bundles_dir)
        outcome.checked.append("bundles")
    if url is not None:
        with open_registry(url, actor=actor) as registry:
            outcome.problems += registry_problems(registry, outcome.lock)
        outcome.checked.append("registry")
    return outcome


def _artifact_problems(registry: Registry, view: View, lock: Lock, locked) -> list[LockProblem]:
    name = locked.artifact
    verdict = registry.store.get(locked.verdict_event_id)
    if verdict is None or verdict.stream != artifact_stream(name) or verdict.type != "VerdictRendered" \
            or verdict.payload.get("payload_sha256") != locked.bundle_sha256:
        return [LockProblem(name, "verdict_unknown", f"the registry has no promoting verdict "
                                                     f"{locked.verdict_event_id} for it")]
    state = view.artifact(name) or {}
    # The read model keeps the latest human decision: a revoke after the lock that still stands is named
    # here; one followed by a new verdict shows below as a verdict that is no longer the locked one.
    human = state.get("human") or {}
    if human.get("action") == "revoke" and human["position"] > lock.log_position \
            and (state.get("verdict_position") or 0) < human["position"]:
        return [LockProblem(name, "revoked", f"revoked at position {human['position']} by "
                                             f"{human['person']}: {human['reason']}")]
    regressed = regression_detail(state) if state else None
    if regressed is not None:
        return [LockProblem(name, "regressed", regressed)]
    if state.get("workload") != lock.workload:
        return [LockProblem(name, "field_mismatch", f"workload: the lock is for {lock.workload!r}; the registry has "
                                                    f"{name} in workload {state.get('workload')!r} (an entry of "
                                                    "another workload's lock)")]
    changed = sorted(key for key, value in locked.identity.items() if state.get(key) != value)
    if changed:
        return [LockProblem(name, "identity_changed", f"it now claims another {', '.join(changed)} than the "
                                                      f"locked identity (a new candidate, not the one promoted)")]
    if state["decision"] != "promoted":
        return [LockProblem(name, "not_promoted", f"its decision is now {state['decision']}")]
    decided = verdict.payload["verdict"]["decision"]
    problems = [LockProblem(name, "field_mismatch", f"{field}: the lock says {said!r}; the registry says {truth!r}"
                            + (f" (the locked verdict decided {decided}; only the current verdict counts)"
                               if field == "verdict_event_id" else ""))
                for field, said, truth in _entry_fields(lock, locked, state, verdict) if said != truth]
    current = (view.workload(state["workload"]) or {}).get("contract_version")
    if not problems and state.get("contract_version") != current:
        problems.append(LockProblem(name, "stale_contract", f"promoted under contract "
                                                            f"v{state.get('contract_version')}; the workload's "
                                                            f"current contract is v{current}: judge it again"))
    return problems


def _entry_fields(lock: Lock, locked, state: dict[str, Any], verdict) -> list[tuple[str, Any, Any]]:
    """(field, the lock's value, the registry's) for every field of an entry that a runtime reads.

    The verdict must be the artifact's current one (an earlier verdict, held
    or promoted, no longer decides anything), and the speedup and its bounds
    are compared with what that verdict recorded, since a runtime ranks by them.
    """
    judged = verdict.payload["verdict"]
    return [
        ("verdict_event_id", locked.verdict_event_id, state.get("verdict_event_id")),
        ("verdict_position", locked.verdict_position, verdict.position),
        ("verdict workload", lock.workload, verdict.payload.get("workload")),
        ("contract_version", locked.contract_version, verdict.payload.get("contract_version")),
        ("speedup", locked.speedup, judged.get("speedup")),
        ("speedup_ci", None if locked.speedup_ci is None else list(locked.speedup_ci), judged.get("speedup_ci")),
    ]


def signed_lock(document: dict[str, Any], key: SigningKey, valid_for: timedelta) -> dict[str, Any]:
    """The lock document signed by `key`, expiring `valid_for` from now (a DSSE envelope)."""
    return sign_lock(document, key, valid_for=valid_for)


def lock_to_refresh(path: str, key: SigningKey | None, rebuild: bool) -> tuple[Lock, dict[str, str | None]]:
    """What `lock --refresh PATH` renews, and the artifacts wanted (id -> the bundle it must still ship, or None).

    The lock must be one the signing key signed (expired or not), else it is refused.

    The registry signs only what it decided, so it renews only a lock whose
    every byte its own key signed: an unsigned lock, one signed by another
    key, or one edited after signing (a profile removed, another lock's entry
    pasted in) is refused unless `rebuild` says to build a new lock from
    scratch, taking from the file only its workload, profile, call site and
    artifact ids; every entry is rebuilt from the registry's state either way.
    """
    from registry.bundles.keys import TrustedKeys
    from registry.bundles.lock import read_lock_json
    from registry.bundles.signed_lock import LockRefused, authenticate

    data = read_lock_json(path)
    if rebuild:
        return _scratch_request(data, path)
    if key is None:
        raise UserError(f"--refresh {path}: an unsigned refresh cannot check the lock's signature; give --key, or "
                        "--rebuild to build a new lock from its workload, profile, call site and artifact ids")
    try:
        verified = authenticate(data, TrustedKeys((key.public,)), path, check_expiry=False)
        return verified, {entry.artifact: entry.bundle_sha256 for entry in verified.artifacts}
    except LockRefused as refused:
        raise UserError(f"--refresh {path}: not a lock this key signed as it stands ({refused.code}: "
                        f"{refused.detail.removeprefix(path + ': ')}); give --rebuild to build a new lock from its "
                        "workload, profile, call site and artifact ids") from None


def _scratch_request(data: Any, path: str) -> tuple[Lock, dict[str, str | None]]:
    """`--rebuild`: the file's workload, profile, call site and artifact ids, nothing else of it read."""
    from registry.bundles.dsse import is_envelope, parse_envelope
    from registry.bundles.lock import parse_lock, payload_json
    from registry.formats.names import check_name

    if is_envelope(data):
        try:
            data = payload_json(parse_envelope(data).payload, path)
        except ValueError as exc:
            raise UserError(f"--refresh {path}: {first_line(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), list):
        raise UserError(f"--refresh {path}: not a lock document (an object with an artifacts list)")
    wanted = {check_name(entry.get("artifact") if isinstance(entry, dict) else None, "artifacts[].artifact"): None
              for entry in data["artifacts"]}
    return parse_lock({**data, "artifacts": []}, path), wanted


def refresh_lock(registry: Registry, previous: Lock, wanted: dict[str, str | None] | None = None,
                 rebuild: bool = False) -> dict[str, Any]:
    """A lock at the log's head holding those artifacts of `previous` that still ship with the same bundle.

    Same workload, profile and call site; a revoked, re-registered or no
    longer promoted artifact drops out, and nothing is added (a new
    promotion ships through a new `registry lock`). Every entry is the
    registry's own, rebuilt from its state; `wanted` (default: the lock's own
    entries) says which artifacts, each with the bundle it must still ship
    (None: whichever ships now). Refused for a lock read from another
    registry, unless `rebuild` (the lock was not verified, so its origin
    fields mean nothing).
    """
    if wanted is None:
        wanted = {entry.artifact: entry.bundle_sha256 for entry in previous.artifacts}
    if not rebuild and registry_problems(registry, replace(previous, artifacts=())):
        raise UserError(f"the lock was read at position {previous.log_position} of another registry (or of a "
                         "rewritten log): it cannot be refreshed here")
    profile = None if previous.document.get("profile") is None else Profile(**previous.document["profile"])
    document = export_lock(registry, previous.workload, profile, _call_site(previous.document.get("call_site")))
    document["artifacts"] = [e for e in document["artifacts"] if e["artifact"] in wanted
                             and wanted[e["artifact"]] in (None, e["bundle_sha256"])]
    return document


def _call_site(recorded: dict[str, Any] | None) -> CallSite:
    if not recorded:
        return CallSite()
    inputs = recorded.get("inputs")
    return CallSite(recorded.get("model_id"), recorded.get("model_revision"), recorded.get("fingerprint"),
                    None if inputs is None else tuple(
                        TensorSignature(shape=tuple(i["shape"]), stride=tuple(i["stride"]), dtype=i["dtype"],
                                        device=i["device"], name=i.get("name")) for i in inputs))
