"""Read models that cannot be trusted are not decided on (registry/projections/row_checks.py).

Rows deleted from the payload index, an artifact row deleted (also among a
workload's rows that resolve, lock and rejudge list), edited without its
hash, edited with it but pointing at another identity's event, or left
behind its stream; a speed record or a benchmark-session stream row deleted,
edited, moved back or given an entry twice; read-model tables dropped. Every decision refuses in one
line naming `registry replay` (exit 1, nothing appended), never exit 70;
`replay`, `db upgrade` and `init` create a dropped table again and rebuild.

Each test damages its own copy of one of two registries (`shared`, `sessions`), each built through the CLI by
the first test of a process that asks for it (a copy of its folder for the others: a file copy against the
eight CLI commands that build it).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from ship_helpers import evidence
from stateful_checks import CopiedStart

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


SHARED = CopiedStart()


@pytest.fixture
def shared(registry_cli):
    """`a` used up the one benchmark attempt of the bytes it shares with `b`, and was rejected; `b` is measured
    fast."""
    SHARED.start(registry_cli.tmp, lambda: build_shared(registry_cli))
    return registry_cli


def build_shared(registry_cli) -> dict:
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "wan.yaml")).exit_code == 0
    register(registry_cli, "a", b"the same bytes")
    measure(registry_cli, "a", 1.0)
    assert registry_cli("promote", "a").exit_code == 3
    register(registry_cli, "b", b"the same bytes")
    measure(registry_cli, "b", 1.5)
    assert registry_cli("show", "b").exit_code == 0  # the read models caught up, then damaged by each test
    return {}


def held_on_attempts(cli) -> None:
    """b is judged on every artifact of its bytes: over their one attempt, and rejected already (a's verdict), which
    a hold cannot reopen (docs/gate.md, "Decisions and contract versions")."""
    verdict = json.loads(cli("promote", "b", "--json").stdout)
    assert verdict["decision"] == "rejected" and verdict["reasons"][0].startswith("these bytes were rejected by")
    assert "speed.max_benchmark_attempts 1: no further benchmark" in json.dumps(verdict)


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
                         "--payload", str(cli.tmp / "b.bin"), "--backend", "other", "--new-identity")
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
    # A listing of the workload checks every row and their count (a deleted row is refused too); resolve and
    # rejudge read no evidence item, so the set-aside benchmark entry is for the decisions that read it.
    if command[0] in ("promote", "approve", "revoke") or damage != "benchmark entry pointed at a set-aside identity's event":
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


SESSIONS = "workload: wan\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 20}\n"
LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
        "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
        "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


SESSIONS_START = CopiedStart()


@pytest.fixture
def sessions(registry_cli):
    """`fast`, measured in one benchmark session of two batches (3 pairs, then 2): promoted on its record."""
    registry_cli.session = SESSIONS_START.start(registry_cli.tmp, lambda: build_sessions(registry_cli))["session"]
    return registry_cli


def build_sessions(cli) -> dict:
    (cli.tmp / "wan.yaml").write_text(SESSIONS)
    assert cli("workload", "declare", str(cli.tmp / "wan.yaml")).exit_code == 0
    register(cli, "fast", b"step cache build 1")
    document = cli.tmp / "fast.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "fast", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [LEAF]}]}))
    assert cli("evidence", "import", str(document)).exit_code == 0
    opened = cli("bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_event", "--json")
    session = json.loads(opened.stdout)["session"]
    for batch, pairs in (("a", 3), ("b", 2)):
        assert cli("bench", "record", "fast", session, "--batch", batch, "--baseline", ",".join(["2"] * pairs),
                   "--candidate", ",".join(["1"] * pairs)).exit_code == 0
    assert cli("bench", "status", "fast").exit_code == 0  # caught up, then damaged by each test
    return {"session": session}


def edit_row(cli, table: str, key: str, value: str, change) -> None:
    """Change a row's state and its indexed last position with it, and hash it again: a row that hashes."""
    state = json.loads(sql(cli, f"SELECT state FROM {table} WHERE {key} = ?", value)[0][0])
    change(state)
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    sql(cli, f"UPDATE {table} SET state = ?, row_hash = ?, last_position = ? WHERE {key} = ?", text,
        hashlib.sha256(text.encode()).hexdigest(), state["last_position"], value)


def record_moved_back(state) -> None:
    state["entries"].pop()
    state["sessions"][next(iter(state["sessions"]))]["pairs"] = 3
    state["last_position"] = state["entries"][-1]["position"]


def stream_moved_back(state) -> None:
    state.update(version=state["version"] - 1, batches=state["batches"][:-1], last_position=state["last_position"] - 1)


RECORDS, STREAMS = "projection_speed_records", "projection_bench_streams"
SESSION_DAMAGES = {
    "record deleted": lambda cli: sql(cli, f"DELETE FROM {RECORDS}"),
    "record's head deleted": lambda cli: sql(cli, "DELETE FROM projection_record_heads"),
    "record edited without its hash": lambda cli: sql(cli, f"UPDATE {RECORDS} SET state = replace(state, "
                                                           "'\"pairs\":5', '\"pairs\":6')"),
    "record moved back with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", record_moved_back),
    "record's entry given twice with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", lambda s: s["entries"].insert(0, s["entries"][0])),
    "record's latest entry moved to another event with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", lambda s: s["entries"][-1].update(position=s["entries"][-1]["position"] - 1)),
    "record's entries not a list, with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", lambda s: s.update(entries={})),
    "record's session moved to another event with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", lambda s: next(iter(s["sessions"].values())).update(opened_position=1)),
    "record given a session nobody opened, with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", lambda s: s["sessions"].update(
            forged={**next(iter(s["sessions"].values())), "opened_position": s["entries"][0]["position"]})),
    "record's running reading behind its latest entry, with its hash": lambda cli: edit_row(
        cli, RECORDS, "workload", "wan", lambda s: s["reading"].update(through=s["reading"]["through"] - 1)),
    "bench stream deleted": lambda cli: sql(cli, f"DELETE FROM {STREAMS}"),
    "bench stream moved back with its hash": lambda cli: edit_row(
        cli, STREAMS, "identity", sql(cli, f"SELECT identity FROM {STREAMS}")[0][0], stream_moved_back),
}


@pytest.mark.parametrize("damage", sorted(SESSION_DAMAGES))
def test_a_damaged_speed_record_or_bench_stream_is_a_refusal(sessions, damage):
    """The speed-record read models are checked on read like the artifact rows."""
    SESSION_DAMAGES[damage](sessions)
    before = events(sessions)
    decisions = [("bench", "status", "fast"), ("bench", "record", "fast", sessions.session, "--batch", "c",
                                              "--baseline", "2", "--candidate", "1")]
    if not damage.startswith("bench stream"):
        decisions.append(("promote", "fast"))  # promote reads the record, not the session's stream
    for decision in decisions:
        result = sessions(*decision)
        assert result.exit_code != 70 and "internal error" not in result.stderr, (decision, result.stderr)
        refused_naming_replay(result)
    assert events(sessions) == before
    assert sessions("replay").exit_code == 0
    assert sessions("replay", "--verify").exit_code == 0
    promoted = json.loads(sessions("promote", "fast", "--json").stdout)
    assert (promoted["decision"], promoted["rule"]) == ("promoted", "speed.passed")


def test_an_earlier_entry_of_a_speed_record_moved_is_found_by_replay_verify(sessions):
    """A read looks up only a record's latest entry in the log (so a record of any size reads in the same time);
    an earlier entry moved to another event, with the row's hash made again, is what `replay --verify` finds."""
    assert len(json.loads(sql(sessions, f"SELECT state FROM {RECORDS}")[0][0])["entries"]) > 1
    edit_row(sessions, RECORDS, "workload", "wan",
             lambda s: s["entries"][0].update(position=s["entries"][0]["position"] - 1))
    verified = sessions("replay", "--verify")
    assert verified.exit_code != 0 and "records" in verified.output, verified.output
    assert sessions("replay").exit_code == 0
    assert sessions("replay", "--verify").exit_code == 0


def test_a_records_running_reading_edited_is_found_by_replay_verify(sessions):
    """The reading a record's row keeps (counted pairs, where the rule stopped) is compared by `replay --verify`
    with one made from the log; `replay` makes it again."""
    edit_row(sessions, RECORDS, "workload", "wan", lambda s: s["reading"]["rule"].update(above=0, stopped=False))
    verified = sessions("replay", "--verify")
    assert verified.exit_code != 0 and "records" in verified.output, verified.output
    assert sessions("replay").exit_code == 0
    assert sessions("replay", "--verify").exit_code == 0


@pytest.mark.parametrize("table", [RECORDS, STREAMS, "projection_record_heads", "projection_workload_counts"])
def test_a_dropped_speed_record_or_count_table_is_refused_then_rebuilt(sessions, table):
    sql(sessions, f"DROP TABLE {table}")
    refused_naming_replay(sessions("promote", "fast"))
    assert sessions("replay").exit_code == 0
    assert sessions("replay", "--verify").exit_code == 0
    assert sessions("promote", "fast").exit_code == 0


@pytest.mark.parametrize("command", [("resolve", "--workload", "wan", "--arch", "sm90"),
                                     ("lock", "--workload", "wan", "--unsigned", "--out", "x.lock"),
                                     ("rejudge", "wan")])
def test_a_deleted_row_among_a_workloads_artifacts_is_a_refusal(shared, command):
    """resolve, lock and rejudge list a workload: its count kept beside the rows tells a deleted row from none."""
    sql(shared, "DELETE FROM projection_artifacts WHERE artifact = 'a'")
    before = events(shared)
    refused_naming_replay(shared(*command))
    assert events(shared) == before and not (shared.tmp / "x.lock").exists()
    assert shared("replay").exit_code == 0
    assert shared(*command).exit_code in (0, 3)


def test_a_catch_up_does_not_begin_a_deleted_speed_record_again(sessions):
    """An append that reads no record (a benchmark document) after the record's row was deleted: the catch-up
    that meets it refuses, naming replay, rather than starting the record afresh from that event."""
    sql(sessions, f"DELETE FROM {RECORDS}")
    document = sessions.tmp / "benchmark.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "fast", "evidence": [
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
         "baseline_s": [2.0, 2.0], "candidate_s": [1.0, 1.0], "schedule": ["BC", "CB"]}]}))
    imported = sessions("evidence", "import", str(document))
    assert imported.exit_code in (0, 1) and imported.exit_code != 70, imported.output
    for decision in (("promote", "fast"), ("bench", "status", "fast")):
        refused_naming_replay(sessions(*decision))
    assert sessions("replay").exit_code == 0
    assert sessions("replay", "--verify").exit_code == 0
