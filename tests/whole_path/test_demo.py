"""A reduced demo campaign (few pairs) decides as the demo promises, on evidence that exists.

What is promised depends on the device, never on how fast this machine is:
on a CPU the Triton kernel (a triton_kernel bundle: its cubins) is not
evaluated, nothing here can launch it, and it is held for want of execution
evidence; on a CUDA GPU the registry's launcher runs and times it and the
speed gate judges it; every other candidate is timed in a benchmark session
that stops as soon as the confident rule decides, and the honest candidates
are decided by the speed gate on whichever side of it this machine's
timings land, or held by the confident rule at --runs pairs with bounds that
reach across the gate.

The reduced campaign takes about ten seconds on a shared two-core machine, so
it runs once per test run (`reduced_demo`, session-scoped; `make test` sends
a file's tests to one xdist worker, so one worker builds it) and the tests
that change its registry work on a copy.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from registry.app.campaign import KERNEL_ARTIFACT, Row, check_expectations, near_gate_notes
from registry.cli.main import main
from store_helpers import opened

ON_GPU = torch.cuda.is_available()
RUNS = 6  # the fewest even pair count the confident rule at alpha 0.05 can decide in (5 pairs), rounded up


def demo_arguments(folder: Path) -> list[str]:
    """The reduced campaign on demo.db in `folder`, writing into its out folder."""
    return ["--db", f"sqlite:///{folder / 'demo.db'}", "demo", "--runs", str(RUNS), "--warmup", "1",
            "--out", str(folder / "out"), "--check", "--json"]


@dataclass(frozen=True)
class ReducedDemo:
    folder: Path  # demo.db and the out folder
    output: str  # what `demo --json` printed

    def copy(self, to: Path) -> Path:
        """The campaign's registry (its WAL files too) and out folder, copied for a test that changes them."""
        shutil.copytree(self.folder, to)
        return to


@pytest.fixture(scope="session")
def reduced_demo(tmp_path_factory) -> ReducedDemo:
    folder = tmp_path_factory.mktemp("reduced-demo")
    result = CliRunner().invoke(main, demo_arguments(folder))
    assert result.exit_code == 0, result.output
    return ReducedDemo(folder, result.output)


def test_reduced_demo_decides_as_promised(reduced_demo):
    url = f"sqlite:///{reduced_demo.folder / 'demo.db'}"
    out = reduced_demo.folder / "out"
    outcome = json.loads(reduced_demo.output)
    rows = {row["artifact"]: row for row in outcome["rows"]}
    decisions = {row["artifact"]: (row["decision"], row["rule"]) for row in outcome["rows"]}
    speed_decided = {("promoted", "speed.passed"), ("rejected", "speed.below_gate")}
    held_by_the_rule = ("held", "speed.undecided")
    for honest in ("sdpa-attention", "step-cache"):
        # Decided on speed, or held by the confident rule only at --runs pairs, naming bounds across the gate.
        assert decisions[honest] in speed_decided | {held_by_the_rule}
        if decisions[honest] == held_by_the_rule:
            assert rows[honest]["stop"] == "max_pairs" and rows[honest]["pairs"] == RUNS
            assert "running bounds [" in rows[honest]["reason"] and "reach both sides of the gate" in rows[honest]["reason"]
    assert decisions["lossy-skip"] == ("quarantined", "fidelity.failed")
    assert decisions["flash-claimed-fallback"] == ("quarantined", "execution.fallback")
    # the compiled kernel: judged on the launcher's timings on a GPU; without one, never launched, so held
    if ON_GPU:
        assert decisions[KERNEL_ARTIFACT] in speed_decided | {held_by_the_rule, ("quarantined", "parity.failed")}
    else:
        assert decisions[KERNEL_ARTIFACT] == ("held", "execution.missing")
        assert rows[KERNEL_ARTIFACT]["kind"] == "triton_kernel" and rows[KERNEL_ARTIFACT]["pairs"] is None
    assert outcome["problems"] == []
    assert all("held, not guessed" in note for note in outcome["near_gate"])

    # Every candidate timed is timed in a session of at most RUNS pairs, stopped at the first batch that decides it.
    timed = [row for row in outcome["rows"] if ON_GPU or row["artifact"] != KERNEL_ARTIFACT]
    for row in timed:
        assert 2 <= row["pairs"] <= RUNS and row["stop"] in ("decided", "max_pairs")
        assert row["pairs_saved"] == (RUNS - row["pairs"] if row["stop"] == "decided" else 0)
    assert outcome["pairs"] == {"spent": sum(row["pairs"] for row in timed), "fixed_design": len(timed) * RUNS,
                                "saved": len(timed) * RUNS - sum(row["pairs"] for row in timed)}

    store = opened(url).store
    verdicts = [e for e in store.read_all() if e.type == "VerdictRendered"]
    assert len(verdicts) == 5
    for verdict in verdicts:
        ids = verdict.payload["verdict"]["evidence_ids"]
        assert ids or (not ON_GPU and verdict.payload["artifact"] == KERNEL_ARTIFACT), verdict.payload["artifact"]
        for event_id in ids:
            evidence = store.get(event_id)
            assert evidence is not None and evidence.position < verdict.position
            assert evidence.payload["artifact"] == verdict.payload["artifact"]
    assert store.verify().intact
    assert not [e for e in store.read_all() if e.type == "BenchmarkMeasured"]  # sessions, not complete benchmark items
    sessions = {e.payload["artifact"]: e.payload for e in store.read_all() if e.type == "BenchmarkSessionOpened"}
    assert sorted(sessions) == sorted(row["artifact"] for row in timed)
    if ON_GPU:
        assert sessions[KERNEL_ARTIFACT]["timer"] == "cuda_event"
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    # Every measured candidate is placed in the support matrix by its session's arch, and every speed record
    # has its running-bounds chart (docs/gate.md, "The speed record").
    matrix = json.loads(CliRunner().invoke(main, ["--db", url, "report", "--matrix", "--format", "json"]).output)
    assert matrix["unplaced"] == [] and "cpu" in matrix["archs"], matrix
    report = json.loads(CliRunner().invoke(main, ["--db", url, "report", "--format", "json"]).output)
    assert len(report["benchmark_records"]) == len(timed)
    assert all(f'alt="running bounds of {row["artifact"]}"' in html for row in timed)
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
                ci: tuple[float, float] | None = None, reasons: tuple[str, ...] = (), pairs: int = 6,
                stop: str = "decided", kind: str = "kind") -> Row:
    margins = [] if speedup is None else [{"metric": "speedup", "value": speedup, "threshold": 1.2,
                                           "margin": speedup - 1.2, "passed": speedup >= 1.2}]
    verdict = {"decision": decision, "rule": rule, "reasons": list(reasons) or [f"{rule}: scripted"],
               "margins": margins, "speedup": speedup, "speedup_ci": list(ci) if ci else None}
    return Row(artifact, kind, verdict, None, None, None, pairs, 4 if stop == "decided" else 0, stop)


def promised_rows(kernel: Row) -> list[Row]:
    return [verdict_row("sdpa-attention", "promoted", "speed.passed", speedup=1.9, ci=(1.7, 2.1)),
            verdict_row("step-cache", "rejected", "speed.below_gate", speedup=1.1, ci=(1.0, 1.15)),
            verdict_row("lossy-skip", "quarantined", "fidelity.failed", reasons=("worst-frame ssim 0.74",)),
            verdict_row("flash-claimed-fallback", "quarantined", "execution.fallback",
                        reasons=("'MATH_REFERENCE' ran instead",)),
            kernel]


UNVERIFIED = "execution.launches_unverified"
MISSING = "execution.missing"


def compiled(decision: str, rule: str, **verdict) -> Row:
    return verdict_row(KERNEL_ARTIFACT, decision, rule, kind="triton_kernel", **verdict)


def entry(decision: str, rule: str, **verdict) -> Row:  # the kernel as `registry demo --server` registers it
    return verdict_row(KERNEL_ARTIFACT, decision, rule, kind="fused_kernel", **verdict)


@pytest.mark.parametrize("on_gpu,kernel,problem", [
    (False, compiled("held", MISSING), None),
    (False, compiled("held", UNVERIFIED), "held by execution.launches_unverified"),
    (False, compiled("held", "speed.interpreter"), "held by speed.interpreter"),
    (False, compiled("held", "evaluation_failed"), "held by evaluation_failed"),
    (False, compiled("promoted", "speed.passed", speedup=3.0, ci=(2.5, 3.5)), "promoted by speed.passed"),
    (True, compiled("promoted", "speed.passed", speedup=3.0, ci=(2.5, 3.5)), None),
    (True, compiled("rejected", "speed.below_gate", speedup=1.0, ci=(0.9, 1.1)), None),
    (True, compiled("quarantined", "parity.failed"), None),
    (True, compiled("held", MISSING), "held by execution.missing"),
    (True, compiled("promoted", "speed.passed", speedup=1.3, ci=(1.1, 1.5)), "without a lower bound above the gate"),
    (False, entry("held", UNVERIFIED), None),
    (True, entry("held", UNVERIFIED), None),
    (True, entry("quarantined", "parity.failed"), None),
    (True, entry("promoted", "speed.passed", speedup=3.0, ci=(2.5, 3.5)), "promoted by speed.passed"),
    (False, entry("held", "speed.interpreter"), "held by speed.interpreter"),
])
def test_check_follows_the_device(on_gpu, kernel, problem):
    problems = check_expectations(promised_rows(kernel), on_gpu=on_gpu)
    assert problems == ([] if problem is None else [next(p for p in problems if problem in p)])


def test_check_refuses_an_honest_candidate_not_decided_by_speed():
    rows = promised_rows(compiled("held", MISSING))
    rows[0] = verdict_row("sdpa-attention", "held", "speed.missing")
    rows.pop()
    assert check_expectations(rows, on_gpu=False) == [
        "sdpa-attention: held by speed.missing, expected promoted by speed.passed or rejected by speed.below_gate "
        "or held by speed.undecided",
        f"{KERNEL_ARTIFACT}: no verdict"]


@pytest.mark.parametrize("row,problem", [
    # Held by the confident rule at max_pairs with bounds across the gate: a right reading on a noisy machine.
    (verdict_row("step-cache", "held", "speed.undecided", speedup=1.3, ci=(1.1, 1.5), pairs=6, stop="max_pairs"),
     None),
    # A clear candidate held: its bounds already lie above the gate.
    (verdict_row("step-cache", "held", "speed.undecided", speedup=2.0, ci=(1.6, 2.4), pairs=6, stop="max_pairs"),
     "step-cache: held, though its bounds [1.6, 2.4] lie on one side of the gate 1.2x"),
    # Held although its session stopped measuring before max_pairs.
    (verdict_row("step-cache", "held", "speed.undecided", speedup=1.3, ci=(1.1, 1.5), pairs=4, stop="limit"),
     "step-cache: held, but its session stopped measuring (limit) before speed.max_pairs"),
    # Decisions the bounds do not show.
    (verdict_row("step-cache", "promoted", "speed.passed", speedup=1.3, ci=(1.1, 1.5)),
     "step-cache: promoted without a lower bound above the gate 1.2x (bounds [1.1, 1.5])"),
    (verdict_row("step-cache", "rejected", "speed.below_gate", speedup=1.1, ci=(1.0, 1.3)),
     "step-cache: rejected without an upper bound below the gate 1.2x (bounds [1.0, 1.3])"),
])
def test_check_accepts_exactly_the_readings_the_confident_rule_can_give(row, problem):
    rows = promised_rows(compiled("held", MISSING))
    rows[1] = row
    assert check_expectations(rows, on_gpu=False) == ([] if problem is None else [problem])


def test_a_cheat_is_refused_by_the_check_even_when_its_speed_is_shown():
    rows = promised_rows(compiled("held", MISSING))
    rows[2] = verdict_row("lossy-skip", "promoted", "speed.passed", speedup=5.0, ci=(3.8, 6.7))
    assert check_expectations(rows, on_gpu=False) == [
        "lossy-skip: promoted by speed.passed, expected quarantined by fidelity.failed", "lossy-skip: no reason names ssim"]


def test_a_candidate_held_with_bounds_across_the_gate_is_named():
    rows = promised_rows(compiled("held", MISSING))
    rows[1] = verdict_row("step-cache", "held", "speed.undecided", speedup=1.1, ci=(1.0, 1.3), pairs=6, stop="max_pairs")
    assert near_gate_notes(rows) == [
        "step-cache: speedup 1.1x held after 6 pairs, its bounds 1-1.3x reach across the gate 1.2x: within this "
        "machine's timing noise, so it is held, not guessed"]


def test_the_campaign_scopes_its_process_wide_settings(monkeypatch):
    """One torch thread and, without a GPU, Triton's interpreter inside; both put back on the way out."""
    from registry.app.campaign import one_torch_thread
    from registry.app.kernels import triton_runtime

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    suite_threads = torch.get_num_threads()
    threads = suite_threads + 1  # not one, which the suite's processes run with: the putting back must show
    torch.set_num_threads(threads)
    try:
        with one_torch_thread(), triton_runtime() as device:
            assert torch.get_num_threads() == 1
            assert device == ("gpu" if ON_GPU else "cpu")
            assert os.environ.get("TRITON_INTERPRET") == (None if ON_GPU else "1")
        assert torch.get_num_threads() == threads and "TRITON_INTERPRET" not in os.environ
    finally:
        torch.set_num_threads(suite_threads)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a caller's own setting is kept, and restored
    with triton_runtime():
        assert os.environ["TRITON_INTERPRET"] == "0"
    assert os.environ["TRITON_INTERPRET"] == "0"


def test_the_demo_run_again_on_its_registry_times_nothing_already_decided(reduced_demo, tmp_path):
    """A second run without --fresh finds every record closed: no session is opened, nothing timed, --check holds;
    the compiled kernel's registered bundle is kept, not compiled and rebuilt again."""
    folder = reduced_demo.copy(tmp_path / "demo")
    url = f"sqlite:///{folder / 'demo.db'}"
    args = demo_arguments(folder)
    first = json.loads(reduced_demo.output)["rows"]
    closed = {row["artifact"] for row in first if row["stop"] in ("decided", "max_pairs")}
    untimed = {row["artifact"] for row in first if row["pairs"] is None}  # the compiled kernel without a GPU
    sessions = len([e for e in opened(url).store.read_all() if e.type == "BenchmarkSessionOpened"])
    kernel_manifest = folder / "out" / "bundles" / KERNEL_ARTIFACT / "bundle.json"
    built = kernel_manifest.stat()
    registrations = [e for e in opened(url).store.read_stream(f"artifact:{KERNEL_ARTIFACT}")
                     if e.type == "ArtifactRegistered"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    rows = {row["artifact"]: row for row in json.loads(again.output)["rows"]}
    assert all(rows[name]["pairs"] == 0 for name in closed)
    assert len([e for e in opened(url).store.read_all()
                if e.type == "BenchmarkSessionOpened"]) == sessions + len(set(rows) - closed - untimed)
    # The compiled kernel's registered bundle is kept as it was (neither compiled nor rebuilt again), and it is
    # not registered again.
    kept = kernel_manifest.stat()
    assert (kept.st_ino, kept.st_mtime_ns) == (built.st_ino, built.st_mtime_ns)
    assert [e for e in opened(url).store.read_stream(f"artifact:{KERNEL_ARTIFACT}")
            if e.type == "ArtifactRegistered"] == registrations


def test_the_commands_the_demo_prints_run_as_printed(tmp_path):
    """The demo's "look further" lines start with a command that runs from a shell as printed,
    whether or not the virtual environment's `registry` is on PATH (one process, about a second)."""
    import shlex
    import subprocess

    from registry.cli.demo_command import runnable_command

    without_venv = {**os.environ, "PATH": "/usr/bin:/bin"}
    printed = f"{runnable_command()} --db {shlex.quote(f'sqlite:///{tmp_path}/x y.db')} init"
    done = subprocess.run(printed, shell=True, capture_output=True, text=True, env=without_venv, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x y.db").exists()


def test_the_readme_and_runtime_blocks_run_as_printed_on_the_demos_registry(reduced_demo, tmp_path):
    """README.md's "look further" and docs/runtime.md's fallback, as printed, on a copy of this campaign's
    registry (tests/cli/test_docs_run.py holds the blocks and how they run)."""
    from doc_blocks import run_the_blocks_on_the_demo

    run_the_blocks_on_the_demo(reduced_demo.folder, tmp_path)


def test_the_readmes_demo_table_reads_as_the_demo_decides(reduced_demo):
    from doc_blocks import check_the_readmes_demo_table

    check_the_readmes_demo_table({row["artifact"]: row for row in json.loads(reduced_demo.output)["rows"]})
