"""Clean evidence around one execution item, and the gate's verdict on it: how the sandbox and launcher tests ask
what the gate makes of an execution item alone (parity byte-equal, a 1.5x paired benchmark, a point contract)."""
from __future__ import annotations

from registry.contracts import Contract
from registry.formats.evidence.items import parse_item
from registry.gate import ArtifactFacts, GateEvidence, Recorded, decide


def decide_execution(execution: dict, facts: ArtifactFacts, *, timer: str = "perf_counter"):
    """The verdict on ``execution`` (an execution item) beside evidence that passes every other gate."""
    leaf = {"name": "shape0.y", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16",
            "reference_shape": [2, 3], "candidate_shape": [2, 3], "reference_strides": [3, 1],
            "candidate_strides": [3, 1], "byte_equal": True, "max_abs_error": 0.0, "max_rel_error": 0.0,
            "has_nan": False, "has_inf": False, "reference_has_nan": False, "reference_has_inf": False,
            "nonfinite_mismatch": False}
    candidate = [1.0 + 0.002 * (i % 4) for i in range(16)]
    items = {
        "execution": execution,
        "parity": {"kind": "parity", "policy": "byte_equal", "leaves": [leaf]},
        "benchmark": {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": timer,
                      "baseline_s": [1.5 * c for c in candidate], "candidate_s": candidate,
                      "schedule": ["BC", "CB"] * 8},
    }
    evidence = GateEvidence(**{kind: Recorded(f"ev-{kind}", parse_item(raw)) for kind, raw in items.items()})
    contract = Contract.from_mapping({"workload": "wan-modln-op", "parity": {"policy": "byte_equal"},
                                      "speed": {"min_speedup": 1.1, "runs_per_arm": 16, "protocol": "paired",
                                                "decision": "point"}})
    return decide(contract, evidence, facts)
