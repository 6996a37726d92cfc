"""Every folded state has exactly the shape the declarations in registry/projections/read_models/ declare.

The read models are dicts (docs/projections.md, "Why the read models are
declared dicts"), so nothing at run time stops the fold from adding a key or
changing a value's type; this test does. It folds generated logs (every event
type the fold places, identities that change and return, evidence and
verdicts for set-aside and pre-identity claims, revokes, imported outcomes
with and without an artifact) and checks each artifact, workload, frame set
and outcomes state, from a replay and from the live read models caught up at
random points, against its TypedDict: the declared keys and no other, each
value of its declared type, recursively through nested TypedDicts, lists and
dicts (read through typing.get_type_hints). The lifecycle state machine
(test_lifecycle_stateful.py) holds its CLI-made states to the same check.
"""
from __future__ import annotations

import shutil
import types
import typing
from typing import Any, Literal, Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.events.identity import artifact_identity
from registry.events.store import NewEvent
from registry.gate.model import Margin as GateMargin
from registry.gate.model import Verdict
from read_side import Reads
from registry.projections import RegistryState, rebuild
from registry.projections.asof import fold_log
from registry.projections.read_models import (
    ArtifactState, AttachedEvidence, BenchStreamState, EvidenceEntry, FrameSetState, IdentityScope, OutcomesState,
    SpeedRecordState, WorkloadState,
)
from registry.projections.snapshot import snapshot
from registry.projections.whole_registry import read_live
from registry.projections.read_models.artifacts import IDENTITY_SCOPED, new_artifact
from store_helpers import opened_store

MODEL_TYPES = {"artifacts": ArtifactState, "workloads": WorkloadState, "framesets": FrameSetState,
               "outcomes": OutcomesState, "bench_streams": BenchStreamState, "records": SpeedRecordState}


# The stored form (the fold, a row): evidence entries reference their event and hold no item.
STORED = {AttachedEvidence: EvidenceEntry}


def shape_problems(value: Any, hint: Any, path: str = "state", instead: dict | None = None) -> list[str]:
    """Where `value` departs from the type `hint` (empty when it conforms); an unknown kind of hint is a defect.

    `instead` maps a declared type to the one expected in its place (STORED: the form a row holds)."""
    hint = (instead or {}).get(hint, hint)
    if hint is Any:
        return []
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        hints = typing.get_type_hints(hint)
        problems = [f"{path}.{key}: a key {hint.__name__} does not declare" for key in sorted(set(value) - set(hints))]
        problems += [f"{path}.{key}: missing" for key in sorted(hint.__required_keys__ - set(value))]
        for key in sorted(set(value) & set(hints)):
            problems += shape_problems(value[key], hints[key], f"{path}.{key}", instead)
        return problems
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        arms = [shape_problems(value, arm, path, instead) for arm in args]
        return [] if any(not found for found in arms) else [f"{path}: {value!r:.80} is none of {hint}"]
    if origin is Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, not a list"]
        return [problem for index, item in enumerate(value)
                for problem in shape_problems(item, args[0], f"{path}[{index}]", instead)]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        return [problem for key, item in value.items()
                for problem in shape_problems(key, args[0], f"{path} key", instead)
                + shape_problems(item, args[1], f"{path}[{key!r}]", instead)]
    if hint is type(None):
        return [] if value is None else [f"{path}: {value!r:.80} is not null"]
    if hint is float:  # a JSON number: an integer is a float's value too (PEP 484), a bool is not
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r:.80} is not a number"]
    if hint in (int, str, bool):
        ok = isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
        return [] if ok else [f"{path}: {value!r:.80} is not {hint.__name__}"]
    raise AssertionError(f"{path}: the shape check does not know the type {hint!r}: teach it before declaring one")


def registry_shape_problems(state: RegistryState, instead: dict | None = None) -> list[str]:
    return [problem for model, declared in MODEL_TYPES.items()
            for key, value in getattr(state, model).items()
            for problem in shape_problems(value, declared, f"{model}[{key!r}]", instead)]


# -- the check itself can fail ----------------------------------------------------

def a_state() -> ArtifactState:
    registration = {"artifact": "a", "kind": "fused_kernel", "workload": "w", "payload_sha256": "ab" * 32}
    return new_artifact(registration, 1)


def test_a_fresh_artifact_has_its_declared_shape():
    assert shape_problems(a_state(), ArtifactState) == []


@pytest.mark.parametrize("spoil, expected", [
    (lambda s: s.update(added=1), "state.added: a key ArtifactState does not declare"),
    (lambda s: s.pop("stream_version"), "state.stream_version: missing"),
    (lambda s: s.update(stream_version=True), "state.stream_version: True is not int"),
    (lambda s: s.update(speedup="1.3"), "state.speedup: '1.3' is none of"),
    (lambda s: s["evidence_counts"].update(parity=None), "state.evidence_counts['parity']: None is not int"),
    (lambda s: s.update(open_failures=[{"event_id": "e", "position": 1, "stage": "load"}]),
     "state.open_failures[0].error: missing"),
    (lambda s: s.update(human={"action": "veto", "person": "p", "reason": "r", "event_id": "e", "position": 2,
                               "verdict_event_id": None}), "state.human: "),
    (lambda s: s["earlier_identities"].update(x={**{k: s[k] for k in IDENTITY_SCOPED}, "payload_sha256": 5}),
     "state.earlier_identities['x'].payload_sha256: 5 is none of"),
])
def test_the_shape_check_names_a_key_or_a_value_the_declaration_does_not_allow(spoil, expected):
    state = a_state()
    spoil(state)
    problems = shape_problems(state, ArtifactState)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_an_evidence_entry_holds_its_item_when_answered_and_only_its_reference_when_stored():
    state = a_state()
    state["evidence"]["parity"] = {"event_id": "e", "position": 2}
    assert shape_problems(state, ArtifactState, instead=STORED) == []
    assert shape_problems(state, ArtifactState) == ["state.evidence['parity'].item: missing",
                                                    "state.evidence['parity'].measured_at: missing"]
    state["evidence"]["parity"].update(item={"kind": "parity"}, measured_at="2026-12-01T17:00:00.000000Z")
    assert shape_problems(state, ArtifactState) == []
    assert shape_problems(state, ArtifactState, instead=STORED) == [
        "state.evidence['parity'].item: a key EvidenceEntry does not declare",
        "state.evidence['parity'].measured_at: a key EvidenceEntry does not declare"]


def test_the_identity_scoped_fields_are_the_declared_scope():
    """set_aside and take_up move exactly the fields IdentityScope declares."""
    assert IDENTITY_SCOPED == tuple(typing.get_type_hints(IdentityScope))


# -- generated logs -----------------------------------------------------------------

ARTIFACTS = ("a", "b")
DIGESTS = ("11" * 32, "22" * 32)
BACKENDS = ("SAGE_ATTN", "FLASH_ATTN")
KINDS = ("parity", "benchmark", "execution", "perceptual")
EVIDENCE_TYPE = {"parity": "ParityMeasured", "benchmark": "BenchmarkMeasured", "execution": "ExecutionObserved",
                 "perceptual": "PerceptualMeasured"}
SCOPES = ("current", "earlier", "none")  # the identity an event names: now, set aside, or none (older logs)

artifacts = st.sampled_from(ARTIFACTS)
scopes = st.sampled_from(SCOPES)
steps = st.one_of(
    st.tuples(st.just("register"), artifacts, st.integers(0, 1), st.integers(0, 1)),
    st.tuples(st.just("evidence"), artifacts, st.sampled_from(KINDS), scopes, st.booleans()),
    st.tuples(st.just("fail"), artifacts, st.sampled_from(("load", "parity", "perceptual", "custom")), scopes),
    st.tuples(st.just("verdict"), artifacts, st.sampled_from(("promoted", "held", "rejected")), scopes,
              st.booleans()),
    st.tuples(st.just("human"), artifacts, st.sampled_from(("approve", "revoke")), scopes),
    st.tuples(st.just("outcome"), st.none() | artifacts, st.sampled_from((None, "promoted", "held"))),
    st.tuples(st.just("frameset"), st.sampled_from(("f", "g"))),
    st.tuples(st.just("declare")),
    st.tuples(st.just("catch_up")),
)


class Log:
    """Appends the events a step stands for, each in its subject's stream, as the app would write them."""

    def __init__(self, store):
        self.store, self.registrations, self.contract_version = store, {}, 0
        self.declare()
        for name in ARTIFACTS:
            self.register(name, 0, 0)

    def append(self, stream: str, event_type: str, payload: dict) -> None:
        self.store.append(stream, [NewEvent(event_type, payload)], actor="test")

    def declare(self) -> None:
        self.contract_version += 1
        self.append("workload:w", "WorkloadDeclared", {"workload": "w", "contract_version": self.contract_version,
                                                       "contract_hash": f"{self.contract_version:064x}",
                                                       "contract": {"workload": "w"}})

    def register(self, name: str, payload: int, backend: int) -> None:
        registration = {"artifact": name, "kind": "attention_backend", "workload": "w",
                        "payload_sha256": DIGESTS[payload], "backend": BACKENDS[backend]}
        self.registrations.setdefault(name, []).append(registration)
        self.append(f"artifact:{name}", "ArtifactRegistered", registration)

    def scoped(self, name: str, scope: str) -> dict:
        """The identity and payload fields of an event about `name`'s current, an earlier, or no identity."""
        registrations = self.registrations[name]
        chosen = registrations[0] if scope == "earlier" else registrations[-1]
        fields = {"artifact": name, "payload_sha256": chosen["payload_sha256"]}
        if scope != "none":
            fields["identity"] = artifact_identity(chosen)
        return fields

    def step(self, step: tuple) -> None:
        action, *args = step
        if action == "register":
            self.register(*args)
        elif action == "evidence":
            name, kind, scope, ok = args
            item = {"kind": kind, **({"stage_status": "ok" if ok else "failed"} if kind == "perceptual" else {})}
            self.append(f"artifact:{name}", EVIDENCE_TYPE[kind], {**self.scoped(name, scope), "item": item})
        elif action == "fail":
            name, stage, scope = args
            self.append(f"artifact:{name}", "EvaluationFailed",
                        {**self.scoped(name, scope), "stage": stage, "error": "it broke"})
        elif action == "verdict":
            name, decision, scope, with_margins = args
            margins = [GateMargin("ssim", 0.99, 0.98, 0.01, True), GateMargin("speedup", 1.2, 1.3, -0.1, False)]
            verdict = Verdict(decision, "perceptual", ["a reason"], margins if with_margins else [],
                              1.2 if with_margins else None, (1.1, 1.3) if with_margins else None, "speed", ["e1"])
            self.append(f"artifact:{name}", "VerdictRendered", {
                **self.scoped(name, scope), "workload": "w", "contract_version": self.contract_version,
                "contract_hash": f"{self.contract_version:064x}", "gate_version": verdict.gate_version,
                "verdict": verdict.to_dict(), "benchmark_attempts": 2 if with_margins else None})
        elif action == "human":
            name, what, scope = args
            self.append(f"artifact:{name}", "HumanDecision",
                        {**self.scoped(name, scope), "action": what, "reason": "looked", "person": "ana"})
        elif action == "outcome":
            name, outcome = args
            self.append(f"artifact:{name}" if name else "outcomes:w", "ExternalOutcome", {
                "workload": "w", "artifact": name, "arch": "sm90", "outcome": outcome,
                "summary": {"runs": 3}, "origin": {"path": "results/run.json", "document_time": None}})
        elif action == "frameset":
            self.append(f"frameset:{args[0]}", "FrameSetRegistered", {
                "name": args[0], "seed": 1, "frames": 2, "height": 16, "width": 16, "channels": 3,
                "dtype": "uint8", "sha256": "ab" * 32})
        elif action == "declare":
            self.declare()
        else:
            Reads(self.store).catch_up()  # a live fold that later events continue from loaded rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(steps, max_size=25))
def test_every_state_folded_from_a_generated_log_has_its_declared_shape(tmp_path_factory, sqlite_template, generated):
    path = tmp_path_factory.mktemp("shapes") / "registry.db"
    shutil.copyfile(sqlite_template, path)  # each example on a copy of the migrated template, not a migration
    store = opened_store(f"sqlite:///{path}")
    try:
        log = Log(store)
        for step in generated:
            log.step(step)
        assert registry_shape_problems(rebuild(store)) == []
        assert registry_shape_problems(fold_log(store, store.head_position()), STORED) == []
        projections = Reads(store)
        assert registry_shape_problems(projections.state()) == []
        for name in ARTIFACTS:
            current = projections.current_artifact(name)
            assert "verdicts" not in current and shape_problems(current, ArtifactState) == []
        with snapshot(store.engine) as conn:
            assert registry_shape_problems(read_live(conn, 0), STORED) == []  # the rows as stored
    finally:
        store.engine.dispose()
