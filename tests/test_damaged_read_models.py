"""Issue 30, class 3: read models that cannot be trusted are not decided on (registry/projections/row_checks.py).

Rows deleted from the payload index, an artifact row deleted, edited without
its hash, edited with it but pointing at another identity's event, or left
behind its stream; read-model tables dropped. Every decision refuses in one
line naming `registry replay` (exit 1, nothing appended), never exit 70;
`replay`, `db upgrade` and `init` create a dropped table again and rebuild.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from ship_helpers import evidence

MANIFEST = """
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point, max_benchmark_attempts: 1}
"""


def sql(cli, statement: str, *args) -> list:
    with sqlite3.connect(cli.url.removeprefix("sqlite:///")) as conn:
        return conn.execute(statement, args).fetchall()


def events(cli) -> int:
    return sql(cli, "SELECT count(*) FROM events")[0][0]


def refused_naming_replay(result) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "registry replay" in lines[0], result.stderr


def register(cli, name: str, payload: bytes) -> None:
    path = cli.tmp / f"{name}.bin"
    path.write_bytes(payload)
    result = cli("artifact", "register", name, "--workload", "wan", "--kind", "step_cache", "--payload", str(path))
    assert result.exit_code == 0, result.output


def measure(cli, name: str, ratio: float) -> None:
    path = cli.tmp / f"{name}-{ratio}.json"
    path.write_text(json.dumps(evidence(name, ratio)))
    assert cli("evidence", "import", str(path)).exit_code == 0


@pytest.fixture
def shared(registry_cli):
    """`a` used up the one benchmark attempt of the bytes it shares with `b`, which is measured fast."""
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "wan.yaml")).exit_code == 0
    register(registry_cli, "a", b"the same bytes")
    measure(registry_cli, "a", 1.0)
    assert registry_cli("promote", "a").exit_code == 3
    register(registry_cli, "b", b"the same bytes")
    measure(registry_cli, "b", 1.5)
    assert registry_cli("show", "b").exit_code == 0  # the read models caught up, then damaged by each test
    return registry_cli


def held_on_attempts(cli) -> None:
    verdict = json.loads(cli("promote", "b", "--json").stdout)
    assert verdict["decision"] == "held" and "speed.attempts_exceeded" in json.dumps(verdict)


@pytest.mark.parametrize("damage", ["DELETE FROM projection_payloads",
                                    "DELETE FROM projection_payloads WHERE artifact = 'a'",
                                    "DELETE FROM projection_payload_counts",
                                    "UPDATE projection_payload_counts SET artifacts = 1"])
def test_a_payload_index_that_lost_rows_is_refused_not_counted(shared, damage):
    sql(shared, damage)
    before = events(shared)
    refused_naming_replay(shared("promote", "b"))
    assert events(shared) == before
    assert shared("replay").exit_code == 0
    held_on_attempts(shared)


def edit_state(cli, artifact: str, change, rehash: bool) -> None:
    state = json.loads(sql(cli, "SELECT state FROM projection_artifacts WHERE artifact = ?", artifact)[0][0])
    change(state)
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest() if rehash else "0" * 64
    sql(cli, "UPDATE projection_artifacts SET state = ?, row_hash = ? WHERE artifact = ?", text, digest, artifact)


def set_aside_benchmark(cli) -> None:
    """Point b's benchmark entry at the benchmark event of an identity b set aside (same stream, other claims)."""
    register_again = cli("artifact", "register", "b", "--workload", "wan", "--kind", "step_cache",
                         "--payload", str(cli.tmp / "b.bin"), "--backend", "other")
    assert register_again.exit_code == 0, register_again.output
    measure(cli, "b", 1.6)
    assert cli("show", "b").exit_code == 0
    state = json.loads(sql(cli, "SELECT state FROM projection_artifacts WHERE artifact = 'b'")[0][0])
    old = next(iter(state["earlier_identities"].values()))["evidence"]["benchmark"]
    edit_state(cli, "b", lambda s: s["evidence"]["benchmark"].update(old), rehash=True)


DAMAGES = {
    "row deleted": lambda cli: sql(cli, "DELETE FROM projection_artifacts WHERE artifact = 'b'"),
    "state edited without its hash": lambda cli: edit_state(cli, "b", lambda s: s.update(decision="promoted"), False),
    "row moved back with its hash": lambda cli: edit_state(
        cli, "b", lambda s: s.update(last_position=s["last_position"] - 1, stream_version=s["stream_version"] - 1),
        True),
    "benchmark entry pointed at a set-aside identity's event": set_aside_benchmark,
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("command", [("promote", "b"), ("approve", "b", "--reason", "ok"),
                                     ("revoke", "b", "--reason", "no"), ("resolve", "--workload", "wan",
                                                                         "--arch", "sm90"),
                                     ("rejudge", "wan")])
def test_a_damaged_artifact_row_is_a_refusal_for_every_decision(shared, damage, command):
    DAMAGES[damage](shared)
    before = events(shared)
    result = shared(*command)
    assert result.exit_code != 70 and "internal error" not in result.stderr, result.stderr
    # A command that lists a workload cannot tell a deleted row from no row, and resolve reads no evidence
    # item: those two damages may leave it answering less, never more, and never deciding on the row.
    # rejudge lists what to judge again, then promotes each through the checked row (b is not final here).
    if command[0] in ("promote", "approve", "revoke") or (command[0] == "resolve" and damage in (
            "state edited without its hash", "row moved back with its hash")):
        refused_naming_replay(result)
    assert events(shared) == before
    assert shared("replay").exit_code == 0
    assert shared("replay", "--verify").exit_code == 0


@pytest.mark.parametrize("table", ["projection_verdicts", "projection_checkpoint", "projection_payloads",
                                   "projection_payload_counts", "projection_artifacts"])
@pytest.mark.parametrize("repair", [("replay",), ("db", "upgrade"), ("init",)])
def test_a_dropped_read_model_table_is_refused_then_rebuilt(shared, table, repair):
    sql(shared, f"DROP TABLE {table}")
    result = shared("promote", "b")
    assert result.exit_code == 1 and "registry replay" in result.stderr, result.output
    repaired = shared(*repair)
    assert repaired.exit_code == 0, repaired.output
    assert shared("replay", "--verify").exit_code == 0
    held_on_attempts(shared)
