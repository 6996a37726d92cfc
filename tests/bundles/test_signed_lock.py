"""Signed locks and attestations, checked by `lock verify --key` and by the runtime.

A lock edited in any field, re-signed by an untrusted key, signed and then
given another payload, expired, replayed after a newer one, unsigned, or with
a truncated signature is refused, naming the reason; an honest lock loads.
The envelopes the registry writes are checked here with an independent
implementation of DSSE's pre-authentication encoding (not the registry's
verifier).
"""
from __future__ import annotations

import base64
import copy
import json
import logging
import os
import stat
import sys
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.bundles import Profile, read_lock
from registry.bundles.keys import create_key, load_signing_key
from registry.bundles.signed_lock import sign_lock
from registry.runtime import LockRefused, load, resolve
from registry.runtime.trust import PROCESS_HISTORY
from ship_helpers import ship_fast_and_faster
from stateful_checks import CopiedStart

PROFILE = Profile("sm90", "2.13.0", "12.8")


# The folder `signed` builds through the CLI (two bundles shipped, a key, a signed lock): built by the first test
# of a process that asks, copied for the others (nothing in it names the folder it was built in). The copies share
# their log's origin, so each test starts with no lock of that log accepted by the process (as a new log had).
SIGNED = CopiedStart()


@pytest.fixture
def signed(registry_cli, monkeypatch):
    monkeypatch.setattr(PROCESS_HISTORY, "_newest", {})
    key = registry_cli.tmp / "signing.key"
    lock = registry_cli.tmp / "registry.lock.json"
    SIGNED.start(registry_cli.tmp, lambda: sign(registry_cli, key, lock))
    registry_cli.key, registry_cli.public, registry_cli.lock = key, f"{key}.pub", lock
    registry_cli.bundles = registry_cli.tmp / "bundles"
    return registry_cli


def sign(registry_cli, key, lock) -> dict:
    assert ship_fast_and_faster(registry_cli) == registry_cli.tmp / "bundles"
    assert registry_cli("keys", "init", str(key)).exit_code == 0
    result = registry_cli("lock", "--workload", "wan", "--key", str(key), "--out", str(lock))
    assert result.exit_code == 0, result.output
    return {}


def envelope_of(path) -> dict:
    return json.loads(path.read_text())


def payload_of(envelope: dict) -> dict:
    return json.loads(base64.b64decode(envelope["payload"]))


def with_payload(envelope: dict, document: dict) -> dict:
    return {**envelope, "payload": base64.b64encode(json.dumps(document).encode()).decode()}


def write(cli, name: str, content: dict):
    path = cli.tmp / name
    path.write_text(json.dumps(content))
    return path


def verify_codes(cli, path, *keys, extra=()) -> list[str]:
    """`lock verify --key` and its problem codes (online too: the test CLI names the registry with --db)."""
    args = [a for k in (keys or (cli.public,)) for a in ("--key", str(k))]
    result = cli("lock", "verify", str(path), *args, *extra, "--json")
    assert result.exit_code in (0, 3), result.output
    return [p["code"] for p in json.loads(result.output)["problems"]]


def runtime_refusal(cli, path, *keys) -> str:
    modules = set(sys.modules)
    with pytest.raises(LockRefused) as refused:
        resolve("wan", PROFILE, lock=path, trusted_keys=list(keys) or [cli.public])
    assert not any(m.startswith("_registry_bundle_") for m in set(sys.modules) - modules)  # nothing imported
    return refused.value.code


def refused_everywhere(cli, path, code: str) -> None:
    assert verify_codes(cli, path) == [code]
    assert runtime_refusal(cli, path) == code


def test_an_honest_signed_lock_verifies_and_loads(signed):
    result = signed("lock", "verify", str(signed.lock), "--key", signed.public, "--bundles", str(signed.bundles))
    assert result.exit_code == 0, result.output
    assert "checked lock file, signature and expiry, bundles" in result.output
    answer = resolve("wan", PROFILE, lock=signed.lock, trusted_keys=[signed.public])
    assert answer.match.artifact == "faster"
    assert load(answer.match, trusted_root=signed.bundles)(3) == ("faster", 3)
    envelope = envelope_of(signed.lock)
    assert envelope["payloadType"] == "application/vnd.registry.lock+json"
    document = payload_of(envelope)
    issued, expires = (datetime.fromisoformat(document[k]) for k in ("exported_at", "expires_at"))
    assert expires - issued == timedelta(days=7)  # the documented default


ENTRY_EDITS = {
    "artifact": lambda e: e.update(artifact="fast2"),
    "identity.kind": lambda e: e["identity"].update(kind="module"),
    "identity.backend": lambda e: e["identity"].update(backend="FLASH"),
    "bundle_sha256": lambda e: e.update(bundle_sha256="0" * 64),
    "manifest.files": lambda e: e["manifest"]["files"][0].update(sha256="1" * 64),
    "manifest.window": lambda e: e["manifest"]["compatibility"]["gpu_architectures"].append("sm80"),
    "manifest.entry_point": lambda e: e["manifest"]["entry_point"].update(symbol="other"),
    "verdict_event_id": lambda e: e.update(verdict_event_id="0" * 32),
    "verdict_position": lambda e: e.update(verdict_position=1),
    "contract_version": lambda e: e.update(contract_version=9),
    "speedup": lambda e: e.update(speedup=99.0),
    "speedup_ci": lambda e: e.update(speedup_ci=[50.0, 99.0]),
}
TOP_EDITS = {
    "workload": lambda d: d.update(workload="other"),
    "expires_at": lambda d: d.update(expires_at="2999-01-01T00:00:00+00:00"),
    "log_position": lambda d: d.update(log_position=d["log_position"] + 1),
    "artifacts (one dropped)": lambda d: d["artifacts"].pop(0),
    "artifacts (reordered)": lambda d: d["artifacts"].reverse(),
}


@pytest.mark.parametrize("field", [*ENTRY_EDITS, *TOP_EDITS])
def test_a_signed_lock_edited_in_any_field_is_refused(signed, field):
    envelope = envelope_of(signed.lock)
    document = payload_of(envelope)
    if field in ENTRY_EDITS:
        ENTRY_EDITS[field](document["artifacts"][-1])
    else:
        TOP_EDITS[field](document)
    refused_everywhere(signed, write(signed, "edited.json", with_payload(envelope, document)), "bad_signature")


def test_a_lock_re_signed_by_an_untrusted_key_is_refused(signed):
    document = payload_of(envelope_of(signed.lock))
    document["artifacts"][-1]["speedup"] = 99.0
    intruder = create_key(signed.tmp / "intruder.key")
    forged = sign_lock({k: v for k, v in document.items() if k != "expires_at"}, intruder)
    refused_everywhere(signed, write(signed, "forged.json", forged), "untrusted_key")
    # trusting the intruder's key too, the signature holds, and online the registry still names the edited field
    trusting_both = (signed.public, f"{signed.tmp / 'intruder.key'}.pub")
    assert verify_codes(signed, signed.tmp / "forged.json", *trusting_both) == ["field_mismatch"]


def test_a_signature_moved_onto_another_payload_is_refused(signed):
    key = load_signing_key(signed.key)
    current = read_lock(signed.lock).document
    older = sign_lock(current, key, now=datetime.now(timezone.utc) - timedelta(hours=1))
    newer = envelope_of(signed.lock)
    swapped = {**newer, "payload": older["payload"]}
    refused_everywhere(signed, write(signed, "swapped.json", swapped), "bad_signature")


@pytest.mark.parametrize("cut", [1, 4, 8, 40])
def test_a_truncated_signature_is_refused(signed, cut):
    envelope = envelope_of(signed.lock)
    signature = envelope["signatures"][0]
    truncated = {**envelope, "signatures": [{**signature, "sig": signature["sig"][:-cut]}]}
    refused_everywhere(signed, write(signed, "truncated.json", truncated), "bad_signature")


def test_an_expired_lock_is_refused(signed):
    document = read_lock(signed.lock).document
    expired = sign_lock(document, load_signing_key(signed.key), valid_for=timedelta(days=7),
                        now=datetime.now(timezone.utc) - timedelta(days=8))
    refused_everywhere(signed, write(signed, "expired.json", expired), "expired")
    result = signed("lock", "verify", str(signed.tmp / "expired.json"), "--key", signed.public)
    assert result.exit_code == 3 and result.stderr.startswith("expired: lock: ") and "refreshed lock" in result.stderr


def test_a_lock_older_than_one_already_seen_is_a_rollback(signed):
    key, document = load_signing_key(signed.key), read_lock(signed.lock).document
    older = write(signed, "older.json", sign_lock(document, key, now=datetime.now(timezone.utc) - timedelta(hours=2)))
    assert resolve("wan", PROFILE, lock=older, trusted_keys=[signed.public]).match.artifact == "faster"
    assert resolve("wan", PROFILE, lock=signed.lock, trusted_keys=[signed.public]).match is not None
    assert runtime_refusal(signed, older) == "rollback"  # replayed after the newer one
    assert resolve("wan", PROFILE, lock=signed.lock, trusted_keys=[signed.public]).match is not None  # same: fine
    assert verify_codes(signed, older, extra=("--seen", str(signed.lock))) == ["rollback"]
    assert verify_codes(signed, signed.lock, extra=("--seen", str(older))) == []


def test_an_unsigned_lock_needs_the_loud_opt_in(signed, caplog):
    unsigned = signed.tmp / "unsigned.json"
    assert signed("lock", "--workload", "wan", "--unsigned", "--out", str(unsigned)).exit_code == 0
    refused_everywhere(signed, unsigned, "unsigned")
    with caplog.at_level(logging.WARNING, logger="registry.runtime"):
        answer = resolve("wan", PROFILE, lock=unsigned, insecure_allow_unsigned_lock=True)
    assert answer.match.artifact == "faster" and "INSECURE" in caplog.text


def test_a_signed_lock_is_refused_without_trusted_keys_even_with_the_opt_in(signed):
    with pytest.raises(LockRefused) as refused:
        resolve("wan", PROFILE, lock=signed.lock, insecure_allow_unsigned_lock=True)
    assert refused.value.code == "untrusted_key"


def test_lock_refuses_to_write_an_unsigned_lock_unless_asked(signed, monkeypatch):
    monkeypatch.delenv("REGISTRY_SIGNING_KEY", raising=False)
    out = signed.tmp / "quiet.json"
    result = signed("lock", "--workload", "wan", "--out", str(out))
    assert result.exit_code == 1 and "no signing key" in result.stderr and not out.exists()
    monkeypatch.setenv("REGISTRY_SIGNING_KEY", signed.key.read_text())  # a secret store's variable
    assert signed("lock", "--workload", "wan", "--out", str(out)).exit_code == 0
    assert verify_codes(signed, out) == []


def test_key_rotation_and_retirement(signed):
    new_key = signed.tmp / "new.key"
    assert signed("keys", "init", str(new_key)).exit_code == 0
    rotated = signed.tmp / "rotated.json"
    assert signed("lock", "--workload", "wan", "--key", str(new_key), "--out", str(rotated)).exit_code == 0
    both = (signed.public, f"{new_key}.pub")
    assert verify_codes(signed, signed.lock, *both) == [] and verify_codes(signed, rotated, *both) == []
    assert verify_codes(signed, signed.lock, f"{new_key}.pub") == ["untrusted_key"]  # the old key retired


def test_keys_init_is_owner_only_and_never_overwrites(registry_cli):
    key = registry_cli.tmp / "k"
    made = registry_cli("keys", "init", str(key), "--json")
    assert made.exit_code == 0
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    again = registry_cli("keys", "init", str(key))
    assert again.exit_code == 1 and "already exists" in again.stderr
    shown = json.loads(registry_cli("keys", "show", "--key", str(key), "--json").output)
    assert shown["key_id"] == json.loads(made.output)["key_id"]
    assert shown["public_key"] == (registry_cli.tmp / "k.pub").read_text()
    os.chmod(key, 0o644)
    loose = registry_cli("keys", "show", "--key", str(key))
    assert loose.exit_code == 1 and "readable by others" in loose.stderr


def test_refresh_drops_a_revoked_artifact_and_online_verify_names_the_revocation(signed):
    assert signed("revoke", "faster", "--reason", "wrong at 720p", actor="carol").exit_code == 0
    result = signed("lock", "verify", str(signed.lock), "--key", signed.public, "--json")
    problems = json.loads(result.output)["problems"]
    assert result.exit_code == 3 and [(p["artifact"], p["code"]) for p in problems] == [("faster", "revoked")]
    refreshed = signed.tmp / "refreshed.json"
    done = signed("lock", "--refresh", str(signed.lock), "--key", str(signed.key), "--out", str(refreshed))
    assert done.exit_code == 0, done.output
    assert [a.artifact for a in read_lock(refreshed).artifacts] == ["fast"]
    assert signed("lock", "verify", str(refreshed), "--key", signed.public).exit_code == 0
    assert resolve("wan", PROFILE, lock=refreshed, trusted_keys=[signed.public]).match.artifact == "fast"
    assert runtime_refusal(signed, signed.lock) == "rollback"  # the pre-revocation lock, replayed


def independent_pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 PAE written from the specification, not imported from the registry."""
    kind = payload_type.encode("utf-8")
    return b" ".join([b"DSSEv1", str(len(kind)).encode(), kind, str(len(body)).encode(), body])


def check_independently(envelope: dict, public_path) -> bytes:
    public = serialization.load_pem_public_key(open(public_path, "rb").read())
    body = base64.b64decode(envelope["payload"])
    [signature] = envelope["signatures"]
    public.verify(base64.b64decode(signature["sig"]), independent_pae(envelope["payloadType"], body))  # raises if bad
    return body


def test_envelopes_verify_with_an_independent_pae(signed):
    body = check_independently(envelope_of(signed.lock), signed.public)
    assert json.loads(body)["workload"] == "wan"
    out = signed.tmp / "faster.intoto.json"
    result = signed("attest", "faster", "--key", str(signed.key), "--out", str(out))
    assert result.exit_code == 0, result.output
    envelope = envelope_of(out)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(check_independently(envelope, signed.public))
    shown = json.loads(signed("show", "faster", "--json").output)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "urn:registry:attestation:promotion:v1"
    bundle, *files = statement["subject"]
    assert bundle == {"name": "faster", "digest": {"sha256": shown["payload_sha256"]},
                      "annotations": {"registry.digest": "canonical bundle manifest (registry.bundle/1)"}}
    assert [f["name"] for f in files] == ["faster/op.py"]
    assert files[0]["digest"]["sha256"] == shown["bundle"]["files"][0]["sha256"]
    predicate = statement["predicate"]
    assert predicate["workload"] == "wan" and predicate["decision"] == "promoted"
    assert predicate["contract"] == {"version": shown["contract_version"], "hash": shown["contract_hash"]}
    assert predicate["verdict"]["event_id"] == shown["verdict_event_id"]
    assert predicate["speedup"] == shown["speedup"] and predicate["speedup_ci"] == shown["speedup_ci"]
    assert predicate["margins"] == shown["margins"]
    assert predicate["evidence_event_ids"] == shown["verdict"]["evidence_ids"] and predicate["evidence_event_ids"]
    assert predicate["speed_record"] == shown["verdict"].get("speed_record")  # None: decided under a point rule
    assert predicate["gate_version"] and predicate["chain_head"]["position"] > 0
    assert len(predicate["chain_head"]["hash"]) == 64 and predicate["attested_at"]
    tampered = copy.deepcopy(envelope)
    tampered["payloadType"] = "application/json"  # the type is signed too
    with pytest.raises(Exception):
        check_independently(tampered, signed.public)


def test_only_what_ships_is_attested(signed):
    assert signed("revoke", "fast", "--reason", "flaky", actor="carol").exit_code == 0
    result = signed("attest", "fast", "--key", str(signed.key), "--out", str(signed.tmp / "fast.json"))
    assert result.exit_code == 1 and "only a promoted artifact is attested" in result.stderr
    assert not (signed.tmp / "fast.json").exists()


def _paths(node, prefix=()):
    """Every path to a value in a JSON tree."""
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, (*prefix, index))


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.text(max_size=20),
                         st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_change_to_a_signed_payload_is_refused(signed, data):
    """Property: whatever is changed in a signed lock's payload (any value anywhere, or its bytes), it is refused."""
    from registry.bundles.keys import TrustedKeys
    from registry.bundles.signed_lock import authenticate

    envelope = envelope_of(signed.lock)
    trusted = TrustedKeys.from_files([signed.public])
    document = payload_of(envelope)
    if data.draw(st.booleans(), label="edit a value (else a byte)"):
        path = data.draw(st.sampled_from([p for p in _paths(document) if p]), label="path")
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        replacement = data.draw(JSON_SCALARS.filter(lambda v: v != parent[path[-1]] or type(v) is not
                                                    type(parent[path[-1]])), label="value")
        parent[path[-1]] = replacement
        changed = with_payload(envelope, document)
    else:
        body = bytearray(base64.b64decode(envelope["payload"]))
        index = data.draw(st.integers(0, len(body) - 1), label="byte")
        body[index] ^= data.draw(st.integers(1, 255), label="xor")
        changed = {**envelope, "payload": base64.b64encode(bytes(body)).decode()}
    with pytest.raises(LockRefused) as refused:
        authenticate(changed, trusted, "mutated")
    assert refused.value.code == "bad_signature"


@pytest.mark.parametrize("valid_for, fragment", [
    ("0d", "must be positive"), ("367d", "at most 366 days"), ("7x", "not a whole number"), ("d", "not a whole"),
    ("-1h", "not a whole number"), ("1.5h", "not a whole number"), ("١h", "not a whole number"),
])
def test_a_validity_nobody_could_mean_is_refused_in_one_line(signed, valid_for, fragment):
    out = signed.tmp / "odd.json"
    result = signed("lock", "--workload", "wan", "--key", str(signed.key), "--valid-for", valid_for, "--out", str(out))
    assert result.exit_code == 1 and fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_valid_for_sets_the_expiry(signed):
    out = signed.tmp / "short.json"
    assert signed("lock", "--workload", "wan", "--key", str(signed.key), "--valid-for", "12h",
                  "--out", str(out)).exit_code == 0
    document = payload_of(envelope_of(out))
    issued, expires = (datetime.fromisoformat(document[k]) for k in ("exported_at", "expires_at"))
    assert expires - issued == timedelta(hours=12)


def test_a_lock_of_another_registry_is_not_refreshed(signed, tmp_path_factory):
    from click.testing import CliRunner

    from registry.cli.main import main

    other = f"sqlite:///{tmp_path_factory.mktemp('other') / 'other.db'}"
    runner = CliRunner()
    assert runner.invoke(main, ["--db", other, "init"]).exit_code == 0
    assert runner.invoke(main, ["--db", other, "workload", "declare", str(signed.tmp / "wan.yaml")]).exit_code == 0
    out = signed.tmp / "elsewhere.json"
    result = runner.invoke(main, ["--db", other, "lock", "--refresh", str(signed.lock), "--key", str(signed.key),
                                  "--out", str(out)])
    assert result.exit_code == 1 and "cannot be refreshed here" in result.stderr and not out.exists()


# Signing only what the registry decides.

def edited_unsigned_lock(signed, path):
    """The signed lock's document, unsigned, with its profile removed and an entry of another lock pasted in."""
    document = payload_of(envelope_of(signed.lock))
    document.pop("profile", None)
    document["artifacts"].append({**document["artifacts"][0], "artifact": "pasted"})
    path.write_text(json.dumps(document))
    return path


def test_refresh_refuses_an_unsigned_edited_lock_and_signs_nothing(signed):
    forged, out = edited_unsigned_lock(signed, signed.tmp / "forged.lock"), signed.tmp / "signed-forgery.lock"
    result = signed("lock", "--refresh", str(forged), "--key", str(signed.key), "--out", str(out))
    assert result.exit_code == 1 and "--rebuild" in result.stderr and "unsigned" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_refresh_refuses_a_signed_lock_edited_after_signing_or_signed_by_another_key(signed):
    envelope = envelope_of(signed.lock)
    document = payload_of(envelope)
    document["artifacts"] = document["artifacts"][:1]
    edited = signed.tmp / "edited.lock"
    edited.write_text(json.dumps(with_payload(envelope, document)))
    other_key = create_key(signed.tmp / "other.key")
    stranger = signed.tmp / "stranger.lock"
    stranger.write_text(json.dumps(sign_lock(payload_of(envelope), other_key)))
    for path in (edited, stranger):
        out = signed.tmp / f"{path.name}.out"
        result = signed("lock", "--refresh", str(path), "--key", str(signed.key), "--out", str(out))
        assert result.exit_code == 1 and "not a lock this key signed" in result.stderr, result.output
        assert not out.exists()
    unsigned_refresh = signed("lock", "--refresh", str(signed.lock), "--unsigned", "--out",
                              str(signed.tmp / "u.lock"))
    assert unsigned_refresh.exit_code == 1 and "--rebuild" in unsigned_refresh.stderr


def test_refresh_renews_an_expired_lock_the_key_signed(signed):
    expired = signed.tmp / "expired.lock"
    document = payload_of(envelope_of(signed.lock))
    long_ago = datetime.now(timezone.utc) - timedelta(days=30)
    expired.write_text(json.dumps(sign_lock(document, load_signing_key(signed.key), valid_for=timedelta(days=1),
                                            now=long_ago)))
    out = signed.tmp / "renewed.lock"
    done = signed("lock", "--refresh", str(expired), "--key", str(signed.key), "--out", str(out))
    assert done.exit_code == 0, done.output
    assert signed("lock", "verify", str(out), "--key", signed.public).exit_code == 0


def test_rebuild_takes_only_the_workload_profile_site_and_ids_and_rebuilds_every_entry(signed):
    forged = edited_unsigned_lock(signed, signed.tmp / "forged.lock")
    document = json.loads(forged.read_text())
    document["artifacts"][0]["bundle_sha256"] = "0" * 64  # an entry edited: rebuilt from the registry, or dropped
    forged.write_text(json.dumps(document))
    out = signed.tmp / "rebuilt.lock"
    done = signed("lock", "--refresh", str(forged), "--rebuild", "--key", str(signed.key), "--out", str(out))
    assert done.exit_code == 0, done.output
    rebuilt = read_lock(out)
    registry_entries = {a.artifact: a.bundle_sha256 for a in read_lock(signed.lock).artifacts}
    assert "pasted" not in {a.artifact for a in rebuilt.artifacts}
    assert all(registry_entries[a.artifact] == a.bundle_sha256 for a in rebuilt.artifacts)
    assert signed("lock", "verify", str(out), "--key", signed.public).exit_code == 0


def test_an_unsigned_lock_with_a_validity_is_refused(signed):
    for valid_for in ("1s", "7d"):
        out = signed.tmp / f"unsigned-{valid_for}.lock"
        result = signed("lock", "--workload", "wan", "--unsigned", "--valid-for", valid_for, "--out", str(out))
        assert result.exit_code == 2 and "--valid-for applies to a signed lock" in result.output
        assert not out.exists()
