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
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import event

from registry.app import open_registry
from registry.app.bench import open_session, record_pairs
from registry.app.decisions import promote
from registry.app.evidence import import_document
from registry.app.rejudge import rejudge_workload
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract
from registry.formats.errors import UserError
from registry.formats.stats import median_interval
from registry.gate import SpeedRecord
from registry.gate.record import read_record

GATE, ALPHA, USERS, DOCUMENTS, PAIRS = 1.2, 0.05, 400, 20, 16
MOTIONKERNEL = Path(__file__).parent / "fixtures" / "motionkernel"
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


def session_entry(position: int, ratios: np.ndarray) -> dict:
    return {**document_entry(position, ratios), "source": "session", "session": "bs-1", "schedule": None}


def upper_allowed(rate: float, n: int) -> float:
    """alpha + 3 standard errors of a rate estimated from n users."""
    return rate + 3.0 * math.sqrt(rate * (1.0 - rate) / n)


def lognormal_ratios(rng: np.random.Generator, median: float, shape: tuple[int, ...]) -> np.ndarray:
    return median * np.exp(0.05 * rng.standard_normal(shape))


# ---- simulations -------------------------------------------------------------------------------------------

def test_retried_documents_below_the_gate_are_promoted_at_most_alpha_of_the_time():
    """400 users each submit twenty complete 16-pair documents at 0.995x of the gate: read as one record, false
    promotions stay within alpha + 3 SE; judged one document at a time (each its own look at alpha), the same
    documents promote far more often, which is what the record prevents."""
    rng = np.random.default_rng(28)
    ratios = lognormal_ratios(rng, 0.995 * GATE, (USERS, DOCUMENTS, PAIRS))
    contract = speed()
    history = versions((1, contract))
    promoted = 0
    for user in range(USERS):
        entries = [document_entry(10 + d, ratios[user, d]) for d in range(DOCUMENTS)]
        promoted += read_record(SpeedRecord("ab" * 32, entries, 0, history), contract.speed).result.decision \
            == "promoted"
    assert promoted / USERS <= upper_allowed(ALPHA, USERS), promoted
    low, _, _ = median_interval(ratios, ALPHA)  # each document alone: its lower bound above the gate promotes
    one_look_each = float(np.mean((low > GATE).any(axis=1)))
    assert one_look_each > upper_allowed(ALPHA, USERS), one_look_each


def test_mixed_sessions_and_documents_at_the_gate_err_at_most_alpha_each_way():
    """Sessions of two pairs and complete documents interleaved in one record, true median exactly at the gate:
    false promotions and false rejections each within alpha + 3 SE."""
    rng = np.random.default_rng(2028)
    contract = speed()
    history = versions((1, contract))
    outcomes = {"promoted": 0, "rejected": 0, "held": 0}
    for _ in range(USERS):
        entries, position = [], 10
        for step in range(24):
            size = PAIRS if step % 3 == 2 else 2
            ratios = lognormal_ratios(rng, GATE, (size,))
            entries.append((document_entry if size == PAIRS else session_entry)(position, ratios))
            position += 1
        outcomes[read_record(SpeedRecord("ab" * 32, entries, 8, history), contract.speed).result.decision] += 1
    assert outcomes["promoted"] / USERS <= upper_allowed(ALPHA, USERS), outcomes
    assert outcomes["rejected"] / USERS <= upper_allowed(ALPHA, USERS), outcomes


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


@pytest.fixture()
def registry(tmp_path):
    found = open_registry(f"sqlite:///{tmp_path / 'r.db'}", actor="t", create=True)
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


def test_the_report_reads_each_read_model_table_once_however_many_artifacts(tmp_path):
    """`report` costs one query per read-model table: the speed records are read with the rest of the state,
    not a stream per artifact."""
    from registry.app.reports import build

    counts = []
    for size in (2, 12):
        registry = open_registry(f"sqlite:///{tmp_path / f'r{size}.db'}", actor="t", create=True)
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


def ltx_registry(tmp_path, files: tuple[str, ...], gate: str, extra: str = ""):
    from registry.app.imports import import_motionkernel

    registry = open_registry(f"sqlite:///{tmp_path / 'ltx.db'}", actor="t", create=True)
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


def test_the_drifting_ltx_run_is_held_for_drift_with_the_figures(tmp_path):
    """The second LTX run of the same bytes, timed arm after arm, has bounds disjoint from the first run's: under
    a confident gate at 1.01x the record is held for drift, naming both intervals; opting out is said."""
    registry, artifact = ltx_registry(tmp_path, ("sm100-1030.measurement.json", "sm100-1040.measurement.json"), "1.01")
    verdict = promote(registry, artifact).verdict
    assert (verdict["decision"], verdict["rule"]) == ("held", "speed.drift"), verdict["reasons"]
    [drift] = [reason for reason in verdict["reasons"] if "disjoint" in reason]
    assert "did not interleave its arms" in drift and "[1.18" in drift and "[0.99" in drift


def test_opting_out_of_the_drift_check_is_recorded_in_the_verdict(tmp_path):
    registry, artifact = ltx_registry(tmp_path, ("sm100-1030.measurement.json", "sm100-1040.measurement.json"),
                                      "1.01", ", drift_check: none")
    verdict = promote(registry, artifact).verdict
    assert verdict["rule"] != "speed.drift"
    assert any("speed.drift_check is none" in reason for reason in verdict["reasons"])


def test_the_steady_ltx_run_decides_as_before(tmp_path):
    registry, artifact = ltx_registry(tmp_path, ("sm100-1030.measurement.json",), "1.2")
    verdict = promote(registry, artifact).verdict
    assert (verdict["decision"], verdict["rule"]) == ("rejected", "speed.below_gate"), verdict["reasons"]
    assert verdict["speedup_ci_level"] == pytest.approx(0.9)


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
    """Judged alone (the imported comparison), a document timed arm after arm whose baseline halves have disjoint
    median intervals is held for drift; the reason is the one docs/gate.md prints."""
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
    assert ("the arms were not interleaved and the baseline drifted: baseline early median 1 s [0.98, 1.02], late "
            "median 1.3 s [1.28, 1.32] (each half's interval at 97.5%, disjoint at most 5% of the time without "
            "drift)") in verdict.reasons
