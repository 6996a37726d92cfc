"""One meaning per word, and the command line's answers that a new user tripped over (each a test that failed
before): a speed record's reading never in an artifact state's words; a regressed artifact headlined as such; a
margin never `passed` under the rule that held it; parity said when it is shown; refusals that name what the
user typed and the way out.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from registry.app import open_registry
from ship_helpers import make_bundle, measure_and_promote, register
from store_helpers import head_of
from ship_helpers import MONITORED, remeasure
from newcomer_helpers import WORKLOAD, evidence
from paths import ROOT

# The words of an artifact's state: a speed record's reading must never be said in them.
STATE_WORDS = re.compile(r"\b(promoted|rejected|held|quarantined|registered)\b")
CONFIDENT = "workload: w\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 20}\n"


def declared(cli, text: str = CONFIDENT, name: str = "w") -> None:
    path = cli.tmp / f"{name}.yaml"
    path.write_text(text)
    assert cli("workload", "declare", str(path)).exit_code == 0


def with_payload(cli, artifact: str = "fast", workload: str = "w", kind: str = "step_cache") -> str:
    path = cli.tmp / f"{artifact}.bin"
    path.write_bytes(artifact.encode())
    result = cli("artifact", "register", artifact, "--workload", workload, "--kind", kind, "--payload", str(path))
    assert result.exit_code == 0, result.output
    return result.output


def opened(cli, artifact: str = "fast") -> str:
    result = cli("bench", "open", artifact, "--device", "NVIDIA H200", "--timer", "cuda_event", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["session"]


def test_a_speed_records_reading_never_uses_a_states_word_in_the_cli_the_api_or_the_example(registry_cli, tmp_path):
    declared(registry_cli)
    with_payload(registry_cli)
    session = opened(registry_cli)
    texts = []
    for index in range(3):
        done = registry_cli("bench", "record", "fast", session, "--batch", f"b{index}", "--baseline", "2.0,2.0",
                            "--candidate", "1.0,1.0")
        texts.append(done.output)
    closed = registry_cli("bench", "record", "fast", session, "--batch", "late", "--baseline", "2.0",
                          "--candidate", "1.0")
    status = registry_cli("bench", "status", "fast")
    document = json.loads(registry_cli("bench", "status", "fast", "--json").output)
    shown = registry_cli("show", "fast")
    record_line = next(line for line in shown.output.splitlines() if "speed record of these bytes" in line)
    example = example_output(tmp_path)
    for text in (*texts, closed.stderr, status.output, record_line, example):
        assert not STATE_WORDS.search(text), text
    assert "closed (shown above the gate after 5 pairs)" in closed.stderr
    assert (document["reading"], document["shows"], document["stop"]) == ("above", "shown above the gate", "decided")
    assert "decision" not in document and not STATE_WORDS.search(json.dumps(
        {key: document[key] for key in ("reading", "shows", "stop")}))
    assert example.startswith("shown above the gate at pair 5")

    documented = (ROOT / "docs" / "evidence-format.md").read_text()
    assert example.strip() in documented  # the worked example prints what docs/evidence-format.md says it prints


def example_output(folder) -> str:
    """What examples/bench_session.py prints, run as its docstring says."""

    root = ROOT
    example = subprocess.run([sys.executable, str(root / "examples" / "bench_session.py"),
                              f"sqlite:///{folder / 'example.db'}", str(folder)], capture_output=True, text=True,
                             timeout=120, cwd=folder)
    assert example.returncode == 0, example.stderr
    return example.stdout


def test_bench_status_says_when_bounds_come_instead_of_none_yet_to_none_yet(registry_cli):
    declared(registry_cli)
    with_payload(registry_cli)
    opened(registry_cli)
    said = registry_cli("bench", "status", "fast").output
    assert "none yet" not in said and "no bounds yet (the first come at pair 5" in said


def test_bench_open_refuses_a_timer_evidence_documents_would_refuse_and_records_nothing(registry_cli):
    declared(registry_cli)
    with_payload(registry_cli)
    before = head_of(registry_cli.url)
    typo = registry_cli("bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_evnt")
    assert typo.exit_code == 1 and "timer: 'cuda_evnt' is not one of cuda_event, perf_counter" in typo.stderr
    assert head_of(registry_cli.url) == before


def test_bench_open_says_a_session_is_read_after_every_pair_and_runs_per_arm_sizes_documents(registry_cli):
    declared(registry_cli)
    with_payload(registry_cli)
    said = registry_cli("bench", "open", "fast", "--device", "NVIDIA H200", "--timer", "cuda_event").output
    assert "may decide from pair 5" in said and "runs_per_arm 16 is the size of a complete evidence document" in said

    workloads = (ROOT / "docs" / "workloads.md").read_text()
    assert "**`runs_per_arm` and benchmark sessions.**" in workloads


def test_a_reused_batch_key_is_named_as_the_user_gave_it(registry_cli):
    declared(registry_cli)
    with_payload(registry_cli)
    session = opened(registry_cli)
    assert registry_cli("bench", "record", "fast", session, "--batch", "first", "--baseline", "2.0",
                        "--candidate", "1.0").exit_code == 0
    other = registry_cli("bench", "record", "fast", session, "--batch", "first", "--baseline", "3.0",
                         "--candidate", "1.0")
    assert other.exit_code == 1
    assert f"batch 'first' of session {session} is already recorded with other pairs" in other.stderr
    assert "bench:" not in other.stderr and "idempotency" not in other.stderr


def promoted_and_regressed(cli) -> None:
    declared(cli, MONITORED, "wan")
    assert register(cli, "fast", make_bundle(cli.tmp / "bundles", "fast")).exit_code == 0
    assert measure_and_promote(cli, "fast", 1.5) == "promoted"
    for index in range(5):
        remeasure(cli, "fast", 0.99, f"b{index}")


def test_show_and_the_report_headline_a_regressed_artifact_as_regressed(registry_cli):
    promoted_and_regressed(registry_cli)
    first = registry_cli("show", "fast").output.splitlines()[0]
    assert first.startswith("fast: PROMOTED, REGRESSED (alarm at pair 10 of its re-measurements")
    headline = json.loads(registry_cli("show", "fast", "--json").output)["headline"]
    assert (headline["decision"], headline["monitor"], headline["regressed"]) == ("promoted", "regressed", True)
    table = registry_cli("report").output
    board = table[table.index("leaderboard: wan"):]
    assert "promoted, regressed" in board.split("\n\n")[0]


def test_a_held_verdicts_margins_never_show_passed_for_the_rule_that_held_it(registry_cli):
    declared(registry_cli)
    with_payload(registry_cli)
    session = opened(registry_cli)
    assert registry_cli("bench", "record", "fast", session, "--batch", "b", "--baseline", "2.0,2.0,2.0",
                        "--candidate", "1.0,1.0,1.0").exit_code == 0
    assert registry_cli("evidence", "import", str(_execution(registry_cli))).exit_code == 0
    held = registry_cli("promote", "fast")
    assert held.exit_code == 3 and "rule speed.undecided" in held.output
    for said in (held.output, registry_cli("show", "fast").output):
        speedup = next(line for line in said.splitlines() if "speedup" in line and "│" in line)
        assert "point value only: held by speed.undecided" in speedup and "True" not in speedup, speedup


def test_show_of_an_exact_tier_kernel_says_parity_was_shown(registry_cli):
    declared(registry_cli, WORKLOAD, "my-wan-modln")
    printed = with_payload(registry_cli, "my-modln", "my-wan-modln", "fused_kernel")
    (registry_cli.tmp / "ev.json").write_text(json.dumps(evidence(re.search(r"[0-9a-f]{64}", printed).group(0))))
    assert registry_cli("evidence", "import", str(registry_cli.tmp / "ev.json")).exit_code == 0
    shown = registry_cli("show", "my-modln").output
    assert "parity: all 1 output leaves byte-equal to the reference" in shown


def test_reverify_of_a_kernel_without_an_entry_names_what_is_missing_and_monitor_record(registry_cli):
    declared(registry_cli, WORKLOAD.replace("protocol: paired}", "protocol: paired}\nmonitor: {alpha: 0.001, "
                                            "reference: gate, margin: 0.0}"), "my-wan-modln")
    printed = with_payload(registry_cli, "my-modln", "my-wan-modln", "fused_kernel")
    (registry_cli.tmp / "ev.json").write_text(json.dumps(evidence(re.search(r"[0-9a-f]{64}", printed).group(0))))
    assert registry_cli("evidence", "import", str(registry_cli.tmp / "ev.json")).exit_code == 0
    assert registry_cli("promote", "my-modln").exit_code == 0
    result = registry_cli("reverify", "my-wan-modln", "--now", "--pairs", "2", "--json")
    [outcome] = json.loads(result.output)["artifacts"]
    assert outcome["outcome"] == "refused"
    assert "registered without --op and --entry" in outcome["detail"]
    assert "only fused kernels" not in outcome["detail"]
    assert "registry monitor record my-modln" in outcome["detail"]


def test_lock_verify_names_the_artifact_once(registry_cli):
    declared(registry_cli, MONITORED, "wan")
    assert register(registry_cli, "steady", make_bundle(registry_cli.tmp / "bundles", "steady")).exit_code == 0
    assert measure_and_promote(registry_cli, "steady", 1.5) == "promoted"
    lock = registry_cli.tmp / "l.json"
    assert registry_cli("lock", "--workload", "wan", "--unsigned", "--out", str(lock)).exit_code == 0
    for index in range(5):  # the artifact regresses after the lock was taken
        remeasure(registry_cli, "steady", 0.99, f"s{index}")
    checked = registry_cli("lock", "verify", str(lock))
    assert checked.exit_code == 3
    line = checked.stderr.strip()
    assert line.startswith("regressed: steady: regression detected at pair 10") and line.count("steady") == 1


def test_key_ids_are_printed_whole_wherever_they_are_printed(registry_cli):
    promoted_and_regressed(registry_cli)
    key = registry_cli.tmp / "signing.key"
    made = registry_cli("keys", "init", str(key)).output
    key_id = re.search(r"key id ([0-9a-f]+)", made).group(1)
    assert len(key_id) == 64
    assert register(registry_cli, "steady", make_bundle(registry_cli.tmp / "b2", "steady")).exit_code == 0
    assert measure_and_promote(registry_cli, "steady", 1.5) == "promoted"
    locked = registry_cli("lock", "--workload", "wan", "--key", str(key), "--out", str(registry_cli.tmp / "l.json"))
    assert f"signed by key {key_id}," in locked.output
    attested = registry_cli("attest", "steady", "--key", str(key), "--out", str(registry_cli.tmp / "a.json"))
    assert attested.output.rstrip().endswith(f"signed by key {key_id}")
    assert registry_cli("keys", "show", "--key", str(key)).output.startswith(f"key id {key_id}\n")


def test_history_reads_as_sentences_and_names_the_session_pairs_a_verdict_rested_on(registry_cli):
    declared(registry_cli)
    with_payload(registry_cli)
    session = opened(registry_cli)
    for index in range(3):
        registry_cli("bench", "record", "fast", session, "--batch", f"b{index}", "--baseline", "2.0,2.0",
                     "--candidate", "1.0,1.0")
    registry_cli("evidence", "import", str(_execution(registry_cli)))
    registry_cli("promote", "fast")
    said = registry_cli("history", "fast").output
    assert "…" not in said and '{"' not in said  # no raw JSON cut short
    assert "step_cache of workload w, payload " in said and "execution: 4 candidate calls, 0 fallbacks" in said
    identity = json.loads(registry_cli("show", "fast", "--json").output)["identity"]
    assert f"from bench:{identity}: session {session}: 3 batches, 6 pairs" in said
    assert f"`registry history bench:{identity}` lists them" in said
    assert "speed record w:" in said and "3 entries up to position" in said  # the record the verdict cites


def _execution(cli):
    """Execution and byte-equal parity evidence for `fast`: all but speed is shown."""
    path = cli.tmp / "execution.json"
    parity = evidence("0" * 64)["evidence"][1]
    path.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "fast", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, parity]}))
    return path


def test_an_option_of_registry_itself_given_after_the_command_says_where_it_goes(registry_cli):
    from click.testing import CliRunner

    from registry.cli.main import main

    result = CliRunner().invoke(main, ["demo", "--db", "sqlite:///elsewhere.db"])
    assert result.exit_code == 2
    assert "--db belongs to `registry` itself and goes before the command: registry --db VALUE demo" in result.output


def speed_fields() -> tuple[str, ...]:
    from registry.contracts.speed import _FIELDS

    return _FIELDS


@pytest.mark.parametrize("field", speed_fields())
def test_every_speed_field_a_contract_accepts_is_in_docs_workloads(field):

    workloads = (ROOT / "docs" / "workloads.md").read_text()
    speed = workloads.split("### `speed`", 1)[1].split("\n### ", 1)[0]
    assert f"| `{field}` |" in speed


def test_over_http_other_claims_for_a_registered_id_need_new_identity_too(migrated_sqlite_url):
    """The API holds the rule `artifact register` holds: a changed payload digest is refused unless asked for."""
    from fastapi.testclient import TestClient

    from registry.app.tokens import issue_token
    from registry.app.workloads import declare_workload
    from registry.contracts import Contract
    from registry.serve.api import ServerConfig, create_app

    registry = open_registry(migrated_sqlite_url, actor="lead")
    declare_workload(registry, Contract.from_yaml(CONFIDENT))
    token, _ = issue_token(registry, "lead", ["decide"], workload="*", person=True)
    client = TestClient(create_app(ServerConfig(registry)), headers={"Authorization": f"Bearer {token}"})
    claims = {"artifact": "fast", "workload": "w", "kind": "step_cache", "payload_sha256": "a" * 64}
    assert client.post("/api/artifacts", json=claims).status_code == 200
    refused = client.post("/api/artifacts", json={**claims, "payload_sha256": "b" * 64})
    assert refused.status_code == 400 and "--new-identity" in refused.json()["error"]
    moved = client.post("/api/artifacts", json={**claims, "payload_sha256": "b" * 64, "new_identity": True})
    assert moved.status_code == 200 and moved.json()["appended"] is True
    registry.close()
