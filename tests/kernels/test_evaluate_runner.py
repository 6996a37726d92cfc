"""The evaluation runner end to end on the cpu corpus (Triton interpreter on CPU).

Candidates that misbehave are real modules written to a temporary folder and
imported by their entry string, exactly as a CLI user's candidate would be.
"""
from __future__ import annotations

import json
import os
import textwrap

import pytest

from registry.kernels.corpus import corpus_cases
from registry.kernels.evaluate import evaluate_kernel, evidence_document
from registry.kernels.sandbox import PROFILE, harness_digest

pytestmark = [pytest.mark.device, pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                                     reason="the cpu corpus runs under the interpreter")]

CASES = corpus_cases("cpu")
TOLERANCES = {"bfloat16": {"atol": 0.02, "rtol": 0.02, "max_abs": 0.1}, "float16": {"atol": 0.002, "rtol": 0.002}}


@pytest.fixture
def candidates(tmp_path):
    """Write a module of candidate functions and return a function making its entries."""
    source = textwrap.dedent('''
        import torch
        from registry.kernels.launches import record_fallback
        from registry.kernels.modln import modulated_layernorm_triton
        from registry.kernels.reference import modulated_layernorm

        CALLS = {"n": 0}

        def raising(x, scale, shift):
            raise RuntimeError("kernel exploded")

        def falls_back(x, scale, shift):
            record_fallback("modln")  # quietly serves the eager op
            return modulated_layernorm(x, scale, shift)

        def dies_when_timed(x, scale, shift):
            CALLS["n"] += 1
            if CALLS["n"] > 4:  # the cpu corpus has 4 cases; parity passes
                raise MemoryError("out of memory at call 5")
            return modulated_layernorm_triton(x, scale, shift)

        def writes_its_input(x, scale, shift):
            scale.mul_(2)
            return modulated_layernorm_triton(x, scale, shift)

        def fast_but_approximate(x, scale, shift):
            # pretends to be clever: uses __expf-style intrinsics in its CUDA twin
            return modulated_layernorm_triton(x, scale, shift)
    ''')
    (tmp_path / "eval_candidates.py").write_text(source)
    return lambda name: f"{tmp_path / 'eval_candidates.py'}:{name}"


def _evaluate(entry, op="modulated_layernorm", **overrides):
    kwargs = dict(corpus="cpu", runs=2, warmup=1, policy="byte_equal", tolerances_by_dtype=None)
    kwargs.update(overrides)
    return evaluate_kernel(op, entry, **kwargs)


def _execution(calls: int, fallbacks: int, observed: dict) -> dict:
    """The execution item `evaluate_kernel` writes: the confinement is the one its jail's launcher reported."""
    assert observed["confinement"]["identity"] in ("sandbox_uid", "user_namespace")
    return {"kind": "execution", "candidate_calls": calls, "fallbacks": fallbacks, "sandbox": PROFILE,
            "harness_sha256": harness_digest(), "confinement": observed["confinement"],
            "launch_signal": "candidate_process"}


def test_builtin_kernel_yields_parity_benchmark_and_execution_evidence():
    seen = []
    observed = {}
    items = _evaluate("registry.kernels.modln:modulated_layernorm_triton", runs=3,
                      progress=lambda done, total: seen.append((done, total)), observed=observed)
    assert [i["kind"] for i in items] == ["parity", "benchmark", "execution"]
    parity, bench, execution = items
    assert parity["policy"] == "byte_equal" and parity["approx_math"] == []
    assert [leaf["name"] for leaf in parity["leaves"]] == [f"{c.label}.y" for c in CASES]
    for side in ("reference", "candidate"):
        assert [leaf[f"{side}_shape"] for leaf in parity["leaves"]] == [[c.batch, c.seq, c.dim] for c in CASES]
        assert [leaf[f"{side}_dtype"] for leaf in parity["leaves"]] == [c.dtype for c in CASES]
    # Observed: bit-exact on every cpu-corpus case under the interpreter.
    assert all(leaf["byte_equal"] for leaf in parity["leaves"])
    assert bench["protocol"] == "paired" and bench["schedule"] == ["BC", "CB", "BC"] and bench["warmup"] == 1
    assert bench["timer"] == "interpreter" and bench["device"] == "cpu (triton interpreter)"
    assert len(bench["baseline_s"]) == len(bench["candidate_s"]) == 3
    # the harness read, from outside the jail, how long each timed baseline call waited for a CPU (this
    # host's kernel keeps scheduler statistics, so every one is reported); the candidate's never
    waits = bench["baseline_waited_s"]
    assert len(waits) == 3 and all(isinstance(w, float) and 0.0 <= w < 60.0 for w in waits), waits
    assert not any("waited" in key and key != "baseline_waited_s" for key in bench)
    # one launch per case: parity once, then warm-up and timed calls each run the corpus
    assert execution == _execution(len(CASES) * (1 + 1 + 3), 0, observed)
    assert seen[-1] == (len(CASES) + 2 * (1 + 3),) * 2 and len(seen) == seen[-1][1]
    json.dumps(items, allow_nan=False)  # evidence is plain JSON


def test_tolerance_policy_records_the_declared_tolerance_on_every_leaf():
    items = evaluate_kernel("gated_residual_layernorm", "registry.kernels.gated:gated_residual_layernorm_triton",
                            corpus="cpu", runs=2, warmup=0, policy="tolerance", tolerances_by_dtype=TOLERANCES)
    parity = items[0]
    assert "approx_math" not in parity
    assert [leaf["name"] for leaf in parity["leaves"]][:2] == ["shape0.n", "shape0.u"]
    for leaf, case in zip(parity["leaves"][::2], CASES):
        assert leaf["tolerance"] == TOLERANCES[case.dtype] and leaf["outside_tolerance"] == 0


def test_tolerance_policy_missing_a_dtype_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="no tolerance declared for dtype float16"):
        _evaluate("registry.kernels.modln:modulated_layernorm_triton", policy="tolerance",
                  tolerances_by_dtype={"bfloat16": TOLERANCES["bfloat16"]})


@pytest.mark.parametrize("overrides,message", [
    ({"runs": 0}, "pairs must be a positive integer"),
    ({"warmup": -1}, "warmup must be a non-negative integer"),
    ({"policy": "roughly"}, "unknown parity policy"),
    ({"corpus": "gpu"}, "gpu corpus is not run under TRITON_INTERPRET=1"),
    ({"op": "softmax"}, "unknown operation 'softmax'"),
])
def test_caller_mistakes_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        _evaluate("registry.kernels.modln:modulated_layernorm_triton", **overrides)


def test_unimportable_entry_is_a_load_failure():
    items = _evaluate("registry.no_such_module:fused")
    assert len(items) == 1 and items[0]["kind"] == "failure" and items[0]["stage"] == "load"
    assert items[0]["error"].startswith("EntryError: entry 'registry.no_such_module:fused': cannot import")


def test_candidate_that_raises_is_a_parity_failure(candidates):
    assert _evaluate(candidates("raising")) == [
        {"kind": "failure", "stage": "parity", "error": "RuntimeError: kernel exploded"}]


def test_candidate_that_dies_while_timed_is_a_benchmark_failure_with_nothing_else(candidates):
    assert _evaluate(candidates("dies_when_timed")) == [
        {"kind": "failure", "stage": "benchmark", "error": "MemoryError: out of memory at call 5"}]


def test_candidate_that_writes_to_its_input_is_a_parity_failure(candidates):
    items = _evaluate(candidates("writes_its_input"))
    assert items == [{"kind": "failure", "stage": "parity",
                      "error": "ValueError: candidate wrote to its input 1 on shape0"}]


def test_fallback_is_counted_and_no_launch_is_credited(candidates):
    observed = {}
    parity, _, execution = _evaluate(candidates("falls_back"), observed=observed)
    assert all(leaf["byte_equal"] for leaf in parity["leaves"])  # the eager op matches itself...
    assert execution == _execution(0, len(CASES) * (1 + 1 + 2), observed)


def test_approximate_math_in_the_candidate_source_is_recorded(candidates):
    parity = _evaluate(candidates("fast_but_approximate"))[0]
    assert parity["approx_math"] == ["__expf"]


def test_evidence_document_wraps_items():
    items = [{"kind": "execution", "candidate_calls": 3, "fallbacks": 0}]
    assert evidence_document("modln-v1", items, run="r1") == {
        "format": "registry.evidence/1", "artifact": "modln-v1", "run": "r1", "evidence": items}
    assert "run" not in evidence_document("modln-v1", items)
    with pytest.raises(ValueError, match="artifact must be a non-empty string"):
        evidence_document(" ", items)
    with pytest.raises(ValueError, match="needs at least one item"):
        evidence_document("modln-v1", [])
    with pytest.raises(ValueError, match="item 0 is not a mapping with a 'kind'"):
        evidence_document("modln-v1", [{"candidate_calls": 1}])


class ScriptedBatches:
    """A benchmark session that asks for the batch sizes it is given (the registry's is tested end to end in
    tests/cli/test_cli_evaluate.py); it keeps what it was handed."""

    def __init__(self, sizes):
        self.sizes, self.opened, self.batches = list(sizes), None, []

    def __call__(self, timer, device, arch=None):
        self.opened = (timer, device)
        return self

    def next_size(self):
        return self.sizes.pop(0) if self.sizes else 0

    def add(self, baseline, candidate):
        self.batches.append((list(baseline), list(candidate)))


def test_batches_go_to_the_session_until_it_asks_for_none():
    session = ScriptedBatches([2, 1])
    observed = {}
    items = _evaluate("registry.kernels.modln:modulated_layernorm_triton", runs=3, open_batches=session,
                      observed=observed)
    assert [i["kind"] for i in items] == ["parity", "execution"]  # the session holds the timings
    assert session.opened == ("interpreter", "cpu (triton interpreter)")
    assert [(len(b), len(c)) for b, c in session.batches] == [(2, 2), (1, 1)]
    assert all(t > 0 for b, c in session.batches for t in b + c)
    # parity once, one warm-up pair (first batch only), then three timed pairs
    assert items[1] == _execution(len(CASES) * (1 + 1 + 3), 0, observed)


def test_a_refused_session_is_raised_not_recorded_as_a_failure():
    from registry.formats.errors import UserError

    def refuse(timer, device, arch=None):
        raise UserError("the benchmark record of modln is closed")

    with pytest.raises(UserError, match="is closed"):
        _evaluate("registry.kernels.modln:modulated_layernorm_triton", open_batches=refuse)
