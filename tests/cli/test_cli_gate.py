"""Contracts, evidence import, promote and show end to end through the CLI on a real SQLite registry."""
from __future__ import annotations

import json

import pytest
from cli_helpers import head

PERCEPTUAL_MANIFEST = """
workload: wan-t2v-1.3b-480p
sampling: {height: 480, width: 832, frames: 49, steps: 20, seed: 1024, dtype: bfloat16}
fidelity:
  tier: perceptual
  min_ssim: 0.98
  max_lpips: 0.02
  frame_set: wan-1.3b-fixed-seed-8
  seed: 1024
  frames: 8
speed:
  min_speedup: 1.1
  runs_per_arm: 4
  protocol: paired
  decision: point
"""


def execution(backend="SAGE_ATTN", effective=None, fallbacks=0):
    return {"kind": "execution", "candidate_calls": 6143, "fallbacks": fallbacks,
            "requested_backend": backend, "effective_backend": effective or backend}


def benchmark(ratio, timer="cuda_event", device="NVIDIA H200"):
    baseline = [15.17, 15.16, 15.18, 15.15]
    return {"kind": "benchmark", "protocol": "paired", "device": device, "timer": timer,
            "baseline_s": baseline, "candidate_s": [b / ratio for b in baseline], "schedule": ["BC", "CB", "BC", "CB"]}


def perceptual(worst_ssim, worst_lpips, frame_set="wan-1.3b-fixed-seed-8"):
    ssim = [0.999] * 7 + [worst_ssim]
    lpips = [0.001] * 7 + [worst_lpips]
    return {"kind": "perceptual", "frame_set": frame_set, "seed": 1024, "ssim": ssim, "lpips": lpips,
            "vbench": None, "stage_status": "ok"}


@pytest.fixture
def cli(registry_cli):
    manifest = registry_cli.tmp / "wan.yaml"
    manifest.write_text(PERCEPTUAL_MANIFEST)
    assert registry_cli("workload", "declare", str(manifest)).exit_code == 0
    return registry_cli


def import_doc(cli, artifact, items, run=None):
    path = cli.tmp / f"{artifact}-{len(items)}-{run}.json"
    document = {"format": "registry.evidence/1", "artifact": artifact, "evidence": items}
    if run:
        document["run"] = run
    path.write_text(json.dumps(document))
    return cli("evidence", "import", str(path))


def register(cli, artifact, kind="attention_backend", backend="SAGE_ATTN"):
    args = ["artifact", "register", artifact, "--workload", "wan-t2v-1.3b-480p", "--kind", kind]
    if backend:
        args += ["--backend", backend]
    result = cli(*args)
    assert result.exit_code == 0, result.output


def test_redeclaring_a_contract_versions_it(cli):
    same = json.loads(cli("workload", "declare", str(cli.tmp / "wan.yaml"), "--json").output)
    assert same["contract_version"] == 1 and same["appended"] is False
    changed = cli.tmp / "wan2.yaml"
    changed.write_text(PERCEPTUAL_MANIFEST.replace("min_ssim: 0.98", "min_ssim: 0.99"))
    declared = json.loads(cli("workload", "declare", str(changed), "--json").output)
    assert declared["contract_version"] == 2 and declared["appended"] is True


def test_invalid_manifest_is_refused_naming_the_field(cli):
    bad = cli.tmp / "bad.yaml"
    bad.write_text(PERCEPTUAL_MANIFEST.replace("min_ssim: 0.98", "min_ssim: 1.5"))
    before = head(cli)
    result = cli("workload", "declare", str(bad))
    assert result.exit_code == 1 and "min_ssim" in result.output and len(result.output.strip().splitlines()) == 1
    assert head(cli) == before


def test_attention_artifact_must_name_its_backend(cli):
    result = cli("artifact", "register", "x", "--workload", "wan-t2v-1.3b-480p", "--kind", "attention_backend")
    assert result.exit_code == 1 and "backend" in result.output


@pytest.mark.parametrize(
    "item, message",
    [
        ({**benchmark(1.2), "speedup": 1.2}, "speedup"),
        ({**perceptual(0.99, 0.01), "worst_ssim": 0.99}, "worst_ssim"),
        ({**benchmark(1.2), "baseline_s": [1.0, -1.0, 1.0, 1.0]}, "baseline_s"),
        ({"kind": "telemetry"}, "telemetry"),
    ],
)
def test_bad_evidence_is_refused_whole(cli, item, message):
    register(cli, "sage")
    before = head(cli)
    result = import_doc(cli, "sage", [execution(), item])
    assert result.exit_code == 1 and message in result.output
    assert head(cli) == before


def test_a_first_document_without_vbench_is_accepted_and_read_as_not_measured(cli):
    """Nobody measures VBench on CPU: an omitted optional measurement means "not measured", like null."""
    register(cli, "sage")
    without_vbench = {key: value for key, value in perceptual(0.9912, 0.0071).items() if key != "vbench"}
    result = import_doc(cli, "sage", [execution(), benchmark(1.25), without_vbench])
    assert result.exit_code == 0, result.output
    verdict = json.loads(cli("promote", "sage", "--json").output)
    assert verdict["decision"] == "promoted"
    gated = cli.tmp / "vbench.yaml"
    gated.write_text(PERCEPTUAL_MANIFEST.replace("max_lpips: 0.02", "max_lpips: 0.02\n  min_vbench: 0.8"))
    assert cli("workload", "declare", str(gated)).exit_code == 0
    register(cli, "sage-2")
    import_doc(cli, "sage-2", [execution(), benchmark(1.25), without_vbench])
    held = json.loads(cli("promote", "sage-2", "--json").output)
    assert (held["decision"], held["rule"]) == ("held", "fidelity.metric_absent")


def test_nan_spelled_in_json_is_refused(cli):
    register(cli, "sage")
    path = cli.tmp / "nan.json"
    path.write_text('{"format": "registry.evidence/1", "artifact": "sage", "evidence": '
                    '[{"kind": "perceptual", "frame_set": "f", "seed": 1, "ssim": [NaN], "lpips": null, '
                    '"vbench": null, "stage_status": "ok"}]}')
    before = head(cli)
    assert cli("evidence", "import", str(path)).exit_code == 1
    assert head(cli) == before


def test_unknown_artifact_is_refused(cli):
    before = head(cli)
    result = import_doc(cli, "ghost", [execution()])
    assert result.exit_code == 1 and "ghost" in result.output and head(cli) == before


def test_lossy_control_is_quarantined_on_its_two_metrics(cli):
    register(cli, "lossy", kind="step_cache", backend=None)
    assert import_doc(cli, "lossy", [{"kind": "execution", "candidate_calls": 12, "fallbacks": 0},
                                     benchmark(1.21), perceptual(0.71, 0.24)]).exit_code == 0
    result = cli("promote", "lossy", "--json")
    verdict = json.loads(result.output)
    assert result.exit_code == 3 and verdict["decision"] == "quarantined"
    failing = {m["metric"] for m in verdict["margins"] if not m["passed"]}
    assert failing == {"ssim", "lpips"}
    assert len(verdict["evidence"]) == 3


def test_perceptually_clean_artifact_is_promoted_with_margins(cli):
    register(cli, "sage")
    import_doc(cli, "sage", [execution(), benchmark(1.25), perceptual(0.9912, 0.0071)], run="run-1")
    result = cli("promote", "sage", "--json")
    verdict = json.loads(result.output)
    assert result.exit_code == 0 and verdict["decision"] == "promoted" and verdict["appended"] is True
    margins = {m["metric"]: m["margin"] for m in verdict["margins"]}
    assert margins["ssim"] == pytest.approx(0.0112, abs=1e-12) and margins["lpips"] == pytest.approx(0.0129, abs=1e-12)
    assert verdict["speedup"] == pytest.approx(1.25)
    # Final for this payload: promoting again returns the standing verdict and appends nothing.
    before = head(cli)
    again = json.loads(cli("promote", "sage", "--json").output)
    assert again["appended"] is False and again["decision"] == "promoted" and head(cli) == before
    shown = json.loads(cli("show", "sage", "--json").output)
    assert shown["decision"] == "promoted" and shown["verdict"]["evidence_ids"] == verdict["evidence_ids"]
    assert "promoted" in cli("show", "sage").output.lower()


def test_missing_evidence_holds_and_show_says_registered_first(cli):
    register(cli, "sage")
    assert json.loads(cli("show", "sage", "--json").output)["decision"] == "registered"
    result = cli("promote", "sage", "--json")
    verdict = json.loads(result.output)
    assert result.exit_code == 3 and verdict["decision"] == "held" and verdict["rule"] == "execution.missing"


def test_silent_fallback_is_quarantined_naming_the_backend_that_ran(cli):
    register(cli, "flash", backend="FLASH_ATTN")
    import_doc(cli, "flash", [execution("FLASH_ATTN", effective="FLASH_ATTN_FALLBACK_SDPA"), benchmark(1.0),
                              perceptual(1.0, 0.0)])
    verdict = json.loads(cli("promote", "flash", "--json").output)
    assert verdict["decision"] == "quarantined" and verdict["rule"] == "execution.backend_mismatch"
    assert any("FLASH_ATTN_FALLBACK_SDPA" in reason for reason in verdict["reasons"])


def test_interpreter_timings_hold(cli):
    register(cli, "sage")
    import_doc(cli, "sage", [execution(), benchmark(3.0, timer="interpreter", device="cpu (triton interpreter)"),
                             perceptual(0.999, 0.001)])
    verdict = json.loads(cli("promote", "sage", "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "speed.interpreter"
    assert any("interpreter" in reason for reason in verdict["reasons"])


def test_evidence_from_another_frame_set_is_refused(cli):
    register(cli, "sage")
    import_doc(cli, "sage", [execution(), benchmark(1.3), perceptual(0.999, 0.001, frame_set="other-set")])
    verdict = json.loads(cli("promote", "sage", "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "fidelity.frame_set_mismatch"
    assert any("other-set" in r and "wan-1.3b-fixed-seed-8" in r for r in verdict["reasons"])


def test_idempotent_evidence_run(cli):
    register(cli, "sage")
    import_doc(cli, "sage", [execution()], run="run-7")
    before = head(cli)
    assert import_doc(cli, "sage", [execution()], run="run-7").exit_code == 0
    assert head(cli) == before


def test_a_lone_surrogate_in_evidence_is_refused_in_one_line(cli):
    """JSON can spell a lone surrogate (\\ud800); it is not Unicode text, and nothing is recorded."""
    register(cli, "sage")
    before = head(cli)
    path = cli.tmp / "surrogate.json"
    document = {"format": "registry.evidence/1", "artifact": "sage", "evidence": [benchmark(1.3, device="H200 \ud800")]}
    path.write_text(json.dumps(document))  # ASCII JSON: the surrogate travels as its \u escape
    result = cli("evidence", "import", str(path))
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    # Refused while the document is parsed, naming where, before anything reaches the store.
    assert result.output.count("\n") == 1, result.output
    assert "document: evidence[0].device: text holds a lone surrogate" in result.output, result.output
    assert head(cli) == before
