"""`show` lists an artifact's latest verdicts and how many it has in all, never its whole history.

docs/projections.md, "`show` is bounded": the latest SHOWN_VERDICTS (20)
verdicts, or `--verdicts N`, oldest of them first, in the table and in
`--json` (`verdicts`, `verdict_count`, `verdicts_omitted`,
`verdicts_in_full`); live from the artifact's row and the last rows of its
history, as of a position from its stream folded.
"""
from __future__ import annotations

import json

import pytest

from registry.cli.query_commands import SHOWN_VERDICTS
from read_side import Reads
from scripted_history import open_store
from state_shapes import Log

JUDGED = SHOWN_VERDICTS + 7  # verdicts of artifact "a": more than show lists


def judge(store, times: int) -> None:
    log = Log(store)
    for index in range(times):
        log.step(("verdict", "a", ("held", "rejected", "promoted")[index % 3], "current", index % 2 == 0))


@pytest.fixture
def judged(registry_cli):
    store = open_store(registry_cli.url)
    judge(store, JUDGED)
    yield registry_cli, store
    store.engine.dispose()


def shown(cli, *args):
    result = cli("show", "a", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_show_json_lists_the_latest_verdicts_and_counts_them_all(judged):
    cli, store = judged
    every = Reads(store).artifact("a")["verdicts"]
    assert len(every) == JUDGED
    document = shown(cli)
    assert document["verdicts"] == every[-SHOWN_VERDICTS:]  # the latest, oldest of them first
    assert document["verdict_count"] == JUDGED and document["verdicts_omitted"] == JUDGED - SHOWN_VERDICTS
    assert document["verdicts_in_full"] == "registry history artifact:a"
    assert document["verdict_event_id"] == every[-1]["event_id"]  # the current verdict is still the latest
    assert shown(cli, "--verdicts", "3")["verdicts"] == every[-3:]
    none = shown(cli, "--verdicts", "0")
    assert none["verdicts"] == [] and none["verdict_count"] == JUDGED and none["verdicts_omitted"] == JUDGED
    everything = shown(cli, "--verdicts", str(JUDGED + 5))
    assert everything["verdicts"] == every and everything["verdicts_omitted"] == 0


def test_show_as_of_a_position_lists_the_latest_verdicts_up_to_it(judged):
    cli, store = judged
    every = Reads(store).artifact("a")["verdicts"]
    middle = every[SHOWN_VERDICTS + 1]["position"]  # SHOWN_VERDICTS + 2 verdicts recorded by then
    document = shown(cli, "--as-of", str(middle))
    assert document["verdicts"] == every[2:SHOWN_VERDICTS + 2]
    assert document["verdict_count"] == SHOWN_VERDICTS + 2 and document["verdicts_omitted"] == 2
    assert shown(cli, "--as-of", str(store.head_position())) == shown(cli)  # as of the head: the live answer


def test_the_table_lists_the_same_latest_verdicts_and_points_to_history(judged):
    cli, store = judged
    every = Reads(store).artifact("a")["verdicts"]
    result = cli("show", "a")
    assert result.exit_code == 0, result.output
    assert f"verdicts: the latest {SHOWN_VERDICTS} of {JUDGED} (`registry history artifact:a` lists all)" in result.output
    listed = [v["event_id"] for v in every if str(v["position"]) in result.output.split()]
    assert listed == [v["event_id"] for v in every[-SHOWN_VERDICTS:]]
    assert f"verdicts: the latest 0 of {JUDGED}" in cli("show", "a", "--verdicts", "0").output


def test_an_artifact_with_few_verdicts_shows_them_all(registry_cli):
    store = open_store(registry_cli.url)
    try:
        judge(store, 2)
        document = shown(registry_cli)
        assert len(document["verdicts"]) == 2 and document["verdict_count"] == 2 and document["verdicts_omitted"] == 0
        assert "verdicts (2)" in registry_cli("show", "a").output
        assert "verdicts" not in registry_cli("show", "b").output.split()  # never judged: no verdict table
    finally:
        store.engine.dispose()


def test_a_negative_verdict_count_is_a_usage_error(judged):
    cli, _ = judged
    result = cli("show", "a", "--verdicts", "-1")
    assert result.exit_code == 2 and "--verdicts" in result.output


@pytest.mark.parametrize("count", [str(2**63), "99999999999999999999"])
def test_a_verdict_count_no_database_can_take_is_a_usage_error_not_a_crash(judged, count):
    cli, _ = judged
    result = cli("show", "a", "--verdicts", count)
    assert result.exit_code == 2 and "--verdicts" in result.output


def test_the_largest_verdict_count_lists_every_verdict(judged):
    cli, _ = judged
    everything = json.loads(cli("show", "a", "--json", "--verdicts", str(2**63 - 1)).output)
    assert everything["verdicts_omitted"] == 0 and len(everything["verdicts"]) == everything["verdict_count"]


def test_the_bounded_read_equals_the_tail_of_the_whole_history_on_each_backend(backend_url):
    store = open_store(backend_url)
    try:
        judge(store, JUDGED)
        projections = Reads(store)
        every = projections.artifact("a")["verdicts"]
        for latest in (0, 1, SHOWN_VERDICTS, JUDGED, JUDGED + 1):
            state, count = projections.shown_artifact("a", latest)
            assert count == JUDGED and state["verdicts"] == every[len(every) - min(latest, JUDGED):]
            assert {k: v for k, v in state.items() if k != "verdicts"} == projections.current_artifact("a")
        assert projections.shown_artifact("unknown", 5) == (None, 0)
        assert projections.shown_artifact("b", 5)[1] == 0
    finally:
        store.engine.dispose()
