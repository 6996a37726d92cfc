"""The read models declared once each (registry/projections/read_models/): what the declarations drive.

Every event type is folded by some declaration; a change to what a model
folds, with its version raised, refolds every row on the next catch-up with
no migration; read models folded before the checkpoint recorded versions (an
upgraded registry) are folded again the same way; and a catch-up onto an
empty read side writes exactly what `reset` writes, table by table.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from sqlalchemy import select

from read_side import Reads
from registry.events.catalogue import SCHEMA_VERSIONS
from registry.projections import ReadModels, read_models, verify_projections
from registry.projections.fold import HANDLERS
from registry.projections.read_models import CHECKPOINT, DECLARATIONS, READ_MODEL_TABLES, versions_text
from store_helpers import opened_store, raw
from scripted_history import build_history


@pytest.fixture
def store(migrated_backend_url):

    store = opened_store(migrated_backend_url)
    build_history(store)
    yield store
    store.engine.dispose()


def recorded_versions(store) -> dict | None:
    with store.engine.connect() as conn:
        text = conn.execute(select(CHECKPOINT.c.versions)).scalar()
    return None if text is None else json.loads(text)


def tables(store) -> dict[str, list]:
    """Every read-model table's rows, sorted (the checkpoint's included)."""
    with store.engine.connect() as conn:
        return {name: sorted(tuple(row) for row in conn.exec_driver_sql(f"SELECT * FROM {name}"))
                for name in READ_MODEL_TABLES}


def test_every_event_type_the_log_holds_is_folded_and_every_model_is_versioned():
    names = [model.name for model in DECLARATIONS]
    assert len(set(names)) == len(names)
    assert set(SCHEMA_VERSIONS) <= set(HANDLERS)  # no event type the fold cannot place
    assert json.loads(read_models.VERSIONS) == {model.name: model.version for model in DECLARATIONS}
    for model in DECLARATIONS:
        assert isinstance(model.version, int) and model.version >= 1 and model.folds, model.name


def test_the_checkpoint_records_the_versions_it_was_folded_under(store):
    Reads(store).catch_up()
    assert recorded_versions(store) == {model.name: model.version for model in DECLARATIONS}


def test_a_field_added_to_a_folded_row_refolds_by_itself_with_its_version_raised(store, monkeypatch):
    """What a developer does to add a field: the handler writes it, the model's version goes up. No migration:
    the next catch-up finds other versions at the checkpoint and folds every row again."""
    from registry.projections.read_models import artifacts

    reads = Reads(store)
    reads.catch_up()
    registered = HANDLERS["ArtifactRegistered"]

    def noting(state, event):
        registered[0](state, event)
        state.artifacts[event.payload["artifact"]]["note"] = f"registered at {event.position}"

    monkeypatch.setitem(HANDLERS, "ArtifactRegistered", (noting, *registered[1:]))
    assert reads.catch_up() == store.head_position()
    assert "note" not in reads.current_artifact("sage-attn")  # the same versions: nothing folded again

    raised = [replace(model, version=model.version + 1) if model.name == "artifacts" else model
              for model in DECLARATIONS]
    monkeypatch.setattr(read_models, "VERSIONS", versions_text(tuple(raised)))
    assert reads.catch_up() == store.head_position()
    assert reads.current_artifact("sage-attn")["note"] == "registered at 5"
    assert recorded_versions(store)["artifacts"] == artifacts.VERSION + 1
    assert verify_projections(store).ok


def test_read_models_folded_before_versions_were_recorded_are_folded_again(store):
    """An upgraded registry's checkpoint holds no versions: whatever its rows say, the next read folds the log
    again (a row an earlier fold wrote without a key a read needs, with its hash, included)."""
    Reads(store).catch_up()
    expected = tables(store)
    raw(store.engine, "UPDATE projection_checkpoint SET versions = NULL",
        "DELETE FROM projection_workload_counts", "DELETE FROM projection_verdicts")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE projection_artifacts SET state = '{}', row_hash = "
                             "'44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a'")
    assert Reads(store).current_artifact("sage-attn")["decision"] == "held"
    assert tables(store) == expected


def test_a_catch_up_onto_an_empty_read_side_writes_what_reset_writes(store):
    ReadModels(store).reset()
    by_reset = tables(store)
    raw(store.engine, *(f"DELETE FROM {name}" for name in READ_MODEL_TABLES))
    assert ReadModels(store).catch_up() == store.head_position()
    assert tables(store) == by_reset
