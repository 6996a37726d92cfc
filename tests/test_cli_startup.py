"""The `registry` command as a process: started through `python -m`, and what a read imports.

Each case runs a real interpreter with the repository root as its working
directory, so `-m` imports the checkout under test, not an installed copy.
A read command's start-up is guarded by what it imports, never by a timing
(benchmarks/cli.py measures it).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_python_m_registry_runs_the_command(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    init = python("-m", "registry", "--db", url, "--actor", "proc", "init")
    assert init.returncode == 0, init.stderr
    verified = python("-m", "registry", "--db", url, "verify", "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["count"] == 0
    usage = python("-m", "registry", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: registry ")


ENDING = """
import atexit, sys, threading
atexit.register(lambda: print("atexit handler ran"))
threading.Thread(target=lambda: (threading.main_thread().join(), print("thread finished"))).start()
sys.argv = ["registry", "--db", sys.argv[1], "show", "nothing-here"]
from registry.cli.main import run
run()
"""


def test_the_command_process_skips_only_the_teardown(tmp_path):
    """`run` ends the process without the interpreter's teardown, not without its exit: a thread that
    works until the main thread has ended (as the interpreter marks it at exit) is joined, atexit handlers
    run, output buffered for a pipe is flushed, and the command's own status (a refusal's 1) is the
    process's. One interpreter start; the teardown it skips is timed in benchmarks, not here."""
    done = python("-c", ENDING, f"sqlite:///{tmp_path / 'none.db'}")
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == ["thread finished", "atexit handler ran"]
    assert done.stderr.startswith("error: no registry database at "), done.stderr


def test_python_m_registry_cli_main_has_no_import_cycle():
    usage = python("-m", "registry.cli.main", "--help")
    assert usage.returncode == 0, usage.stderr
    assert all(f" {command} " in usage.stdout for command in ("show", "report", "promote", "demo", "evidence"))


# Libraries a read command has no use for: each is imported only by the commands that measure,
# validate, draw or migrate. torch, triton, numpy and matplotlib measure and plot; pydantic
# validates payloads; rich draws tables (never --json); alembic and yaml migrate and read
# manifests; the Postgres dialect and driver serve Postgres URLs only; the ORM is never used.
NOT_ON_THE_READ_PATH = ("torch", "triton", "numpy", "matplotlib", "PIL", "pydantic", "rich", "alembic",
                        "yaml", "sqlalchemy.orm", "sqlalchemy.dialects.postgresql", "psycopg")
MANIFEST = """
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""
EVIDENCE = {"format": "registry.evidence/1", "artifact": "sage", "evidence": [
    {"kind": "execution", "candidate_calls": 40, "fallbacks": 0,
     "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"},
    {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
     "baseline_s": [2.0, 2.02], "candidate_s": [1.4, 1.41], "schedule": ["BC", "CB"]},
    {"kind": "perceptual", "frame_set": "wan-8", "seed": 1024, "ssim": [0.999, 0.991], "lpips": None,
     "vbench": None, "stage_status": "ok"}]}


def imported_modules(importtime: str) -> set[str]:
    """Module names from `python -X importtime` output (one `import time: self | cumulative | name` per line)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines() if line.startswith("import time:")}


# `promote` of a promoted artifact returns its standing verdict: a read like the others.
@pytest.mark.parametrize("command", [["show", "sage", "--json"], ["history", "sage", "--json"],
                                     ["promote", "sage", "--json"]])
def test_a_read_command_imports_nothing_heavy(registry_cli, command):
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    (registry_cli.tmp / "sage.json").write_text(json.dumps(EVIDENCE))
    for args in (["workload", "declare", str(registry_cli.tmp / "wan.yaml")],
                 ["artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend",
                  "--backend", "SAGE_ATTN"],
                 ["evidence", "import", str(registry_cli.tmp / "sage.json")], ["promote", "sage"]):
        assert registry_cli(*args).exit_code == 0
    read = python("-X", "importtime", "-m", "registry", "--db", registry_cli.url, *command)
    assert read.returncode == 0, read.stderr
    answer = json.loads(read.stdout)
    assert (answer[-1]["type"] == "VerdictRendered") if command[0] == "history" else (answer["decision"] == "promoted")
    assert command[0] != "promote" or answer["appended"] is False  # the standing verdict, nothing decided again
    heavy = sorted(module for module in imported_modules(read.stderr)
                   if any(module == name or module.startswith(name + ".") for name in NOT_ON_THE_READ_PATH))
    assert heavy == []
