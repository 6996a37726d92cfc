"""The speed record (registry/gate/record.py, docs/gate.md "The speed record"): one anytime-valid record per payload
within a workload that no retried document, new claim, new id, payload-less twin or loosened contract can reset.

The error rates are simulated through the gate's public reading of a record (`read_record` over `SpeedRecord`
rows shaped as the read model stores them): a user who promotes after each of twenty documents is promoted
exactly when the record, read after every pair, decides at a pair of those documents (the rule stops at its
first deciding pair and later pairs change nothing), which `test_promoting_after_each_document_*` shows through
the registry itself. The simulations are vectorised where they can be and take about a second each.
"""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event
from registry.app.bench import open_session, record_pairs
from registry.app.decisions import promote
from registry.app.evidence import import_document
from registry.app.rejudge import rejudge_workload
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract
from registry.formats.errors import UserError
from stacked_intervals import median_interval
from registry.gate import SpeedRecord
from registry.gate.record import read_record
from store_helpers import opened
from paths import MOTIONKERNEL

GATE, ALPHA, PAIRS = 1.2, 0.05, 16
PASSING_LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
                "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
                "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


def speed(**changes):
    block = {"min_speedup": GATE, "runs_per_arm": PAIRS, "protocol": "paired", "alpha": ALPHA, "max_pairs": 100_000,
             **changes}
    return Contract.from_mapping({"workload": "w", "speed": block})


def versions(*contracts: tuple[int, Contract]) -> list[dict]:
    return [{"version": i + 1, "position": position, "speed": contract.speed.canonical()}
            for i, (position, contract) in enumerate(contracts)]


def document_entry(position: int, ratios: np.ndarray) -> dict:
    candidate = 1.0 + 0.01 * (np.arange(len(ratios)) % 3)
    return {"source": "document", "position": position, "event_id": f"ev-{position}", "artifact": "a",
            "identity": None, "session": None, "protocol": "paired",
            "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(len(ratios))],
            "baseline_s": (ratios * candidate).tolist(), "candidate_s": candidate.tolist(),
            "timer": "cuda_event", "device": "NVIDIA H200", "arch": "sm90"}


def lognormal_ratios(rng: np.random.Generator, median: float, shape: tuple[int, ...]) -> np.ndarray:
    return median * np.exp(0.05 * rng.standard_normal(shape))


# ---- simulations -------------------------------------------------------------------------------------------
#
# Each simulated user's record is read through the gate's public reading (`read_record` over rows shaped as the read
# model stores them) and compared, user by user, with this test's own reading of the whole stream (the mixture
# capital computed directly, `read_independently`), so a reading that skipped, reordered or restarted anything is
# caught on the first user it changes. The rates are then checked at the gate (the worst case: every pair's sign
# a fair coin) with 2,000 users, against alpha and against the exact rate the count table gives for the stream's
# length (`crossing_chance`). A rule with twice the capital (a look at 1/(2 alpha)) fails every one of these checks
# (`test_each_simulation_catches_a_rule_with_twice_the_capital`); the simulations take about a second and a half a rule.

RATE_USERS = 2_000
# This test's own statement of the rule's mixture (docs/gate.md, "Streams of pairs"): 3/4 of the weight on
# q = 0.98, 1/36 on each of q = 0.55, 0.60, ..., 0.95.
MIXTURE = ((0.98, 0.75),) + tuple((0.55 + 0.05 * j, 0.25 / 9) for j in range(9))
LAYOUTS = {
    "retried documents": [("document", PAIRS)] * 5,
    "mixed sessions and documents": [("session", 2), ("session", 2), ("document", PAIRS)] * 3,
}


def user_streams(seed: int, layout: list[tuple[str, int]], median: float) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, candidate) times of every user, one row each, whose pair ratios have exactly `median` as median."""
    pairs = sum(size for _, size in layout)
    ratios = lognormal_ratios(np.random.default_rng(seed), median, (RATE_USERS, pairs))
    candidate = np.broadcast_to(1.0 + 0.01 * (np.arange(pairs) % 3), ratios.shape)
    return ratios * candidate, np.array(candidate)


def read_through_the_registry(baseline: np.ndarray, candidate: np.ndarray,
                              layout: list[tuple[str, int]]) -> list[tuple[str, int | None]]:
    contract = speed()
    history = versions((1, contract))
    readings = []
    for user in range(len(baseline)):
        entries, start = [], 0
        for position, (source, size) in enumerate(layout, start=10):
            entry = document_entry(position, np.ones(size))
            entry.update(baseline_s=baseline[user, start:start + size].tolist(),
                         candidate_s=candidate[user, start:start + size].tolist())
            entries.append(entry if source == "document" else {**entry, "source": "session", "session": "bs-1",
                                                                "schedule": None})
            start += size
        result = read_record(SpeedRecord("ab" * 32, entries, 0, history), contract.speed).result
        readings.append((result.decision, result.decided_at))
    return readings


def read_independently(baseline: np.ndarray, candidate: np.ndarray) -> list[tuple[str, int | None]]:
    """Every user's stream read after every pair by the mixture capital itself: promoted at the first pair where
    the capital betting on r > gate reaches 1/alpha, rejected where the one betting on r < gate does."""
    ratios = baseline / candidate
    looked = np.arange(1, ratios.shape[1] + 1)

    def first_crossing(hits: np.ndarray) -> np.ndarray:
        counts = np.cumsum(hits, axis=1)
        log_capital = np.logaddexp.reduce(np.stack([
            math.log(weight) + counts * math.log(2 * q) + (looked - counts) * math.log(2 * (1 - q))
            for q, weight in MIXTURE]), axis=0)
        crossed = log_capital >= math.log(1 / ALPHA)
        return np.where(crossed.any(axis=1), crossed.argmax(axis=1) + 1, 0)

    promoted, rejected = first_crossing(ratios > GATE), first_crossing(ratios < GATE)
    return [("promoted", int(p)) if p and (not r or p < r) else ("rejected", int(r)) if r else ("held", None)
            for p, r in zip(promoted, rejected)]


def crossing_chance(pairs: int, alpha: float) -> float:
    """The exact chance that the count table promotes within `pairs` pairs whose signs are fair coins (the gate is
    the median): a walk over the count of pairs above the gate, removed once it reaches the table's threshold."""
    from registry.formats import sequential

    alive, crossed = {0: 1.0}, 0.0
    for n in range(1, pairs + 1):
        need, after = sequential.needed_count(n, alpha), {}
        for count, chance in alive.items():
            for step in (0, 1):
                if count + step >= need:
                    crossed += chance / 2
                else:
                    after[count + step] = after.get(count + step, 0.0) + chance / 2
        alive = after
    return crossed


def rate_checks(readings: list[tuple[str, int | None]], pairs: int) -> list[str]:
    """What a simulated rate at the gate fails: above alpha by more than 0.8 standard errors of alpha at this many
    users, or away from the exact rate of the count table by more than 4 of its own."""
    exact = crossing_chance(pairs, ALPHA)
    failed = []
    for side in ("promoted", "rejected"):
        rate = sum(1 for decision, _ in readings if decision == side) / len(readings)
        if rate > ALPHA + 0.8 * math.sqrt(ALPHA * (1 - ALPHA) / len(readings)):
            failed.append(f"{side} {rate:.4f} above alpha")
        if abs(rate - exact) > 4.0 * math.sqrt(exact * (1 - exact) / len(readings)):
            failed.append(f"{side} {rate:.4f} away from the exact {exact:.4f}")
    return failed


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_user_s_record_is_the_whole_stream_read_once_and_errs_at_most_alpha_at_the_gate(name):
    """2,000 users, true median exactly at the gate: retried 16-pair documents, or two-pair sessions interleaved
    with documents, each user's record read by the registry decides as the whole stream read after every pair
    does, and false promotions and false rejections each stay within alpha, at the exact rate of the table."""
    layout = LAYOUTS[name]
    baseline, candidate = user_streams(len(name), layout, GATE)
    readings = read_through_the_registry(baseline, candidate, layout)
    assert readings == read_independently(baseline, candidate)
    assert rate_checks(readings, baseline.shape[1]) == []


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_simulation_catches_a_rule_with_twice_the_capital(name, monkeypatch):
    """The same users read by a rule that looks at 1/(2 alpha): users' decisions differ from the whole stream's,
    and the rates fail their checks, so the simulations above can fail."""
    from registry.formats import sequential

    layout = LAYOUTS[name]
    baseline, candidate = user_streams(len(name), layout, GATE)
    table = sequential.needed_count
    monkeypatch.setattr(sequential, "needed_count", lambda pairs, alpha: table(pairs, min(0.5, 2 * alpha)))
    readings = read_through_the_registry(baseline, candidate, layout)
    monkeypatch.undo()
    assert readings != read_independently(baseline, candidate)
    assert rate_checks(readings, baseline.shape[1]) != []


def test_the_count_table_errs_at_most_alpha_exactly_and_twice_the_capital_does_not():
    """Exact, not simulated: with the gate the median (each sign a fair coin), the table promotes within 1,000 pairs
    with chance 3.99% at alpha 5% (0.64% at 1%); a table looking at 1/(2 alpha) does so 7.8% of the time."""
    from registry.formats import sequential

    for alpha in (0.05, 0.01):
        assert crossing_chance(1_000, alpha) <= alpha
    table = sequential.needed_count
    try:
        sequential.needed_count = lambda pairs, alpha: table(pairs, 2 * alpha)
        assert crossing_chance(1_000, ALPHA) > ALPHA
    finally:
        sequential.needed_count = table


def test_retried_documents_judged_one_at_a_time_would_promote_more_than_alpha():
    """What the record prevents: each of eight documents at the gate judged alone (its own look at alpha) lets at
    least one through far more often than alpha."""
    ratios = lognormal_ratios(np.random.default_rng(28), GATE, (RATE_USERS, 8, PAIRS))
    low, _, _ = median_interval(ratios, ALPHA)  # each document alone: its lower bound above the gate promotes
    one_look_each = float(np.mean((low > GATE).any(axis=1)))
    assert one_look_each > ALPHA + 3.0 * math.sqrt(ALPHA * (1 - ALPHA) / RATE_USERS), one_look_each


def test_a_loosened_contract_reads_the_pairs_already_seen_under_the_stricter_terms():
    """Pairs seen under alpha 0.05 and gate 1.2 that do not decide there, re-declared at alpha 0.3 and gate 1.1:
    those pairs are still read at 0.05 and 1.2 (no promotion on them), new pairs count under the looser terms;
    tightening re-reads everything."""
    strict, loose = speed(), speed(alpha=0.3, min_speedup=1.1)
    seen = np.array([1.25, 1.15, 1.3, 1.22, 1.18, 1.27, 1.24, 1.21])
    entries = [document_entry(10, seen)]
    assert read_record(SpeedRecord("ab" * 32, entries, 0, versions((1, strict))), strict.speed).result.decision \
        == "held"
    history = versions((1, strict), (20, loose))
    as_if_fresh = read_record(SpeedRecord("ab" * 32, entries, 0, versions((1, loose))), loose.speed).result
    assert as_if_fresh.decision == "promoted"  # what re-declaring would have done without the rule
    assert read_record(SpeedRecord("ab" * 32, entries, 0, history), loose.speed).result.decision == "held"
    later = entries + [document_entry(30, np.full(8, 1.5))]
    assert read_record(SpeedRecord("ab" * 32, later, 0, history), loose.speed).result.decision == "promoted"
    tightened = versions((1, loose), (20, strict))
    promoted_loose = [document_entry(10, np.full(6, 1.15))]
    assert read_record(SpeedRecord("ab" * 32, promoted_loose, 0, versions((1, loose))),
                       loose.speed).result.decision == "promoted"
    # Tightened, the same pairs are read again against 1.2 for promotion: not shown above it any more (and shown
    # below only against the lowest gate in force since they were recorded, 1.1, which they are not).
    assert read_record(SpeedRecord("ab" * 32, promoted_loose, 0, tightened), strict.speed).result.decision \
        == "held"


def test_a_rejection_stands_through_any_redeclaration():
    """Rejected at gate 1.1 under v1; v2 lowers the gate to 1.0 (so a rejection side re-read at 1.0 would not
    reject) and faster pairs follow: the record stays rejected, naming the version it was rejected under."""
    v1, v2 = speed(min_speedup=1.1), speed(min_speedup=1.0)
    entries = [document_entry(10, np.full(16, 1.05)), document_entry(30, np.full(16, 1.6))]
    reading = read_record(SpeedRecord("ab" * 32, entries, 0, versions((1, v1), (20, v2))), v2.speed)
    assert (reading.result.decision, reading.result.stop, reading.rejected_under) == ("rejected", "rejected_before", 1)


# ---- through the registry ----------------------------------------------------------------------------------

MANIFEST = ("workload: w\nparity: {policy: byte_equal}\n"
            "speed: {min_speedup: 1.1, runs_per_arm: 16, protocol: paired, max_pairs: 400}\n")


@pytest.fixture
def fresh(sqlite_template):
    """`fresh(path)`: a registry opened on a copy of the worker's migrated template written at `path` (a new
    registry, as `init` makes it, without migrating one for every test)."""
    def copied(path):
        shutil.copyfile(sqlite_template, path)
        return opened(f"sqlite:///{path}", actor="t")
    return copied


@pytest.fixture()
def registry(tmp_path, fresh):
    found = fresh(tmp_path / "r.db")
    declare_workload(found, Contract.from_yaml(MANIFEST))
    (tmp_path / "k.bin").write_bytes(b"kernel bytes")
    found.payload = str(tmp_path / "k.bin")
    return found


def import_run(registry, artifact: str, ratios: list[float], run: str) -> None:
    candidate = [1.0 + 0.001 * (i % 3) for i in range(len(ratios))]
    document = {"format": "registry.evidence/1", "artifact": artifact, "run": run, "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0},
        {"kind": "parity", "leaves": [PASSING_LEAF]},
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event", "arch": "sm90",
         "baseline_s": [r * c for r, c in zip(ratios, candidate)], "candidate_s": candidate,
         "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(len(ratios))]}]}
    import_document(registry, json.dumps(document))


def test_promoting_after_each_document_is_the_record_read_once(registry):
    """A user who promotes after every document gets the decision the record reaches at its first deciding pair."""
    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    decisions = []
    for run, level in enumerate((1.12, 1.09, 1.5, 1.5)):
        import_run(registry, "a1", [level] * 16, f"r{run}")
        decisions.append(promote(registry, "a1").verdict["decision"])
    assert decisions == ["promoted"] * 4  # decided on the first document's 5th pair; nothing after it counts


def test_a_new_claim_and_a_new_id_continue_a_rejected_record(registry):
    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    import_run(registry, "a1", [1.0] * 16, "slow")
    assert promote(registry, "a1").verdict["decision"] == "rejected"
    register_artifact(registry, "a3", workload="w", kind="module", payload=registry.payload, backend="OTHER")
    for run in range(3):
        import_run(registry, "a3", [1.6] * 16, f"fast-{run}")
    verdict = promote(registry, "a3").verdict
    assert (verdict["decision"], verdict["rule"]) == ("rejected", "speed.below_gate"), verdict["reasons"]
    assert any("1 complete benchmark document" not in r and "4 complete benchmark documents" in r
               for r in verdict["reasons"])
    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload, backend="SAGE")
    import_run(registry, "a1", [1.6] * 16, "fast-again")  # the new claims' own evidence: the speed record still decides
    assert promote(registry, "a1").verdict["decision"] == "rejected"


def test_a_payload_less_twin_borrows_no_record(registry):
    """Two artifacts without a payload share an identity; neither has a speed record, so neither is promoted."""
    register_artifact(registry, "measured", workload="w", kind="module")
    register_artifact(registry, "twin", workload="w", kind="module")
    import_run(registry, "measured", [1.6] * 16, "fast")
    for artifact in ("measured", "twin"):
        verdict = promote(registry, artifact).verdict
        assert verdict["decision"] == "held"
        assert any(r.startswith("the artifact was registered without a payload") for r in verdict["reasons"])
    with pytest.raises(UserError, match="without a payload"):
        open_session(registry, "twin", "d", "perf_counter")


def test_a_loosened_contract_promotes_nothing_on_pairs_already_seen(registry, tmp_path):
    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    import_run(registry, "a1", [1.15, 1.05, 1.2, 1.12, 1.08, 1.17, 1.14, 1.11] * 2, "seen")
    assert promote(registry, "a1").verdict["decision"] == "held"
    declare_workload(registry, Contract.from_yaml(MANIFEST.replace("max_pairs: 400", "max_pairs: 400, alpha: 0.3")
                                                  .replace("min_speedup: 1.1", "min_speedup: 1.05")))
    verdict = promote(registry, "a1").verdict
    assert (verdict["decision"], verdict["rule"]) == ("held", "speed.undecided"), verdict["reasons"]
    session, record = open_session(registry, "a1", "NVIDIA H200", "cuda_event")
    batches = 0
    while not record.closed:  # new pairs count under the looser terms
        _, record = record_pairs(registry, "a1", session, [1.5, 1.5], [1.0, 1.0], f"b{batches}")
        batches += 1
    assert record.result.decided_at > 16 and promote(registry, "a1").verdict["decision"] == "promoted"


def test_a_final_rejection_is_not_reopened_by_redeclaring_and_rejudging(registry, tmp_path):
    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    import_run(registry, "a1", [1.0] * 16, "slow")
    assert promote(registry, "a1").verdict["decision"] == "rejected"
    import_run(registry, "a1", [1.6] * 16, "fast")
    declare_workload(registry, Contract.from_yaml(MANIFEST.replace("max_pairs: 400", "max_pairs: 399")))
    declare_workload(registry, Contract.from_yaml(MANIFEST))
    [(_, outcome)] = rejudge_workload(registry, "w")
    assert outcome.verdict["decision"] == "rejected"


def test_the_report_reads_each_read_model_table_once_however_many_artifacts(tmp_path, fresh):
    """`report` costs one query per read-model table: the speed records are read with the rest of the state,
    not a stream per artifact."""
    from registry.app.reports import build

    counts = []
    for size in (2, 12):
        registry = fresh(tmp_path / f"r{size}.db")
        declare_workload(registry, Contract.from_yaml(MANIFEST))
        for index in range(size):
            (tmp_path / f"k{index}.bin").write_bytes(f"bytes {index}".encode())
            register_artifact(registry, f"a{index}", workload="w", kind="module", payload=str(tmp_path / f"k{index}.bin"))
            import_run(registry, f"a{index}", [1.5] * 16, "r")
        build(registry, workload=None, position=None, stale_days=30)  # catches up first
        statements: list[str] = []
        event.listen(registry.store.engine, "before_cursor_execute",
                     lambda conn, cursor, statement, *rest: statements.append(statement))
        report, _ = build(registry, workload=None, position=None, stale_days=30)
        assert len(report["benchmark_records"]) == size
        counts.append(len(statements))
    assert counts[0] == counts[1], counts


# ---- the MotionKernel LTX runs ------------------------------------------------------------------------------

LTX = ("workload: ltx-t2v-480p\nparity: {policy: byte_equal}\nfidelity: {tier: exact}\n"
       "speed: {min_speedup: GATE, runs_per_arm: 15, protocol: sequential}\n")


# The artifact the two dispatch measurements describe; its bytes are registered before the import, so the
# measurements are evidence of those bytes (an imported artifact is registered without a payload otherwise).
LTX_ARTIFACT = "mk-ltx-t2v-480p-sm100-a9c44ac8b6"


def ltx_registry(tmp_path, fresh, files: tuple[str, ...], gate: str, extra: str = ""):
    from registry.app.imports import import_motionkernel

    tmp_path = tmp_path / "-".join(name.split(".")[0] for name in files)
    tmp_path.mkdir()
    registry = fresh(tmp_path / "ltx.db")
    declare_workload(registry, Contract.from_yaml(LTX.replace("GATE", gate).replace("sequential}",
                                                                                    f"sequential{extra}}}")))
    (tmp_path / "ltx.bin").write_bytes(b"the LTX transformer artifacts")
    register_artifact(registry, LTX_ARTIFACT, workload="ltx-t2v-480p", kind="fused_kernel",
                      payload=str(tmp_path / "ltx.bin"))
    tree = tmp_path / "campaign"
    tree.mkdir()
    for name in files:
        shutil.copy(MOTIONKERNEL / "dispatch" / name, tree / name)
    import_motionkernel(registry, [tree])
    return registry, LTX_ARTIFACT


LTX_1030, LTX_1040 = "sm100-1030.measurement.json", "sm100-1040.measurement.json"


@pytest.mark.parametrize("run, after, size, p, published", [
    (LTX_1040, 3, "+19.6%", "0.024", 1.2459),  # 3.12-3.28 s, then 3.70-4.01 s: the least p a shift after 3 allows
    (LTX_1030, 8, "+9.8%", "0.00058", 1.0274),
])
def test_each_ltx_run_timed_arm_after_arm_is_held_for_drift_with_where_how_large_and_p(tmp_path, fresh, run, after,
                                                                                        size, p, published):
    """Each real LTX run alone, under a confident gate at 1.01x: its baseline shifts level (the change-point scan's
    exact permutation p at most alpha / 2), so its runs are not read as one speedup; the verdict names the split,
    the size and p, and shows the figure the run publishes (its candidate arm is steady and not named)."""
    registry, artifact = ltx_registry(tmp_path, fresh, (run,), "1.01")
    verdict = promote(registry, artifact).verdict
    assert (verdict["decision"], verdict["rule"]) == ("held", "speed.drift"), verdict["reasons"]
    [drift] = [reason for reason in verdict["reasons"] if "shifted" in reason]
    assert f"baseline shifted after run {after} of 15 by {size}" in drift and f"exact permutation p {p})" in drift
    assert "candidate shifted" not in drift and "at most alpha / 2 = 0.025 per arm" in drift
    assert round(verdict["speedup"], 4) == published


def test_both_ltx_runs_in_one_record_are_held_for_drift_naming_each(tmp_path, fresh):
    registry, artifact = ltx_registry(tmp_path, fresh, (LTX_1030, LTX_1040), "1.01")
    verdict = promote(registry, artifact).verdict
    assert (verdict["decision"], verdict["rule"]) == ("held", "speed.drift"), verdict["reasons"]
    drifts = [reason for reason in verdict["reasons"] if "did not interleave its arms and baseline shifted" in reason]
    assert len(drifts) == 2 and "after run 8 of 15" in drifts[0] and "after run 3 of 15" in drifts[1]


def test_opting_out_of_the_drift_check_is_recorded_in_the_verdict(tmp_path, fresh):
    registry, artifact = ltx_registry(tmp_path, fresh, (LTX_1030, LTX_1040), "1.01", ", drift_check: none")
    verdict = promote(registry, artifact).verdict
    assert verdict["rule"] != "speed.drift"
    assert any("speed.drift_check is none" in reason for reason in verdict["reasons"])


@pytest.mark.parametrize("run, gate, published", [(LTX_1030, "1.2", 1.0274), (LTX_1040, "1.01", 1.2459)])
def test_an_ltx_run_read_as_exchangeable_shows_its_published_figure_beside_the_deciding_pair(tmp_path, fresh, run, gate,
                                                                                            published):
    """Opted out of the drift check, each run is read pair by pair and decided before its last pair (1030 rejected
    at pair 5 under a 1.2x gate, where its pairs' median is 1.0008; 1040 promoted at pair 11 under 1.01x, where it
    is 1.2288: the figures shown before); the verdict
    shows the ratio of its arm medians over all 15 pairs (what MotionKernel published), and names the deciding pair
    and its running bounds."""
    from registry.formats.sequential import decide_stream

    registry, artifact = ltx_registry(tmp_path, fresh, (run,), gate, ", drift_check: none")
    verdict = promote(registry, artifact).verdict
    document = json.loads((MOTIONKERNEL / "dispatch" / run).read_text())
    ratios = [b / c for b, c in zip(document["native"]["runs"], document["candidate"]["runs"])]
    rule = decide_stream(ratios, float(gate), ALPHA, 100_000)
    assert rule.decided_at < 15 and verdict["decision"] == rule.decision
    assert round(verdict["speedup"], 4) == published and verdict["speedup_pairs"] == 15
    assert verdict["speedup_ci_pair"] == rule.decided_at and verdict["speedup_ci"] == [rule.lower, rule.upper]
    assert (f"over the 15 pairs read up to the document that decided (ratio of the arm medians); decided at pair "
            f"{rule.decided_at} of 15 recorded: running bounds") in verdict["reasons"][0]


def test_the_seed_s_paired_run_decides_as_before_and_shows_its_published_figure(tmp_path, fresh):
    """The paired (interleaved) Wan run is read without a drift check: promoted at its fifth pair under a 1.2x
    confident gate, as before, showing the median of its sixteen pair ratios (published 1.3)."""
    from registry.app.imports import import_motionkernel
    from registry.evidence.motionkernel import plan_import

    registry = fresh(tmp_path / "wan.db")
    declare_workload(registry, Contract.from_yaml(
        "workload: wan-t2v-1.3b-480p\nparity: {policy: byte_equal}\nfidelity: {tier: exact}\n"
        "speed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired}\n"))
    (tmp_path / "wan.bin").write_bytes(b"the Wan fusions")
    tree = tmp_path / "campaign"
    tree.mkdir()
    shutil.copy(MOTIONKERNEL / "dispatch" / "sm90-paired.measurement.json", tree)
    artifact = plan_import(json.loads((tree / "sm90-paired.measurement.json").read_text())).artifact
    register_artifact(registry, artifact, workload="wan-t2v-1.3b-480p", kind="fused_kernel",
                      payload=str(tmp_path / "wan.bin"))
    import_motionkernel(registry, [tree])
    verdict = promote(registry, artifact).verdict
    assert (verdict["decision"], verdict["speedup_ci_pair"], verdict["speedup_pairs"]) == ("promoted", 5, 16)
    assert round(verdict["speedup"], 2) == 1.3 and round(verdict["speedup"], 4) == 1.3011


def test_workload_declare_names_the_speed_records_a_loosening_affects(registry_cli, tmp_path):
    manifest = tmp_path / "w.yaml"
    manifest.write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(manifest)).exit_code == 0
    (tmp_path / "k.bin").write_bytes(b"kernel bytes")
    assert registry_cli("artifact", "register", "a1", "--workload", "w", "--kind", "module",
                        "--payload", str(tmp_path / "k.bin")).exit_code == 0
    session = json.loads(registry_cli("bench", "open", "a1", "--device", "d", "--timer", "perf_counter", "--json").stdout)
    assert registry_cli("bench", "record", "a1", session["session"], "--batch", "b", "--baseline", "1.2,1.0",
                        "--candidate", "1.0,1.0").exit_code == 0
    manifest.write_text(MANIFEST.replace("max_pairs: 400", "max_pairs: 400, alpha: 0.3"))
    declared = registry_cli("workload", "declare", str(manifest))
    assert "speed terms loosened (gate 1.1 -> 1.1, alpha 0.05 -> 0.3): pairs recorded before this version" \
        in declared.stdout and "(2 pairs; a1)" in declared.stdout
    manifest.write_text(MANIFEST)
    tightened = json.loads(registry_cli("workload", "declare", str(manifest), "--json").stdout)
    assert tightened["speed_records"]["change"] == "tightened"
    assert [r["artifacts"] for r in tightened["speed_records"]["records"]] == [["a1"]]


def test_a_sequential_document_whose_baseline_drifted_is_held_with_the_figures():
    """Judged alone (the imported comparison), a document timed arm after arm whose baseline steps up halfway is held
    for drift; the reason is the one docs/gate.md prints."""
    from registry.formats.evidence.items import parse_item
    from registry.gate import ArtifactFacts, GateEvidence, Recorded, decide

    baseline = [1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.98, 1.01, 1.3, 1.31, 1.29, 1.3, 1.32, 1.3, 1.28, 1.31]
    item = parse_item({"kind": "benchmark", "protocol": "sequential", "device": "NVIDIA H200", "timer": "cuda_event",
                       "baseline_s": baseline, "candidate_s": [0.5] * 16})
    contract = speed(protocol="sequential")
    verdict = decide(contract, GateEvidence(
        execution=Recorded("ev-exec", parse_item({"kind": "execution", "candidate_calls": 4, "fallbacks": 0})),
        parity=Recorded("ev-parity", parse_item({"kind": "parity", "leaves": [PASSING_LEAF]})),
        benchmark=Recorded("ev-bench", item), benchmark_attempts=1), ArtifactFacts("a", "module"))
    assert (verdict.decision, verdict.rule) == ("held", "speed.drift")
    assert ("the arms were not interleaved and baseline shifted after run 8 of 16 by +30.0% (median 1 s before, "
            "1.3 s after; exact permutation p 0.00016): at most alpha / 2 = 0.025 per arm when the runs are "
            "exchangeable, so they are not read as one speedup") in verdict.reasons


def test_every_view_shows_the_run_s_published_figure_and_names_the_deciding_pair_s_bounds(tmp_path, fresh):
    """LTX run 1040 read as exchangeable under a 1.01x gate, promoted at pair 11: `promote`, `show`, `report` in every
    format, the live view's data and the stored verdict give 1.2459 (its arm medians' ratio over all 15 pairs), and
    the interval beside it is named as the running bounds at pair 11, with their level."""
    from click.testing import CliRunner

    from registry.cli.main import main
    from registry.serve.live import snapshot

    registry, artifact = ltx_registry(tmp_path, fresh, (LTX_1040,), "1.01", ", drift_check: none")
    url = str(registry.store.engine.url)

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["--db", url, *args])
        assert result.exit_code in (0, 3), result.output
        return result.output

    named = "interval [1.047, 1.257] (90% two-sided, running bounds at pair 11)"
    assert f"speedup 1.2459x over 15 pairs, {named}" in run("promote", artifact)
    assert f"speedup 1.2459x over 15 pairs, {named}" in run("show", artifact)
    [stored] = [e.payload["verdict"] for e in registry.store.read_all() if e.type == "VerdictRendered"]
    assert (round(stored["speedup"], 4), stored["speedup_pairs"], stored["speedup_ci_pair"]) == (1.2459, 15, 11)
    report = json.loads(run("report", "--format", "json"))
    [entry] = report["leaderboard"]["ltx-t2v-480p"]
    assert (round(entry["speedup"], 4), entry["speedup_ci_pair"]) == (1.2459, 11)
    [record] = report["benchmark_records"]
    assert (round(record["speedup"], 4), record["speedup_pairs"], record["decided_at"]) == (1.2459, 15, 11)
    assert "1.2459" in run("report", "--format", "csv")
    for text in (run("report"), run("report", "--format", "html")):
        assert "1.2459" in text and "running bounds at pair 11" in text
    [shown] = [a for w in snapshot(registry)["workloads"] for a in w["artifacts"] if a["artifact"] == artifact]
    assert shown["speedup"] == stored["speedup"]


# ---- the running reading the read model keeps ---------------------------------------------------------------

LEVELS = (0.8, 1.0, 1.15, 1.2, 1.25, 1.6)


@st.composite
def record_entry(draw, position: int) -> dict:
    """One session batch or complete document of any shape the record takes: paired or sequential, interleaved or
    not, timed on a device or by the interpreter, drifting or steady, or an item not shaped as a benchmark."""
    source = draw(st.sampled_from(("session", "document")))
    protocol = "paired" if source == "session" else draw(st.sampled_from(("paired", "sequential", None)))
    runs = draw(st.integers(1, 16))
    level = draw(st.sampled_from(LEVELS))
    shift = draw(st.sampled_from((0.0, 0.0, 0.3)))  # a level shift halfway in the baseline arm
    baseline = [1.0 + 0.01 * ((i * 7) % 5) + (shift if i >= runs // 2 else 0.0) for i in range(runs)]
    candidate = [b / level * (1.0 + 0.004 * ((i * 3) % 4)) for i, b in enumerate(baseline)]
    if protocol == "sequential":
        candidate = candidate[: draw(st.integers(1, runs))]
    alternating = draw(st.booleans()) or source == "session"
    return {"source": source, "position": position, "event_id": f"ev-{position}", "artifact": "a",
            "identity": "i", "session": "s" if source == "session" else None, "protocol": protocol,
            "schedule": [("BC", "CB")[i % 2] if alternating else "BC" for i in range(runs)]
            if protocol == "paired" else None,
            "baseline_s": baseline if protocol else [], "candidate_s": candidate if protocol else [],
            "timer": draw(st.sampled_from(("cuda_event", "cuda_event", "triton_interpreter"))),
            "device": "NVIDIA H200", "arch": "sm90"}


@given(st.data())
@settings(max_examples=120, deadline=None)
def test_a_kept_reading_read_on_entry_by_entry_is_the_reading_of_the_whole_record(data):
    """The read model keeps a record's reading (record_readings.py): read whole once, then each later entry read
    into the kept state, through its JSON, under the same terms. That must be the reading of the whole record, for
    every shape of entry, every declared history of terms, and the rule stopped (decided, max_pairs) or not."""
    from registry.events.canonical import canonical_json
    from registry.gate.record import RecordReader, contract_terms

    count = data.draw(st.integers(1, 14))
    entries = [data.draw(record_entry(10 * (index + 1))) for index in range(count)]
    split = data.draw(st.integers(0, count))  # read whole up to here, then entry by entry
    declared = [speed(min_speedup=data.draw(st.sampled_from((1.1, 1.2, 1.3))),
                      alpha=data.draw(st.sampled_from((0.05, 0.3))),
                      max_pairs=data.draw(st.sampled_from((8, 30, 100_000))),
                      **({"drift_check": "none"} if data.draw(st.booleans()) else {}))
                  for _ in range(data.draw(st.integers(1, 3)))]
    positions = sorted(data.draw(st.lists(st.integers(1, 10 * split + 5), min_size=len(declared),
                                          max_size=len(declared), unique=True)))
    history = versions(*zip(positions, declared))
    current, terms = declared[-1].speed, contract_terms(history)
    whole = read_record(SpeedRecord("ab" * 32, entries, 2, history), current)
    reader = RecordReader(current, terms)
    reader.read_all(entries[:split])
    state = json.loads(canonical_json(reader.state))  # as the row keeps it
    for entry in entries[split:]:
        reader = RecordReader(current, terms, state)
        reader.add(entry)
        state = json.loads(canonical_json(reader.state))
    assert RecordReader(current, terms, state).reading(2) == whole
    kept = SpeedRecord("ab" * 32, entries, 2, history, reading=state)
    assert read_record(kept, current) == whole
    # One entry behind (a batch just appended, not yet folded): read on from the kept state, the same reading.
    if split < count:
        assert read_record(SpeedRecord("ab" * 32, entries, 2, history, reading=_behind(current, terms, entries,
                                                                                         split)), current) == whole
    # Under other terms the kept state is not used: the record is read whole under them.
    other = speed(min_speedup=1.05, alpha=0.2, max_pairs=40)
    assert read_record(kept, other.speed) == read_record(SpeedRecord("ab" * 32, entries, 2, history), other.speed)


def _behind(current, terms, entries, split) -> dict:
    from registry.gate.record import RecordReader

    reader = RecordReader(current, terms)
    reader.read_all(entries[:split])
    for entry in entries[split:-1]:
        reader.add(entry)
    return reader.state


def kept_reading(registry, workload: str = "w") -> dict:
    """The running reading the speed record row of the registry's payload keeps (caught up first)."""
    with registry.view() as view:
        [record] = view.workload_speed_records(workload)
    return record["reading"]


def test_a_kept_reading_is_used_only_under_the_terms_it_was_kept_under(registry):
    """A contract re-declared with other speed terms makes the kept reading stale: it is never used, the record is
    read whole under the new terms until its next entry is folded, and then kept under them; `replay --verify`
    finds the kept readings equal to readings made from scratch at every step."""
    from registry.app.show import show_artifact
    from registry.projections import verify_projections

    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    import_run(registry, "a1", [1.15] * 16, "first")
    assert show_artifact(registry, "a1", 0).bench["reading"] == "above"
    first = kept_reading(registry)
    assert first["pairs"] == 16 and first["rule"]["stopped"] and verify_projections(registry.store).ok
    declare_workload(registry, Contract.from_yaml(MANIFEST.replace("min_speedup: 1.1", "min_speedup: 1.3")))
    assert kept_reading(registry) == first  # nothing of the record was folded since: kept as it was
    shown = show_artifact(registry, "a1", 0).bench
    # Read whole under the new terms, not the kept ones: pairs seen under gate 1.1 are not above 1.3 for promotion,
    # nor below 1.1 for rejection.
    assert (shown["reading"], shown["gate"]) == ("undecided", 1.3)
    assert verify_projections(registry.store).ok
    import_run(registry, "a1", [1.15] * 16, "second")
    again = kept_reading(registry)
    assert again["rule"]["terms"] != first["rule"]["terms"] and again["pairs"] == 32
    assert show_artifact(registry, "a1", 0).bench["reading"] != "above" and verify_projections(registry.store).ok


def test_a_verdict_on_a_record_of_a_thousand_documents_stays_small(registry):
    """A verdict cites the record it read by key, head and digest, so its size does not grow with the record: under
    16 KB with 1,000 documents (listing each document's id took about 38 KB). Imports 1,000 documents (about
    a second): a list of ids outgrows the bound only at that scale."""
    from registry.events.canonical import canonical_json, sha256_hex

    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    candidate = [1.0 + 0.001 * (i % 3) for i in range(16)]
    benchmark = {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
                 "arch": "sm90", "baseline_s": [1.02 * c for c in candidate], "candidate_s": candidate,
                 "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(16)]}
    import_document(registry, json.dumps({"format": "registry.evidence/1", "artifact": "a1", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [PASSING_LEAF]},
        *[benchmark] * 1000]}))
    outcome = promote(registry, "a1")
    [verdict] = [event for event in registry.store.read_all() if event.type == "VerdictRendered"]
    assert len(canonical_json(verdict.payload).encode()) < 16 * 1024
    documents = [event for event in registry.store.read_all() if event.type == "BenchmarkMeasured"]
    digest = ""
    for document in documents:
        digest = sha256_hex(digest + document.event_id)
    assert outcome.verdict["speed_record"] == {"record": outcome.verdict["speed_record"]["record"],
                                              "head": documents[-1].position, "entries": 1000, "digest": digest}


def test_a_verdict_on_a_thousand_entries_that_each_hold_it_names_ten_and_counts_the_rest(registry):
    """1,000 paired documents in one order only (never ABBA): each is held by `speed.interleave`. The verdict lists
    the first MOST_LISTED and counts the rest in one reason, so it stays under 16 KB; every entry still shows in
    `show --documents`. Imports 1,000 documents (about a second): the list outgrows the bound only at that scale."""
    from registry.events.canonical import canonical_json
    from registry.gate.speed import MOST_LISTED

    register_artifact(registry, "a1", workload="w", kind="module", payload=registry.payload)
    candidate = [1.0 + 0.001 * (i % 3) for i in range(16)]
    benchmark = {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
                 "arch": "sm90", "baseline_s": [1.5 * c for c in candidate], "candidate_s": candidate,
                 "schedule": ["BC"] * 16}
    import_document(registry, json.dumps({"format": "registry.evidence/1", "artifact": "a1", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [PASSING_LEAF]},
        *[benchmark] * 1000]}))
    outcome = promote(registry, "a1")
    [verdict] = [event for event in registry.store.read_all() if event.type == "VerdictRendered"]
    assert outcome.verdict["decision"] == "held" and len(canonical_json(verdict.payload).encode()) < 16 * 1024
    reasons = outcome.verdict["reasons"]
    named = [reason for reason in reasons if reason.startswith("document ") and "set aside" in reason]
    counted = [reason for reason in reasons if reason.startswith(f"and {1000 - MOST_LISTED} more")]
    assert len(named) == MOST_LISTED and len(counted) == 1 and "--documents" in counted[0], reasons
