"""The declared shape of every folded state, checked recursively; and generated logs to fold.

`registry_shape_problems` names every key a state holds that its TypedDict in registry/projections/read_models/
does not declare, every declared key it lacks, and every value not of its declared type (through nested
TypedDicts, lists and dicts, read by typing.get_type_hints). `Log` appends the events a generated step stands
for, each in its subject's stream, as the app would write them; `steps` generates those steps. The read models'
shape test and the lifecycle state machine use both; `show`'s tests use `Log`.
"""
from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union

from hypothesis import strategies as st

from registry.events.identity import artifact_identity
from registry.events.store import NewEvent
from registry.gate.model import Margin as GateMargin
from registry.gate.model import Verdict
from read_side import Reads
from registry.projections import RegistryState
from registry.projections.read_models import (
    ArtifactState, AttachedEvidence, BenchStreamState, EvidenceEntry, FrameSetState, OutcomesState,
    SpeedRecordState, WorkloadState,
)

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
