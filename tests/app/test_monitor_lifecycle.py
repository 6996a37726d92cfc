"""A promoted artifact's monitor end to end: re-measurements, the alarm, resolve/lock skipping it, acknowledgment."""
from __future__ import annotations

import json

import pytest
from registry.app.monitor import record_remeasurement
from registry.formats.errors import UserError
from read_side import Reads
from ship_helpers import (MANIFEST, MONITORED, PROFILE, SOFTWARE, declare_monitored, make_bundle, measure_and_promote,
                          register, remeasure)
from registry.runtime.trust import PROCESS_HISTORY
from stateful_checks import CopiedStart
from store_helpers import head_of, opened
from paths import KERNEL_FIXTURES


# The folder `promoted` builds through the CLI (a monitored workload, two bundles registered, measured and
# promoted): built by the first test of a process that asks, copied for the others (nothing in it names the
# folder it was built in). The copies share their log's origin, so each test starts with no lock of that log
# accepted by the process (as a new log had).
PROMOTED = CopiedStart()


@pytest.fixture
def promoted(registry_cli, monkeypatch):
    monkeypatch.setattr(PROCESS_HISTORY, "_newest", {})
    PROMOTED.start(registry_cli.tmp, lambda: promote_two(registry_cli))
    return registry_cli


def promote_two(registry_cli) -> dict:
    declare_monitored(registry_cli)
    root = registry_cli.tmp / "bundles"
    for name, ratio in (("fast", 1.5), ("steady", 1.3)):
        assert register(registry_cli, name, make_bundle(root, name)).exit_code == 0
        assert measure_and_promote(registry_cli, name, ratio) == "promoted"
    return {}


def resolved(cli):
    result = cli("resolve", "--workload", "wan", *PROFILE, "--json")
    return json.loads(result.output)


def test_a_drop_below_the_gate_is_alarmed_at_the_fewest_pairs_and_stops_resolving(promoted):
    out = {}
    for i in range(8):  # 16 pairs at 10% below the gate (1.1 -> 0.99)
        out = remeasure(promoted, "fast", 0.99, f"b{i}")
    monitor = out["monitor"]
    assert monitor["status"] == "regressed" and monitor["crossed_at"] == 10  # every pair below: fewest_pairs_to_alarm
    assert monitor["pairs"] == 10 and monitor["pairs_after_alarm"] == 6
    answer = resolved(promoted)
    assert answer["match"]["artifact"] == "steady"
    skipped = {o["artifact"]: o for o in answer["others"]}
    assert skipped["fast"]["code"] == "regressed"
    history = json.loads(promoted("history", "artifact:fast", "--json").output)
    alarms = [e for e in history if e["type"] == "RegressionDetected"]
    assert len(alarms) == 1 and alarms[0]["payload"]["pairs"] == 10  # a known regression is not alerted again
    assert alarms[0]["payload"]["profiles"] == [{"device": "NVIDIA H200",
                                                 "software": {"torch": "2.13.0", "triton": "3.5.0"}}]
    lock = promoted.tmp / "lock.json"
    assert promoted("lock", "--workload", "wan", "--unsigned", "--out", str(lock)).exit_code == 0
    assert [a["artifact"] for a in json.loads(lock.read_text())["artifacts"]] == ["steady"]


def test_an_artifact_that_holds_its_speed_is_never_alarmed(promoted):
    for i in range(100):  # 400 pairs at the promoted speed, above the gate
        out = remeasure(promoted, "steady", 1.3, f"b{i}", pairs=4)
    assert out["monitor"]["status"] == "in_control" and out["monitor"]["below"] == 0
    assert resolved(promoted)["match"]["artifact"] == "fast"


def test_a_retried_batch_appends_once_and_replay_reproduces_the_alarm(promoted):
    for i in range(5):
        remeasure(promoted, "fast", 0.9, f"b{i}")
    again = remeasure(promoted, "fast", 0.9, "b4")
    assert again["appended"] is False
    assert promoted("replay", "--verify").exit_code == 0
    registry = opened(promoted.url)
    state = Reads(registry.store).current_artifact("fast")
    assert state["monitors"][state["identity"]]["alarm"]["pairs"] == 10


def test_an_alarm_is_acknowledged_once_by_a_named_person_and_still_does_not_ship(promoted):
    for i in range(5):
        out = remeasure(promoted, "fast", 0.9, f"b{i}")
    alarm = out["monitor"]["alarm"]["event_id"]
    wrong = promoted("monitor", "ack", "fast", "not-an-alarm", "--reason", "seen")
    assert wrong.exit_code == 1
    acked = promoted("monitor", "ack", "fast", alarm, "--reason", "driver 560 regression, tracked", "--json",
                     actor="oncall")
    assert acked.exit_code == 0, acked.output
    monitor = json.loads(acked.output)["monitor"]
    assert monitor["status"] == "acknowledged" and monitor["acknowledged"]["person"] == "oncall"
    assert promoted("monitor", "ack", "fast", alarm, "--reason", "again").exit_code == 1
    assert {o["artifact"]: o["code"] for o in resolved(promoted)["others"]}["fast"] == "regressed"


def test_refusals_write_nothing(promoted):
    registry = opened(promoted.url)
    head = registry.store.head_position()
    base = ("monitor", "record", "fast", "--batch", "x", "--device", "d", *SOFTWARE)
    assert promoted(*base, "--baseline", "1.0", "--candidate", "0").exit_code == 1
    assert promoted(*base, "--baseline", "1.0,1.0", "--candidate", "1.0").exit_code == 1
    assert promoted("monitor", "record", "nobody", "--batch", "x", "--device", "d", *SOFTWARE, "--baseline", "1",
                    "--candidate", "1").exit_code == 1
    assert promoted("revoke", "fast", "--reason", "r").exit_code == 0
    head = registry.store.head_position()
    assert promoted(*base, "--baseline", "1.0", "--candidate", "1.0").exit_code == 1  # no longer promoted
    assert registry.store.head_position() == head


def test_the_harness_waits_leave_out_pairs_only_under_a_declared_share_and_a_contended_batch_counts_below(
        promoted):
    """Waits recorded with each batch (2.0 s baseline runs; 0.5 s waited is a share of 0.25, 0.05 s one of 0.025).

    Without `baseline_wait_share` (the fixture's contract) nothing is left
    out, exactly as before the term, nor once the term is declared after the
    monitor started (it is fixed then); with 0.05 declared, a pair whose
    baseline waited past it is not fed to the detector (so the alarm comes
    at the tenth kept pair), and a batch with more than half its pairs
    flagged is contended: those pairs count as below, however fast they read
    (a candidate contending for the CPU during the baseline's runs).
    """
    out = remeasure(promoted, "fast", 0.99, "w0", pairs=4, waited="0.5,0.05,-,0.5")
    assert out["monitor"]["pairs"] == 4 and out["monitor"]["left_out"] == 0
    assert out["monitor"]["baseline_wait_share"] is None
    assert "left out" not in promoted("monitor", "status", "fast").output
    (promoted.tmp / "later.yaml").write_text(MONITORED.replace("margin: 0.0}", "margin: 0.0, baseline_wait_share: 0.05}"))
    assert promoted("workload", "declare", str(promoted.tmp / "later.yaml")).exit_code == 0
    out = remeasure(promoted, "fast", 0.99, "w1", pairs=4, waited="0.5,0.5,0.0,0.0")  # the term came after the data
    assert (out["monitor"]["pairs"], out["monitor"]["left_out"], out["monitor"]["baseline_wait_share"]) == (8, 0, None)
    (promoted.tmp / "screened.yaml").write_text(
        MANIFEST.replace("workload: wan", "workload: wan-screened")
        + "monitor: {alpha: 0.001, reference: gate, margin: 0.0, baseline_wait_share: 0.05}\n")
    assert promoted("workload", "declare", str(promoted.tmp / "screened.yaml")).exit_code == 0
    root = promoted.tmp / "bundles"
    for name, ratio in (("quick", 1.5), ("spinner", 1.5)):
        assert promoted("artifact", "register", name, "--workload", "wan-screened", "--kind", "step_cache",
                        "--bundle", str(make_bundle(root, name))).exit_code == 0
        assert measure_and_promote(promoted, name, ratio) == "promoted"
    for i in range(4):  # 3 of 4 pairs kept per batch; unreported ('-') is never left out
        out = remeasure(promoted, "quick", 0.99, f"q{i}", pairs=4, waited="0.5,0.05,-,0.0")
    monitor = out["monitor"]
    assert (monitor["pairs"], monitor["left_out"], monitor["contended_batches"]) == (10, 4, 0)
    assert monitor["crossed_at"] == 10 and monitor["pairs_after_alarm"] == 2  # the tenth kept pair, the 14th timed
    assert "4 pairs left out" in promoted("monitor", "status", "quick").output
    for i in range(5):  # both pairs flagged: contended, counted below although they read 1.6x
        out = remeasure(promoted, "spinner", 1.6, f"s{i}", waited="0.5,0.5")
    monitor = out["monitor"]
    assert monitor["status"] == "regressed" and monitor["crossed_at"] == 10 and monitor["contended_batches"] == 5
    history = json.loads(promoted("history", "artifact:quick", "--json").output)
    batches = [e["payload"] for e in history if e["type"] == "PairsRemeasured"]
    assert batches[0]["baseline_waited_s"] == [0.5, 0.05, None, 0.0] and batches[0]["baseline_wait_share"] == 0.05
    assert promoted("replay", "--verify").exit_code == 0
    head = head_of(promoted.url)
    for bad in ("0.5", "0.5,-1", "0.5,nan", "0.5,x"):  # one per pair, each finite and >= 0, or '-'
        refused = promoted("monitor", "record", "quick", "--batch", "bad", "--baseline", "2.0,2.0", "--candidate",
                           "1.0,1.0", "--device", "d", *SOFTWARE, "--baseline-waited", bad)
        assert refused.exit_code in (1, 2), (bad, refused.output)
    registry = opened(promoted.url)
    for times, waits in (([2.0, 2.0], [10 ** 400, None]), ([10 ** 400, 2.0], None)):  # a job's JSON may hold such
        with pytest.raises(UserError, match="nothing recorded"):  # one line, not an OverflowError retried
            record_remeasurement(registry, "quick", times, [1.0, 1.0], batch="huge", device="d",
                                 software={"torch": "2.13.0"}, baseline_waited=waits)
    assert head_of(promoted.url) == head


def test_show_and_report_show_the_monitor_and_its_alert(promoted):
    for i in range(5):
        remeasure(promoted, "fast", 0.9, f"b{i}")
    remeasure(promoted, "steady", 1.3, "s0")
    shown = json.loads(promoted("show", "fast", "--json").output)
    assert shown["monitor"]["status"] == "regressed" and shown["monitor"]["crossed_at"] == 10
    assert "monitor regressed" in promoted("show", "fast").output
    report = json.loads(promoted("report", "--json").output)
    assert {m["artifact"]: m["status"] for m in report["monitors"]} == {"fast": "regressed", "steady": "in_control"}
    assert report["alerts"] == ["fast"]
    assert "monitors (re-measured promoted artifacts)" in promoted("report").output


def test_a_lock_taken_before_the_alarm_no_longer_verifies_and_one_after_leaves_it_out(promoted):
    before = promoted.tmp / "before.json"
    assert promoted("lock", "--workload", "wan", "--unsigned", "--out", str(before)).exit_code == 0
    for i in range(5):
        remeasure(promoted, "fast", 0.9, f"b{i}")
    checked = promoted("lock", "verify", str(before), "--bundles", str(promoted.tmp / "bundles"), "--json")
    assert checked.exit_code == 3
    assert "regressed" in {p["code"] for p in json.loads(checked.output)["problems"]}
    after = promoted.tmp / "after.json"
    # an unsigned lock cannot vouch for itself: its workload, profile and ids are rebuilt from the registry
    refreshed = promoted("lock", "--refresh", str(before), "--rebuild", "--unsigned", "--out", str(after))
    assert refreshed.exit_code == 0, refreshed.output
    assert [a["artifact"] for a in json.loads(after.read_text())["artifacts"]] == ["steady"]


def test_an_alarm_the_detector_did_not_reach_cannot_be_folded(promoted):
    from registry.events.store import NewEvent
    from registry.projections import ProjectionError

    remeasure(promoted, "fast", 0.9, "b0")  # 2 pairs below: far from an alarm
    registry = opened(promoted.url)
    state = Reads(registry.store).current_artifact("fast")
    forged = {"artifact": "fast", "identity": state["identity"], "payload_sha256": state["payload_sha256"],
              "verdict_event_id": state["verdict_event_id"], "pairs": 2, "below": 2, "log_statistic": 7.0,
              "threshold": 1.1, "alpha": 0.001, "profiles": []}
    registry.store.append("artifact:fast", [NewEvent("RegressionDetected", forged)], actor="mallory")
    with pytest.raises(ProjectionError, match="has not crossed"):
        Reads(registry.store).current_artifact("fast")


def test_reverify_now_runs_each_job_in_process_and_says_why_nothing_was_recorded(promoted):
    """On SQLite the re-verification runs here; a bundle with no kernel entry cannot be timed, and says so."""
    registry = opened(promoted.url)
    head = registry.store.head_position()
    result = promoted("reverify", "wan", "--now", "--pairs", "4", "--json")
    assert result.exit_code == 3, result.output  # nothing could be re-measured here: nothing recorded
    outcomes = {r["artifact"]: r for r in json.loads(result.output)["artifacts"]}
    assert set(outcomes) == {"fast", "steady"}
    assert {r["outcome"] for r in outcomes.values()} == {"refused"}
    assert "cannot time in-process" in outcomes["fast"]["detail"]
    assert "registry monitor record fast" in outcomes["fast"]["detail"]
    assert registry.store.head_position() == head
    assert promoted("reverify", "wan", "--now", "--pairs", "3").exit_code == 1  # an odd count is no ABBA run
    assert promoted("reverify", "wan", "--pairs", "4").exit_code == 2  # neither --now nor --schedule
    queued = promoted("reverify", "wan", "--pairs", "4", "--schedule", "0 * * * *")
    assert queued.exit_code == 1 and "Postgres" in queued.output  # SQLite has no queue


def test_the_runtime_never_takes_a_regressed_artifact_from_a_lock_signed_after_the_alarm(promoted):
    from registry.bundles import Profile
    from registry.runtime import resolve
    from ship_helpers import sign_lock_file

    profile = Profile("sm90", "2.13.0", "12.8")
    assert resolve("wan", profile, database=promoted.url).match.artifact == "fast"
    for i in range(5):
        remeasure(promoted, "fast", 0.9, f"b{i}")
    lock = sign_lock_file(promoted)
    from_lock = resolve("wan", profile, lock=lock, trusted_keys=promoted.trusted)
    assert from_lock.match.artifact == "steady" and "fast" not in from_lock.reason_codes()
    from_db = resolve("wan", profile, database=promoted.url)
    assert from_db.match.artifact == "steady" and from_db.reason_codes()["fast"] == "regressed"


OPERATION = """
workload: wan-modln-op
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
monitor: {alpha: 0.001, reference: gate, margin: 0.0}
"""
LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
        "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
        "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


def promote_kernels(cli, entries: dict[str, str]) -> None:
    """Fused kernels of one operation (artifact -> entry) in a monitored workload, promoted on imported GPU
    evidence."""
    (cli.tmp / "op.yaml").write_text(OPERATION)
    assert cli("workload", "declare", str(cli.tmp / "op.yaml")).exit_code == 0
    for artifact, entry in entries.items():
        registered = cli("artifact", "register", artifact, "--workload", "wan-modln-op", "--kind", "fused_kernel",
                         "--op", "modulated_layernorm", "--entry", entry)
        assert registered.exit_code == 0, registered.output
        document = cli.tmp / f"{artifact}.json"
        document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": artifact, "evidence": [
            {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [LEAF]},
            {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
             "baseline_s": [2.0, 2.02], "candidate_s": [1.0, 1.01], "schedule": ["BC", "CB"]}]}))
        assert cli("evidence", "import", str(document)).exit_code == 0
        promoted = cli("promote", artifact, "--json")
        assert json.loads(promoted.output)["decision"] == "promoted", promoted.output


def test_reverify_runs_the_real_timing_path_and_records_no_number_this_machine_cannot_vouch_for(registry_cli):
    """The kernel really runs: sandboxed workers, parity on the corpus, ABBA pairs (under Triton's interpreter here).

    Two promoted fused kernels of one operation, promoted on imported GPU
    evidence: the built-in Triton kernel is timed and its interpreter timings
    are refused with nothing written; a kernel that raises is recorded as the
    evaluation failure it is. Takes a few seconds: each entry is evaluated in
    its sandboxed worker processes (the same path `evaluate` takes).
    """
    cli = registry_cli
    promote_kernels(cli, {"modln": "registry.kernels.modln:modulated_layernorm_triton",
                          "broken": f"{KERNEL_FIXTURES}:broken_modulated_layernorm"})
    registry = opened(cli.url)
    before = {a: [e.type for e in registry.store.read_stream(f"artifact:{a}")] for a in ("modln", "broken")}
    result = cli("reverify", "wan-modln-op", "--now", "--pairs", "2", "--run", "cpu-1", "--json")
    assert result.exit_code == 4, result.output
    outcomes = {r["artifact"]: r for r in json.loads(result.output)["artifacts"]}
    assert outcomes["modln"]["outcome"] == "refused" and "interpreter" in outcomes["modln"]["detail"]
    assert outcomes["broken"]["outcome"] == "failed" and "illegal memory access" in outcomes["broken"]["detail"]
    after = {a: [e.type for e in registry.store.read_stream(f"artifact:{a}")] for a in ("modln", "broken")}
    assert after["modln"] == before["modln"]  # no PairsRemeasured from interpreter timings
    assert after["broken"] == before["broken"] + ["EvaluationFailed"]
    assert outcomes["modln"]["monitor"] is None and outcomes["broken"]["monitor"] is None  # no monitor started
    # The candidate's error is quoted on one line: its line break cannot add a line to what is printed.
    assert "(simulated)\\nforged: PROMOTED" in outcomes["broken"]["detail"]


SWAPPABLE = "def modulated_layernorm(x, scale, shift):\n    raise RuntimeError({said!r})\n"


def test_reverify_runs_only_the_registered_text_and_refuses_per_artifact(registry_cli):
    """After promotion one candidate's file is swapped for other text and another's is removed: each is refused
    as its own outcome, never run, nothing appended to its stream, and the run goes on to the artifacts after
    it. A run id that is empty or too long (alone, or with an artifact's id) is refused before anything runs.
    Takes a few seconds: the one artifact left is evaluated in its sandboxed workers."""
    cli = registry_cli
    files = {artifact: cli.tmp / f"{artifact}_kernel.py" for artifact in ("gone", "kept", "swapped")}
    for artifact, path in files.items():
        path.write_text(SWAPPABLE.format(said=f"{artifact} as promoted"))
    promote_kernels(cli, {artifact: f"{path}:modulated_layernorm" for artifact, path in files.items()})
    files["swapped"].write_text(SWAPPABLE.format(said="swapped in after promotion, and run"))
    files["gone"].unlink()
    registry = opened(cli.url)
    streams = lambda: {a: [e.type for e in registry.store.read_stream(f"artifact:{a}")] for a in files}  # noqa: E731
    before = registry.store.head_position()
    for run in ("", "r" * 129, "r" * 300, "r" * 125):  # 125: the run id passes, `<run>-<artifact>` would not
        refused = cli("reverify", "wan-modln-op", "--now", "--pairs", "2", "--run", run)
        assert refused.exit_code == 1 and len(refused.stderr.strip().splitlines()) == 1, (run, refused.output)
        assert "--run" in refused.stderr
    assert registry.store.head_position() == before
    was = streams()
    result = cli("reverify", "wan-modln-op", "--now", "--pairs", "2", "--run", "r-1", "--json")
    assert result.exit_code == 4, result.output
    outcomes = {r["artifact"]: r for r in json.loads(result.output)["artifacts"]}
    assert outcomes["gone"]["outcome"] == "refused" and "cannot read" in outcomes["gone"]["detail"]
    assert outcomes["swapped"]["outcome"] == "refused", outcomes["swapped"]
    assert "no longer holds the candidate registered" in outcomes["swapped"]["detail"]
    assert outcomes["kept"]["outcome"] == "failed" and "kept as promoted" in outcomes["kept"]["detail"]
    now = streams()
    assert now["gone"] == was["gone"] and now["swapped"] == was["swapped"]  # refused: nothing appended, nothing run
    assert now["kept"] == was["kept"] + ["EvaluationFailed"]  # the run went on past the refused artifacts
