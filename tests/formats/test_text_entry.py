"""Text and numbers at every entry (registry/formats/text.py, registry/formats/numbers.py).

Undecodable bytes on a command line reach Python as lone surrogates (PEP
383); every argument of every command is checked once, at the command
group, and every str given to a use case of the Python API by the same
check: one line, exit 1, a UserError, nothing written. Numbers on the
command line are ASCII decimal notation only.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import click
import pytest
from registry.app.bench import open_session, record_pairs
from registry.app.decisions import human_decision, promote
from registry.app.evidence import capture_subject, record_evidence
from registry.app.workloads import register_artifact
from registry.cli.main import main
from registry.cli.params import Integer, Real
from registry.formats.errors import UserError
from registry.formats.numbers import parse_integer, parse_real
from registry.formats.text import TextError
from store_helpers import opened
from paths import ROOT

MANIFEST = "workload: wan\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 20}\n"
BAD = "bad\udcff"  # what Python makes of the byte 0xff on a command line


@pytest.fixture
def bench(registry_cli, tmp_path):
    (tmp_path / "wan.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(tmp_path / "wan.yaml")).exit_code == 0
    (tmp_path / "a.bin").write_bytes(b"step cache")
    assert registry_cli("artifact", "register", "a", "--workload", "wan", "--kind", "step_cache",
                        "--payload", str(tmp_path / "a.bin")).exit_code == 0
    opened = registry_cli("bench", "open", "a", "--device", "NVIDIA H200", "--timer", "cuda_event", "--json")
    assert opened.exit_code == 0, opened.output
    import json

    registry_cli.session = json.loads(opened.stdout)["session"]
    return registry_cli


def events(cli) -> int:
    with sqlite3.connect(cli.url.removeprefix("sqlite:///")) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def refused(result, fragment: str) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


UNDECODABLE = [
    ("revoke", "a", "--reason", BAD),
    ("approve", "a", "--reason", "\udcfe"),
    ("show", "a\udcff"),
    ("history", "artifact:a\udcff"),
    ("bench", "open", "a", "--device", "H\udcff200", "--timer", "cuda_event"),
    ("bench", "open", "a", "--device", "H200", "--timer", "cuda\udcffevent"),
    # variants: a root option, a file name, a JSON flag's neighbour, a lone high surrogate
    ("--actor", BAD, "show", "a"),
    ("evidence", "import", "ev\udcff.json"),
    ("report", "--json", "--workload", "w\ud800"),
]


@pytest.mark.parametrize("args", UNDECODABLE, ids=lambda a: " ".join(a[:2]))
def test_undecodable_text_anywhere_on_the_command_line_is_one_refusal(bench, args):
    before = events(bench)
    refused(bench(*args), "is not UTF-8 text")
    assert events(bench) == before


def test_real_undecodable_bytes_in_argv_are_refused_by_a_fresh_process(bench):
    """One real process (about a second): argv bytes, not a str made in the test, reach the check."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "registry", "--db", bench.url, "revoke", "a",
                           "--reason", os.fsencode(BAD)], capture_output=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode("utf-8", "replace").count("\n") == 1 and b"not UTF-8 text" in done.stderr


@pytest.mark.parametrize("device, fragment", [("H\n200", "control or invisible character U+000A"),
                                              ("H\u200b200", "control or invisible character U+200B"),
                                              ("   ", "expected 1 to 200 characters")])
def test_device_and_timer_are_checked_like_stored_text(bench, device, fragment):
    before = events(bench)
    refused(bench("bench", "open", "a", "--device", device, "--timer", "cuda_event"), fragment)
    refused(bench("bench", "open", "a", "--device", "H200", "--timer", device), fragment)
    assert events(bench) == before


@pytest.mark.parametrize("times", ["1_5,1_5", "１５,１５", "1.5,٢", "0x10,1", "nan,1.0", "inf,1.0", "1e999,1.0"])
def test_bench_times_are_ascii_decimal_notation_only(bench, times):
    before = events(bench)
    refused(bench("bench", "record", "a", bench.session, "--batch", "b", "--baseline", times,
                  "--candidate", "1.0,1.0"), "--baseline")
    assert events(bench) == before


@pytest.mark.parametrize("args", [("report", "--stale-days", "3_0"), ("report", "--stale-days", "３０"),
                                  ("show", "a", "--verdicts", "1_0"),
                                  ("frames", "register", "f", "a.bin", "--seed", "1_024")])
def test_integer_options_are_ascii_decimal_digits_only(bench, args):
    result = bench(*(str(bench.tmp / arg) if arg == "a.bin" else arg for arg in args))
    refused(result, "ASCII decimal digits")


def _number_parameters() -> list[tuple[str, click.Parameter]]:
    """Every option and argument of every command (subcommands too) whose value is a number."""
    found = []

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
                found.append((path, param))
        if isinstance(command, click.Group):
            for name in command.list_commands(None):
                walk(command.get_command(None, name), f"{path} {name}".strip())

    walk(main, "")
    return found


def test_every_number_option_of_every_command_reads_ascii_decimal_notation_only():
    """The rule holds for the class, not a list of examples: each number a command line takes, in any command
    (those added since the rule included: `token issue --valid-for`, `reverify --pairs`, `worker --device` and
    `--heartbeat`, `serve --port` and `--workers`), is read by registry/cli/params.py's decimal types."""
    parameters = _number_parameters()
    assert len(parameters) >= 15
    loose = [f"{path} {param.opts[0] if param.opts else param.name}" for path, param in parameters
             if not isinstance(param.type, (Integer, Real))]
    assert loose == []


@pytest.mark.parametrize("args", [("token", "issue", "--principal", "p", "--scope", "read", "--valid-for", "1_0"),
                                  ("token", "issue", "--principal", "p", "--scope", "read", "--valid-for", "\uff13"),
                                  ("token", "issue", "--principal", "p", "--scope", "read", "--valid-for", "\u0663"),
                                  ("reverify", "wan", "--now", "--pairs", "1_0"),
                                  ("reverify", "wan", "--now", "--pairs", "\uff14")])
def test_the_new_commands_numbers_are_ascii_decimal_digits_only(bench, args):
    before = events(bench)
    refused(bench(*args), "ASCII decimal digits")
    assert events(bench) == before


def test_the_number_rule():
    assert parse_real("1.5", "x") == 1.5 and parse_real("-2e-3", "x") == -0.002 and parse_real(".5", "x") == 0.5
    assert parse_integer("+15", "x") == 15
    for text in ("1_5", "１５", "", "1.5.2", "1e", "nan", "Infinity", "1 5", "٣"):
        with pytest.raises(UserError):
            parse_real(text, "x")
    for text in ("1_5", "１５", "1.0", "1e3", "9" * 401):
        with pytest.raises(UserError):
            parse_integer(text, "x")


def test_the_python_api_refuses_lone_surrogates_with_the_refusal_root(bench, tmp_path):
    registry = opened(bench.url, actor="api")
    before = events(bench)
    (tmp_path / "b.bin").write_bytes(b"another")
    calls = [
        lambda: human_decision(registry, "a", "revoke", BAD),
        lambda: open_session(registry, "a", "H\udcff200", "cuda_event"),
        lambda: open_session(registry, "a", "H200", "cuda\ud800"),
        lambda: register_artifact(registry, "b", workload="wan", kind="step_cache", payload=str(tmp_path / "b.bin"),
                                  origin={"note": BAD}),
        lambda: register_artifact(registry, "b", workload="w\udcff", kind="step_cache"),
        lambda: promote(registry, "a\udcff"),
        lambda: record_pairs(registry, "a", bench.session, [1.0], [1.0], BAD),
        # a variant: a surrogate deep inside an evidence item
        lambda: record_evidence(registry, capture_subject(registry, "a"),
                                [{"kind": "execution", "candidate_calls": 1, "fallbacks": 0, "note": [BAD]}]),
    ]
    for call in calls:
        with pytest.raises(TextError, match="not UTF-8 text"):
            call()
    assert events(bench) == before
