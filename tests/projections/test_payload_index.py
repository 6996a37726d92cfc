"""The payload index behind promote's attempt count (projections/read_models/payload_index.py, docs/gate.md "Attempts").

`promote` counts the benchmark attempts of an artifact's bytes over the
artifacts of its workload that ever registered them, read through
`projection_payloads`, instead of over every artifact of the workload. The
count must be exactly the one the whole workload gives, after any sequence of
registrations, re-registrations (new bytes, the same bytes again, another
artifact's bytes) and benchmarks, scoped to the current identity, to a
set-aside one, or to no identity (events written before identities were);
with catch-ups at any point between them, so the incremental writes are
checked as well as the rebuild. The logs are real SQLite files (a
hypothesis search) and a real Postgres server (a scripted sequence).
"""
from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy import select

from registry.app.decisions import payload_attempts
from registry.events.identity import artifact_identity
from registry.events.store import EventStore, NewEvent
from read_side import Reads
from registry.projections import verify_projections
from registry.projections.read_models.payload_index import PAYLOADS
from store_helpers import opened_store, raw
from scripted_history import benchmark

ARTIFACTS = ("a", "b", "c")
WORKLOADS = ("w1", "w2")
PAYLOADS_SHA = ("1" * 64, "2" * 64, "3" * 64, None)
# What the store takes (a str) but the app never registers: longer than a digest, or a digest's other spelling.
ODD_PAYLOADS = ("not a digest " * 40, "1" * 63, "A" * 64)
BACKENDS = ("SAGE", "FA3")
ITEM = benchmark(1.2)


class Log:
    """Appends registrations and benchmarks the way the fold reads them, and remembers each artifact's identities."""

    def __init__(self, store: EventStore):
        self.store = store
        self.identities: dict[str, list[str]] = {}  # artifact -> identities registered, in order
        self.current: dict[str, dict] = {}

    def register(self, artifact: str, workload: str, payload: str | None, backend: str) -> None:
        registration = {"artifact": artifact, "kind": "attention_backend", "workload": workload,
                        "payload_sha256": payload, "backend": backend, "op": None, "entry": None}
        self.store.append(f"artifact:{artifact}", [NewEvent("ArtifactRegistered", registration)], actor="test")
        self.identities.setdefault(artifact, []).append(artifact_identity(registration))
        self.current[artifact] = registration

    def bench(self, artifact: str, scope: str, pick: int) -> None:
        """A benchmark of the current identity, of one registered before (`earlier`), or naming no identity."""
        if artifact not in self.current:
            return
        payload = {"artifact": artifact, "payload_sha256": self.current[artifact]["payload_sha256"], "item": ITEM}
        if scope == "current":
            payload["identity"] = self.identities[artifact][-1]
        elif scope == "earlier":
            earlier = self.identities[artifact]
            payload["identity"] = earlier[pick % len(earlier)]
        self.store.append(f"artifact:{artifact}", [NewEvent("BenchmarkMeasured", payload)], actor="test")


def assert_indexed_counts_equal_whole_workload_counts(store: EventStore) -> None:
    """For every artifact: the index's answer gives the same count as the whole workload, and the index
    holds every artifact that adds to it; the live table equals a fresh fold's."""
    projections = Reads(store)
    for state in projections.artifacts():
        workload = projections.artifacts(workload=state["workload"])
        payload = state["payload_sha256"]
        sharing = [] if payload is None else projections.artifacts_sharing_payload(state["workload"], payload)
        assert payload_attempts(state, sharing) == payload_attempts(state, workload)
        names = [other["artifact"] for other in sharing]
        assert names == sorted(names) and {*names} <= {other["artifact"] for other in workload}
        if payload is not None:
            assert state["artifact"] in names
    report = verify_projections(store)
    assert report.ok, report.summary()


operations = st.lists(st.one_of(
    st.tuples(st.just("register"), st.sampled_from(ARTIFACTS), st.sampled_from(WORKLOADS),
              st.sampled_from((*PAYLOADS_SHA, *ODD_PAYLOADS)), st.sampled_from(BACKENDS)),
    st.tuples(st.just("bench"), st.sampled_from(ARTIFACTS), st.sampled_from(("current", "earlier", "none")),
              st.integers(0, 5)),
    st.tuples(st.just("catch_up")),
), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(operations)
def test_the_indexed_count_equals_the_whole_workload_count_on_sqlite(sqlite_template, steps):
    """Any registration, re-registration and benchmark sequence; a registration may even move an artifact to
    another workload, or register a value that is not a digest (the app refuses both, a log written by other
    means may hold them): the rows move with the artifact, and equal values still find each other."""
    with tempfile.TemporaryDirectory(prefix="payload-index-") as folder:
        shutil.copyfile(sqlite_template, f"{folder}/registry.db")  # a copy of the migrated template: no migration
        store = opened_store(f"sqlite:///{folder}/registry.db")
        try:
            log = Log(store)
            for step in steps:
                if step[0] == "register":
                    log.register(*step[1:])
                elif step[0] == "bench":
                    log.bench(*step[1:])
                else:
                    assert_indexed_counts_equal_whole_workload_counts(store)
            assert_indexed_counts_equal_whole_workload_counts(store)
            Reads(store).reset()
            assert_indexed_counts_equal_whole_workload_counts(store)
        finally:
            store.close()  # the store's append connection, then the pool's: nothing stays open per example
            store.engine.dispose()


def scripted(log: Log) -> None:
    """Two artifacts share bytes X; one moves to Y and back; a late result lands on its set-aside identity."""
    x, y = PAYLOADS_SHA[0], PAYLOADS_SHA[1]
    log.register("a", "w1", x, "SAGE")
    log.bench("a", "current", 0)
    log.register("b", "w1", x, "FA3")
    log.bench("b", "current", 0)
    log.register("c", "w1", y, "SAGE")
    log.bench("c", "none", 0)


@pytest.fixture
def store(migrated_backend_url):
    store = opened_store(migrated_backend_url)
    yield store
    store.close()
    store.engine.dispose()


def index_rows(store: EventStore) -> list[tuple[str, str, str]]:
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(
            select(PAYLOADS.c.workload, PAYLOADS.c.payload_sha256, PAYLOADS.c.artifact)
            .order_by(PAYLOADS.c.workload, PAYLOADS.c.payload_sha256, PAYLOADS.c.artifact))]


def test_a_scripted_sequence_on_each_backend(store):
    x, y = PAYLOADS_SHA[0], PAYLOADS_SHA[1]
    log = Log(store)
    scripted(log)
    assert_indexed_counts_equal_whole_workload_counts(store)
    assert index_rows(store) == [("w1", x, "a"), ("w1", x, "b"), ("w1", y, "c")]
    log.register("a", "w1", y, "SAGE")  # a moves to Y: its X history is set aside, its X row stays
    log.bench("a", "current", 0)
    log.bench("a", "earlier", 0)  # a late result for a's set-aside X identity
    assert_indexed_counts_equal_whole_workload_counts(store)
    projections = Reads(store)
    assert [s["artifact"] for s in projections.artifacts_sharing_payload("w1", x)] == ["a", "b"]
    assert [s["artifact"] for s in projections.artifacts_sharing_payload("w1", y)] == ["a", "c"]
    b = projections.current_artifact("b")
    assert payload_attempts(b, projections.artifacts_sharing_payload("w1", x)) == 3  # a's two on X, b's one
    log.register("a", "w1", x, "SAGE")  # back to X: the same rows, nothing added
    assert_indexed_counts_equal_whole_workload_counts(store)
    assert index_rows(store) == [("w1", x, "a"), ("w1", x, "b"), ("w1", y, "a"), ("w1", y, "c")]
    assert projections.artifacts_sharing_payload("w2", x) == []
    assert projections.artifacts_sharing_payload("w1", "9" * 64) == []


def test_an_artifact_moved_to_another_workload_takes_its_rows_along(store):
    """A log written by other means may move an artifact to another workload; the index follows its state."""
    x = PAYLOADS_SHA[0]
    log = Log(store)
    scripted(log)
    Reads(store).catch_up()
    log.register("b", "w2", x, "FA3")
    assert_indexed_counts_equal_whole_workload_counts(store)
    assert [row for row in index_rows(store) if row[2] == "b"] == [("w2", x, "b")]


def test_verify_names_a_missing_or_stray_index_row_and_reset_rebuilds_it(store):
    x = PAYLOADS_SHA[0]
    scripted(Log(store))
    report = verify_projections(store)
    assert report.ok and report.payloads_checked == 3
    raw(store.engine, "DELETE FROM projection_payloads WHERE artifact = 'b'",
        f"INSERT INTO projection_payloads (workload, payload_sha256, artifact) VALUES ('w2', '{x}', 'c')")
    report = verify_projections(store)
    assert [(d.model, d.key, d.problem) for d in report.differences] == [
        ("payloads", f"w1/{x}/b", "missing from the live table"),
        ("payloads", f"w2/{x}/c", "not in the replay"),
    ]
    assert f"payload w1/{x}/b: missing from the live table" in report.summary()
    Reads(store).reset()
    assert verify_projections(store).ok
    assert len(index_rows(store)) == 3


def test_a_registered_value_that_is_not_a_digest_neither_stops_the_catch_up_nor_hides_an_attempt(store):
    """Longer than any digest: keyed by a digest of it, so the catch-up writes it on either backend."""
    odd = ODD_PAYLOADS[0]
    log = Log(store)
    log.register("a", "w1", odd, "SAGE")
    log.bench("a", "current", 0)
    log.register("b", "w1", odd, "FA3")
    log.register("c", "w1", "A" * 64, "SAGE")
    log.bench("c", "current", 0)
    assert_indexed_counts_equal_whole_workload_counts(store)
    projections = Reads(store)
    b = projections.current_artifact("b")
    assert payload_attempts(b, projections.artifacts_sharing_payload("w1", odd)) == 1
    assert [s["artifact"] for s in projections.artifacts_sharing_payload("w1", "A" * 64)] == ["c"]
    assert all(len(row[1]) == 64 for row in index_rows(store))
