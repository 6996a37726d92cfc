"""A rejection of given bytes is final (docs/gate.md, "Decisions and contract versions"), under `decision: point`
as under the default confident rule: a Hypothesis state machine tries the sequences that could reopen one.

Through the app's use cases on a real SQLite file, each example starts with one bundle's bytes rejected at 1.1x
under a 1.2x gate (point or confident rule); then two bundles' bytes are registered under two artifact ids (with
other backend claims and back), measured slow (1.1x) and fast (1.6x), promoted, revoked, re-judged, and the
workload re-declared: to a trivial variant and straight back to the first content, to a lower gate, to the other
decision rule. After every step in one example, and at the end of each (tests/support/stateful_checks.py):
(a) read from the log itself: once a verdict rejected bytes of the workload, no later verdict of those bytes
    there is promoted;
(b) no artifact the read models hold with those bytes is promoted;
(c) `resolve` ships none of them (nor does any candidate with those bytes come out selectable).
On the code before the rule, a point-rule rejection at 1.1x, a 1.6x document recorded after it, the contract
re-declared to a variant and back, and `rejudge` promoted the bytes and `resolve` shipped them.
40 examples of up to 12 steps, each step a use case on SQLite: about 12 s, the machine's whole point being to try
many sequences (on the code before it finds one within the first few examples).
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from registry.app import open_registry
from registry.app.bundles import register_bundle
from registry.app.decisions import human_decision, promote
from registry.app.evidence import import_document
from registry.app.rejudge import rejudge_workload
from registry.app.resolve import resolve_workload
from registry.app.workloads import declare_workload
from registry.bundles import Profile
from registry.contracts import Contract
from read_side import Reads
from ship_helpers import make_bundle
from stateful_checks import CheckedAtTheEnd, CopiedStart, checked_after_every_step
from store_helpers import opened

ARTIFACTS = ("a", "b")
SOURCES = ("def replacement(x):\n    return ('one', x)\n", "def replacement(x):\n    return ('two', x)\n")
PROFILE = Profile("sm90", "2.13.0", "12.8")
BASE = "workload: w\nparity: {policy: byte_equal}\nfidelity: {tier: exact}\n"
SPEED = {
    "point": "speed: {min_speedup: 1.2, runs_per_arm: 8, protocol: paired, decision: point}\n",
    "point, trivially varied": "speed: {min_speedup: 1.2, runs_per_arm: 8, protocol: paired, decision: point, "
                              "max_cv: 0.5}\n",
    "point, lower gate": "speed: {min_speedup: 1.05, runs_per_arm: 8, protocol: paired, decision: point}\n",
    "confident": "speed: {min_speedup: 1.2, runs_per_arm: 8, protocol: paired, max_pairs: 400}\n",
    "confident, trivially varied": "speed: {min_speedup: 1.2, runs_per_arm: 8, protocol: paired, max_pairs: 399}\n",
    "confident, lower gate": "speed: {min_speedup: 1.05, runs_per_arm: 8, protocol: paired, max_pairs: 400}\n",
}
LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
        "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
        "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False, "nonfinite_mismatch": False}


def document(artifact: str, payload: str, ratio: float, run: int) -> str:
    candidate = [1.0 + 0.01 * (i % 3) for i in range(8)]
    return json.dumps({"format": "registry.evidence/1", "artifact": artifact, "run": f"run-{run}",
                       "payload_sha256": payload, "evidence": [
                           {"kind": "execution", "candidate_calls": 4, "fallbacks": 0},
                           {"kind": "parity", "leaves": [LEAF]},
                           {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
                            "baseline_s": [ratio * c for c in candidate], "candidate_s": candidate,
                            "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(8)]}]})


class FinalRejection(CheckedAtTheEnd):
    START = CopiedStart()  # a registry with the workload declared under both rules' first terms, and the bundles

    @initialize(rule_name=st.sampled_from(("point", "confident")))
    def start(self, rule_name: str) -> None:
        """Every example starts where the report did: bytes rejected at 1.1x under the rule drawn."""
        self.tmp = Path(tempfile.mkdtemp(prefix="final-rejection-"))
        self.__dict__.update(self.START.start(self.tmp, self.start_registry))
        self.registry = open_registry(f"sqlite:///{self.tmp / 'registry.db'}", actor="machine")
        self.runs = 0
        self.declare(rule_name)
        self.register("a", 0, None)
        self.measure("a", 1.1)
        assert promote(self.registry, "a").verdict["decision"] == "rejected"

    def start_registry(self) -> dict:
        with open_registry(f"sqlite:///{self.tmp / 'registry.db'}", actor="machine", create=True):
            pass
        for index, source in enumerate(SOURCES):
            make_bundle(self.tmp / f"bytes-{index}", "bundle", source=source)
        return {}

    def release(self) -> None:
        if getattr(self, "registry", None) is not None:
            self.registry.close()
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    def declare(self, variant: str) -> None:
        declare_workload(self.registry, Contract.from_yaml(BASE + SPEED[variant]))

    def current(self, artifact: str):
        with self.registry.view() as view:
            return view.artifact(artifact)

    # -- rules -------------------------------------------------------------------------------------

    @rule(artifact=st.sampled_from(ARTIFACTS), source=st.sampled_from(range(len(SOURCES))),
          backend=st.sampled_from((None, "ALT")))
    def register(self, artifact: str, source: int, backend: str | None) -> None:
        register_bundle(self.registry, artifact, self.tmp / f"bytes-{source}" / "bundle", workload="w",
                        kind="step_cache", backend=backend)

    @rule(artifact=st.sampled_from(ARTIFACTS), ratio=st.sampled_from((1.1, 1.6)))
    def measure(self, artifact: str, ratio: float) -> None:
        state = self.current(artifact)
        if state is not None:
            self.runs += 1
            import_document(self.registry, document(artifact, state["payload_sha256"], ratio, self.runs))

    @rule(artifact=st.sampled_from(ARTIFACTS))
    def promote(self, artifact: str) -> None:
        if self.current(artifact) is not None:
            promote(self.registry, artifact)

    @rule(variant=st.sampled_from(sorted(SPEED)))
    def redeclare(self, variant: str) -> None:
        self.declare(variant)

    @rule()
    def rejudge(self) -> None:
        rejudge_workload(self.registry, "w")

    @rule(artifact=st.sampled_from(ARTIFACTS))
    def revoke(self, artifact: str) -> None:
        state = self.current(artifact)
        if state is not None and state["decision"] in ("promoted", "rejected"):
            human_decision(self.registry, artifact, "revoke", "machine")

    # -- checks ------------------------------------------------------------------------------------

    def whole_checks(self) -> None:
        rejected: set[str] = set()
        for event in self.registry.store.read_all():
            if event.type != "VerdictRendered":
                continue
            payload, decision = event.payload["payload_sha256"], event.payload["verdict"]["decision"]
            assert not (payload in rejected and decision == "promoted"), (
                f"verdict at {event.position} promoted bytes {payload[:12]} rejected before")
            if decision == "rejected":
                rejected.add(payload)
        for artifact in ARTIFACTS:
            state = self.current(artifact)
            assert state is None or not (state["payload_sha256"] in rejected and state["decision"] == "promoted"), \
                (artifact, state["decision"])
        shipped = resolve_workload(self.registry, "w", PROFILE).resolution.chosen
        if shipped is not None:
            state = self.current(shipped.artifact)
            assert state["payload_sha256"] not in rejected, f"resolve ships {shipped.artifact}, whose bytes were rejected"


FinalRejection.TestCase.settings = settings(max_examples=40, stateful_step_count=12, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestFinalRejection = FinalRejection.TestCase
TestFinalRejectionEveryStep = checked_after_every_step(FinalRejection, FinalRejection.TestCase.settings)


def test_the_reported_sequence_leaves_the_rejection_standing(tmp_path):
    """The sequence from the report, step by step: rejected at 1.1x under the point rule, a 1.6x document recorded
    after it, the contract re-declared to a variant and straight back, rejudged: still rejected, naming the verdict
    that rejected the bytes, and nothing ships."""
    registry = opened(f"sqlite:///{tmp_path / 'r.db'}", actor="t", create=True)
    declare_workload(registry, Contract.from_yaml(BASE + SPEED["point"]))
    bundle = make_bundle(tmp_path / "bytes", "a")
    register_bundle(registry, "a", bundle, workload="w", kind="step_cache")
    payload = Reads(registry.store).current_artifact("a")["payload_sha256"]
    import_document(registry, document("a", payload, 1.1, 1))
    first = promote(registry, "a").verdict
    assert first["decision"] == "rejected"
    import_document(registry, document("a", payload, 1.6, 2))
    declare_workload(registry, Contract.from_yaml(BASE + SPEED["point, trivially varied"]))
    declare_workload(registry, Contract.from_yaml(BASE + SPEED["point"]))
    [(_, outcome)] = rejudge_workload(registry, "w")
    assert (outcome.verdict["decision"], outcome.verdict["rule"]) == ("rejected", "speed.below_gate")
    assert outcome.verdict["reasons"][0].startswith("these bytes were rejected by verdict")
    assert resolve_workload(registry, "w", PROFILE).resolution.chosen is None
    # A new id for the same bytes, or another backend claim, is rejected too; new bytes decide afresh.
    register_bundle(registry, "b", bundle, workload="w", kind="step_cache", backend="ALT")
    import_document(registry, document("b", payload, 1.6, 3))
    assert promote(registry, "b").verdict["decision"] == "rejected"
    other = make_bundle(tmp_path / "other", "c", source="def replacement(x):\n    return ('c', x)\n")
    register_bundle(registry, "c", other, workload="w", kind="step_cache")
    import_document(registry, document("c", Reads(registry.store).current_artifact("c")["payload_sha256"], 1.6, 4))
    assert promote(registry, "c").verdict["decision"] == "promoted"
