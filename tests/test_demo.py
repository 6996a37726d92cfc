"""A reduced demo campaign (few runs) decides as the demo promises, on evidence that exists.

What is promised depends on the device, never on how fast this machine is:
on a CPU the Triton kernel is held on interpreter timings, on a CUDA GPU it
is judged on CUDA-event timings; the honest candidates are decided by the
speed gate on whichever side of it this machine's timings land.
"""
from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner

from registry.app import open_registry
from registry.app.campaign import KERNEL_ARTIFACT, Row, check_expectations, near_gate_notes
from registry.cli.main import main

ON_GPU = torch.cuda.is_available()


def test_reduced_demo_decides_as_promised(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--db", url, "demo", "--runs", "2", "--warmup", "1", "--out", str(out),
                                       "--check", "--json"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.output)
    decisions = {row["artifact"]: (row["decision"], row["rule"]) for row in outcome["rows"]}
    speed_decided = {("promoted", "speed.passed"), ("rejected", "speed.below_gate")}
    assert decisions["sdpa-attention"] in speed_decided
    assert decisions["step-cache"] in speed_decided
    assert decisions["lossy-skip"] == ("quarantined", "fidelity.failed")
    assert decisions["flash-claimed-fallback"] == ("quarantined", "execution.fallback")
    if ON_GPU:
        assert decisions[KERNEL_ARTIFACT] in speed_decided | {("quarantined", "parity.failed")}
    else:
        assert decisions[KERNEL_ARTIFACT] == ("held", "speed.interpreter")
    assert outcome["problems"] == []
    assert all("reaches across the gate" in note for note in outcome["near_gate"])

    store = open_registry(url).store
    verdicts = [e for e in store.read_all() if e.type == "VerdictRendered"]
    assert len(verdicts) == 5
    for verdict in verdicts:
        ids = verdict.payload["verdict"]["evidence_ids"]
        assert ids, verdict.payload["artifact"]
        for event_id in ids:
            evidence = store.get(event_id)
            assert evidence is not None and evidence.position < verdict.position
            assert evidence.payload["artifact"] == verdict.payload["artifact"]
    assert store.verify().intact
    kernel_benchmark = next(e for e in store.read_all()
                            if e.type == "BenchmarkMeasured" and e.payload["artifact"] == KERNEL_ARTIFACT)
    assert kernel_benchmark.payload["item"]["timer"] == ("cuda_event" if ON_GPU else "interpreter")
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert {p.name for p in out.glob("*.png")} == {"sdpa-attention.png", "step-cache.png", "lossy-skip.png",
                                                    "flash-claimed-fallback.png"}
    verified = CliRunner().invoke(main, ["--db", url, "replay", "--verify"])
    assert verified.exit_code == 0, verified.output

    # Every candidate ships as a verified bundle, and the demo ends by saying what would ship here and why not the rest.
    from registry.bundles import verify_directory

    for name in decisions:
        state = json.loads(CliRunner().invoke(main, ["--db", url, "show", name, "--json"]).output)
        assert verify_directory(out / "bundles" / name).digest == state["payload_sha256"]
    shipped = {found["workload"]: found for found in outcome["resolve"]}
    video = {o["artifact"]: o["code"] for o in shipped["tiny-dit-t2v"]["others"]}
    assert video["lossy-skip"] == video["flash-claimed-fallback"] == "not_promoted"
    promoted = {name for name, (decision, _) in decisions.items() if decision == "promoted"}
    if promoted:
        assert shipped["tiny-dit-t2v"]["match"]["artifact"] in promoted
    kernel = {o["artifact"]: o["code"] for o in shipped["tiny-dit-modln-op"]["others"]}
    if decisions["modln-triton"][0] != "promoted":
        assert kernel == {"modln-triton": "not_promoted"} and shipped["tiny-dit-modln-op"]["match"] is None

    # The demo signs its lock with a key it created in its out directory, and the runtime loads from that lock.
    signed = outcome["signed_lock"]
    if promoted - {KERNEL_ARTIFACT}:
        assert signed["loaded"] == shipped["tiny-dit-t2v"]["match"]["artifact"]
        assert signed["lock"] == str(out / "registry.lock.json")
        assert oct(os.stat(out / "signing.key").st_mode)[-3:] == "600"
        held = CliRunner().invoke(main, ["--db", url, "lock", "verify", signed["lock"], "--key", signed["public_key"],
                                         "--bundles", str(out / "bundles")])
        assert held.exit_code == 0, held.output
        assert "checked lock file, signature and expiry, bundles, registry" in held.output
    else:
        assert signed is None

def verdict_row(artifact: str, decision: str, rule: str, *, speedup: float | None = None,
                ci: tuple[float, float] | None = None, reasons: tuple[str, ...] = ()) -> Row:
    margins = [] if speedup is None else [{"metric": "speedup", "value": speedup, "threshold": 1.2,
                                           "margin": speedup - 1.2, "passed": speedup >= 1.2}]
    verdict = {"decision": decision, "rule": rule, "reasons": list(reasons) or [f"{rule}: scripted"],
               "margins": margins, "speedup": speedup, "speedup_ci": list(ci) if ci else None}
    return Row(artifact, "kind", verdict, None, None, None)


def promised_rows(kernel: Row) -> list[Row]:
    return [verdict_row("sdpa-attention", "promoted", "speed.passed", speedup=1.9, ci=(1.7, 2.1)),
            verdict_row("step-cache", "rejected", "speed.below_gate", speedup=1.1, ci=(1.0, 1.3)),
            verdict_row("lossy-skip", "quarantined", "fidelity.failed", reasons=("worst-frame ssim 0.74",)),
            verdict_row("flash-claimed-fallback", "quarantined", "execution.fallback",
                        reasons=("'MATH_REFERENCE' ran instead",)),
            kernel]


@pytest.mark.parametrize("on_gpu,kernel,problem", [
    (False, verdict_row(KERNEL_ARTIFACT, "held", "speed.interpreter"), None),
    (False, verdict_row(KERNEL_ARTIFACT, "held", "evaluation_failed"), "held by evaluation_failed"),
    (False, verdict_row(KERNEL_ARTIFACT, "promoted", "speed.passed", speedup=3.0), "promoted by speed.passed"),
    (True, verdict_row(KERNEL_ARTIFACT, "promoted", "speed.passed", speedup=3.0), None),
    (True, verdict_row(KERNEL_ARTIFACT, "quarantined", "parity.failed"), None),
    (True, verdict_row(KERNEL_ARTIFACT, "held", "speed.interpreter"), "held by speed.interpreter"),
])
def test_check_follows_the_device(on_gpu, kernel, problem):
    problems = check_expectations(promised_rows(kernel), on_gpu=on_gpu)
    assert problems == ([] if problem is None else [next(p for p in problems if problem in p)])


def test_check_refuses_an_honest_candidate_not_decided_by_speed():
    rows = promised_rows(verdict_row(KERNEL_ARTIFACT, "held", "speed.interpreter"))
    rows[0] = verdict_row("sdpa-attention", "held", "speed.missing")
    rows.pop()
    assert check_expectations(rows, on_gpu=False) == [
        "sdpa-attention: held by speed.missing, expected promoted by speed.passed or rejected by speed.below_gate",
        f"{KERNEL_ARTIFACT}: no verdict"]


def test_a_speed_verdict_whose_interval_reaches_across_the_gate_is_named():
    rows = promised_rows(verdict_row(KERNEL_ARTIFACT, "held", "speed.interpreter"))
    assert near_gate_notes(rows) == [
        "step-cache: speedup 1.1x, 95% CI 1-1.3x, reaches across the gate 1.2x: within this machine's timing "
        "noise, so another run may decide it the other way"]


def test_the_campaign_scopes_its_process_wide_settings(monkeypatch):
    """One torch thread and, without a GPU, Triton's interpreter inside; both put back on the way out."""
    from registry.app.campaign import one_torch_thread
    from registry.app.kernels import triton_runtime

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    threads = torch.get_num_threads()
    with one_torch_thread(), triton_runtime() as device:
        assert torch.get_num_threads() == 1
        assert device == ("gpu" if ON_GPU else "cpu")
        assert os.environ.get("TRITON_INTERPRET") == (None if ON_GPU else "1")
    assert torch.get_num_threads() == threads and "TRITON_INTERPRET" not in os.environ
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a caller's own setting is kept, and restored
    with triton_runtime():
        assert os.environ["TRITON_INTERPRET"] == "0"
    assert os.environ["TRITON_INTERPRET"] == "0"
