"""Deciding: the gate over recorded evidence, human decisions, and what-if.

`promote` runs the one gate on the latest evidence of each kind recorded for
the artifact's current identity (as the projection scopes it) under the
workload's current contract, and appends the verdict on condition that the
artifact's stream has not moved since the state it decided on was read.
When it has (an import landed meanwhile), the verdict is decided again on the
new state, a bounded number of times. Promoted and rejected are final for an
identity: promoting again returns the standing verdict (decided under the
contract it names; `show` flags it once the contract moves on). Any other
decision is decided again, under the current contract.

Everything a decision reads comes from one unit of work (`registry.view()`:
one catch-up, one snapshot): the artifact's row and its evidence items, the
rows of the artifacts sharing its bytes, the workload's row with its contract
and the speed record of its bytes.

Returning a standing verdict reads rows and nothing else, so the gate, the
contract model and the payload models (pydantic, numpy) are imported where a
verdict or decision is made, not when this module loads (and the speed
record's reading with them): `promote` of a decided artifact starts as fast
as a read (benchmarks/cli.py).

A human decision names the verdict it answers (by default the latest) and is
appended only if nothing reached the artifact's stream since that verdict
was read, so a person never approves or revokes something they did not see.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from registry.formats.errors import UserError
from registry.events.errors import ConcurrencyError
from registry.events.store import NewEvent
from registry.formats.names import artifact_stream
from registry.projections.read_models import FINAL, ArtifactState
from registry.projections.read_models.artifacts import attempts_on, contract_note
from registry.projections.view import DeclaredContract, View
from registry.formats.text import text_arguments

from .context import Registry
from .retries import decided_on_a_still_stream

if TYPE_CHECKING:
    from registry.contracts import Contract
    from registry.gate import ArtifactFacts, GateEvidence, SpeedRecord

# How many times promote decides again when evidence keeps landing while it decides.
PROMOTE_TRIES = 5


def gate_inputs(state: ArtifactState, attempts: int, record: SpeedRecord | None,
                sharing: list[ArtifactState] = ()) -> tuple[GateEvidence, ArtifactFacts]:
    """The gate's view of an artifact's projected state (its evidence items attached); `attempts` the payload's
    count (`payload_attempts`), `record` the speed record of its bytes (`View.speed_record`), `sharing` the
    artifacts of its workload that registered its bytes (or more, `View.sharing_payload`), for an earlier
    rejection of them (`standing_rejection`)."""
    from registry.gate import ArtifactFacts, GateEvidence, Recorded

    from .compiled import registered_cubins

    latest = state["evidence"]

    def recorded(kind: str) -> Recorded | None:
        found = latest.get(kind)
        return Recorded(found["event_id"], found["item"]) if found else None

    failures = [Recorded(f["event_id"], {"kind": "failure", "stage": f["stage"], "error": f["error"]})
                for f in state["open_failures"]]
    evidence = GateEvidence(execution=recorded("execution"), benchmark=recorded("benchmark"),
                            parity=recorded("parity"), perceptual=recorded("perceptual"), failures=failures,
                            benchmark_attempts=attempts, record=record,
                            rejection=standing_rejection(state, sharing))
    facts = ArtifactFacts(artifact_id=state["artifact"], kind=state["kind"], claimed_backend=state["backend"],
                          cubins=registered_cubins(state.get("bundle")))
    return evidence, facts


def standing_rejection(state: ArtifactState, sharing: list[ArtifactState] = ()):
    """A verdict that rejected the state's bytes in its workload, if any (registry.gate `StandingRejection`).

    Every identity scope, current or set aside, of the artifact and of those
    in `sharing` that was registered with the same bytes, keeps its latest
    verdict; once a verdict of given bytes is rejected, every later one is
    too (the gate rejects on this), so a rejected latest verdict in any of
    those scopes is every rejection there was. A person's revoke leaves the
    scope's verdict in place, so it does not lift the rejection either. An
    artifact registered without bytes has only its current identity's own.
    """
    from registry.gate.model import StandingRejection

    payload = state["payload_sha256"]
    scopes = [(state["artifact"], state)]
    if payload is not None:
        for found in (state, *(other for other in sharing if other["artifact"] != state["artifact"])):
            if found["payload_sha256"] == payload and found is not state:
                scopes.append((found["artifact"], found))
            scopes.extend((found["artifact"], kept) for kept in found["earlier_identities"].values()
                          if kept["payload_sha256"] == payload)
    for artifact, scope in scopes:
        verdict = scope["verdict"]
        if verdict is not None and verdict["decision"] == "rejected":
            return StandingRejection(scope["verdict_event_id"], artifact, scope["contract_version"])
    return None


def artifact_state(view: View, artifact: str) -> ArtifactState:
    """The artifact's current state from the caught-up read model (one row; no stream, no verdict history), its
    evidence items attached (which also checks that each entry names an event of its kind in its stream)."""
    state = view.artifact(artifact)
    if state is None:
        raise UserError(f"unknown artifact {artifact!r} (register it with `registry artifact register`)")
    return state


def payload_attempts(state: ArtifactState, workload_artifacts: list[ArtifactState]) -> int:
    """Benchmark attempts of the artifact's bytes within its workload (docs/gate.md, "Attempts").

    The same payload registered under another artifact id, or under other
    claims of this one, does not start a fresh count: every benchmark item of
    those bytes in the workload counts. An artifact without a payload hash
    has nothing to match by, so its own identity's count stands.
    `workload_artifacts` are the projected artifacts of its workload, or
    at least all of them that ever registered its bytes (the payload index's
    answer, `View.sharing_payload`: no other artifact adds to the count).
    """
    payload = state["payload_sha256"]
    if payload is None:
        return state["benchmark_attempts"]
    others = [other for other in workload_artifacts if other["artifact"] != state["artifact"]]
    return sum(attempts_on(artifact, payload) for artifact in (state, *others))


# An artifact imported against a workload nobody declared: the gate has no contract to run.
NO_CONTRACT_RULE = "contract.missing"


@dataclass(frozen=True)
class PromoteOutcome:
    verdict: dict[str, Any]
    appended: bool
    contract_version: int | None
    contract_hash: str
    position: int | None
    benchmark_attempts: int

    @property
    def standing(self) -> bool:
        """Whether this is an earlier final verdict returned again (not a hold for want of a contract)."""
        return not self.appended and self.verdict["rule"] != NO_CONTRACT_RULE


def undeclared_contract_verdict(workload: str) -> dict[str, Any]:
    """The hold for an artifact whose workload has no contract: nothing to judge by, and none is invented."""
    from registry.gate.model import GATE_VERSION

    return {
        "decision": "held", "tier": None, "rule": NO_CONTRACT_RULE, "margins": [], "speedup": None,
        "speedup_ci": None, "evidence_ids": [], "gate_version": GATE_VERSION,
        "reasons": [f"workload {workload} has no declared contract (declare it with `registry workload declare`); "
                    "no contract is invented, so nothing is decided"],
    }


@text_arguments
def promote(registry: Registry, artifact: str, *, rejudge: bool = False) -> PromoteOutcome:
    """Decide and record; decide again on the new state when evidence lands meanwhile (PROMOTE_TRIES times).

    With `rejudge`, a final verdict decided under an older contract than the
    workload's current one does not stand: it is decided again under the
    current contract (app/rejudge.py).
    """
    def once() -> PromoteOutcome:
        with registry.view() as view:
            return _promote_once(view, artifact, rejudge)

    return decided_on_a_still_stream(
        once, PROMOTE_TRIES,
        f"artifact {artifact} received new events each of the {PROMOTE_TRIES} times its verdict was decided; "
        "nothing recorded: run promote again once its evidence imports have finished")


def _promote_once(view: View, artifact: str, rejudge: bool = False) -> PromoteOutcome:
    state = artifact_state(view, artifact)
    sharing = view.sharing_payload(state["workload"], state["payload_sha256"], artifact)
    attempts = payload_attempts(state, sharing)
    workload = view.workload(state["workload"])
    moved = workload is not None and state["contract_version"] != workload["contract_version"]
    if state["decision"] in FINAL and state["verdict"] is not None and not (rejudge and moved):
        return PromoteOutcome(state["verdict"], False, state["contract_version"], state.get("contract_hash") or "",
                              None, attempts)
    if workload is None:
        return PromoteOutcome(undeclared_contract_verdict(state["workload"]), False, None, "", None, attempts)
    from registry.contracts import Contract
    from registry.gate import decide

    contract = Contract.from_stored(workload["contract"])
    evidence, facts = gate_inputs(state, attempts, view.speed_record(state, workload).record, sharing)
    verdict = decide(contract, evidence, facts).to_dict()
    payload = {"artifact": artifact, "identity": state["identity"], "payload_sha256": state["payload_sha256"],
               "workload": state["workload"], "contract_version": workload["contract_version"],
               "contract_hash": workload["contract_hash"], "gate_version": verdict["gate_version"],
               "verdict": verdict, "benchmark_attempts": attempts}
    # The verdict must rest on exactly the events the projection saw: if anything
    # landed on the stream since, the append fails and promote decides again.
    placed = view.append(artifact_stream(artifact), [NewEvent("VerdictRendered", payload)],
                         expected_version=state["stream_version"])
    return PromoteOutcome(verdict, True, workload["contract_version"], workload["contract_hash"],
                          placed.positions[0], attempts)


@text_arguments
def human_decision(registry: Registry, artifact: str, action: str, reason: str,
                   verdict_event_id: str | None = None) -> int:
    """Record an approval (advisory tier only) or a revocation, by a named person with a reason.

    The decision answers `verdict_event_id` (default: the artifact's latest
    verdict), which must still be the latest when the decision is appended.
    """
    if not reason or not reason.strip():
        raise UserError(f"{action} needs a non-empty --reason")
    with registry.view() as view:
        state = artifact_state(view, artifact)
        if action == "approve":
            if state["tier"] != "advisory" or state["decision"] != "recorded":
                raise UserError(
                    f"approve applies to advisory-tier artifacts whose verdict is recorded; {artifact} is "
                    f"{state['decision']} (tier {state['tier'] or 'none'})"
                )
            _check_approvable(view.contract(state["workload"]), artifact, state)
        elif action == "revoke":
            if state["decision"] not in FINAL:
                raise UserError(f"revoke ends a promotion or rejection; {artifact} is {state['decision']}")
        else:
            raise UserError(f"unknown human action {action!r}")
        latest = state["verdict_event_id"]
        if verdict_event_id is not None and verdict_event_id != latest:
            raise UserError(
                f"--verdict {verdict_event_id} is not the latest verdict of {artifact} ({latest}); "
                f"read it with `registry show {artifact}` and {action} that one"
            )
        payload = {"artifact": artifact, "identity": state["identity"], "payload_sha256": state["payload_sha256"],
                   "action": action, "reason": reason.strip(), "person": view.actor, "verdict_event_id": latest}
        try:
            return view.append(artifact_stream(artifact), [NewEvent("HumanDecision", payload)],
                               expected_version=state["stream_version"]).positions[0]
        except ConcurrencyError:
            raise UserError(
                f"{artifact} changed while the {action} was being recorded (verdict {latest} may no longer be the "
                f"latest); nothing recorded: read it again with `registry show {artifact}`"
            ) from None


def _check_approvable(declared: DeclaredContract | None, artifact: str, state: ArtifactState) -> None:
    """An approval answers a verdict that still stands: under the current contract, on the current evidence.

    A person may promote only what the workload's current contract leaves to
    a person (the advisory tier), on the verdict that contract gave; and the
    verdict must have seen everything recorded for the identity since: no
    evidence or failure after it, no revoke after it.
    """
    verdict_id, verdict_position = state["verdict_event_id"], state["verdict_position"]
    if declared is None or declared.version != state["contract_version"] or declared.contract.tier != "advisory":
        now = "has no declared contract" if declared is None else \
            f"is now at contract v{declared.version} (tier {declared.contract.tier})"
        raise UserError(
            f"verdict {verdict_id} of {artifact} was decided under contract v{state['contract_version']} and "
            f"workload {state['workload']} {now}; nothing recorded: run `registry promote {artifact}` to decide "
            "under the current contract first"
        )
    later = [entry["position"] for entry in (*state["evidence"].values(), *state["open_failures"])
             if entry["position"] > verdict_position]
    human = state["human"]
    if human is not None and human["action"] == "revoke" and human["position"] > verdict_position:
        later.append(human["position"])
    if later:
        raise UserError(
            f"verdict {verdict_id} of {artifact} is older than what was recorded for it at position {max(later)}; "
            f"nothing recorded: run `registry promote {artifact}` to decide on it first"
        )


@dataclass(frozen=True)
class WhatIf:
    artifact: str
    old_decision: str
    new_decision: str
    old_rule: str | None
    new_rule: str
    reasons: list[str]
    moved_margins: list[dict[str, Any]]
    decided_under: int | None  # the contract version the standing verdict was decided under
    contract_note: str | None  # set when a final decision stands under an older contract than the current one

    @property
    def changed(self) -> bool:
        return self.old_decision != self.new_decision

    def to_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "old_decision": self.old_decision, "new_decision": self.new_decision,
                "old_rule": self.old_rule, "new_rule": self.new_rule, "changed": self.changed,
                "reasons": self.reasons, "moved_margins": self.moved_margins,
                "decided_under_contract": self.decided_under, "contract_note": self.contract_note}


def _margins_by_metric(verdict: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {m["metric"]: m for m in (verdict or {}).get("margins", [])}


def what_if(registry: Registry, contract: Contract) -> list[WhatIf]:
    """Decide every artifact of the contract's workload again under it; append nothing."""
    from registry.gate import decide

    from .workloads import declared_contract

    outcomes = []
    with registry.view() as view:
        declared_contract(view, contract.workload)
        workload = view.workload(contract.workload)
        artifacts = view.artifacts(workload=contract.workload)
        records = [view.speed_record(state, workload, documents=True).record for state in artifacts]
    for state, record in zip(artifacts, records):
        evidence, facts = gate_inputs(state, payload_attempts(state, artifacts), record, artifacts)
        new = decide(contract, evidence, facts)
        old = _margins_by_metric(state["verdict"])
        moved = []
        for margin in new.to_dict()["margins"]:
            before = old.get(margin["metric"])
            if before is None or before["threshold"] != margin["threshold"] or before["passed"] != margin["passed"]:
                moved.append({"metric": margin["metric"], "value": margin["value"],
                              "old_threshold": before["threshold"] if before else None,
                              "new_threshold": margin["threshold"],
                              "old_margin": before["margin"] if before else None, "new_margin": margin["margin"],
                              "passed": margin["passed"]})
        outcomes.append(WhatIf(state["artifact"], state["decision"], new.decision, state["rule"], new.rule,
                               list(new.reasons), moved, state["contract_version"], contract_note(state, workload)))
    return outcomes


