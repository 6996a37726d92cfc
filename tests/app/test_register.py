"""`artifact register` decides from the artifact's read-model row, on SQLite and Postgres.

registry/app/workloads.py: a registration reads the artifact's caught-up row
(workload, kind, identity, stream version), never its stream, so registering
again costs the same on a stream of any length. The append expects the row's
stream version: whatever lands on the stream between the read and the append
(another registration, evidence) makes it read the row again, so racing
registrations end as if they had run one after the other.
"""
from __future__ import annotations

import pytest
from registry.app.workloads import REGISTER_TRIES, declare_workload, register_artifact
from registry.contracts import Contract
from registry.events.identity import artifact_identity
from registry.events.store import NewEvent
from registry.formats.errors import UserError
from read_side import Reads, land_before_append
from store_helpers import opened

A, B = "aa" * 32, "bb" * 32
LONG_STREAM = 2_000  # evidence events on the artifact before it is registered again


@pytest.fixture
def registry(migrated_backend_url):
    """A copy of the worker's migrated template (the schema is not what these tests are about) with two workloads."""
    registry = opened(migrated_backend_url, actor="tester")
    declare_workload(registry, Contract.from_mapping({"workload": "w"}))
    declare_workload(registry, Contract.from_mapping({"workload": "v"}))
    yield registry
    registry.engine.dispose()


def register(registry, digest: str, **claims):
    return register_artifact(registry, "k", workload=claims.pop("workload", "w"), kind=claims.pop("kind", "fused_kernel"),
                             payload_sha256=digest, **claims)


def registrations(registry) -> list[dict]:
    return [e.payload for e in registry.store.read_stream("artifact:k") if e.type == "ArtifactRegistered"]


def shown(registry) -> dict:
    return Reads(registry.store).current_artifact("k")


def lengthen(registry) -> None:
    """A long stream: evidence for the current identity, appended as one batch."""
    state = shown(registry)
    item = {"kind": "execution", "candidate_calls": 1, "fallbacks": 0}
    events = [NewEvent("ExecutionObserved", {"artifact": "k", "identity": state["identity"],
                                             "payload_sha256": state["payload_sha256"], "item": item})
              for _ in range(LONG_STREAM)]
    registry.store.append("artifact:k", events, actor="worker")


def test_register_again_on_a_long_stream_appends_only_a_change_of_claims(registry):
    assert register(registry, A).appended
    lengthen(registry)
    version = registry.store.stream_version("artifact:k")
    assert not register(registry, A).appended  # the same claims: nothing appended
    assert registry.store.stream_version("artifact:k") == version
    assert register(registry, B).appended  # another payload: a new identity, at the next version
    assert registry.store.stream_version("artifact:k") == version + 1
    state = shown(registry)
    assert state["payload_sha256"] == B and state["stream_version"] == version + 1
    assert state["identity"] == artifact_identity(registrations(registry)[-1])
    assert register(registry, A).appended and shown(registry)["evidence_counts"]["execution"] == LONG_STREAM
    assert [r["payload_sha256"] for r in registrations(registry)] == [A, B, A]


@pytest.mark.parametrize("claims, named", [({"kind": "step_cache"}, "a fused_kernel of workload w"),
                                           ({"workload": "v"}, "a fused_kernel of workload w")])
def test_register_as_another_kind_or_workload_is_refused_with_nothing_written(registry, claims, named):
    register(registry, A)
    lengthen(registry)
    head = registry.store.head_position()
    with pytest.raises(UserError, match=f"is registered as {named}; register a new id instead"):
        register(registry, B, **claims)
    assert registry.store.head_position() == head


def land_meanwhile(monkeypatch, *landings):
    """Each landing runs between one read of the artifact's row and the append that follows it
    (a landing's own registration reads the row too, and lands nothing)."""
    land_before_append(monkeypatch, *landings)


def other_writer(url):
    return opened(url, actor="other")


def test_a_registration_that_lands_first_with_other_claims_is_followed_by_this_one(registry, migrated_backend_url,
                                                                                 monkeypatch):
    register(registry, A)
    lengthen(registry)
    other = other_writer(migrated_backend_url)
    land_meanwhile(monkeypatch, lambda: register(other, B))
    assert register(registry, "cc" * 32).appended
    assert [r["payload_sha256"] for r in registrations(registry)] == [A, B, "cc" * 32]  # in the order they ran
    assert shown(registry)["payload_sha256"] == "cc" * 32
    other.engine.dispose()


def test_the_same_claims_registered_meanwhile_are_appended_once(registry, migrated_backend_url, monkeypatch):
    register(registry, A)
    lengthen(registry)
    other = other_writer(migrated_backend_url)
    land_meanwhile(monkeypatch, lambda: register(other, B))
    assert not register(registry, B).appended  # the other registration already made these claims current
    assert [r["payload_sha256"] for r in registrations(registry)] == [A, B]
    other.engine.dispose()


def test_a_first_registration_racing_one_of_another_kind_is_refused(registry, migrated_backend_url, monkeypatch):
    other = other_writer(migrated_backend_url)
    land_meanwhile(monkeypatch, lambda: register(other, A, kind="step_cache"))
    with pytest.raises(UserError, match="is registered as a step_cache of workload w"):
        register(registry, A)
    assert [r["kind"] for r in registrations(registry)] == ["step_cache"]
    other.engine.dispose()


def test_evidence_landing_meanwhile_makes_the_registration_read_again_not_fail(registry, migrated_backend_url,
                                                                               monkeypatch):
    register(registry, A)
    other = other_writer(migrated_backend_url)
    land_meanwhile(monkeypatch, lambda: lengthen(other))
    assert register(registry, B).appended
    state = shown(registry)
    assert state["payload_sha256"] == B and state["stream_version"] == 1 + LONG_STREAM + 1
    other.engine.dispose()


def test_a_registration_raced_on_every_try_is_refused_with_nothing_of_its_own_written(registry, migrated_backend_url,
                                                                                     monkeypatch):
    register(registry, A)
    other = other_writer(migrated_backend_url)
    digests = iter(f"{n:064x}" for n in range(1, REGISTER_TRIES + 1))
    land_meanwhile(monkeypatch, *[lambda: register(other, next(digests))] * REGISTER_TRIES)
    with pytest.raises(UserError, match=f"kept changing while it was registered \\({REGISTER_TRIES} tries\\)"):
        register(registry, B)
    assert B not in [r["payload_sha256"] for r in registrations(registry)]
    assert len(registrations(registry)) == 1 + REGISTER_TRIES
    other.engine.dispose()


# One name, one look (registry/formats/names.py, registry/formats/confusables.py).

NFC_E, NFD_E = "\u00e9-cache", "e\u0301-cache"


def test_a_name_typed_in_nfd_is_the_nfc_name(registry, registry_cli):
    first = register_artifact(registry, NFC_E, workload="w", kind="step_cache", payload_sha256=A)
    again = register_artifact(registry, NFD_E, workload="w", kind="step_cache", payload_sha256=A)
    assert first.appended and not again.appended and again.artifact == NFC_E
    assert Reads(registry.store).artifact(NFD_E)["artifact"] == NFC_E
    assert [s["artifact"] for s in Reads(registry.store).artifacts(workload="w")] == [NFC_E]
    declared = registry_cli.tmp / "w.yaml"
    declared.write_text("workload: w\n")
    assert registry_cli("workload", "declare", str(declared)).exit_code == 0
    assert registry_cli("artifact", "register", NFD_E, "--workload", "w", "--kind", "step_cache",
                        "--payload", str(declared), "--new-identity").exit_code == 0
    shown = registry_cli("show", NFC_E, "--json")
    assert shown.exit_code == 0 and NFD_E not in shown.stdout


@pytest.mark.parametrize("hidden", ["\ufe0f", "\u3164", "\u034f", "\u2800", "\U000e0041", "\u115f", "\u180b"])
def test_a_name_holding_an_invisible_character_is_refused(registry, hidden):
    with pytest.raises(UserError, match=f"U\\+{ord(hidden):04X}"):
        register_artifact(registry, "cache" + hidden, workload="w", kind="step_cache", payload_sha256=A)
    assert Reads(registry.store).artifacts(workload="w") == []


@pytest.mark.parametrize("existing, look_alike", [("cache", "\u0441ache"),  # Cyrillic es
                                                  ("cache", "\uff43\uff41\uff43\uff48\uff45"),  # full-width
                                                  ("model-v1", "model-vl"), ("fa3", "f\u04303"),
                                                  # prototypes of two or more characters (confusables.txt 14.0)
                                                  ("m-fused", "rn-fused"), ("rn-fused", "m-fused"),
                                                  ("file-cache", "\ufb01le-cache"), ("ll-fused", "\u2161-fused")])
def test_a_look_alike_of_an_id_in_the_workload_is_refused_naming_it(registry, existing, look_alike):
    register_artifact(registry, existing, workload="w", kind="step_cache", payload_sha256=A)
    with pytest.raises(UserError, match=f"looks like '{existing}', already an artifact of workload w"):
        register_artifact(registry, look_alike, workload="w", kind="step_cache", payload_sha256=B)
    assert register_artifact(registry, look_alike, workload="v", kind="step_cache", payload_sha256=B).appended
