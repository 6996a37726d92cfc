"""Tokens as events (registry/app/tokens.py) on a real SQLite registry: issued once, kept as a digest, refused
when malformed, unknown, revoked or expired; scopes and lifetimes checked before anything is written."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from registry.app.tokens import (KnownTokens, NotPermitted, TokenRefused, authenticate, issue_token, new_token,
                                 revoke_token, TOKEN_PATTERN)
from registry.formats.errors import UserError
from store_helpers import opened


@pytest.fixture
def registry(sqlite_url):
    return opened(sqlite_url, actor="lead", create=True)


def test_the_log_keeps_the_digest_never_the_token(registry):
    token, grant = issue_token(registry, "gpu-7", ["ingest:wan-*"])
    assert TOKEN_PATTERN.fullmatch(token)
    events = registry.store.read_stream(f"token:{grant.key_id}")
    assert [e.type for e in events] == ["TokenIssued"] and events[0].actor == "lead"
    payload = events[0].payload
    assert payload["secret_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert (payload["scopes"], payload["workload"], payload["issuer"]) == (["ingest"], "wan-*", "lead")
    assert token not in json.dumps([e.to_dict() for e in registry.store.read_all()])
    assert authenticate(registry, token).actor == f"gpu-7/{grant.key_id}"
    assert registry.store.verify().intact


def test_default_lifetime_is_30_days_and_at_most_366(registry):
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    _, grant = issue_token(registry, "p", ["read"], now=now)
    assert grant.not_after == now + timedelta(days=30)
    for bad in (0, 367, -1, True):
        with pytest.raises(UserError, match="--valid-for"):
            issue_token(registry, "p", ["read"], valid_days=bad)


def test_expired_and_revoked_tokens_are_refused(registry):
    old, _ = issue_token(registry, "p", ["read"], valid_days=1, now=datetime.now(timezone.utc) - timedelta(days=2))
    with pytest.raises(TokenRefused, match="expired"):
        authenticate(registry, old)
    token, grant = issue_token(registry, "p", ["read"])
    known = KnownTokens()  # a server's: the stream's events kept until its version moves
    assert authenticate(registry, token) == authenticate(registry, token, known=known) == grant
    # Expiry is no event: the kept stream has not moved, and the very next request past `not_after` is refused.
    with pytest.raises(TokenRefused, match="expired"):
        authenticate(registry, token, now=grant.not_after, known=known)
    revoke_token(registry, grant.key_id, "rotated")
    for kept in (None, known):
        with pytest.raises(TokenRefused, match="revoked"):
            authenticate(registry, token, known=kept)
    with pytest.raises(UserError, match="already revoked"):
        revoke_token(registry, grant.key_id, "again")


def test_a_token_with_another_secret_under_a_known_key_is_unknown(registry):
    token, grant = issue_token(registry, "p", ["read"])
    _, forged = new_token()
    forged_body = f"rgt_{grant.key_id}_{forged.split('_')[2]}"
    import zlib

    forged = f"{forged_body}_{zlib.crc32(forged_body.encode()):08x}"
    known = KnownTokens()
    authenticate(registry, token, known=known)  # the key's events now kept, as a server keeps them
    for kept in (None, known):
        with pytest.raises(TokenRefused, match="unknown token"):
            authenticate(registry, forged, known=kept)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return opened(f"sqlite:///{tmp_path_factory.mktemp('tokens') / 'registry.db'}", actor="lead", create=True)


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=120))
def test_anything_that_is_not_a_token_is_refused_in_one_line(shared, text):
    with pytest.raises(TokenRefused) as refused:
        authenticate(shared, text)
    assert "\n" not in str(refused.value)


def test_a_flipped_checksum_character_is_refused_before_the_log_is_read(registry):
    token, _ = issue_token(registry, "p", ["read"])
    flipped = token[:-1] + ("0" if token[-1] != "0" else "1")
    with pytest.raises(TokenRefused, match="checksum"):
        authenticate(registry, flipped)


@pytest.mark.parametrize("scopes, workload, message", [
    ([], None, "at least one --scope"),
    (["write"], None, "expected one of"),
    (["read:wan-*"], None, "expected one of"),
    (["ingest"], None, "give the workloads' glob"),
    (["decide"], None, "give the workloads' glob"),
    (["read"], "wan-*", "restricts the ingest and decide"),
    (["ingest:wan-*"], "ltx-*", "two workload globs"),
    (["ingest"], "wan *", "without whitespace"),
])
def test_scopes_that_say_nothing_exact_are_refused_and_nothing_is_written(registry, scopes, workload, message):
    with pytest.raises(UserError, match=message):
        issue_token(registry, "p", scopes, workload=workload)
    assert registry.store.head_position() == 0


def test_a_grant_reaches_only_its_workloads_and_persons_only_decide_as_persons(registry):
    token, _ = issue_token(registry, "w", ["ingest"], workload="wan-*")
    grant = authenticate(registry, token)
    grant.require("ingest", "wan-t2v")
    for scope, workload in (("ingest", "ltx-video"), ("decide", "wan-t2v"), ("admin", None), ("read", None)):
        with pytest.raises(NotPermitted):
            grant.require(scope, workload)
    person, _ = issue_token(registry, "alice", ["decide"], workload="*", person=True)
    authenticate(registry, person).require("decide", "anything", person=True)
    machine, _ = issue_token(registry, "ci", ["decide"], workload="*")
    with pytest.raises(NotPermitted, match="not a person's token"):
        authenticate(registry, machine).require("decide", "anything", person=True)


def test_token_issue_prints_the_token_once_and_revoke_ends_it(registry_cli):
    issued = registry_cli("token", "issue", "--principal", "gpu-1", "--scope", "ingest:wan-*")
    assert issued.exit_code == 0, issued.output
    token = issued.stdout.strip()
    assert TOKEN_PATTERN.fullmatch(token) and "keep it secret" in issued.stderr
    key_id = token.split("_")[1]
    assert registry_cli("token", "revoke", key_id, "--reason", "gone").exit_code == 0
    again = registry_cli("token", "revoke", key_id, "--reason", "gone")
    assert again.exit_code == 1 and "already revoked" in again.stderr
    assert registry_cli("history", f"token:{key_id}").exit_code == 0
    assert registry_cli("replay", "--verify").exit_code == 0


def test_the_server_binds_loopback_unless_told_a_proxy_is_in_front(registry_cli):
    from registry.serve.server import check_bind

    refused = registry_cli("serve", "--host", "0.0.0.0")
    assert refused.exit_code == 1 and "--allow-remote" in refused.stderr and refused.stderr.count("\n") == 1
    assert check_bind("127.0.0.1", False) == "127.0.0.1" and check_bind("::1", False) == "::1"
    assert check_bind("10.1.2.3", True) == "10.1.2.3"
    with pytest.raises(UserError, match="give an IP address"):
        check_bind("example.org", True)
