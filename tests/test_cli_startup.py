"""The `registry` command as a process: started through `python -m`, from this checkout.

Each case runs a real interpreter with the repository root as its working
directory, so `-m` imports the checkout under test, not an installed copy.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_python_m_registry_cli_main_has_no_import_cycle():
    usage = python("-m", "registry.cli.main", "--help")
    assert usage.returncode == 0, usage.stderr
    assert all(f" {command} " in usage.stdout for command in ("show", "report", "promote", "demo", "evidence"))
