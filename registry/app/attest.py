"""Attestations: a signed in-toto Statement that an artifact's bundle was promoted, and on what grounds.

`attestation(registry, artifact)` builds an in-toto Statement v1 whose
subject is the bundle (its digest, then each of its files with its SHA-256)
and whose predicate (PREDICATE_TYPE, schema in docs/bundles.md,
"Attestations") is the verdict that promoted it: workload, contract version
and hash, decision, margins, speedup and its interval, the ids of the
evidence events the verdict rested on, gate version, the approval when a
person gave it, the log's chain head (position and hash) and the time.
`signed_attestation` puts it in a DSSE envelope of type
application/vnd.in-toto+json, so any DSSE verifier holding the public key can
check it.

Only what ships is attested: a promoted, unrevoked bundle promoted under the
workload's current contract. Anything else is refused in one line.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from registry.bundles import parse_manifest
from registry.bundles.dsse import sign
from registry.bundles.keys import SigningKey
from registry.formats.errors import UserError
from registry.formats.text import text_arguments

from .context import Registry
from .lock import chain_hash_at

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:registry:attestation:promotion:v1"


@text_arguments
def attestation(registry: Registry, artifact: str) -> dict[str, Any]:
    """The in-toto Statement for `artifact`'s promotion, read at the log's head; refused unless it ships."""
    with registry.view() as view:
        state = view.artifact(artifact)
        workload = (view.workload(state["workload"]) if state is not None else None) or {}
    if state is None:
        raise UserError(f"unknown artifact {artifact!r} (register it with `registry artifact register`)")
    if state["decision"] != "promoted":
        raise UserError(f"{artifact} is {state['decision']}: only a promoted artifact is attested")
    if state.get("bundle") is None:
        raise UserError(f"{artifact} was registered without a bundle: there is nothing to attest")
    if state["contract_version"] != workload.get("contract_version"):
        raise UserError(f"{artifact} was promoted under contract v{state['contract_version']}; the current is "
                         f"v{workload.get('contract_version')}: judge it again (`registry rejudge "
                         f"{state['workload']}`) before attesting it")
    manifest = parse_manifest(state["bundle"], f"artifact {artifact}: stored bundle")
    verdict_event = registry.store.get(state["verdict_event_id"])
    verdict = verdict_event.payload["verdict"]
    head = registry.store.head_position()
    human = state.get("human")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": artifact, "digest": {"sha256": manifest.digest},
                     "annotations": {"registry.digest": f"canonical bundle manifest ({manifest.format})"}}]
        + [{"name": f"{artifact}/{file.path}", "digest": {"sha256": file.sha256}} for file in manifest.files],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "artifact": artifact,
            "identity": state["identity"],
            "workload": state["workload"],
            "contract": {"version": verdict_event.payload["contract_version"],
                         "hash": verdict_event.payload["contract_hash"]},
            "decision": state["decision"],
            "verdict": {"event_id": verdict_event.event_id, "position": verdict_event.position,
                        "decision": verdict["decision"], "tier": verdict["tier"], "rule": verdict["rule"]},
            "approval": None if not human or human["action"] != "approve" else
            {"event_id": human["event_id"], "person": human["person"], "reason": human["reason"]},
            "margins": verdict["margins"],
            "speedup": verdict["speedup"],
            "speedup_ci": verdict["speedup_ci"],
            "evidence_event_ids": verdict["evidence_ids"],
            # A verdict decided on a speed record cites the record instead of listing its entries: the attestation
            # carries that citation (key, head, entries, digest of their event ids), or None for an older verdict.
            "speed_record": verdict.get("speed_record"),
            "gate_version": verdict_event.payload["gate_version"],
            "chain_head": {"position": head, "hash": chain_hash_at(registry, head)},
            "attested_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }


def signed_attestation(statement: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """The statement in a DSSE envelope signed by `key`."""
    payload = json.dumps(statement, sort_keys=True, ensure_ascii=False, allow_nan=False,
                         separators=(",", ":")).encode("utf-8")
    return sign(INTOTO_PAYLOAD_TYPE, payload, key).to_dict()
