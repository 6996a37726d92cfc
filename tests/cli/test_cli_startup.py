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

import pytest

from paths import ROOT



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
speed: {min_speedup: 1.1, runs_per_arm: 6, protocol: paired, decision: confident}
"""
EVIDENCE = {"format": "registry.evidence/1", "artifact": "sage", "evidence": [
    {"kind": "execution", "candidate_calls": 40, "fallbacks": 0,
     "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"},
    {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
     "baseline_s": [2.0, 2.02, 2.01, 2.03, 2.0, 2.02], "candidate_s": [1.4, 1.41, 1.4, 1.42, 1.41, 1.4],
     "schedule": ["BC", "CB"] * 3},
    {"kind": "perceptual", "frame_set": "wan-8", "seed": 1024, "ssim": [0.999, 0.991], "lpips": None,
     "vbench": None, "stage_status": "ok"}]}


def imported_modules(importtime: str) -> set[str]:
    """Module names from `python -X importtime` output (one `import time: self | cumulative | name` per line)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines() if line.startswith("import time:")}


# `promote` of a promoted artifact returns its standing verdict: a read like the others. The contract is
# confident, so `show` reads the speed record of the artifact's bytes (registry/gate/record.py) as it prints it.
@pytest.mark.parametrize("command", [["show", "sage", "--json"], ["history", "sage", "--json"],
                                     ["promote", "sage", "--json"]])
def test_a_read_command_imports_nothing_heavy(registry_cli, command):
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    (registry_cli.tmp / "sage.json").write_text(json.dumps(EVIDENCE))
    (registry_cli.tmp / "sage.bin").write_bytes(b"the kernel's bytes")  # its speed record is of these bytes
    for args in (["workload", "declare", str(registry_cli.tmp / "wan.yaml")],
                 ["artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend",
                  "--backend", "SAGE_ATTN", "--payload", str(registry_cli.tmp / "sage.bin")],
                 ["evidence", "import", str(registry_cli.tmp / "sage.json")], ["promote", "sage"]):
        assert registry_cli(*args).exit_code == 0
    read = python("-X", "importtime", "-m", "registry", "--db", registry_cli.url, *command)
    assert read.returncode == 0, read.stderr
    answer = json.loads(read.stdout)
    assert (answer[-1]["type"] == "VerdictRendered") if command[0] == "history" else (answer["decision"] == "promoted")
    assert command[0] != "promote" or answer["appended"] is False  # the standing verdict, nothing decided again
    assert command[0] != "show" or answer["bench"]["shows"] == "shown above the gate"  # the record was read
    heavy = sorted(module for module in imported_modules(read.stderr)
                   if any(module == name or module.startswith(name + ".") for name in NOT_ON_THE_READ_PATH))
    assert heavy == []



def test_a_deciding_promote_imports_nothing_heavy(registry_cli):
    """A promote that runs the gate re-derives every stored item (the benchmark's statistics included,
    registry/formats/stats.py) and appends its verdict: still none of the read path's heavy libraries."""
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    (registry_cli.tmp / "sage.json").write_text(json.dumps(EVIDENCE))
    (registry_cli.tmp / "sage.bin").write_bytes(b"the kernel's bytes")
    for args in (["workload", "declare", str(registry_cli.tmp / "wan.yaml")],
                 ["artifact", "register", "sage", "--workload", "wan", "--kind", "attention_backend",
                  "--backend", "SAGE_ATTN", "--payload", str(registry_cli.tmp / "sage.bin")],
                 ["evidence", "import", str(registry_cli.tmp / "sage.json")]):
        assert registry_cli(*args).exit_code == 0
    decided = python("-X", "importtime", "-m", "registry", "--db", registry_cli.url, "promote", "sage", "--json")
    assert decided.returncode == 0, decided.stderr
    answer = json.loads(decided.stdout)
    assert answer["appended"] is True and answer["decision"] == "promoted"
    heavy = sorted(module for module in imported_modules(decided.stderr)
                   if any(module == name or module.startswith(name + ".") for name in NOT_ON_THE_READ_PATH))
    assert heavy == []

def test_registering_a_kernel_entry_imports_no_torch_or_numpy(registry_cli):
    """The entry is read as text and hashed, never imported (registry/kernels/entries.py); the operation's
    name is checked against a table of names. The append validates its payload, so pydantic may load."""
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "wan.yaml")).exit_code == 0
    done = python("-X", "importtime", "-m", "registry", "--db", registry_cli.url, "artifact", "register", "modln",
                  "--workload", "wan", "--kind", "fused_kernel", "--op", "modulated_layernorm",
                  "--entry", "registry.kernels.modln:modulated_layernorm_triton", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["appended"] is True
    heavy = {"torch", "triton", "numpy"} & {module.split(".")[0] for module in imported_modules(done.stderr)}
    assert heavy == set()


def test_each_command_is_found_in_the_module_the_table_names():
    """`registry` imports a command's module when the command is looked up (cli/main.py COMMAND_MODULES):
    every module's commands are in the table under that module, and nothing else is."""
    import importlib

    from registry.cli.main import COMMAND_MODULES

    found = {}
    for module in sorted(set(COMMAND_MODULES.values())):
        for command in importlib.import_module(f"registry.cli.{module}").COMMANDS:
            found[command.name] = module
    assert found == COMMAND_MODULES


@pytest.mark.parametrize("first", ["import registry.gate.decide",
                                   "import importlib; importlib.import_module('registry.gate.decide')",
                                   "from registry.gate import decide; import registry.gate.decide"])
def test_the_gate_s_decide_is_the_function_whichever_import_comes_first(first):
    """`decide` is imported when first asked for (registry/gate/__init__.py), and its submodule has the same
    name: importing the submodule first must not leave the module where the function is asked for."""
    probe = python("-c", f"{first}\nimport registry.gate, types\nfrom registry.gate import decide\n"
                         "assert isinstance(decide, types.FunctionType), decide\n"
                         "assert registry.gate.decide is decide\nprint(decide.__module__)")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "registry.gate.decide"
