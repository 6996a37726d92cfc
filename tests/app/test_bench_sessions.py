"""Benchmark sessions (registry/app/bench.py, `registry bench ...`): batches of pairs decided as soon as the
confident rule can, on real SQLite files and a real Postgres server; bad input refused with nothing written."""
from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import sqlite3
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from registry.app.bench import PairWriter, open_session, pairs, benchmark_record, record_pair_group, record_pairs
from registry.events.errors import IdempotencyConflict, StoreError
from registry.formats.errors import UserError
from registry.app.workloads import register_artifact
from store_helpers import opened
from paths import ROOT
from limits import HANG_GUARD_S

MANIFEST = "workload: wan\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 20}\n"
EXAMPLE = ROOT / "examples" / "bench_session.py"


def declare_and_register(cli, tmp_path, name="fast", payload=b"step cache build 1"):
    (tmp_path / "wan.yaml").write_text(MANIFEST)
    assert cli("workload", "declare", str(tmp_path / "wan.yaml")).exit_code == 0
    (tmp_path / f"{name}.bin").write_bytes(payload)
    result = cli("artifact", "register", name, "--workload", "wan", "--kind", "step_cache",
                 "--payload", str(tmp_path / f"{name}.bin"))
    assert result.exit_code == 0, result.output


def events_count(cli) -> int:
    with sqlite3.connect(cli.url.removeprefix("sqlite:///")) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def run_json(cli, *args):
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_clear_speedup_is_decided_after_five_pairs_and_the_record_closes(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    session = run_json(registry_cli, "bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_event")
    name = session["session"]
    assert session["pairs"] == 0 and session["reading"] == "undecided"
    first = run_json(registry_cli, "bench", "record", "fast", name, "--batch", "b1",
                     "--baseline", "2.0,2.0,2.0", "--candidate", "1.0,1.0,1.0")
    assert (first["reading"], first["pairs"], first["stop"]) == ("undecided", 3, "measuring")
    second = run_json(registry_cli, "bench", "record", "fast", name, "--batch", "b2",
                      "--baseline", "2.0,2.0", "--candidate", "1.0,1.0")
    assert (second["reading"], second["decided_at"], second["stop"]) == ("above", 5, "decided")
    assert second["lower"] == 2.0 and second["pairs_saved"] == 15 and second["alpha"] == 0.05
    before = events_count(registry_cli)
    closed = registry_cli("bench", "record", "fast", name, "--batch", "b3", "--baseline", "2.0", "--candidate", "1.0")
    assert closed.exit_code == 1 and "closed (shown above the gate after 5 pairs)" in closed.stderr
    assert events_count(registry_cli) == before
    status = registry_cli("bench", "status", "fast")
    assert status.exit_code == 0 and "speed record shown above the gate at pair 5 of the 5 in the record (decided)" in status.stdout
    assert registry_cli("verify").exit_code == 0
    assert registry_cli("replay", "--verify").exit_code == 0


def test_all_sessions_of_an_identity_count_in_order_even_under_another_name(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    first = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    run_json(registry_cli, "bench", "record", "fast", first, "--batch", "a", "--baseline", "1.0,1.0,1.0",
             "--candidate", "1.0,1.0,1.0")
    # A second session that never reports stays in the record and counts as an attempt.
    run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")
    declare_and_register(registry_cli, tmp_path, name="renamed")  # the same bytes under another id
    third = run_json(registry_cli, "bench", "open", "renamed", "--device", "d", "--timer", "perf_counter")
    assert third["pairs"] == 3 and len(third["sessions"]) == 3
    status = run_json(registry_cli, "bench", "record", "renamed", third["session"], "--batch", "a",
                      "--baseline", "1.0,1.0", "--candidate", "1.0,1.0")
    assert status["pairs"] == 5 and status["reading"] == "below" and status["decided_at"] == 5
    assert [s["pairs"] for s in status["sessions"]] == [3, 0, 2]
    shown = run_json(registry_cli, "show", "fast")["bench"]
    assert shown["pairs"] == 5 and len(shown["sessions"]) == 3  # the silent session is listed too


def test_max_pairs_ends_the_record_held(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    at_gate = ",".join(["1.2"] * 20)
    record = run_json(registry_cli, "bench", "record", "fast", name, "--batch", "all", "--baseline", at_gate,
                      "--candidate", ",".join(["1.0"] * 20))
    assert (record["reading"], record["stop"], record["closed"], record["pairs_saved"]) == ("undecided", "max_pairs",
                                                                                             True, 0)
    again = registry_cli("bench", "open", "fast", "--device", "d", "--timer", "perf_counter")
    assert again.exit_code == 1 and "undecided at speed.max_pairs 20" in again.stderr


@pytest.mark.parametrize("args, message", [
    (("--baseline", "1.0,0", "--candidate", "1.0,1.0"), "baseline[1]: 0.0 is not a positive finite time"),
    (("--baseline", "1.0,-2", "--candidate", "1.0,1.0"), "baseline[1]: -2.0 is not a positive finite time"),
    (("--baseline", "1.0", "--candidate", "nan"), "--candidate (comma-separated seconds) 'nan': expected a number"),
    (("--baseline", "1.0", "--candidate", "inf"), "--candidate (comma-separated seconds) 'inf': expected a number"),
    (("--baseline", "1.0,1.0", "--candidate", "1.0"), "as many candidate as baseline times"),
    (("--baseline", "1e308", "--candidate", "1e-300"), "pair 0: baseline 1e+308 / candidate 1e-300 is not a finite"),
    (("--baseline", "1e-320", "--candidate", "1e300"), "is not a finite positive ratio"),
    (("--baseline", ",".join(["2.0"] * 21), "--candidate", ",".join(["1.0"] * 21)),
     "21 pairs would take the record of fast past speed.max_pairs 20"),
])
def test_bad_batches_are_one_line_refusals_that_write_nothing(registry_cli, tmp_path, args, message):
    declare_and_register(registry_cli, tmp_path)
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    before = events_count(registry_cli)
    result = registry_cli("bench", "record", "fast", name, "--batch", "b", *args)
    assert result.exit_code == 1 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert events_count(registry_cli) == before


def test_unknown_sessions_other_identities_and_repeated_batches_write_nothing(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    declare_and_register(registry_cli, tmp_path, name="other", payload=b"another build")
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    run_json(registry_cli, "bench", "record", "fast", name, "--batch", "b", "--baseline", "2.0", "--candidate", "1.0")
    before = events_count(registry_cli)
    cases = [
        (("bench", "record", "other", name, "--batch", "c"), "is not open for the current identity of other"),
        (("bench", "record", "fast", "bs-nope", "--batch", "c"), "session bs-nope is not open"),
    ]
    for args, message in cases:
        result = registry_cli(*args, "--baseline", "2.0", "--candidate", "1.0")
        assert result.exit_code == 1 and message in result.stderr, result.output
    # The same batch again is a no-op, as a repeated evidence import is.
    again = registry_cli("bench", "record", "fast", name, "--batch", "b", "--baseline", "2.0", "--candidate", "1.0",
                         "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["appended"] is False, again.output
    different = registry_cli("bench", "record", "fast", name, "--batch", "b", "--baseline", "3.0", "--candidate", "1.0")
    assert different.exit_code == 1
    assert events_count(registry_cli) == before


def test_a_re_registered_artifact_starts_a_new_record_and_its_old_session_is_refused(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    old = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    (tmp_path / "fast.bin").write_bytes(b"step cache build 2")
    assert registry_cli("artifact", "register", "fast", "--workload", "wan", "--kind", "step_cache",
                        "--payload", str(tmp_path / "fast.bin"), "--new-identity").exit_code == 0
    stale = registry_cli("bench", "record", "fast", old, "--batch", "b", "--baseline", "2.0", "--candidate", "1.0")
    assert stale.exit_code == 1 and "is not open for the current identity" in stale.stderr
    assert run_json(registry_cli, "bench", "status", "fast")["pairs"] == 0


def test_a_point_contract_has_no_sessions(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    (tmp_path / "wan.yaml").write_text(MANIFEST.replace("max_pairs: 20", "decision: point"))
    assert registry_cli("workload", "declare", str(tmp_path / "wan.yaml")).exit_code == 0
    result = registry_cli("bench", "open", "fast", "--device", "d", "--timer", "perf_counter")
    assert result.exit_code == 1 and "speed.decision point" in result.stderr


def test_the_python_api_decides_on_sqlite_and_postgres(migrated_backend_url, sqlite_template, tmp_path):
    registry = opened(migrated_backend_url, actor="gpu-worker-1")
    from registry.app.workloads import declare_workload
    from registry.contracts import Contract

    declare_workload(registry, Contract.from_yaml(MANIFEST))
    (tmp_path / "k.bin").write_bytes(b"kernel")
    register_artifact(registry, "k", workload="wan", kind="fused_kernel", payload=str(tmp_path / "k.bin"))
    session, record = open_session(registry, "k", "NVIDIA H200", "cuda_event")
    for batch in range(4):
        appended, record = record_pairs(registry, "k", session, [1.0, 1.0], [1.0, 1.0], f"b{batch}")
        assert appended
        if record.result.decision != "held":
            break
    assert (record.result.decision, record.result.decided_at) == ("rejected", 5)
    appended, again = record_pairs(registry, "k", session, [1.0, 1.0], [1.0, 1.0], "b0")
    assert not appended and again.pairs == record.pairs
    assert benchmark_record(registry, "k").to_dict()["reading"] == "below"
    # A group (group commit, as the server records batches): checked in order against one read of the rows with
    # the group's earlier batches folded in, appended in one transaction; each refusal is its own batch's only.
    (tmp_path / "g.bin").write_bytes(b"grouped kernel")
    for name in ("g", "g-twin"):  # the twin's bytes are the same: one speed record for both
        register_artifact(registry, name, workload="wan", kind="fused_kernel", payload=str(tmp_path / "g.bin"))
    g, twin = (open_session(registry, name, "d", "perf_counter")[0] for name in ("g", "g-twin"))
    at_gate = ([1.2, 1.2], [1.0, 1.0])  # a ratio at the gate decides nothing, so only max_pairs (20) closes it
    head = registry.store.head_position()
    group = [pairs(registry, "g", g, *at_gate, "a"), pairs(registry, "g", g, *at_gate, "a"),
             pairs(registry, "g", g, [1.3, 1.3], [1.0, 1.0], "a"), pairs(registry, "g", "bs-nope", *at_gate, "b"),
             pairs(registry, "g-twin", twin, *at_gate, "t"), pairs(registry, "g", g, [1.2] * 16, [1.0] * 16, "c"),
             pairs(registry, "g", g, [1.2] * 3, [1.0] * 3, "d")]
    first, retry, other, unknown, deferred, sixteen, past = record_pair_group(group)
    assert first[0] is True and retry[0] is False and first[1].pairs == retry[1].pairs == 2
    assert isinstance(other, IdempotencyConflict) and "batch 'a' of session" in str(other)
    assert "already recorded with other pairs" in str(other) and "bench:" not in str(other)  # the caller's key
    assert isinstance(unknown, UserError) and "session bs-nope is not open" in str(unknown)
    assert deferred is None  # its record was touched by g's batch in this group: left to the next group
    assert sixteen[0] is True and sixteen[1].pairs == 18 and not sixteen[1].closed
    assert isinstance(past, UserError) and "3 pairs would take the record of g past speed.max_pairs 20 (18 recorded)" in str(past)
    appended = registry.store.read_all(after_position=head)
    assert [(e.payload["batch"], e.position) for e in appended] == [("a", head + 1), ("c", head + 2)]
    (twin_appended, twin_record), = record_pair_group([group[4]])
    assert twin_appended and twin_record.pairs == 20 and twin_record.closed
    assert benchmark_record(registry, "g").to_dict()["pairs"] == 20 and registry.store.verify().intact
    # Batches of two registries in one group: each read from and appended to its own store.
    shutil.copyfile(sqlite_template, tmp_path / "other.db")  # a new registry: a copy of the migrated template
    other = opened(f"sqlite:///{tmp_path / 'other.db'}", actor="gpu-worker-2")
    declare_workload(other, Contract.from_yaml(MANIFEST))
    register_artifact(other, "k", workload="wan", kind="fused_kernel", payload=str(tmp_path / "g.bin"))
    other_session = open_session(other, "k", "d", "perf_counter")[0]
    heads = registry.store.head_position(), other.store.head_position()
    there, here = record_pair_group([pairs(other, "k", other_session, *at_gate, "m"),
                                     pairs(registry, "k", session, [1.0, 1.0], [1.0, 1.0], "b0")])
    assert there[0] is True and here[0] is False and here[1].result.decision == "rejected"
    assert (registry.store.head_position(), other.store.head_position()) == (heads[0], heads[1] + 1)
    # A batch the store refuses (its key, session and batch names together, too long) is not folded in before the
    # batch after it: that one is appended.
    long, after = record_pair_group([pairs(other, "k", other_session, *at_gate, "L" * 128),
                                     pairs(other, "k", other_session, *at_gate, "n")])
    assert isinstance(long, StoreError) and "idempotency key must be 1 to 200 characters" in str(long)
    assert after[0] is True and after[1].pairs == 4 and other.store.head_position() == heads[1] + 2
    # Another process appends a batch and then this group's batch under its key, after this group read its rows: the
    # batch is not appended again, and is answered as a retry, by the record in the log.
    (tmp_path / "h.bin").write_bytes(b"raced kernel")
    register_artifact(registry, "h", workload="wan", kind="fused_kernel", payload=str(tmp_path / "h.bin"))
    h = open_session(registry, "h", "d", "perf_counter")[0]
    rival = opened(migrated_backend_url, actor="rival")

    def raced(_workload):  # runs after the group's read, before its append
        assert [outcome[0] for outcome in record_pair_group([pairs(rival, "h", h, [1.5, 1.5], [1.0, 1.0], "x"),
                                                              pairs(rival, "h", h, *at_gate, "k")])] == [True, True]

    (appended, record), = record_pair_group([pairs(registry, "h", h, *at_gate, "k", authorize=raced)])
    assert appended is False and record.to_dict() == benchmark_record(registry, "h").to_dict() and record.pairs == 4
    # The server's pair writer answers every batch whatever its group raises (here one batch's own callback raising a
    # BaseException), and goes on recording the batches after it.
    writer, answers = PairWriter(), queue.Queue()
    retry = pairs(registry, "k", session, [1.0, 1.0], [1.0, 1.0], "b0")  # answered from the record, nothing written

    def stops(_workload):
        raise SystemExit(3)

    writer.submit(pairs(registry, "k", session, *at_gate, "x", authorize=stops), answers.put)
    writer.submit(retry, lambda outcome: (answers.put(outcome), 1 / 0))  # its delivery fails once it is answered
    writer.submit(retry, answers.put)
    stopped, answered, again = (answers.get(timeout=HANG_GUARD_S) for _ in range(3))
    assert isinstance(stopped, RuntimeError) and "stopped: SystemExit: 3" in str(stopped)
    assert answered[0] is again[0] is False and answered[1].result.decision == "rejected"
    # A process forked while the writer's thread held its lock starts its own writer, which records the child's batch.
    held, release = threading.Event(), threading.Event()

    def hold():
        with writer._ready:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    child = os.fork()
    if child == 0:
        done = queue.Queue()
        sender = threading.Thread(target=lambda: writer.submit(
            pairs(opened(migrated_backend_url, actor="forked"), "k", session, [1.0, 1.0], [1.0, 1.0], "b0"), done.put))
        sender.start()
        sender.join(HANG_GUARD_S)
        try:
            os._exit(0 if done.get(timeout=HANG_GUARD_S)[0] is False else 1)
        except BaseException:
            os._exit(2)
    release.set()
    holder.join()
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    assert registry.store.verify().intact


def test_the_worked_example_runs(tmp_path):
    namespace: dict = {}
    exec(compile(EXAMPLE.read_text(), str(EXAMPLE), "exec"), namespace)
    outcome = namespace["main"](f"sqlite:///{tmp_path / 'example.db'}", str(tmp_path))
    assert (outcome["reading"], outcome["decided_at"], outcome["pairs"], outcome["pairs_saved"]) == ("above", 5, 6, 58)


PASSING_LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
                "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
                "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


def test_promote_decides_on_the_sessions_and_cites_their_record(registry_cli, tmp_path):
    """The verdict cites the speed record it read by key, head and digest of its entries, not each batch's id."""
    declare_and_register(registry_cli, tmp_path)
    document = tmp_path / "evidence.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "fast", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [PASSING_LEAF]}]}))
    assert registry_cli("evidence", "import", str(document)).exit_code == 0
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_event")["session"]
    run_json(registry_cli, "bench", "record", "fast", name, "--batch", "a", "--baseline", "2,2,2",
             "--candidate", "1,1,1")
    held = registry_cli("promote", "fast", "--json")
    assert held.exit_code == 3
    verdict = json.loads(held.stdout)
    assert (verdict["decision"], verdict["rule"]) == ("held", "speed.undecided")
    assert "do not yet decide" in verdict["reasons"][0]
    run_json(registry_cli, "bench", "record", "fast", name, "--batch", "b", "--baseline", "2,2", "--candidate", "1,1")
    promoted = registry_cli("promote", "fast", "--json")
    assert promoted.exit_code == 0, promoted.output
    verdict = json.loads(promoted.stdout)
    assert (verdict["decision"], verdict["rule"]) == ("promoted", "speed.passed")
    assert verdict["reasons"][0].startswith(
        "speedup 2.00x over the 5 pairs read up to the batch that decided (median of the pair ratios); decided at "
        "pair 5 of 5 recorded: running bounds [2.0, 2.0]")
    assert (verdict["speedup"], verdict["speedup_pairs"], verdict["speedup_ci_pair"]) == (2.0, 5, 5)
    assert verdict["speedup_ci"] == [2.0, 2.0] and len(verdict["evidence_ids"]) == 2  # the execution, the parity
    batches = [event for event in opened(registry_cli.url).store.read_all() if event.type == "BenchmarkPairsRecorded"]
    digest = ""
    for batch in batches:
        digest = hashlib.sha256((digest + batch.event_id).encode()).hexdigest()
    cited = verdict["speed_record"]
    assert cited == {"record": cited["record"], "head": batches[-1].position, "entries": 2, "digest": digest}
    assert not set(verdict["evidence_ids"]) & {batch.event_id for batch in batches}


def test_a_session_timed_under_the_interpreter_holds(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "cpu", "--timer", "interpreter")["session"]
    run_json(registry_cli, "bench", "record", "fast", name, "--batch", "a", "--baseline", "2,2,2,2,2",
             "--candidate", "1,1,1,1,1")
    verdict = json.loads(registry_cli("promote", "fast", "--json").stdout)
    assert verdict["decision"] == "held" and "speed.passed" not in json.dumps(verdict)
    assert "timings came from Triton's interpreter and are not speed evidence" in verdict["reasons"]


def test_interpreter_pairs_never_decide_or_close_a_record_and_a_later_gpu_session_is_read(registry_cli, tmp_path):
    """Pairs a CPU's interpreter timed (the candidate ten times slower there: enough to reject, had they been read)
    decide nothing and leave the record open; a GPU session for the same bytes is then opened and decides alone,
    and the verdict says what was set aside. On the code before, the interpreter's pairs rejected the record at
    pair 5 and closed it, and the GPU session was refused."""
    declare_and_register(registry_cli, tmp_path)
    document = tmp_path / "evidence.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "fast", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [PASSING_LEAF]}]}))
    assert registry_cli("evidence", "import", str(document)).exit_code == 0
    cpu = run_json(registry_cli, "bench", "open", "fast", "--device", "cpu (triton interpreter)",
                   "--timer", "interpreter")["session"]
    record = run_json(registry_cli, "bench", "record", "fast", cpu, "--batch", "a", "--baseline", "1,1,1,1,1,1",
                      "--candidate", "10,10,10,10,10,10")
    assert (record["reading"], record["closed"], record["pairs"], record["set_aside_pairs"]) == ("undecided", False, 0, 6)
    gpu = run_json(registry_cli, "bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_event")
    record = run_json(registry_cli, "bench", "record", "fast", gpu["session"], "--batch", "b",
                      "--baseline", "2,2,2,2,2", "--candidate", "1,1,1,1,1")
    assert (record["reading"], record["decided_at"], record["pairs"], record["speedup"]) == ("above", 5, 5, 2.0)
    verdict = run_json(registry_cli, "promote", "fast")
    assert (verdict["decision"], verdict["speedup"], verdict["speedup_pairs"]) == ("promoted", 2.0, 5)
    assert ("6 pairs timed by interpreter cpu (triton interpreter) set aside, never read: timings came from "
            "Triton's interpreter and are not speed evidence") in verdict["reasons"]


def test_a_batched_session_timed_by_an_interpreter_times_one_batch(registry_cli, tmp_path):
    from registry.app.bench import BATCH_PAIRS, BatchedSession

    declare_and_register(registry_cli, tmp_path)
    registry = opened(registry_cli.url)
    batches = BatchedSession(registry, "fast", device="cpu (triton interpreter)", timer="interpreter")
    assert batches.next_size() == BATCH_PAIRS
    batches.add([1.0] * BATCH_PAIRS, [9.0] * BATCH_PAIRS)
    assert (batches.next_size(), batches.stop, batches.record.closed) == (0, "not_speed_evidence", False)
    emulated = BatchedSession(registry, "fast", device="NVIDIA H200", timer="emulator", limit=4)
    while size := emulated.next_size():
        emulated.add([1.0] * size, [9.0] * size)
    assert (emulated.pairs, emulated.stop, benchmark_record(registry, "fast").to_dict()["set_aside_pairs"]) == (
        4, "not_speed_evidence", 6)


def test_show_and_report_give_the_running_bounds_pairs_stop_and_alpha(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")  # never reported
    run_json(registry_cli, "bench", "record", "fast", name, "--batch", "a", "--baseline", "2,2,2,2,2,2",
             "--candidate", "1,1,1,1,1,1")
    shown = registry_cli("show", "fast")
    assert ("speed record of these bytes: 6 pairs; speedup 2x over the 6 pairs read up to the batch that decided "
            "(median of the pair ratios); shown above the gate (decided at pair 5); running bounds at pair 5 2x to 2x "
            "(two-sided 90%) against the gate 1.2x at alpha 0.05 per side") in shown.stdout
    assert "its bytes' speed record holds 2 session(s) and 0 complete document(s)" in shown.stdout
    bench = run_json(registry_cli, "show", "fast")["bench"]
    assert (bench["decided_at"], bench["alpha"], bench["stop"]) == (5, 0.05, "decided")
    assert bench["running_bounds"][:5] == [[None, None]] * 4 + [[2.0, 2.0]]
    report = json.loads(registry_cli("report", "--format", "json").stdout)
    [record] = report["benchmark_records"]
    assert (record["artifacts"], record["shows"], record["pairs"], len(record["sessions"]), record["level"]) == (
        ["fast"], "shown above the gate", 6, 2, pytest.approx(0.9))
    table = registry_cli("report").stdout
    assert "speed records (one per payload within a workload" in table
    html = registry_cli("report", "--format", "html").stdout
    assert "Running bounds against the gate" in html and 'alt="running bounds of fast"' in html
    early = run_json(registry_cli, "show", "fast", "--as-of", "4")["bench"]
    assert early is None or early["pairs"] == 0


times = st.one_of(st.floats(1e-3, 10.0), st.sampled_from([0.0, -1.0, float("nan"), float("inf"), 1e308, 1e-320]))
operations = st.lists(st.one_of(
    st.tuples(st.just("open"), st.sampled_from(["fast", "renamed", "ghost"])),
    st.tuples(st.just("record"), st.sampled_from(["fast", "renamed"]), st.integers(0, 3), st.sampled_from("abc"),
              st.lists(st.tuples(times, times), min_size=0, max_size=7)),
), min_size=1, max_size=12)


@settings(max_examples=20, deadline=None)
@given(operations)
def test_any_sequence_of_opens_and_batches_keeps_one_ordered_record(tmp_path_factory, sqlite_template, ops):
    """Whatever is tried, the record holds exactly the accepted batches in order, refusals write nothing,
    and its decision is the rule's reading of those pairs. Each answer (the rows read before the append with
    the new event folded in) is what a fresh read of the record then says."""
    tmp = tmp_path_factory.mktemp("ops")
    shutil.copyfile(sqlite_template, tmp / "r.db")  # each example on a copy of the migrated template
    registry = opened(f"sqlite:///{tmp / 'r.db'}", actor="w")
    from registry.app.workloads import declare_workload
    from registry.contracts import Contract
    from registry.formats.sequential import decide_stream

    declare_workload(registry, Contract.from_yaml(MANIFEST))
    (tmp / "p.bin").write_bytes(b"same bytes")
    for name in ("fast", "renamed"):
        register_artifact(registry, name, workload="wan", kind="step_cache", payload=str(tmp / "p.bin"))
    sessions: list[str] = []
    accepted: list[float] = []
    batches: dict[tuple[str, str], list] = {}
    for op in ops:
        head = registry.store.head_position()
        try:
            if op[0] == "open":
                name, answer = open_session(registry, op[1], "d", "perf_counter")
                assert answer == benchmark_record(registry, op[1])
                sessions.append(name)
                continue
            _, artifact, index, key, pairs = op
            session = sessions[index] if index < len(sessions) else "bs-unknown"
            appended, answer = record_pairs(registry, artifact, session, [b for b, _ in pairs], [c for _, c in pairs],
                                            key)
            assert answer == benchmark_record(registry, artifact)
            if appended:
                batches[(session, key)] = pairs
                accepted.extend(b / c for b, c in pairs)
            else:
                assert batches[(session, key)] == pairs and registry.store.head_position() == head
        except Exception as exc:  # every refusal is a one-line ValueError (or the store's own) with nothing written
            assert type(exc).__name__ in ("UserError", "IdempotencyConflict"), repr(exc)
            assert "\n" not in str(exc) and registry.store.head_position() == head
    record = benchmark_record(registry, "renamed")
    assert record.pairs == len(accepted) <= record.max_pairs
    assert record.result == decide_stream(accepted, 1.2, 0.05, 20)


def _answered(outcome) -> tuple:
    return (type(outcome).__name__, str(outcome)) if isinstance(outcome, Exception) else (outcome[0], outcome[1].to_dict())


grouped = st.lists(st.tuples(st.sampled_from(["fast", "twin", "other"]), st.integers(0, 3),
                             st.sampled_from(["a", "b", "c", "d", "L" * 120]),  # the last: a key the store refuses
                             st.lists(st.tuples(times, st.sampled_from([1.0, 2.0])), min_size=0, max_size=6)),
                   min_size=1, max_size=14)


@settings(max_examples=10, deadline=None)  # about 0.12 s an example: two registries, several groups
@given(grouped, st.lists(st.integers(1, 6), min_size=1, max_size=14))
def test_batches_in_groups_are_recorded_as_one_by_one_in_the_order_the_groups_took_them(
        tmp_path_factory, sqlite_template, batches, sizes):
    """Any batches, cut into groups as the pair writer cuts them (a batch left over heads the next group): each
    answer and every event are what `record_pairs` gives the batches one by one in the order the groups answered
    them. Two copies of one registry (twins sharing a record, retries, other pairs under a key, refusals)."""
    from registry.app.workloads import declare_workload
    from registry.contracts import Contract

    tmp = tmp_path_factory.mktemp("groups")
    shutil.copyfile(sqlite_template, tmp / "grouped.db")
    registry = opened(f"sqlite:///{tmp / 'grouped.db'}", actor="w")
    declare_workload(registry, Contract.from_yaml(MANIFEST.replace("max_pairs: 20", "max_pairs: 12")))
    for name, payload in (("fast", b"same bytes"), ("twin", b"same bytes"), ("other", b"other bytes")):
        (tmp / f"{name}.bin").write_bytes(payload)
        register_artifact(registry, name, workload="wan", kind="step_cache", payload=str(tmp / f"{name}.bin"))
    sessions = {name: [open_session(registry, name, "d", "perf_counter")[0] for _ in range(2)] for name in ("fast", "twin", "other")}
    with sqlite3.connect(tmp / "grouped.db") as source, sqlite3.connect(tmp / "alone.db") as copy:
        source.backup(copy)
    alone = opened(f"sqlite:///{tmp / 'alone.db'}", actor="w")
    asked = [pairs(registry, artifact, (sessions[artifact] + ["bs-unknown"] * 2)[index], [b for b, _ in timed],
                   [c for _, c in timed], key) for artifact, index, key, timed in batches]
    answers, order, waiting, sizes = {}, [], [], iter(sizes)
    while waiting or len(order) + len(waiting) < len(asked):
        taken = len(order) + len(waiting)
        group = waiting + list(range(taken, min(len(asked), taken + next(sizes, 6))))
        outcomes = record_pair_group([asked[index] for index in group])
        waiting = [index for index, outcome in zip(group, outcomes) if outcome is None]
        for index, outcome in zip(group, outcomes):
            if outcome is not None:
                answers[index] = _answered(outcome)
                order.append(index)
    for index in order:
        batch = asked[index]
        try:
            one = record_pairs(alone, batch.artifact, batch.session, batch.baseline, batch.candidate, batch.batch)
        except Exception as exc:
            one = exc
        assert answers[index] == _answered(one), (index, batches[index])
    logged = [[(e.position, e.stream, e.version, e.type, e.payload, e.actor, e.idempotency_key)
               for e in found.store.read_all()] for found in (registry, alone)]
    assert logged[0] == logged[1] and registry.store.verify().intact


def test_a_record_under_a_contract_redeclared_as_point_is_shown_but_not_read(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")["session"]
    run_json(registry_cli, "bench", "record", "fast", name, "--batch", "a", "--baseline", "2,2", "--candidate", "1,1")
    (tmp_path / "wan.yaml").write_text(MANIFEST.replace("max_pairs: 20", "decision: point"))
    assert registry_cli("workload", "declare", str(tmp_path / "wan.yaml")).exit_code == 0
    shown = registry_cli("show", "fast")
    assert "speed record of these bytes: 2 pairs; not read (speed.decision is point)" in shown.stdout
    assert "0 benchmark attempt(s); its bytes' speed record holds 1 session(s) and 0 complete document(s)" in shown.stdout
    report = json.loads(registry_cli("report", "--format", "json").stdout)
    assert report["benchmark_records"][0]["reading"] is None
    assert "Running bounds against the gate" not in registry_cli("report", "--format", "html").stdout
    verdict = json.loads(registry_cli("promote", "fast", "--json").stdout)
    assert "1 benchmark session opened for these bytes holds pairs, which only speed.decision confident reads" \
        in verdict["reasons"]


def test_a_session_that_never_reports_is_named_in_the_verdict(registry_cli, tmp_path):
    declare_and_register(registry_cli, tmp_path)
    run_json(registry_cli, "bench", "open", "fast", "--device", "d", "--timer", "perf_counter")
    verdict = json.loads(registry_cli("promote", "fast", "--json").stdout)
    assert "1 benchmark session opened for these bytes recorded no pairs" in verdict["reasons"]


def test_show_lists_a_records_latest_entries_and_every_one_when_asked(registry_cli, tmp_path):
    """`show` gives a speed record's counts, reading and latest entries; `--documents` lists every entry."""
    declare_and_register(registry_cli, tmp_path)
    name = run_json(registry_cli, "bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_event")["session"]
    for index, batch in enumerate("abcdefg"):  # above and below the gate by turns: undecided, so still open
        run_json(registry_cli, "bench", "record", "fast", name, "--batch", batch, "--baseline", "2.0",
                 "--candidate", "1.0" if index % 2 else "4.0")
    events = opened(registry_cli.url).store.read_all()
    batches = [event.event_id for event in events if event.type == "BenchmarkPairsRecorded"]
    shown = run_json(registry_cli, "show", "fast")
    assert (shown["bench"]["entries"], shown["bench"]["head"]) == (7, events[-1].position)
    assert [entry["event_id"] for entry in shown["record_entries"]] == batches[-5:]
    assert shown["record_entries_omitted"] == 2
    every = run_json(registry_cli, "show", "fast", "--documents")
    assert [entry["event_id"] for entry in every["record_entries"]] == batches
    assert every["record_entries_omitted"] == 0
    text = registry_cli("show", "fast").output
    assert "latest 5 of 7; --documents lists every one" in text and batches[1] not in text and batches[-1] in text
    assert all(batch in registry_cli("show", "fast", "--documents").output for batch in batches)
