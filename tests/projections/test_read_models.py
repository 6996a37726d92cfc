"""The artifact read model behind appends and promotion, and the verdict history table beside it.

docs/projections.md, "Live read models": the artifact row holds the stream
version and current identity an append needs and the current verdict; each
verdict of its history is its own row in `projection_verdicts`, rebuilt by a
replay and compared by `replay --verify`. `history` reads a stream a page at
a time and prints what printing the whole list at once would.
"""
from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import func, select

from registry.app import history as history_use_case
from registry.cli.main import main
from registry.cli.output import json_text
from registry.events.store import EventStore, NewEvent
from read_side import Reads
from registry.projections import rebuild, verify_projections
from registry.projections.read_models.artifacts import ARTIFACTS
from registry.projections.read_models.verdicts import VERDICTS
from store_helpers import raw
# The scripted history of test_projections.py, with its fixtures (a store on each backend, the history in it).
from scripted_history import SHA_SAGE, history, history_url, open_store, store  # noqa: F401


def verdict_rows(store: EventStore) -> list[tuple[str, int, str]]:
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(
            select(VERDICTS.c.artifact, VERDICTS.c.position, VERDICTS.c.decision)
            .order_by(VERDICTS.c.artifact, VERDICTS.c.position))]


def test_the_artifact_row_keeps_no_history_and_the_history_table_one_row_per_verdict(store, history):
    projections = Reads(store)
    projections.catch_up()
    assert verdict_rows(store) == [
        ("fa3-approx", history.at["fa3_verdict"], "quarantined"),
        ("rms-fused", history.at["rms_verdict"], "rejected"),
        ("sage-attn", history.at["sage_verdict"], "promoted"),
        ("step-cache", history.at["cache_verdict"], "recorded"),
    ]
    with store.engine.connect() as conn:
        texts = conn.execute(select(ARTIFACTS.c.state)).scalars().all()
    assert texts and all('"verdicts"' not in text for text in texts)
    # the whole state, history included, is what a replay folds
    rebuilt = rebuild(store)
    for name, expected in rebuilt.artifacts.items():
        assert projections.artifact(name) == expected
        assert projections.position == store.head_position()
    assert projections.artifacts() == [rebuilt.artifacts[key] for key in sorted(rebuilt.artifacts)]


def test_the_current_artifact_carries_the_stream_version_and_identity_without_the_history(store, history):
    projections = Reads(store)
    for name in ("sage-attn", "rms-fused", "step-cache", "fa3-approx"):
        current = projections.current_artifact(name)
        assert "verdicts" not in current
        assert current["stream_version"] == store.stream_version(f"artifact:{name}")
        with store.engine.connect() as conn:
            row = conn.execute(select(ARTIFACTS.c.stream_version, ARTIFACTS.c.identity)
                               .where(ARTIFACTS.c.artifact == name)).one()
        assert tuple(row) == (current["stream_version"], current["identity"])
    assert projections.current_artifact("nobody") is None


def test_a_catch_up_adds_history_rows_and_rewrites_none(store, history):
    Reads(store).catch_up()
    before = verdict_rows(store)
    [position] = store.append("artifact:sage-attn", [NewEvent("VerdictRendered", {
        "artifact": "sage-attn", "payload_sha256": SHA_SAGE, "workload": "wan-t2v", "contract_version": 2,
        "contract_hash": f"{2:064x}", "gate_version": "gate/1", "verdict": {
            "decision": "held", "tier": "perceptual", "rule": "evidence.missing", "reasons": ["no benchmark"],
            "margins": [], "speedup": None, "speedup_ci": None, "evidence_ids": [], "gate_version": "gate/1"}})],
        actor="test")
    state = Reads(store).artifact("sage-attn")
    assert [v["position"] for v in state["verdicts"]] == [history.at["sage_verdict"], position]
    assert verdict_rows(store) == sorted([*before, ("sage-attn", position, "held")])
    assert state["stream_version"] == store.stream_version("artifact:sage-attn")
    assert verify_projections(store).ok


def test_verify_names_a_tampered_or_missing_history_row_and_reset_rebuilds_it(store, history):
    report = verify_projections(store)
    assert report.ok and report.verdicts_checked == 4
    raw(store.engine, "UPDATE projection_verdicts SET decision = 'promoted' WHERE artifact = 'rms-fused'",
        "DELETE FROM projection_verdicts WHERE artifact = 'fa3-approx'")
    report = verify_projections(store)
    by_key = {(d.model, d.key): d for d in report.differences}
    assert set(by_key) == {("verdicts", f"rms-fused@{history.at['rms_verdict']}"),
                           ("verdicts", f"fa3-approx@{history.at['fa3_verdict']}")}
    assert by_key["verdicts", f"rms-fused@{history.at['rms_verdict']}"].fields == ("decision",)
    assert by_key["verdicts", f"fa3-approx@{history.at['fa3_verdict']}"].problem == "missing from the live table"
    assert f"verdict rms-fused@{history.at['rms_verdict']}: differs (decision)" in report.summary()
    raw(store.engine, "UPDATE projection_verdicts SET entry = '{\"decision\":\"promoted\"}' WHERE artifact = 'sage-attn'")
    entry_fields = {d.key: d.fields for d in verify_projections(store).differences}
    assert "entry.rule" in entry_fields[f"sage-attn@{history.at['sage_verdict']}"]
    Reads(store).reset()
    assert verify_projections(store).ok
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(VERDICTS)).scalar() == 4


def test_history_json_read_page_by_page_is_the_whole_list(sqlite_url, monkeypatch):
    store = open_store(sqlite_url)
    events = [NewEvent("FrameSetRegistered", {"name": "f", "seed": seed, "frames": 1, "height": 8, "width": 8,
                                              "channels": 3, "dtype": "uint8", "sha256": "ab" * 32,
                                              "source": "line\u2028separator"})
              for seed in range(7)]
    store.append("frameset:f", events, actor="test")
    monkeypatch.setattr(history_use_case, "HISTORY_PAGE", 3)
    runner = CliRunner()
    shown = runner.invoke(main, ["--db", sqlite_url, "history", "frameset:f", "--json"])
    assert shown.exit_code == 0, shown.output
    whole = [event.to_dict() for event in store.read_stream("frameset:f")]
    assert shown.output == json_text(whole) + "\n"
    assert len(json.loads(shown.output)) == 7
    table = runner.invoke(main, ["--db", sqlite_url, "history", "frameset:f"])
    assert table.exit_code == 0 and table.output.count("FrameSetRegistered") == 7
