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
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from read_side import Reads
from registry.projections import rebuild
from registry.projections.asof import fold_log
from registry.projections.read_models import (
    ArtifactState, IdentityScope,
)
from registry.projections.snapshot import snapshot
from registry.projections.whole_registry import read_live
from registry.projections.read_models.artifacts import IDENTITY_SCOPED, new_artifact
from store_helpers import opened_store

from state_shapes import ARTIFACTS, STORED, Log, registry_shape_problems, shape_problems, steps


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
