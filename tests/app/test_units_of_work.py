"""One unit of work per use case (registry/projections/view.py): one catch-up, one snapshot, appends that say
what the store did.

Counted on a real registry by the statements the database is sent: a
catch-up opens with one statement reading the checkpoint and the log's head
together. `promote` used to make five catch-ups (the artifact, the artifacts
sharing its bytes, the workload twice, the speed record), each with its own
snapshot. Three
processes importing one evidence document at once are told the truth about
which of them appended it: the store's answer, not a read of the log's head
before the append (three processes of the CLI, about two seconds: a race
between processes is what the old answer got wrong, one run in three).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import event

from registry.app import open_registry
from registry.app.decisions import promote
from limits import HANG_GUARD_S

MANIFEST = "workload: wan\nparity: {policy: byte_equal}\nspeed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, " \
           "decision: point}\n"
LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
        "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
        "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


def evidence(ratio: float, run: str | None = None) -> dict:
    return {"format": "registry.evidence/1", "artifact": "k", "run": run, "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}, {"kind": "parity", "leaves": [LEAF]},
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
         "baseline_s": [2.0, 2.02], "candidate_s": [2.0 / ratio, 2.02 / ratio], "schedule": ["BC", "CB"]}]}


@pytest.fixture
def kernel(registry_cli):
    """A fused kernel of payload bytes, its workload declared: evidence makes it promotable, or not."""
    cli = registry_cli
    (cli.tmp / "wan.yaml").write_text(MANIFEST)
    (cli.tmp / "k.bin").write_bytes(b"kernel build 1")
    assert cli("workload", "declare", str(cli.tmp / "wan.yaml")).exit_code == 0
    assert cli("artifact", "register", "k", "--workload", "wan", "--kind", "fused_kernel",
               "--payload", str(cli.tmp / "k.bin")).exit_code == 0
    cli.document = cli.tmp / "k.json"
    return cli


class CatchUps:
    """How many catch-ups a registry's engine was asked for."""

    def __init__(self, engine):
        self.count = 0
        event.listen(engine, "before_cursor_execute", self.seen)

    def seen(self, _conn, _cursor, statement: str, *_):
        if "projection_checkpoint" in statement and "max(events.position)" in statement:
            self.count += 1


@pytest.mark.parametrize("ratio, decision", [(1.4, "promoted"), (1.0, "rejected")])
def test_a_promote_makes_one_catch_up(kernel, ratio, decision):
    kernel.document.write_text(json.dumps(evidence(ratio)))
    assert kernel("evidence", "import", str(kernel.document)).exit_code == 0  # the read models are behind now
    with open_registry(kernel.url, actor="reviewer") as registry:
        catch_ups = CatchUps(registry.engine)
        outcome = promote(registry, "k")
        assert (outcome.appended, outcome.verdict["decision"]) == (True, decision)
        assert catch_ups.count == 1
        standing = promote(registry, "k")  # a final verdict stands: returned, nothing appended
        assert not standing.appended and standing.verdict == outcome.verdict
        assert catch_ups.count == 2


def test_three_racing_imports_of_one_run_say_appended_once(kernel):
    """Three identical `evidence import --json` at once, each its own process: the batch is in the log once,
    and exactly one of them says it appended it; the others give the positions it landed at."""
    kernel.document.write_text(json.dumps(evidence(1.4, run="run-7")))
    command = [sys.executable, "-m", "registry", "--db", kernel.url, "--actor", "worker", "evidence", "import",
               str(kernel.document), "--json"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ}) for _ in range(3)]
    answers = []
    for run in runs:
        out, err = run.communicate(timeout=HANG_GUARD_S)
        assert run.returncode == 0, err
        answers.append(json.loads(out))
    assert sorted(answer["appended"] for answer in answers) == [False, False, True]
    assert len({tuple(answer["positions"]) for answer in answers}) == 1
    with open_registry(kernel.url) as registry:
        assert len(registry.store.read_stream("artifact:k")) == 1 + 3  # the registration and the one batch


def test_a_deciding_promote_imports_neither_pydantic_nor_the_bundles(kernel):
    """A promote that runs the gate and appends its verdict, in a fresh interpreter (about a second): the
    verdict's plain payload is checked by its written form (registry/events/plain_forms.json), not by its
    model, and a fused kernel's registration reads no bundle. Both imports were most of what a deciding
    promote spent above the start-up floor (benchmarks/cli.py)."""
    kernel.document.write_text(json.dumps(evidence(1.4)))
    assert kernel("evidence", "import", str(kernel.document)).exit_code == 0
    probe = ("import sys, json\nfrom registry.cli.main import main\n"
             f"try: main(['--db', {kernel.url!r}, 'promote', 'k', '--json'])\n"
             "except SystemExit as exc: assert not exc.code, exc.code\n"
             "print(json.dumps(sorted(m for m in ('pydantic', 'registry.bundles') if m in sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    *answer, imported = done.stdout.strip().splitlines()
    assert json.loads("\n".join(answer))["decision"] == "promoted"
    assert json.loads(imported) == []


def test_a_view_that_fails_to_open_gives_its_connection_back(kernel, monkeypatch):
    """A view that cannot read its checkpoint once its snapshot is open closes the snapshot before it says why:
    no connection stays checked out for the garbage collector to close at a moment nobody chose."""
    from registry.events.errors import StoreError
    from registry.projections import view as view_module

    def refused(_conn):
        raise StoreError("the checkpoint could not be read")

    with open_registry(kernel.url) as registry:
        registry.view().__enter__().__exit__(None, None, None)  # caught up: the next view opens a snapshot
        monkeypatch.setattr(view_module, "read_checkpoint", refused)
        with pytest.raises(StoreError, match="checkpoint could not be read") as refusal:
            with registry.view():
                pass
        assert refusal.tb is not None  # held, as a caller's traceback holds the view that failed: not its snapshot
        assert registry.engine.pool.checkedout() == 0


def test_a_view_reads_an_artifact_and_its_evidence_items_on_its_one_connection(kernel):
    """The evidence items a view attaches are read in the view's own snapshot: reading an artifact opens no
    connection beside the one the view holds (one more a command, and a second snapshot of the log, before)."""
    kernel.document.write_text(json.dumps(evidence(1.4)))
    assert kernel("evidence", "import", str(kernel.document)).exit_code == 0
    with open_registry(kernel.url) as registry:
        registry.view().__enter__().__exit__(None, None, None)  # caught up, its connection back in the pool
        opened = []
        event.listen(registry.engine, "connect", lambda *_: opened.append(1))
        with registry.view() as view:
            artifact = view.artifact("k")
            assert artifact is not None
            assert {kind: "item" in entry for kind, entry in artifact["evidence"].items()} == {
                "execution": True, "parity": True, "benchmark": True}
        assert opened == []
        assert registry.engine.pool.checkedout() == 0
