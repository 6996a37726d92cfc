"""The README's and docs/'s command blocks run as printed, against the database each needs, and what they claim of
the program's output holds.

Every shell block of README.md and docs/*.md is either run here or excused in `EXCUSED` with why (it needs a
remote server, names the reader's own files, is a synopsis with placeholders, ...); a new block that is neither
fails `test_every_command_block_is_run_or_excused`. Blocks run with bash in a scratch folder laid out as a clone
(`.venv`, `tests` and `examples` of this checkout, `registry` on PATH), in the order a reader meets them, each
document's after the set-up its text assumes (`make demo` before the README's "look further"; a declared
workload before docs/bundles.md's registration). A line ending in `# exit N` must exit N.

Needs seconds: each block starts `registry` processes. The blocks that read the demo's registry run in
tests/test_demo.py, on its reduced campaign (built once per run), through `run_the_blocks_on_the_demo`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
COMMAND = re.compile(r"^(\.venv/bin/)?(registry|python|createdb|psql|make)(\s|$)")
# Blocks that run a benchmark: minutes of measurement on purpose (docs/benchmarks.md gives each one's figures).
BENCHMARK = ".venv/bin/python benchmarks/"


@dataclass(frozen=True)
class Block:
    document: str  # README.md, docs/bundles.md, ...
    line: int
    text: str
    follows: str | None  # the fenced block right after it, when the text between says it is what it prints

    @property
    def key(self) -> tuple[str, str]:
        return self.document, _first_command(self.text)[:60]


def _first_command(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")), "")


def command_blocks() -> list[Block]:
    """Every fenced block of the documents that holds shell commands: tagged `sh`, or untagged and starting with
    a command. Untagged blocks of output, layouts and configuration are not commands."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        matches = list(FENCE.finditer(text))
        for index, match in enumerate(matches):
            tag, body = match.group(1), match.group(2)
            if tag in ("sh", "bash") or (tag == "" and COMMAND.match(_first_command(body))):
                after = matches[index + 1] if index + 1 < len(matches) else None
                between = text[match.end():after.start()] if after else ""
                follows = after.group(2) if after and after.group(1) == "" and between.strip() == "prints" else None
                found.append(Block(str(path.relative_to(ROOT)), text[:match.start()].count("\n") + 1, body, follows))
    return found


EXCUSED = {
    ("README.md", 'make demo   # creates .venv, installs the pins, runs the dem'):
        "`make test` runs this very suite, and `make demo` the full demo campaign: tests/test_demo.py runs the "
        "reduced campaign, and this module runs the blocks that read the demo's registry on it",
    ("README.md", '.venv/bin/registry --db sqlite:///served.db init && .venv/bi'):
        "binds the fixed port 8750 and leaves a server running, then runs the whole demo campaign through it "
        "(tests/test_serve_worker.py runs the served demo; the token it writes goes to a git-ignored path: "
        "test_every_token_a_documented_command_writes_is_git_ignored)",
    ("docs/bundles.md", 'registry kernels build bundles                     # the bui'):
        "compiles every built-in kernel for each target and rebuilds it in the sandbox (minutes of ptxas): "
        "tests/test_kernel_build.py and tests/test_register_kernel_bundle.py run both commands",
    ("docs/bundles.md", 'registry lock --workload W [--arch sm90 --torch 2.13.0 --cud'):
        "a synopsis: W, FILE and the bracketed options are placeholders (tests/test_lock.py runs each form)",
    ("docs/hooks.md", 'registry hook remove HOOK_ID --reason "channel archived"'):
        "names a hook by the id its reader's `hook add` printed (tests/test_hooks.py removes one)",
    ("docs/import.md", 'registry import motionkernel campaigns/ltx-r4 campaigns/wan-'):
        "names the reader's own campaign folders; the README's block runs the same command on the repository's "
        "tree, and tests/test_import_motionkernel.py each form",
    ("docs/postgres.md", 'registry --db postgresql://USER:PASSWORD@HOST:5432/DBNAME ve'):
        "a synopsis of a Postgres URL (tests/test_store_postgres.py runs the registry on a real server)",
    ("docs/postgres.md", 'createdb --owner registry_owner registry'):
        "an administrator's set-up of a Postgres server with roles and passwords (tests/test_roles.py applies "
        "`db roles` on a real server)",
    ("docs/postgres.md", 'registry --db "$URL" verify --json > registry-head.json     '):
        "a backup and restore of a production Postgres database, $URL the reader's",
    ("docs/postgres.md", 'createdb --owner registry_owner registry_restored'):
        "a restore into a production Postgres server",
    ("docs/projections.md", 'registry verify --expect-head 1234:9f2c...e1     # exit 3 un'):
        "1234:9f2c...e1 stands for a head the reader noted (tests/test_chain.py checks --expect-head)",
    ("docs/runtime.md", 'registry resolve --workload W --arch sm90 --torch 2.13.0 [--'):
        "a synopsis: W and the bracketed options are placeholders (tests/test_cli_resolve.py runs each form)",
    ("docs/serve.md", 'registry --db postgresql://registry@db/registry serve --port'):
        "serves a Postgres database on a host named db (tests/test_serve_api.py serves a real Postgres)",
    ("docs/serve.md", 'registry token issue --principal gpu-worker-7 --scope ingest'):
        "revokes 3f9c0e1d2a4b5c6d, a key id only the reader's own `token issue` prints (tests/test_serve_tokens.py)",
    ("docs/serve.md", 'registry evaluate modln --server https://registry.example.or'):
        "a worker of a remote server (tests/test_serve_worker.py runs `evaluate --server` against a real one)",
    ("docs/serve.md", 'registry --db postgresql://registry@db/registry serve --host'):
        "serves a Postgres database on a host named db behind a proxy",
}


def test_every_command_block_is_run_or_excused():
    blocks = {block.key: block for block in command_blocks()}
    unknown = sorted(f"{key[0]}:{blocks[key].line}: {key[1]!r}" for key in blocks if key not in EXCUSED
                     and key not in RUN and not key[1].startswith(BENCHMARK))
    assert unknown == [], "command blocks neither run by this module nor excused in EXCUSED: " + "; ".join(unknown)
    stale = sorted((set(EXCUSED) | set(RUN)) - set(blocks))
    assert stale == [], f"entries naming no block any more: {stale}"


def clone(folder: Path) -> Path:
    """A scratch folder laid out as a clone: this checkout's .venv, tests and examples."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in (".venv", "tests", "examples"):
        (folder / name).symlink_to(ROOT / name)
    return folder


def run_block(block: Block, folder: Path, database: str | None = None) -> str:
    """Run a block as printed with bash in `folder`; a line ending in `# exit N` must exit N. Returns its output."""
    lines = []
    for line in block.text.splitlines():
        expected = re.search(r"\s#\s*exit (\d+)\b.*$", line)
        if expected:
            command = line[:expected.start()]
            line = f"if {command}; then exit 97; else [ $? -eq {expected.group(1)} ] || exit 98; fi"
        lines.append(line)
    env = {key: value for key, value in os.environ.items() if key != "REGISTRY_DATABASE_URL"}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{env['PATH']}"
    if database is not None:
        env["REGISTRY_DATABASE_URL"] = database
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", "\n".join(lines)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{block.document}:{block.line} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    if block.follows is not None:
        printed = done.stdout + done.stderr
        missing = [line for line in block.follows.splitlines() if line.strip() and line.strip() not in printed]
        assert missing == [], (f"{block.document}:{block.line} does not print what the document says: {missing}; "
                               f"it printed:\n{printed}")
    return done.stdout


def blocks_of(document: str) -> list[Block]:
    return [block for block in command_blocks() if block.document == document and block.key in RUN]


RUN = {
    ("README.md", '.venv/bin/registry --db sqlite:///demo.db show step-cache'): "demo",
    ("README.md", '.venv/bin/registry --db sqlite:///history.db init'): "clone",
    ("docs/runtime.md", '.venv/bin/registry --db sqlite:///demo.db lock --workload ti'): "demo",
    ("docs/bundles.md", 'mkdir -p bundles/my-modln'): "bundles",
    ("docs/bundles.md", 'registry artifact register my-modln --workload my-wan-modln '): "bundles",
    ("docs/bundles.md", 'registry keys init signing.key          # signing.key (mode '): "bundles",
    ("docs/bundles.md", 'registry attest my-modln --key signing.key --out my-modln.in'): "bundles",
    ("docs/hooks.md", 'registry hook secret hook.secret          # 32 random bytes,'): "hooks",
}


def demo_clone(demo_folder: Path, to: Path) -> Path:
    """A clone where `make demo` ran, from a demo campaign's folder (its demo.db and out folder, copied)."""
    folder = clone(to)
    shutil.copy2(demo_folder / "demo.db", folder / "demo.db")
    for suffix in ("-wal", "-shm"):
        if (demo_folder / f"demo.db{suffix}").exists():
            shutil.copy2(demo_folder / f"demo.db{suffix}", folder / f"demo.db{suffix}")
    shutil.copytree(demo_folder / "out", folder / "demo-out")
    return folder


def run_the_blocks_on_the_demo(demo_folder: Path, scratch: Path) -> None:
    """The README's and docs/runtime.md's blocks, those that read the demo's registry on a copy of it (tests/
    test_demo.py hands over its reduced campaign, built once per run), the others in a clone of their own."""
    folder = demo_clone(demo_folder, scratch / "demo-clone")
    for block in [*blocks_of("README.md"), *blocks_of("docs/runtime.md")]:
        run_block(block, folder if RUN[block.key] == "demo" else clone(scratch / f"clone-{block.line}"))


def check_the_readmes_demo_table(rows: dict[str, dict]) -> None:
    """The README prints the demo's table; the rows whose reasons do not depend on this machine's timings must
    read as the program reads them (a reason that changed is a stale README). `rows`: the demo's, by artifact."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("demo campaign", 1)[1].split("└", 1)[0]
    said: dict[str, list[list[str]]] = {}
    current = None
    for row in (line for line in table.splitlines() if line.startswith("│")):
        cells = [cell.strip() for cell in row.strip().strip("│").split("│")]
        current = cells[0] or current
        said.setdefault(current, []).append(cells)
    for artifact in ("lossy-skip", "flash-claimed-fallback", "modln-triton"):
        printed = " ".join(cells[-1] for cells in said[artifact] if cells[-1])
        assert printed == rows[artifact]["reason"], artifact
        assert said[artifact][0][2] == rows[artifact]["decision"], artifact


def test_the_bundles_blocks_make_register_attest_and_sign_in_order(tmp_path):
    """docs/bundles.md from a workload of one's own: make the bundle, register it, make a key, attest it (after the
    evidence the text says the promotion rests on)."""
    from test_newcomer_path import WORKLOAD, evidence

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
