"""Projections: the fold, the live read models, time travel and replay verification.

One scripted history (appended with the store, as the application layer
would) covers every rule of the fold: evidence scoped to the current payload,
failures cleared by later evidence, a verdict, a contract change, a revoke
that restarts the evidence scope, an approve, a quarantine and a re-registered
payload. Cases that touch the database run on SQLite and on Postgres.
"""
from __future__ import annotations

import hashlib
import json
import threading
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, insert, select

from registry.events.canonical import canonical_json
from registry.events.catalogue import SCHEMA_VERSIONS
from registry.events.errors import StoreError
from registry.events.store import EVENTS, EventStore
from registry.events.types import UPCASTERS
from read_side import Reads
from registry.projections import (
    ProjectionError,
    RegistryState,
    apply,
    rebuild,
    resolve_as_of,
    verify_projections,
)
from registry.events.chain import timestamp_text
from registry.projections.items import attach_items
from registry.projections.record_items import attach_state_documents
from registry.projections.record_readings import keep_readings
from registry.projections.log import artifact_of, chain_time, identity_of, scope_of
from registry.events.canonical import canonical_json as state_text
from registry.projections.read_models import CHECKPOINT
from registry.projections.read_models.artifacts import ARTIFACTS

from store_helpers import raw

from scripted_history import SHA_CACHE, SHA_FA3, SHA_RMS, SHA_RMS_2, SHA_SAGE, WAN_V1, WAN_V2, History, execution, open_store
from scripted_history import history, history_url, store  # noqa: F401 - the fixtures


def checkpoint(store: EventStore) -> int | None:
    with store.engine.connect() as conn:
        return conn.execute(select(CHECKPOINT.c.position)).scalar()


def artifact_rows(store: EventStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(ARTIFACTS)).scalar()


# -- the fold, through the live read models ---------------------------------------------------

def test_projections_after_catch_up(store, history):
    h = history
    projections = Reads(store)
    assert projections.catch_up() == h.at["rms_reg_2"] == store.head_position()

    sage = projections.artifact("sage-attn")
    assert sage["decision"] == "held" and sage["decided_by"] == "human"
    assert sage["human"] == {"action": "revoke", "person": "Ada Lovelace", "reason": "scripted revoke",
                             "event_id": h.event_id("sage_revoke"), "position": h.at["sage_revoke"],
                             "verdict_event_id": None}
    # the revoke restarted the evidence scope: only the execution after it counts
    assert set(sage["evidence"]) == {"execution"}
    assert sage["evidence"]["execution"]["position"] == h.at["sage_exec_2"]
    assert sage["evidence"]["execution"]["item"]["candidate_calls"] == 64
    assert sage["evidence_counts"] == {"parity": 0, "benchmark": 0, "execution": 1, "perceptual": 0}
    assert sage["open_failures"] == []
    # the latest verdict is still on record, with its margins
    assert sage["verdict_position"] == h.at["sage_verdict"] and sage["verdict"]["decision"] == "promoted"
    assert sage["tier"] == "perceptual" and sage["rule"] == "speed.passed"
    assert (sage["contract_version"], sage["contract_hash"]) == (1, f"{1:064x}")
    assert sage["tightest_margin"]["metric"] == "ssim"  # 0.005/0.97 is tighter than lpips 0.004/0.05
    assert sage["speedup"] == 1.45 and sage["speedup_ci"] == [1.4065, 1.4935]
    assert [v["decision"] for v in sage["verdicts"]] == ["promoted"]
    assert sage["last_position"] == h.at["sage_stray"]
    assert (sage["kind"], sage["backend"], sage["payload_sha256"]) == ("attention_backend", "SAGE", SHA_SAGE)

    rms = projections.artifact("rms-fused")
    assert rms["decision"] == "registered" and rms["decided_by"] is None and rms["verdict"] is None
    assert rms["payload_sha256"] == SHA_RMS_2 and rms["registered_position"] == h.at["rms_reg_2"]
    assert rms["evidence"] == {} and rms["tightest_margin"] is None and rms["contract_hash"] is None
    assert [(v["decision"], v["payload_sha256"]) for v in rms["verdicts"]] == [("rejected", SHA_RMS)]

    cache = projections.artifact("step-cache")
    assert (cache["decision"], cache["decided_by"], cache["tier"]) == ("promoted", "human", "advisory")
    fa3 = projections.artifact("fa3-approx")
    assert (fa3["decision"], fa3["rule"], fa3["contract_version"]) == ("quarantined", "fidelity.failed", 2)
    assert fa3["tightest_margin"]["margin"] == pytest.approx(-0.03)
    assert projections.artifact("no-such-artifact") is None

    assert [a["artifact"] for a in projections.artifacts()] == ["fa3-approx", "rms-fused", "sage-attn", "step-cache"]
    assert [a["artifact"] for a in projections.artifacts(workload="wan-t2v")] == ["fa3-approx", "sage-attn"]

    wan = projections.workload("wan-t2v")
    assert (wan["contract_version"], wan["contract"]) == (2, WAN_V2)
    assert wan["versions"] == [
        {"version": 1, "hash": f"{1:064x}", "position": h.at["wan_v1"], "speed": WAN_V1["speed"]},
        {"version": 2, "hash": f"{2:064x}", "position": h.at["wan_v2"], "speed": WAN_V2["speed"]}]
    assert [w["workload"] for w in projections.workloads()] == ["cosmos", "ltx-video", "wan-t2v"]
    frames = projections.frameset("wan-fs8")
    assert frames["sha256"] == "e6" * 32 and frames["position"] == h.at["frameset"]


def test_failures_stay_open_until_later_evidence(store, history):
    h = history
    at_failure = Reads(store).artifact("sage-attn", as_of=h.at["sage_fail"])
    assert at_failure["open_failures"] == [{"event_id": h.event_id("sage_fail"), "position": h.at["sage_fail"],
                                            "stage": "perceptual", "error": "LPIPS backend absent"}]
    assert at_failure["decision"] == "registered"
    after = Reads(store).artifact("sage-attn", as_of=h.at["sage_perc"])
    assert after["open_failures"] == [] and after["evidence_counts"]["perceptual"] == 1


def test_catch_up_is_incremental(store, history):
    projections = Reads(store)
    projections.catch_up()
    before = projections.artifact("fa3-approx")
    history.human("fa3_approve", "fa3-approx", SHA_FA3, "approve")
    after = projections.artifact("fa3-approx")  # the read catches up first
    assert checkpoint(store) == history.at["fa3_approve"]
    assert before["decision"] == "quarantined" and after["decision"] == "promoted"
    assert after["verdict"] == before["verdict"]
    assert projections.artifact("sage-attn")["decision"] == "held"


# -- time travel --------------------------------------------------------------------------------

def test_as_of_positions(store, history):
    h = history
    projections = Reads(store)
    assert projections.artifact("sage-attn", as_of=h.at["sage_reg"] - 1) is None
    registered = projections.artifact("sage-attn", as_of=h.at["sage_reg"])
    assert registered["decision"] == "registered" and registered["evidence_counts"]["execution"] == 0

    promoted = projections.artifact("sage-attn", as_of=h.at["sage_verdict"])
    assert (promoted["decision"], promoted["decided_by"]) == ("promoted", "gate")
    assert set(promoted["evidence"]) == {"execution", "perceptual", "benchmark"}
    assert promoted["evidence"]["benchmark"]["item"]["derived"]["speedup"] == pytest.approx(1.45)

    rejected = projections.artifact("rms-fused", as_of=h.at["rms_verdict"])
    assert rejected["decision"] == "rejected" and rejected["evidence_counts"]["benchmark"] == 2
    assert rejected["evidence"]["benchmark"]["event_id"] == h.event_id("rms_bench_2")

    assert projections.workload("wan-t2v", as_of=h.at["wan_v2"] - 1)["contract"] == WAN_V1
    assert projections.workload("wan-t2v", as_of=h.at["wan_v2"])["contract_version"] == 2
    assert [w["workload"] for w in projections.workloads(as_of=h.at["ltx"])] == ["ltx-video", "wan-t2v"]
    assert projections.frameset("wan-fs8", as_of=0) is None
    assert [a["artifact"] for a in projections.artifacts(workload="wan-t2v", as_of=h.at["fa3_reg"] - 1)] == ["sage-attn"]

    state = projections.state(as_of=h.at["cache_verdict"])
    assert state.position == h.at["cache_verdict"]
    assert state.artifacts["step-cache"]["decision"] == "recorded"
    assert "fa3-approx" not in state.artifacts


def test_as_of_by_iso_time(store, history):
    h = history
    assert resolve_as_of(store, h.times["after_failure"].isoformat()) == h.at["sage_fail"]
    naive = h.times["after_sage_verdict"].replace(tzinfo=None).isoformat()
    assert resolve_as_of(store, naive) == h.at["sage_verdict"]
    assert resolve_as_of(store, "2000-01-01T00:00:00Z") == 0
    assert resolve_as_of(store, f" {h.at['wan_v2']} ") == h.at["wan_v2"]
    assert resolve_as_of(store, None) is None
    at_time = Reads(store).artifact("sage-attn", as_of=resolve_as_of(store, h.times["after_sage_verdict"].isoformat()))
    assert at_time["decision"] == "promoted"


@pytest.mark.parametrize("text, message", [
    ("yesterday", "neither a log position"),
    ("-3", "neither a log position"),
    ("2026-13-01", "neither a log position"),
    ("99999", "beyond the log's head"),
])
def test_bad_as_of_is_refused_in_one_line(store, history, text, message):
    with pytest.raises(ValueError, match=message) as caught:
        resolve_as_of(store, text)
    assert "\n" not in str(caught.value)


def test_bad_as_of_position_is_refused_by_the_api(store, history):
    projections = Reads(store)
    for bad in (-1, True, "3", store.head_position() + 1):
        with pytest.raises(ValueError, match="as-of position"):
            projections.artifact("sage-attn", as_of=bad)


def test_as_of_does_not_touch_live_tables(store, history):
    h = history
    projections = Reads(store)
    projections.state(as_of=h.at["sage_verdict"])
    projections.artifact("sage-attn", as_of=h.at["sage_verdict"])
    projections.artifacts(as_of=h.at["rms_verdict"])
    assert checkpoint(store) is None and artifact_rows(store) == 0
    projections.catch_up()
    with store.engine.connect() as conn:
        live_before = conn.execute(select(ARTIFACTS.c.artifact, ARTIFACTS.c.row_hash)).all()
    history.human("cache_revoke", "step-cache", SHA_CACHE, "revoke")
    assert projections.artifact("step-cache", as_of=h.at["cache_approve"])["decision"] == "promoted"
    assert projections.state(as_of=h.at["cache_revoke"]).artifacts["step-cache"]["decision"] == "held"
    with store.engine.connect() as conn:
        assert conn.execute(select(ARTIFACTS.c.artifact, ARTIFACTS.c.row_hash)).all() == live_before
    assert checkpoint(store) == h.at["rms_reg_2"]


# -- rebuild and replay verification ----------------------------------------------------------------

def test_rebuild_equals_live_and_stepwise_apply(store, history):
    live = Reads(store).state()
    rebuilt = rebuild(store)
    assert rebuilt == live and rebuilt.position == store.head_position()
    stepwise = RegistryState()
    for event in store.read_all():
        apply(stepwise, event)
    keep_readings(store, stepwise.records.values(), stepwise.workloads.get)  # what a catch-up keeps beside the fold
    attach_items(store, stepwise.artifacts.values())  # the fold references items; questions read them
    attach_state_documents(store, stepwise)  # and a speed record's documents
    assert stepwise == rebuilt


def test_verify_passes_then_names_a_tampered_artifact(store, history):
    report = verify_projections(store)
    assert report.ok and report.position == store.head_position()
    assert report.checked == {"artifacts": 4, "workloads": 3, "framesets": 1, "outcomes": 0, "bench_streams": 0,
                              "records": 3, "workload_counts": 3, "payload_counts": 5, "record_heads": 3}
    assert report.summary().endswith("all equal to the replay")

    raw(store.engine, "UPDATE projection_artifacts SET decision = 'promoted' WHERE artifact = 'fa3-approx'")
    report = verify_projections(store)
    assert not report.ok and report.differing_artifacts == ["fa3-approx"]
    assert report.differences[0].fields == ("decision",)
    assert "artifact fa3-approx: differs (decision)" in report.summary()


def test_verify_names_fields_inside_the_state(store, history):
    Reads(store).catch_up()
    with store.engine.connect() as conn:
        text = conn.execute(select(ARTIFACTS.c.state).where(ARTIFACTS.c.artifact == "sage-attn")).scalar()
    forged = text.replace('"decision":"held"', '"decision":"promoted"')
    assert forged != text
    raw(store.engine, f"UPDATE projection_artifacts SET state = '{forged}' WHERE artifact = 'sage-attn'",
        "DELETE FROM projection_workloads WHERE workload = 'cosmos'")
    report = verify_projections(store)
    assert not report.ok and report.differing_artifacts == ["sage-attn"]
    by_key = {d.key: d for d in report.differences}
    assert by_key["sage-attn"].fields == ("state.decision",)
    assert by_key["cosmos"].problem == "missing from the live table"
    # a reset rebuilds the read models from the log
    assert Reads(store).reset() == store.head_position()
    assert verify_projections(store).ok


def test_concurrent_catch_ups_agree(store, history):
    errors = []

    def catch_up():
        try:
            Reads(store).catch_up()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=catch_up) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert checkpoint(store) == store.head_position()
    assert verify_projections(store).ok


# -- events the fold cannot place ------------------------------------------------------------------

def test_evidence_for_an_unregistered_artifact_is_refused(sqlite_url):
    store = open_store(sqlite_url)
    History(store).evidence("x", "ghost", SHA_SAGE, "ExecutionObserved", execution())
    with pytest.raises(ProjectionError, match="position 1 .*'ghost', which was never registered"):
        Reads(store).catch_up()
    assert checkpoint(store) is None


def test_a_payload_naming_another_artifact_is_refused(sqlite_url):
    store = open_store(sqlite_url)
    h = History(store)
    h.register("reg", "sage-attn", "wan-t2v", "attention_backend", SHA_SAGE)
    h.add("bad", "artifact:sage-attn", "ExecutionObserved",
          {"artifact": "other", "payload_sha256": SHA_SAGE, "run": None, "item": execution()})
    with pytest.raises(ProjectionError, match="position 2 .* names 'other'"):
        rebuild(store)


def unchained_execution(store: EventStore, *, schema_version: int, payload: str) -> None:
    """An ExecutionObserved for sage-attn at position 2, inserted as no append would write it (the fold reads
    payloads, not the chain)."""
    with store.engine.begin() as conn:
        conn.execute(insert(EVENTS).values(
            position=2, event_id="00000000-0000-0000-0000-000000000002", stream="artifact:sage-attn", version=2,
            type="ExecutionObserved", schema_version=schema_version, payload=payload,
            recorded_at=datetime.now(timezone.utc), actor="t", idempotency_key=None, prev_hash="0" * 64,
            hash="0" * 64))


def test_an_event_under_a_newer_schema_is_refused_with_its_position(sqlite_url):
    store = open_store(sqlite_url)
    History(store).register("reg", "sage-attn", "wan-t2v", "attention_backend", SHA_SAGE)
    unchained_execution(store, schema_version=2, payload="{}")
    with pytest.raises(StoreError, match="position 2 cannot be read: .*schema_version 2 is newer"):
        rebuild(store)


def test_a_kept_evidence_payload_without_its_item_is_refused_when_a_question_reads_it(sqlite_url):
    """The fold keeps the reference without decoding the payload; reading the item refuses it, naming the position."""
    store = open_store(sqlite_url)
    History(store).register("reg", "sage-attn", "wan-t2v", "attention_backend", SHA_SAGE)
    unchained_execution(store, schema_version=SCHEMA_VERSIONS["ExecutionObserved"],
                        payload=canonical_json({"artifact": "sage-attn", "payload_sha256": SHA_SAGE, "run": None}))
    projections = Reads(store)
    assert projections.catch_up() == 2
    for read in (projections.artifact, projections.current_artifact, lambda name: projections.artifact(name, 2),
                 lambda _: projections.state(), lambda _: rebuild(store)):
        with pytest.raises(ProjectionError, match=r"^event at position 2 \(ExecutionObserved\) cannot be folded: "
                                                  r"malformed payload \(KeyError\('item'\)\)$"):
            read("sage-attn")


def test_a_kept_item_recorded_under_an_older_schema_is_read_through_its_upcaster(sqlite_url, monkeypatch):
    """The item read by position goes the fold's way: an older payload is upcast (and validated) first."""
    monkeypatch.setitem(UPCASTERS, ("ExecutionObserved", 0),
                        lambda old: {**{k: v for k, v in old.items() if k != "measured"}, "item": old["measured"]})
    store = open_store(sqlite_url)
    History(store).register("reg", "sage-attn", "wan-t2v", "attention_backend", SHA_SAGE)
    unchained_execution(store, schema_version=0, payload=canonical_json(
        {"artifact": "sage-attn", "payload_sha256": SHA_SAGE, "run": None, "measured": execution()}))
    expected = store.read_all()[1].typed().model_dump(mode="python")["item"]
    for state in (Reads(store).artifact("sage-attn"), rebuild(store).artifacts["sage-attn"]):
        assert state["evidence"]["execution"]["item"] == expected and expected["kind"] == "execution"


def test_a_read_model_naming_an_event_that_is_not_its_evidence_is_refused_in_one_line(store, history):
    """A row pointing at another event (edited by hand, or another log's) never lends that event's payload."""
    Reads(store).catch_up()
    with store.engine.begin() as conn:
        state = json.loads(conn.execute(select(ARTIFACTS.c.state).where(ARTIFACTS.c.artifact == "fa3-approx")).scalar())
        state["evidence"]["perceptual"]["position"] = history.at["sage_perc"]
        text = json.dumps(state)  # edited with its row hash, so only the reference itself is wrong
        conn.execute(ARTIFACTS.update().where(ARTIFACTS.c.artifact == "fa3-approx")
                     .values(state=text, row_hash=hashlib.sha256(text.encode()).hexdigest()))
    with pytest.raises(ProjectionError, match=rf"^the read model of artifact 'fa3-approx' names position "
                                              rf"{history.at['sage_perc']} as its perceptual evidence, but the log "
                                              r"holds PerceptualMeasured in stream artifact:sage-attn there: [^\n]*$"):
        Reads(store).artifact("fa3-approx")


def test_rows_hold_canonical_json(store, history):
    state = rebuild(store)
    for artifact in state.artifacts.values():
        assert state_text(artifact) == canonical_json(artifact)


_TOKENS = ["a", "b", '"', "\\", ":", ",", "{", "}", "\n", "\u00e9", '"payload_sha256":', ',"run":', "null"]
_text = st.lists(st.sampled_from(_TOKENS), max_size=12).map("".join)
_json = st.recursive(st.none() | st.integers() | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text | st.just("payload_sha256"), inner, max_size=3),
                     max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(artifact=_text.filter(bool), sha=st.none() | _text, run=st.none() | _text,
       item=st.dictionaries(_text | st.sampled_from(["payload_sha256", "run"]), _json, max_size=4))
def test_scope_shortcut_reads_the_top_level_payload_hash(artifact, sha, run, item):
    """The reader's shortcut must agree with a full decode for any payload the store could write."""
    text = canonical_json({"artifact": artifact, "item": item, "payload_sha256": sha, "run": run})
    assert scope_of(text) == sha


_DIGESTS = st.sampled_from(["a" * 64, "b" * 64, 'c"' + "c" * 62, "d\\" + "d" * 62, "e" * 63])
_TOP_KEYS = ["artifact", "identity", "item", "payload_sha256", "run", "origin"]
_member = st.tuples(st.sampled_from(_TOP_KEYS),
                    st.none() | _DIGESTS | st.dictionaries(st.sampled_from(_TOP_KEYS), st.none() | _DIGESTS, max_size=3))


@settings(max_examples=400, deadline=None)
@given(members=st.lists(_member, max_size=8), artifact_first=st.booleans())
def test_the_scope_and_identity_shortcuts_read_what_a_decode_reads_in_any_text(members, artifact_first):
    """Keys in any order, repeated, nested under the top-level names: texts the store never writes, but a log
    written by other means can hold. Whatever the layout, each shortcut answers as a full decode (the last
    of repeated keys) does, or decodes; the scope wherever the payload has the top-level `payload_sha256`
    every evidence schema requires (a text without one is refused on append and by the fold's decode)."""
    if artifact_first:
        members = [("artifact", "wan"), *members]
    text = "{" + ",".join(f"{json.dumps(key)}:{canonical_json(value)}" for key, value in members) + "}"
    decoded = json.loads(text)
    if "payload_sha256" in decoded:
        assert scope_of(text) == decoded["payload_sha256"]
    assert identity_of(text) == decoded.get("identity")


_NAMES = st.sampled_from(["wan", "", 'a"b', "a\\", "\u00e9", ',"', '"artifact":', "a,", '"']) | _text


@settings(max_examples=400, deadline=None)
@given(members=st.lists(_member, max_size=8), name=st.none() | _NAMES | _DIGESTS, artifact_first=st.booleans())
def test_the_artifact_shortcut_reads_what_a_decode_reads_in_any_text(members, name, artifact_first):
    """The fold checks every evidence event's subject from its text: keys in any order, repeated or nested, any
    name (quotes, backslashes, the key's own text in it). The shortcut answers as a full decode does (the last
    of repeated keys), or decodes; a text without the key raises KeyError, which the fold reports as malformed."""
    if artifact_first:
        members = [("artifact", name), *members]
    text = "{" + ",".join(f"{json.dumps(key)}:{canonical_json(value)}" for key, value in members) + "}"
    decoded = json.loads(text)
    if "artifact" in decoded:
        assert artifact_of(text) == decoded["artifact"]
    else:
        with pytest.raises(KeyError):
            artifact_of(text)


@settings(max_examples=300, deadline=None)
@given(name=_NAMES, item=st.dictionaries(_text | st.just("artifact"), _json, max_size=4))
def test_the_artifact_shortcut_reads_the_name_of_any_stored_payload(name, item):
    text = canonical_json({"artifact": name, "identity": None, "item": item, "payload_sha256": None, "run": None})
    assert artifact_of(text) == name


_moments = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 30))


@settings(max_examples=200, deadline=None)
@given(moment=_moments, offset_minutes=st.integers(-23 * 60, 23 * 60), fold=st.sampled_from([0, 1]))
def test_the_kept_time_conversions_answer_as_a_fresh_conversion(moment, offset_minutes, fold):
    """The fold keeps recent time conversions by stored value: SQLite text, a naive time (UTC), an aware time
    in any zone. Values that compare equal (one instant in two zones, a naive time with `fold` 0 or 1) share
    an entry, so each must convert to the same text as a fresh conversion of itself."""
    naive = moment.replace(fold=fold)
    zone = timezone(timedelta(minutes=offset_minutes))
    aware_utc = naive.replace(tzinfo=timezone.utc)
    for stored in (naive, aware_utc, aware_utc.astimezone(zone), naive.isoformat(sep=" ")):
        fresh = datetime.fromisoformat(stored) if isinstance(stored, str) else stored
        expected = timestamp_text(fresh if fresh.tzinfo else fresh.replace(tzinfo=timezone.utc))
        assert chain_time(stored) == expected == timestamp_text(aware_utc)


def test_a_name_no_stream_can_hold_is_unknown_or_refused_in_one_line(store, history):
    """The store refuses NUL in stream names; Postgres cannot even compare one: a one-line refusal, not a traceback."""
    projections = Reads(store)
    calls = (lambda: projections.artifact("sage-attn\x00"), lambda: projections.artifact("sage-attn\x00", as_of=3),
             lambda: projections.artifacts(workload="wan\x00"))
    for call in calls:
        if store.engine.dialect.name == "postgresql":
            with pytest.raises(StoreError, match="could not read the (log|projections): [^\n]*$"):
                call()
        else:
            assert call() in (None, [])


def test_events_out_of_order_are_refused(store, history):
    events = store.read_all()
    state = RegistryState()
    apply(state, events[1])
    with pytest.raises(ProjectionError, match="must be folded in order"):
        apply(state, events[0])
