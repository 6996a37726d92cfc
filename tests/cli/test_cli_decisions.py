"""A scripted history through the CLI: verdicts, a contract change, what-if, revoke, approve, as-of."""
from __future__ import annotations

import json

import pytest
from store_helpers import head_of

MANIFEST = """
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""
ADVISORY = """
workload: ltx-cache
fidelity: {tier: advisory, min_ssim: 0.95, frame_set: ltx-8}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""


def evidence(artifact, worst_ssim, ratio, frame_set="wan-8"):
    return {"format": "registry.evidence/1", "artifact": artifact, "evidence": [
        {"kind": "execution", "candidate_calls": 40, "fallbacks": 0},
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
         "baseline_s": [2.0, 2.02], "candidate_s": [2.0 / ratio, 2.02 / ratio], "schedule": ["BC", "CB"]},
        {"kind": "perceptual", "frame_set": frame_set, "seed": 1024, "ssim": [0.999, worst_ssim], "lpips": None,
         "vbench": None, "stage_status": "ok"}]}


@pytest.fixture
def cli(registry_cli, tmp_path):
    invoke = registry_cli

    def load(name, document):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        assert invoke("evidence", "import", str(path)).exit_code == 0

    for name, text in (("wan", MANIFEST), ("ltx", ADVISORY)):
        (tmp_path / f"{name}.yaml").write_text(text)
        assert invoke("workload", "declare", str(tmp_path / f"{name}.yaml")).exit_code == 0
    for artifact, workload in (("sage", "wan"), ("teacache", "wan"), ("fora", "ltx-cache")):
        kind = "attention_backend" if artifact == "sage" else "step_cache"
        extra = ["--backend", "SAGE_ATTN"] if artifact == "sage" else []
        assert invoke("artifact", "register", artifact, "--workload", workload, "--kind", kind, *extra).exit_code == 0
    load("sage", {**evidence("sage", 0.991, 1.4), "evidence": [
        {**evidence("sage", 0.991, 1.4)["evidence"][0], "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"},
        *evidence("sage", 0.991, 1.4)["evidence"][1:]]})
    load("teacache", evidence("teacache", 0.985, 1.3))
    load("fora", evidence("fora", 0.97, 1.5, frame_set="ltx-8"))
    invoke.load = load
    return invoke


def decision(cli, artifact, *extra):
    return json.loads(cli("show", artifact, "--json", *extra).output)["decision"]


def test_scripted_history(cli):
    assert cli("promote", "sage").exit_code == 0
    assert cli("promote", "teacache").exit_code == 0
    fora = json.loads(cli("promote", "fora", "--json").output)
    assert fora["decision"] == "recorded" and fora["rule"] == "advisory"
    after_verdicts = head_of(cli.url)

    # What-if: tightening min_ssim to 0.99 would quarantine teacache (0.985) and keep sage (0.991).
    tighter = cli.tmp / "tighter.yaml"
    tighter.write_text(MANIFEST.replace("min_ssim: 0.98", "min_ssim: 0.99"))
    outcomes = {o["artifact"]: o for o in json.loads(cli("what-if", str(tighter), "--json").output)}
    assert (outcomes["teacache"]["old_decision"], outcomes["teacache"]["new_decision"]) == ("promoted", "quarantined")
    assert outcomes["teacache"]["changed"] and not outcomes["sage"]["changed"]
    moved = outcomes["teacache"]["moved_margins"][0]
    assert moved["metric"] == "ssim" and moved["old_margin"] == pytest.approx(0.005) \
        and moved["new_margin"] == pytest.approx(-0.005)
    assert head_of(cli.url) == after_verdicts  # what-if appended nothing
    assert "1 of 2 decisions would change" in cli("what-if", str(tighter)).output

    # The contract change itself: a new version; standing promotions stay final until revoked.
    assert json.loads(cli("workload", "declare", str(tighter), "--json").output)["contract_version"] == 2
    assert decision(cli, "teacache") == "promoted"

    # Revoke: held until new evidence and a new verdict; the old evidence no longer counts.
    assert cli("revoke", "teacache", "--reason", "").exit_code == 1
    assert cli("revoke", "teacache", "--reason", "contract v2 tightened SSIM", actor="bob").exit_code == 0
    shown = json.loads(cli("show", "teacache", "--json").output)
    assert shown["decision"] == "held" and shown["human"]["person"] == "bob"
    held = json.loads(cli("promote", "teacache", "--json").output)
    assert held["decision"] == "held" and held["rule"] == "execution.missing"
    cli.load("teacache-2", evidence("teacache", 0.985, 1.3))
    requalified = json.loads(cli("promote", "teacache", "--json").output)
    assert requalified["decision"] == "quarantined" and requalified["contract_version"] == 2

    # Approve: only an advisory artifact with a recorded verdict, only with a reason.
    assert cli("approve", "sage", "--reason", "looks fine").exit_code == 1
    assert cli("approve", "fora", "--reason", "  ").exit_code == 1
    assert cli("approve", "fora", "--reason", "reviewed frames 0-7 by eye", actor="carol").exit_code == 0
    fora_state = json.loads(cli("show", "fora", "--json").output)
    assert fora_state["decision"] == "promoted" and fora_state["decided_by"] == "human"

    # As of the moment the first verdicts were in, the registry answered differently.
    assert decision(cli, "teacache", "--as-of", str(after_verdicts)) == "promoted"
    assert decision(cli, "fora", "--as-of", str(after_verdicts)) == "recorded"
    history = cli("history", "teacache").output
    assert "revoke by bob: contract v2 tightened SSIM" in history and "rested on" in history

    report = json.loads(cli("report", "--format", "json").output)
    assert [row["artifact"] for row in report["leaderboard"]["wan"]] == ["sage"]
    assert [row["artifact"] for row in report["leaderboard"]["ltx-cache"]] == ["fora"]
    assert report["caught"]["quarantined"] == [{"rule": "fidelity.failed", "count": 1, "artifacts": ["teacache"]}]
    before = json.loads(cli("report", "--format", "json", "--as-of", str(after_verdicts)).output)
    assert [row["artifact"] for row in before["leaderboard"]["wan"]] == ["sage", "teacache"]
    assert [row["artifact"] for row in before["waiting"]] == ["fora"]
    assert cli("replay", "--verify").exit_code == 0
