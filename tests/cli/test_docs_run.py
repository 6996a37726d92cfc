"""The README's and docs/'s command blocks run as printed, against the database each needs, and what they claim of
the program's output holds.

Every shell block of README.md and docs/*.md is either run here or excused in `EXCUSED` with why (it needs a
remote server, names the reader's own files, is a synopsis with placeholders, ...); a new block that is neither
fails `test_every_command_block_is_run_or_excused` (the blocks, `EXCUSED` and `RUN`: tests/support/doc_blocks.py). Blocks run with bash in a scratch folder laid out as a clone
(`.venv`, `tests` and `examples` of this checkout, `registry` on PATH), in the order a reader meets them, each
document's after the set-up its text assumes (`make demo` before the README's "look further"; a declared
workload before docs/bundles.md's registration). A line ending in `# exit N` must exit N.

Needs seconds: each block starts `registry` processes. The blocks that read the demo's registry run in
tests/whole_path/test_demo.py, on its reduced campaign (built once per run), through `run_the_blocks_on_the_demo`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from paths import ROOT
from doc_blocks import BENCHMARK, EXCUSED, RUN, blocks_of, clone, command_blocks, run_block


def test_every_command_block_is_run_or_excused():
    blocks = {block.key: block for block in command_blocks()}
    unknown = sorted(f"{key[0]}:{blocks[key].line}: {key[1]!r}" for key in blocks if key not in EXCUSED
                     and key not in RUN and not key[1].startswith(BENCHMARK))
    assert unknown == [], "command blocks neither run by this module nor excused in EXCUSED: " + "; ".join(unknown)
    stale = sorted((set(EXCUSED) | set(RUN)) - set(blocks))
    assert stale == [], f"entries naming no block any more: {stale}"


def test_the_bundles_blocks_make_register_attest_and_sign_in_order(tmp_path):
    """docs/bundles.md from a workload of one's own: make the bundle, register it, make a key, attest it (after the
    evidence the text says the promotion rests on)."""
    from newcomer_helpers import WORKLOAD, evidence

    folder = clone(tmp_path / "clone")
    database = f"sqlite:///{folder / 'registry.db'}"
    (folder / "my-wan-modln.yaml").write_text(WORKLOAD)
    prepare = subprocess.run("registry init && registry workload declare my-wan-modln.yaml", shell=True, cwd=folder,
                             env={**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
                                  "REGISTRY_DATABASE_URL": database}, capture_output=True, text=True, timeout=120)
    assert prepare.returncode == 0, prepare.stderr
    for block in blocks_of("docs/bundles.md"):
        if block.key[1].startswith("registry attest"):
            from click.testing import CliRunner

            from registry.cli.main import main

            digest = json.loads(CliRunner().invoke(main, ["--db", database, "show", "my-modln", "--json"]).output)[
                "payload_sha256"]
            (folder / "evidence.json").write_text(json.dumps(evidence(digest)))
            for args in (["evidence", "import", str(folder / "evidence.json")], ["promote", "my-modln"]):
                assert CliRunner().invoke(main, ["--db", database, *args]).exit_code == 0
        run_block(block, folder, database)
    assert json.loads((folder / "my-modln.intoto.json").read_text())["payloadType"] == "application/vnd.in-toto+json"


def test_the_hooks_blocks_run(tmp_path):
    folder = clone(tmp_path / "clone")
    database = f"sqlite:///{folder / 'registry.db'}"
    subprocess.run([str(ROOT / ".venv" / "bin" / "registry"), "--db", database, "init"], check=True,
                   capture_output=True, timeout=120)
    for block in blocks_of("docs/hooks.md"):
        printed = run_block(block, folder, database)
    assert "https://chat.example.org/registry" in printed


def test_every_token_a_documented_command_writes_is_git_ignored():
    """A token written to a file by a documented command must never be committed by `git add .`."""
    written = []
    for block in command_blocks():
        for line in block.text.splitlines():
            if "token issue" in line:
                written += re.findall(r"token issue [^>|&]*>\s*(\S+)", line)
    assert written, "no documented command writes a token to a file any more: drop this test"
    for path in written:
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} (written by a documented `token issue`) is not git-ignored"
