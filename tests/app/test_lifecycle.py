"""The lifecycle of a decision through the CLI (docs/gate.md, "Lifecycle").

Each case the lifecycle answers, end to end on a real SQLite
registry: a failure is cleared only by its own stage, evidence is bound to
the payload it measured, a change of identity starts a new decision, a
human decision names the verdict it answers, plus attempts, contract
versions and promote racing an import.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from registry.app.workloads import register_artifact
from registry.formats.evidence.items import parse_item
from registry.formats.names import artifact_stream
from stateful_checks import CopiedStart
from store_helpers import opened
from cli_helpers import head, one_line_refusal
from lifecycle_helpers import advisory_workload, benchmark, execution, loading, failure, perceptual, promote, show

MANIFEST = """
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""
ADVISORY = advisory_workload(0.95)


# The folder `cli` starts from (both workloads declared, `sage` registered through the CLI): built by the first
# test of a process that asks, copied for the others.
DECLARED = CopiedStart()


@pytest.fixture
def cli(registry_cli, tmp_path):
    invoke, _, load = loading(registry_cli, tmp_path)
    DECLARED.start(tmp_path, lambda: declare_and_register(invoke, tmp_path))
    invoke.load = load
    return invoke


def declare_and_register(invoke, tmp_path) -> dict:
    for name, text in (("wan", MANIFEST), ("ltx", ADVISORY)):
        (tmp_path / f"{name}.yaml").write_text(text)
        assert invoke("workload", "declare", str(tmp_path / f"{name}.yaml")).exit_code == 0
    (tmp_path / "sage.bin").write_bytes(b"sage attention build 1")
    (tmp_path / "sage-2.bin").write_bytes(b"sage attention build 2")
    assert invoke("artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend",
                  "--backend", "SAGE_ATTN", "--payload", str(tmp_path / "sage.bin")).exit_code == 0
    return {}


# -- a failure is cleared only by a later success of its own stage -------------------------

def test_a_failed_stage_is_not_cleared_by_evidence_of_another_kind(cli):
    assert cli.load("sage", [execution(), benchmark(), perceptual()]).exit_code == 0
    assert cli.load("sage", [failure("perceptual")]).exit_code == 0
    assert cli.load("sage", [benchmark()]).exit_code == 0  # a benchmark says nothing about the perceptual stage
    verdict = promote(cli, "sage")
    assert verdict["decision"] == "held" and verdict["rule"] == "evaluation_failed"
    assert any("'perceptual'" in reason for reason in verdict["reasons"])
    assert [f["stage"] for f in show(cli, "sage")["open_failures"]] == ["perceptual"]


def test_a_failed_stage_is_cleared_only_by_its_stage_completing(cli):
    cli.load("sage", [execution(), benchmark(), failure("perceptual")])
    cli.load("sage", [perceptual(status="timeout")])  # the stage ran again and still did not complete
    assert [f["stage"] for f in show(cli, "sage")["open_failures"]] == ["perceptual"]
    cli.load("sage", [failure("warp-drive")])  # a stage no evidence kind answers for
    cli.load("sage", [perceptual()])
    assert [f["stage"] for f in show(cli, "sage")["open_failures"]] == ["warp-drive"]
    assert promote(cli, "sage")["decision"] == "held"
    # Only a new identity clears a stage no evidence kind answers for.
    cli("artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend", "--backend", "SAGE_ATTN",
        "--payload", str(cli.tmp / "sage-2.bin"), "--new-identity")
    assert show(cli, "sage")["open_failures"] == []


def test_a_revoke_does_not_clear_an_open_failure(cli):
    cli.load("sage", [execution(), benchmark(), perceptual()])
    assert promote(cli, "sage")["decision"] == "promoted"
    cli.load("sage", [failure("benchmark")])
    assert cli("revoke", "sage", "--reason", "benchmark crashed since").exit_code == 0
    assert [f["stage"] for f in show(cli, "sage")["open_failures"]] == ["benchmark"]
    cli.load("sage", [execution(), perceptual()])
    assert promote(cli, "sage")["decision"] == "held"
    cli.load("sage", [benchmark()])
    assert promote(cli, "sage")["decision"] == "promoted"


# -- evidence is bound to the payload it measured ------------------------------------------

def test_a_document_for_another_payload_is_refused_and_writes_nothing(cli):
    before = head(cli)
    refused = cli.load("sage", [execution(), benchmark(), perceptual()], payload_sha256="ab" * 32)
    one_line_refusal(refused)
    assert "payload_sha256" in refused.output and "abababababab" in refused.output
    assert head(cli) == before
    assert "payload_sha256" in cli.load("sage", [benchmark()], payload_sha256="AB" * 32).output  # not a sha256
    huge = cli.load("sage", [benchmark()], payload_sha256="ab" * 100_000)
    one_line_refusal(huge)
    assert "a string of 200000 characters" in huge.output and len(huge.output) < 200
    current = show(cli, "sage")["payload_sha256"]
    assert cli.load("sage", [execution(), benchmark(), perceptual()], payload_sha256=current).exit_code == 0
    assert promote(cli, "sage")["decision"] == "promoted"


def _register_moving_disc(cli):
    from frame_helpers import moving_disc

    np.save(cli.tmp / "reference.npy", moving_disc())
    np.save(cli.tmp / "candidate.npy", moving_disc())
    assert cli("frames", "register", "wan-8", str(cli.tmp / "reference.npy"), "--seed", "1024").exit_code == 0


def test_a_re_registration_while_frames_are_measured_never_lends_them_to_the_new_payload(cli, monkeypatch):
    """The evidence frames command measures payload 1; the artifact is re-registered as payload 2 meanwhile."""
    import registry.app.frames as frames

    _register_moving_disc(cli)
    measure = frames.measure_against_reference

    def measure_then_re_register(*args, **kwargs):
        item = measure(*args, **kwargs)
        register_artifact(opened(cli.url, actor="other"), "sage", workload="wan", kind="attention_backend",
                          backend="SAGE_ATTN", payload=str(cli.tmp / "sage-2.bin"))
        return item

    monkeypatch.setattr(frames, "measure_against_reference", measure_then_re_register)
    before = head(cli)
    result = cli("evidence", "frames", "sage", "--reference", "wan-8", "--candidate", str(cli.tmp / "candidate.npy"))
    one_line_refusal(result)
    assert "re-registered" in result.output
    assert head(cli) == before + 1  # the re-registration only
    assert show(cli, "sage")["evidence"] == {}


def test_evidence_appended_across_a_re_registration_counts_for_nothing(cli):
    """The race the append check cannot close: the event names its identity, and the fold holds it to that."""
    from registry.app.evidence import capture_subject, evidence_events

    registry = opened(cli.url)
    subject = capture_subject(registry, "sage")  # captured before measuring
    register_artifact(registry, "sage", workload="wan", kind="attention_backend", backend="SAGE_ATTN",
                      payload=str(cli.tmp / "sage-2.bin"))
    items = [parse_item(item) for item in (execution(), benchmark(), perceptual())]
    registry.store.append(artifact_stream("sage"), evidence_events(subject, None, items), actor="late-worker")
    state = show(cli, "sage")
    assert state["evidence"] == {} and state["benchmark_attempts"] == 0
    assert promote(cli, "sage")["decision"] == "held"
    assert cli("replay", "--verify").exit_code == 0


# -- a change of what the artifact claims starts a new decision ---------------------------

@pytest.mark.parametrize("change", [["--backend", "FLASH_ATTN"], ["--payload", "sage-2.bin"]])
def test_a_new_identity_starts_a_new_decision(cli, change):
    cli.load("sage", [execution(), benchmark(), perceptual()])
    assert promote(cli, "sage")["decision"] == "promoted"
    claims = {"--backend": "SAGE_ATTN", "--payload": str(cli.tmp / "sage.bin")}
    option, value = change
    claims[option] = str(cli.tmp / value) if option == "--payload" else value
    again = cli("artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend",
                *[part for pair in claims.items() for part in pair], "--new-identity")
    assert again.exit_code == 0, again.output
    state = show(cli, "sage")
    assert state["decision"] == "registered" and state["evidence"] == {} and state["benchmark_attempts"] == 0
    assert state["identity_changed"]["position"] == head(cli)
    assert list(state["identity_changed"]["changes"]) == [option.removeprefix("--").replace("payload", "payload_sha256")]
    assert [v["decision"] for v in state["verdicts"]] == ["promoted"]  # kept in history
    shown = cli("show", "sage").output
    assert "identity changed at position" in shown and "no longer count" in shown
    assert promote(cli, "sage")["decision"] == "held"


def test_the_same_claims_again_continue_the_decision(cli):
    cli.load("sage", [execution(), benchmark(), perceptual()])
    promote(cli, "sage")
    before = head(cli)
    cli("artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend", "--backend", "SAGE_ATTN",
        "--payload", str(cli.tmp / "sage.bin"))
    assert head(cli) == before and show(cli, "sage")["decision"] == "promoted"


# -- a human decision names the verdict it answers ------------------------------------------

def test_a_human_decision_on_a_verdict_that_is_no_longer_the_latest_is_refused(cli):
    cli("artifact", "register", "cache", "--workload", "ltx", "--kind", "step_cache")
    cli.load("cache", [execution(None), benchmark(1.5), perceptual(0.97)])
    first = promote(cli, "cache")
    assert first["decision"] == "recorded"
    seen = show(cli, "cache")["verdict_event_id"]
    cli.load("cache", [perceptual(0.96)])
    assert promote(cli, "cache")["decision"] == "recorded"
    latest = show(cli, "cache")["verdict_event_id"]
    assert latest != seen
    before = head(cli)
    stale = cli("approve", "cache", "--reason", "frames look fine", "--verdict", seen)
    one_line_refusal(stale)
    assert seen in stale.output and "latest" in stale.output and head(cli) == before
    assert cli("approve", "cache", "--reason", "frames look fine", "--verdict", latest).exit_code == 0
    state = show(cli, "cache")
    assert state["decision"] == "promoted" and state["human"]["verdict_event_id"] == latest
    # revoke by default answers the latest verdict
    assert cli("revoke", "cache", "--reason", "second look").exit_code == 0
    assert show(cli, "cache")["human"]["verdict_event_id"] == latest


def test_a_human_decision_is_appended_only_on_the_state_it_was_checked_against(cli, monkeypatch):
    """Evidence lands between reading the verdict and appending the revoke: the revoke is refused."""
    from read_side import land_before_append

    cli.load("sage", [execution(), benchmark(), perceptual()])
    assert promote(cli, "sage")["decision"] == "promoted"
    land_before_append(monkeypatch, lambda: cli.load("sage", [benchmark(1.05)]))
    before = head(cli)
    result = cli("revoke", "sage", "--reason", "too slow now")
    one_line_refusal(result)
    assert "changed while the revoke" in result.output and head(cli) == before + 1
    assert show(cli, "sage")["human"] is None


# -- attempts, contract versions, promote racing an import -----------------------------------

def test_attempts_are_counted_per_identity_and_survive_a_revoke(cli):
    cli.load("sage", [execution(), benchmark(1.02), perceptual()])
    assert promote(cli, "sage")["decision"] == "rejected"
    cli("revoke", "sage", "--reason", "try again")
    cli.load("sage", [execution(), benchmark(1.4)])
    verdict = promote(cli, "sage")
    assert verdict["benchmark_attempts"] == 2
    assert any("2 benchmark attempts for this identity" in reason for reason in verdict["reasons"])
    assert show(cli, "sage")["benchmark_attempts"] == 2
    assert "2 benchmark attempt(s)" in cli("show", "sage").output
    assert "2 benchmark attempt(s)" in cli("promote", "sage").output
    report = json.loads(cli("report", "--format", "json").output)
    assert {"artifact": "sage", "decision": verdict["decision"], "benchmark_attempts": 2} in report["attempts"]


def test_final_verdicts_under_an_older_contract_are_flagged_and_others_decided_again(cli):
    cli("artifact", "register", "tea", "--workload", "wan", "--kind", "step_cache")
    cli.load("sage", [execution(), benchmark(), perceptual(0.991)])
    cli.load("tea", [execution(None), perceptual(0.985)])  # no benchmark: held
    assert promote(cli, "sage")["decision"] == "promoted"
    assert promote(cli, "tea")["decision"] == "held"
    tighter = cli.tmp / "tighter.yaml"
    tighter.write_text(MANIFEST.replace("min_ssim: 0.98", "min_ssim: 0.995"))
    assert cli("workload", "declare", str(tighter)).exit_code == 0

    note = "promoted under contract v1; current v2"
    assert show(cli, "sage")["contract_note"] == note and note in cli("show", "sage").output
    assert show(cli, "tea")["contract_note"] is None
    report = json.loads(cli("report", "--format", "json").output)
    assert [(e["artifact"], e["note"]) for e in report["contracts_moved"]] == [("sage", note)]
    assert note in cli("report").output
    outcomes = {o["artifact"]: o for o in json.loads(cli("what-if", str(tighter), "--json").output)}
    assert outcomes["sage"]["contract_note"] == note and outcomes["sage"]["new_decision"] == "quarantined"
    assert note in cli("what-if", str(tighter)).output

    # The final verdict stands (under the contract it names); a held one is decided again under v2.
    standing = promote(cli, "sage")
    assert standing["decision"] == "promoted" and standing["contract_version"] == 1 and not standing["appended"]
    cli.load("tea", [benchmark()])
    again = promote(cli, "tea")
    assert again["contract_version"] == 2 and again["decision"] == "quarantined"


def test_promote_decides_again_when_an_import_lands_while_it_decides(cli, monkeypatch):
    import registry.gate as gate  # promote imports the gate's decide when it decides (not to return a standing verdict)

    cli.load("sage", [execution(), benchmark(1.4), perceptual()])
    decide = gate.decide
    raced = []

    def decide_while_importing(*args, **kwargs):
        verdict = decide(*args, **kwargs)
        if not raced:
            raced.append(cli.load("sage", [benchmark(1.02)]).exit_code)
        return verdict

    monkeypatch.setattr(gate, "decide", decide_while_importing)
    verdict = promote(cli, "sage")
    assert raced == [0]
    # decided on the state with the later benchmark, not the one read first
    assert verdict["decision"] == "rejected" and verdict["benchmark_attempts"] == 2


def test_promote_gives_up_with_one_line_when_imports_never_stop(cli, monkeypatch):
    import registry.gate as gate  # promote imports the gate's decide when it decides (not to return a standing verdict)

    cli.load("sage", [execution(), benchmark(1.4), perceptual()])
    decide = gate.decide

    def decide_while_importing(*args, **kwargs):
        verdict = decide(*args, **kwargs)
        cli.load("sage", [execution()])
        return verdict

    monkeypatch.setattr(gate, "decide", decide_while_importing)
    result = cli("promote", "sage")
    one_line_refusal(result)
    assert "run promote again" in result.output
    assert show(cli, "sage")["verdicts"] == []


def test_a_registry_upgraded_from_before_identities_folds_its_read_models_again(tmp_path):
    """Rows an earlier fold wrote have another shape: the upgrade empties them and the next read rebuilds."""
    from alembic import command
    from sqlalchemy import text

    from registry.events.database import alembic_config, make_engine, upgrade
    from registry.events.store import EventStore, NewEvent
    from read_side import Reads

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url, must_exist=False)
    command.upgrade(alembic_config(url), "0004")
    store = EventStore(engine)
    [position] = store.append("artifact:old", [NewEvent("ArtifactRegistered", {
        "artifact": "old", "kind": "step_cache", "workload": "wan", "payload_sha256": "ab" * 32})], actor="past")
    old_shape = json.dumps({"artifact": "old", "workload": "wan", "decision": "registered"})
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO projection_artifacts VALUES ('old', 'wan', 'registered', NULL, NULL, :p, :s, :h)"),
                     {"p": position, "s": old_shape, "h": "0" * 64})
        conn.execute(text("INSERT INTO projection_checkpoint VALUES ('log', :p)"), {"p": position})
    upgrade(engine)
    state = Reads(EventStore(engine)).artifact("old")
    assert state["benchmark_attempts"] == 0 and state["identity"] is not None
    engine.dispose()


KERNEL_MANIFEST = """
workload: op
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""
MODLN = ("--op", "modulated_layernorm", "--entry", "registry.kernels.modln:modulated_layernorm_triton")


@pytest.fixture
def kernel_cli(registry_cli):
    (registry_cli.tmp / "op.yaml").write_text(KERNEL_MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "op.yaml")).exit_code == 0
    assert registry_cli("artifact", "register", "modln", "--workload", "op", "--kind", "fused_kernel",
                        *MODLN).exit_code == 0
    return registry_cli


def _re_register_modln(url):
    register_artifact(opened(url, actor="other"), "modln", workload="op", kind="fused_kernel",
                      op=MODLN[1], entry=MODLN[3], payload_sha256="cd" * 32)


def test_evaluate_records_nothing_for_a_registration_that_changed_while_it_measured(kernel_cli, monkeypatch):
    import registry.kernels.evaluate as kernel_evaluation

    measure = kernel_evaluation.evaluate_kernel

    def measure_then_re_register(*args, **kwargs):
        items = measure(*args, **kwargs)
        _re_register_modln(kernel_cli.url)
        return items

    monkeypatch.setattr(kernel_evaluation, "evaluate_kernel", measure_then_re_register)
    before = head(kernel_cli)
    result = kernel_cli("evaluate", "modln", "--warmup", "0")
    one_line_refusal(result)
    assert "re-registered" in result.output and head(kernel_cli) == before + 1
    state = show(kernel_cli, "modln")
    assert state["payload_sha256"] == "cd" * 32 and state["evidence"] == {}


def test_an_emitted_document_names_its_payload_and_is_refused_for_another(kernel_cli):
    out = kernel_cli.tmp / "modln.json"
    assert kernel_cli("evaluate", "modln", "--warmup", "0", "--emit", str(out)).exit_code == 0
    measured = json.loads(out.read_text())["payload_sha256"]
    assert measured == show(kernel_cli, "modln")["payload_sha256"]
    _re_register_modln(kernel_cli.url)
    before = head(kernel_cli)
    refused = kernel_cli("evidence", "import", str(out))
    one_line_refusal(refused)
    assert measured[:12] in refused.output and head(kernel_cli) == before
