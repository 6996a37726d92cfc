"""The speed gate's attempt cap and its calibrated "conclusive" rule, on real evidence items."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.cli.main import main
from registry.contracts import Contract, ContractError
from registry.formats.evidence.errors import EvidenceError
from registry.formats.evidence.items import parse_item
from registry.formats.ranks import MAX_RUNS_PER_ARM
from stacked_intervals import speedup_interval
from registry.gate import RULES, ArtifactFacts, GateEvidence, Recorded, decide
from paths import ROOT

MODULE = ArtifactFacts("fused-rmsnorm-v1", "module")
SPEED = {"min_speedup": 1.3, "runs_per_arm": 16, "protocol": "paired", "decision": "point"}
PASSING_LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
                "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
                "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


def contract(**speed) -> Contract:
    return Contract.from_mapping({"workload": "w", "speed": {**SPEED, **speed}})


def paired(baseline: list[float], candidate: list[float]) -> Recorded:
    return Recorded("ev-bench", parse_item({
        "kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
        "baseline_s": baseline, "candidate_s": candidate,
        "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(len(baseline))],
    }))


def passing_evidence(attempts: int | None = None, benchmark: Recorded | None = None) -> GateEvidence:
    candidate = [1.0 + 0.002 * (i % 4) for i in range(16)]
    return GateEvidence(
        execution=Recorded("ev-exec", parse_item({"kind": "execution", "candidate_calls": 4, "fallbacks": 0})),
        parity=Recorded("ev-parity", parse_item({"kind": "parity", "leaves": [PASSING_LEAF]})),
        benchmark=benchmark or paired([1.5 * c for c in candidate], candidate),
        benchmark_attempts=attempts,
    )


# ---- speed.max_benchmark_attempts -------------------------------------------------------------------

def test_within_the_cap_promotes_and_states_the_count():
    verdict = decide(contract(max_benchmark_attempts=3), passing_evidence(attempts=3), MODULE)
    assert (verdict.decision, verdict.rule) == ("promoted", "speed.passed")
    assert verdict.reasons == [
        "speedup 1.50x meets the gate 1.30x (min_speedup)",
        "3 benchmark attempts for this identity, of at most 3 (speed.max_benchmark_attempts)",
    ]


def test_over_the_cap_holds_even_a_passing_benchmark():
    verdict = decide(contract(max_benchmark_attempts=3), passing_evidence(attempts=4), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.attempts_exceeded")
    assert verdict.reasons == [
        "4 benchmark attempts for this identity exceed speed.max_benchmark_attempts 3: "
        "no further benchmark of this identity can promote it",
    ]


@pytest.mark.parametrize(("attempts", "why"), [
    (None, "the number of benchmark attempts was not counted"),
    (0, "benchmark evidence is recorded but the attempt count is 0"),
    (-1, "the benchmark attempt count -1 is not a count"),
    (True, "the benchmark attempt count True is not a count"),
])
def test_a_declared_cap_without_a_usable_count_holds(attempts, why):
    verdict = decide(contract(max_benchmark_attempts=3), passing_evidence(attempts=attempts), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.attempts_unknown")
    assert verdict.reasons == [f"{why}, so speed.max_benchmark_attempts 3 cannot be checked"]


def test_no_cap_is_stated_with_the_count():
    verdict = decide(contract(), passing_evidence(attempts=1), MODULE)
    assert verdict.decision == "promoted"
    assert verdict.reasons[-1] == (  # notes come after every reason that decided
        "1 benchmark attempt for this identity; speed.max_benchmark_attempts is not declared, "
        "so attempts are not capped"
    )


def test_the_count_is_stated_whatever_the_decision():
    slow = [1.0] * 16
    verdict = decide(contract(max_benchmark_attempts=5), passing_evidence(2, paired(slow, slow)), MODULE)
    assert verdict.decision == "rejected"
    assert verdict.reasons == [
        "speedup 1.00x is below the gate 1.30x (min_speedup)",
        "2 benchmark attempts for this identity, of at most 5 (speed.max_benchmark_attempts)",
    ]
    no_speed = Contract.from_mapping({"workload": "w"})
    verdict = decide(no_speed, passing_evidence(attempts=2), MODULE)
    assert verdict.decision == "held"
    assert verdict.reasons[-1].startswith("2 benchmark attempts for this identity; speed.max_benchmark_attempts")
    assert not verdict.reasons[0].startswith("2 benchmark attempts")


@settings(max_examples=60, deadline=None)
@given(attempts=st.one_of(st.none(), st.booleans(), st.integers(-3, 12)), cap=st.one_of(st.none(), st.integers(1, 8)))
def test_a_cap_promotes_only_a_counted_identity_within_it(attempts, cap):
    speed = {} if cap is None else {"max_benchmark_attempts": cap}
    verdict = decide(contract(**speed), passing_evidence(attempts=attempts), MODULE)
    counted = isinstance(attempts, int) and not isinstance(attempts, bool) and attempts >= 1
    if cap is None or (counted and attempts <= cap):
        assert verdict.decision == "promoted"
    else:
        assert (verdict.decision, verdict.rule) == (
            "held", "speed.attempts_exceeded" if counted else "speed.attempts_unknown")
    stated = [reason for reason in verdict.reasons if "attempt" in reason]
    assert len(stated) == (1 if counted or cap is not None else 0)
    if counted:
        assert stated[0].startswith(f"{attempts} benchmark attempt")


def test_the_attempt_rules_are_listed():
    assert {"speed.attempts", "speed.attempts_unknown", "speed.attempts_exceeded"} <= set(RULES)


@pytest.mark.parametrize(("value", "message"), [
    (0, "speed.max_benchmark_attempts: 0 is below the minimum 1"),
    (2.5, "speed.max_benchmark_attempts: expected an integer, got float"),
    (True, "speed.max_benchmark_attempts: expected an integer, got bool"),
])
def test_the_cap_must_be_a_positive_integer(value, message):
    with pytest.raises(ContractError) as refused:
        contract(max_benchmark_attempts=value)
    assert str(refused.value).startswith(message)


def test_an_undeclared_cap_keeps_the_contract_hash():
    """A manifest that does not use the new field hashes as it did before the field existed."""
    assert "max_benchmark_attempts" not in contract().canonical()["speed"]
    assert contract(max_benchmark_attempts=2).canonical()["speed"]["max_benchmark_attempts"] == 2
    assert contract().content_hash() != contract(max_benchmark_attempts=2).content_hash()


# ---- require_conclusive: calibrated by simulation ---------------------------------------------------
#
# Under a null of equal arms the interval must exclude 1.0 (the gate's "conclusive") at most 5% of the
# time, for every run count a contract with require_conclusive accepts. The counts simulated run from the
# fewest the contract accepts to 48, then a few larger ones; above that, the exact rank test in
# test_stats.py covers every count up to the evidence limit. Rates are estimated from SIMULATIONS draws,
# so each is allowed a binomial margin of 4 standard errors of a 5% rate (a method exactly at 5% exceeds
# it with probability about 3e-5 per count). Seeded: the same draws every run.

SIMULATIONS = 4000
FALSE_POSITIVE_BOUND = 0.05 + 4 * (0.05 * 0.95 / SIMULATIONS) ** 0.5
LARGER_COUNTS = (64, 101, 256)


def lognormal(rng, shape):
    return np.exp(rng.normal(0.0, 0.1, shape))


def skewed(rng, shape):
    return 1.0 + rng.exponential(0.1, shape)


def heavy_tailed(rng, shape):
    return 1.0 + 0.02 * rng.pareto(1.1, shape)  # infinite variance: the occasional preempted run


def coarse_timer(rng, shape):
    return np.round(1.0 + rng.exponential(0.05, shape), 2)  # 10 ms resolution: many tied runs and pairs


NOISE = {"lognormal": lognormal, "skewed": skewed, "heavy_tailed": heavy_tailed, "coarse_timer": coarse_timer}


def draw_arms(rng, noise, protocol: str, n: int, speedup: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """SIMULATIONS benchmarks of n runs per arm; paired ones share a per-pair drift (clocks, thermals)."""
    baseline, candidate = NOISE[noise](rng, (SIMULATIONS, n)), NOISE[noise](rng, (SIMULATIONS, n))
    if protocol == "paired":
        drift = np.exp(rng.normal(0.0, 0.3, (SIMULATIONS, n)))
        baseline, candidate = baseline * drift, candidate * drift
    return baseline, candidate / speedup


def conclusive_rate(protocol: str, baseline: np.ndarray, candidate: np.ndarray) -> float:
    low, high, _ = speedup_interval(protocol, baseline, candidate)
    return float(np.mean(~((low <= 1.0) & (1.0 <= high))))  # the gate's test: conclusive unless low <= 1 <= high


def fewest_accepted(protocol: str) -> int:
    """The smallest runs_per_arm a require_conclusive contract accepts (evidence may carry any count above)."""
    for n in range(2, 100):
        try:
            contract(protocol=protocol, runs_per_arm=n, require_conclusive=True)
            return n
        except ContractError:
            continue
    raise AssertionError("no run count accepted")


@pytest.mark.parametrize("protocol", ["paired", "sequential"])
@pytest.mark.parametrize("noise", sorted(NOISE))
def test_require_conclusive_passes_equal_arms_at_most_5_percent_of_the_time(protocol, noise):
    rng = np.random.default_rng([len(protocol), len(noise)])
    rates = {n: conclusive_rate(protocol, *draw_arms(rng, noise, protocol, n))
             for n in (*range(fewest_accepted(protocol), 49), *LARGER_COUNTS)}
    worst = max(rates, key=rates.get)
    assert rates[worst] <= FALSE_POSITIVE_BOUND, f"{rates[worst]:.3f} false positives at {worst} runs per arm"


@pytest.mark.parametrize("protocol", ["paired", "sequential"])
@pytest.mark.parametrize("noise", sorted(NOISE))
def test_require_conclusive_finds_a_real_1_5x_speedup(protocol, noise):
    rng = np.random.default_rng([len(protocol), len(noise), 15])
    fewest = fewest_accepted(protocol)
    at_fewest = conclusive_rate(protocol, *draw_arms(rng, noise, protocol, fewest, speedup=1.5))
    at_16 = conclusive_rate(protocol, *draw_arms(rng, noise, protocol, 16, speedup=1.5))
    assert at_fewest >= 0.75 and at_16 >= 0.99, (at_fewest, at_16)


def test_the_gate_promotes_the_fewest_pairs_that_can_be_conclusive():
    fewest = fewest_accepted("paired")
    assert fewest == 6
    rule = {"runs_per_arm": fewest, "require_conclusive": True}
    six = passing_evidence(benchmark=paired([1.5, 1.6, 1.5, 1.7, 1.5, 1.6], [1.0] * 6))
    assert decide(contract(**rule), six, MODULE).decision == "promoted"
    one_slow = passing_evidence(benchmark=paired([1.5, 1.6, 0.9, 1.7, 1.5, 1.6], [1.0] * 6))
    verdict = decide(contract(**rule), one_slow, MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.inconclusive")
    assert verdict.reasons == [
        "the 96.9% order-statistic CI [0.9, 1.7] of the speedup includes 1.0 and require_conclusive is set",
    ]


# ---- bounded memory: 10^5 runs per arm (issue: 20,000 runs took 6.2 GB through the bootstrap) ---------

PEAK_RSS_BOUND_MIB = 256  # interpreter, numpy, SQLite and the 2.7 MB document included
# Runs each `registry` command as a child and prints the largest child's peak RSS. Linux starts a forked
# child's ru_maxrss at its parent's resident size (pytest with torch loaded exceeds the bound), so the
# commands are forked from this bare interpreter, never from pytest. The address-space limit makes a
# regression fail here (the old bootstrap asked for 7.45 GiB at once) instead of exhausting the machine.
LAUNCHER = """
import json, resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
for args in json.loads(sys.argv[1]):
    done = subprocess.run([sys.executable, "-m", "registry", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{args[4]} exited {done.returncode}: {(done.stdout + done.stderr)[-1500:]}")
scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale // (1 << 20))
"""


def test_a_benchmark_at_the_runs_limit_is_imported_promoted_and_replayed_in_bounded_memory(tmp_path):
    """Import, promote and what-if of a 10^5-run paired benchmark, each a real `registry` process."""
    n = MAX_RUNS_PER_ARM
    candidate = [1.0 + 1e-4 * (i % 37) for i in range(n)]
    (tmp_path / "evidence.json").write_text(json.dumps({"format": "registry.evidence/1", "artifact": "a", "evidence": [
        {"kind": "execution", "candidate_calls": 3, "fallbacks": 0},
        {"kind": "parity", "leaves": [PASSING_LEAF]},
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
         "baseline_s": [1.5 * c + 1e-5 * (i % 11) for i, c in enumerate(candidate)], "candidate_s": candidate,
         "schedule": ["BC", "CB"] * (n // 2)}]}))
    (tmp_path / "w.yaml").write_text(
        f"workload: w\nspeed: {{min_speedup: 1.3, runs_per_arm: {n}, protocol: paired, require_conclusive: true}}\n")
    (tmp_path / "payload.bin").write_bytes(b"kernel")
    session = ["--db", f"sqlite:///{tmp_path / 'r.db'}", "--actor", "t"]
    commands = [[*session, *args] for args in (
        ["init"], ["workload", "declare", str(tmp_path / "w.yaml")],
        ["artifact", "register", "a", "--workload", "w", "--kind", "module",
         "--payload", str(tmp_path / "payload.bin")],
        ["evidence", "import", str(tmp_path / "evidence.json")], ["promote", "a"],
        ["what-if", str(tmp_path / "w.yaml")],
    )]
    root = ROOT
    result = subprocess.run([sys.executable, "-c", LAUNCHER, json.dumps(commands)], capture_output=True,
                            text=True, timeout=600, cwd=root)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) < PEAK_RSS_BOUND_MIB
    shown = CliRunner().invoke(main, [*session, "show", "a", "--json"])  # a read afterwards: no process of its own
    assert json.loads(shown.output)["decision"] == "promoted"


def test_more_runs_than_the_limit_are_refused_in_one_line(registry_cli):
    n = MAX_RUNS_PER_ARM + 1
    path = registry_cli.tmp / "huge.json"
    path.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "a", "evidence": [{
        "kind": "benchmark", "protocol": "sequential", "device": "NVIDIA H200", "timer": "cuda_event",
        "baseline_s": [1.0] * n, "candidate_s": [1.0] * 8}]}))
    result = registry_cli("evidence", "import", str(path))
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].endswith(
        f"evidence[0].baseline_s: {n} runs; a benchmark arm carries at most {MAX_RUNS_PER_ARM}")
    assert len(result.output.strip().splitlines()) == 1
    with pytest.raises(EvidenceError, match=f"candidate_s: {n} runs"):
        parse_item({"kind": "benchmark", "protocol": "sequential", "device": "d", "timer": "cuda_event",
                    "baseline_s": [1.0] * 8, "candidate_s": [1.0] * n})


def test_a_contract_cannot_ask_for_more_runs_than_evidence_may_carry():
    with pytest.raises(ContractError, match=f"above the {MAX_RUNS_PER_ARM} runs per arm"):
        contract(runs_per_arm=MAX_RUNS_PER_ARM + 2)
