"""`registry evaluate` end to end on a real SQLite registry, then `registry promote`."""
from __future__ import annotations

import json

import pytest

from kernel_fixtures import FORGED
from registry.kernels.sandbox import harness_digest
from store_helpers import opened
from paths import KERNEL_FIXTURES


MANIFEST = """
workload: wan-modln-op
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""


@pytest.fixture
def cli(registry_cli):
    (registry_cli.tmp / "op.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "op.yaml")).exit_code == 0
    return registry_cli


def types(url, artifact):
    return [e.type for e in opened(url).store.read_stream(f"artifact:{artifact}")]


def test_kernels_lists_the_builtin_operations(cli):
    ops = json.loads(cli("kernels", "--json").output)
    modln = next(op for op in ops if op["name"] == "modulated_layernorm")
    assert "registry.kernels.modln:modulated_layernorm_triton" in modln["kernels"]


def test_evaluate_then_promote_holds_on_interpreter_timings(cli):
    registered = cli("artifact", "register", "modln", "--workload", "wan-modln-op", "--kind", "fused_kernel",
                     "--op", "modulated_layernorm", "--entry", "registry.kernels.modln:modulated_layernorm_triton")
    assert registered.exit_code == 0, registered.output
    evaluated = cli("evaluate", "modln", "--warmup", "0", "--json")
    assert evaluated.exit_code == 0, evaluated.output
    items = {item["kind"]: item for item in json.loads(evaluated.output)["evidence"]}
    assert items["parity"]["derived"]["all_byte_equal"] is True
    assert items["benchmark"]["timer"] == "interpreter" and len(items["benchmark"]["baseline_s"]) == 2
    assert items["execution"]["candidate_calls"] > 0 and items["execution"]["fallbacks"] == 0
    assert types(cli.url, "modln")[1:] == ["ParityMeasured", "BenchmarkMeasured", "ExecutionObserved"]
    promoted = cli("promote", "modln", "--json")
    verdict = json.loads(promoted.output)
    assert promoted.exit_code == 3 and verdict["decision"] == "held"
    # held first because the launches were counted inside the candidate's process, then for interpreter timings
    assert verdict["rule"] == "execution.launches_unverified"
    assert any("interpreter" in reason for reason in verdict["reasons"])


def test_emit_writes_an_import_file_and_appends_nothing(cli):
    cli("artifact", "register", "rms", "--workload", "wan-modln-op", "--kind", "fused_kernel",
        "--op", "rms_norm", "--entry", "registry.kernels.rmsnorm:rms_norm_triton")
    out = cli.tmp / "rms.json"
    assert cli("evaluate", "rms", "--runs", "2", "--warmup", "0", "--emit", str(out), "--run", "gpu-7").exit_code == 0
    assert types(cli.url, "rms") == ["ArtifactRegistered"]
    document = json.loads(out.read_text())
    assert document["format"] == "registry.evidence/1" and document["run"] == "gpu-7"
    assert (document["sandbox"], document["harness_sha256"]) == ("linux-ns-seccomp/1", harness_digest())
    execution = next(item for item in document["evidence"] if item["kind"] == "execution")
    assert document["confinement"] == execution["confinement"]  # the launcher's report, named by both
    assert document["confinement"]["memory"] in ("jail_cgroup", "process_rlimits")
    assert cli("evidence", "import", str(out)).exit_code == 0
    assert types(cli.url, "rms")[1:] == ["ParityMeasured", "BenchmarkMeasured", "ExecutionObserved"]


def test_a_candidate_that_raises_is_recorded_as_a_failure(cli):
    registered = cli("artifact", "register", "broken", "--workload", "wan-modln-op", "--kind", "fused_kernel",
                     "--op", "modulated_layernorm", "--entry", f"{KERNEL_FIXTURES}:broken_modulated_layernorm")
    assert registered.exit_code == 0, registered.output
    evaluated = cli("evaluate", "broken", "--runs", "2", "--warmup", "0")
    assert evaluated.exit_code == 4 and "illegal memory access" in evaluated.output
    events = opened(cli.url).store.read_stream("artifact:broken")
    assert [e.type for e in events] == ["ArtifactRegistered", "EvaluationFailed"]
    assert events[1].payload["stage"] == "parity"
    assert events[1].payload["error"].endswith(f"\n{FORGED}")  # kept as the candidate wrote it
    verdict = json.loads(cli("promote", "broken", "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "evaluation_failed"
    # The candidate's text is printed quoted and on one line: it cannot add a line of the registry's own.
    printed = [evaluated, cli("promote", "broken"), cli("show", "broken"), cli("history", "artifact:broken")]
    for result in printed:
        assert "illegal memory access (simulated)\\n" in result.output, result.output
        assert not any(line.strip().startswith(FORGED) for line in result.output.splitlines()), result.output


def test_evaluate_refuses_an_artifact_without_a_kernel_entry(cli):
    cli("artifact", "register", "cache", "--workload", "wan-modln-op", "--kind", "step_cache")
    result = cli("evaluate", "cache", "--runs", "2")
    assert result.exit_code == 1 and "no kernel entry" in result.output


CONFIDENT = """
workload: wan-modln-confident
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: confident, alpha: 0.05, max_pairs: 7}
"""


def batches_of(url, identity_stream, session):
    return [len(e.payload["baseline_s"]) for e in opened(url).store.read_stream(identity_stream)
            if e.type == "BenchmarkPairsRecorded" and e.payload["session"] == session]


def test_evaluate_under_a_confident_contract_on_a_cpu_times_a_batch_the_record_never_reads(registry_cli):
    """The batching, and interpreter timings: on a CPU the session's pairs are timed by Triton's interpreter, so they
    are recorded but never read; they neither decide nor close the record, and a later session on a GPU is read
    as if the CPU had never timed the bytes (on the code before, the interpreter's pairs decided and closed it)."""
    cli = registry_cli
    (cli.tmp / "confident.yaml").write_text(CONFIDENT)
    assert cli("workload", "declare", str(cli.tmp / "confident.yaml")).exit_code == 0
    assert cli("artifact", "register", "modln", "--workload", "wan-modln-confident", "--kind", "fused_kernel",
               "--op", "modulated_layernorm", "--entry", "registry.kernels.modln:modulated_layernorm_triton"
               ).exit_code == 0
    stream = "bench:" + json.loads(cli("show", "modln", "--json").output)["identity"]

    # --runs caps this session: 3 pairs are two batches (2, then 1), none of them read.
    first = cli("evaluate", "modln", "--runs", "3", "--warmup", "0", "--json")
    assert first.exit_code == 0, first.output
    outcome = json.loads(first.output)
    session = outcome["session"]
    assert (session["pairs"], session["batches"], session["stop"]) == (3, 2, "not_speed_evidence")
    assert (session["record_pairs"], session["reading"], session["pairs_saved"]) == (0, "undecided", 0)
    assert batches_of(cli.url, stream, session["session"]) == [2, 1]
    assert "benchmark" not in {item["kind"] for item in outcome["evidence"]}  # the session holds the timings
    assert types(cli.url, "modln")[1:] == ["ParityMeasured", "ExecutionObserved"]

    # Without --runs an interpreter session times one batch: more of them would decide nothing.
    second = json.loads(cli("evaluate", "modln", "--warmup", "0", "--json").output)["session"]
    assert (second["pairs"], second["batches"], second["stop"], second["record_pairs"]) == (
        2, 1, "not_speed_evidence", 0)
    record = json.loads(cli("bench", "status", "modln", "--json").output)
    assert (record["closed"], record["set_aside_pairs"], record["reading"]) == (False, 5, "undecided")

    # The same bytes on a GPU: the session opens, its pairs are read and decide.
    gpu = json.loads(cli("bench", "open", "modln", "--device", "NVIDIA H200", "--timer", "cuda_event",
                         "--json").output)["session"]
    record = json.loads(cli("bench", "record", "modln", gpu, "--batch", "b", "--baseline", "2,2,2,2,2",
                            "--candidate", "1,1,1,1,1", "--json").output)
    assert (record["reading"], record["decided_at"], record["closed"]) == ("above", 5, True)

    # The record is closed: a third evaluation is refused before anything runs, and writes nothing.
    before = len(opened(cli.url).store.read_all())
    third = cli("evaluate", "modln", "--warmup", "0")
    assert third.exit_code == 1 and "is closed" in third.output
    assert len(opened(cli.url).store.read_all()) == before
    verdict = json.loads(cli("promote", "modln", "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "execution.launches_unverified"
    assert any("5 pairs timed by interpreter cpu (triton interpreter) set aside" in reason
               for reason in verdict["reasons"])
