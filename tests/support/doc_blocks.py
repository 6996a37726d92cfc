"""The command blocks of README.md and docs/: found, run as printed on the database each needs, or excused with why.

Each block is run in a clone of the checkout's folders it reads (docs, examples), with the registry it names; the
demo's blocks run on a copy of the demo's registry from the demo's test file."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from paths import ROOT


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
        "`make test` runs this very suite, and `make demo` the full demo campaign: tests/whole_path/test_demo.py runs the "
        "reduced campaign, and this module runs the blocks that read the demo's registry on it",
    ("README.md", '.venv/bin/registry --db sqlite:///served.db init && .venv/bi'):
        "binds the fixed port 8750 and leaves a server running, then runs the whole demo campaign through it "
        "(tests/serve/test_serve_worker.py runs the served demo; the token it writes goes to a git-ignored path: "
        "test_every_token_a_documented_command_writes_is_git_ignored)",
    ("docs/bundles.md", 'registry kernels build bundles                     # the bui'):
        "compiles every built-in kernel for each target and rebuilds it in the sandbox (minutes of ptxas): "
        "tests/kernels/test_kernel_build.py and tests/app/test_register_kernel_bundle.py run both commands",
    ("docs/bundles.md", 'registry lock --workload W [--arch sm90 --torch 2.13.0 --cud'):
        "a synopsis: W, FILE and the bracketed options are placeholders (tests/app/test_lock.py runs each form)",
    ("docs/hooks.md", 'registry hook remove HOOK_ID --reason "channel archived"'):
        "names a hook by the id its reader's `hook add` printed (tests/app/test_hooks.py removes one)",
    ("docs/import.md", 'registry import motionkernel campaigns/ltx-r4 campaigns/wan-'):
        "names the reader's own campaign folders; the README's block runs the same command on the repository's "
        "tree, and tests/app/test_import_motionkernel.py each form",
    ("docs/postgres.md", 'registry --db postgresql://USER:PASSWORD@HOST:5432/DBNAME ve'):
        "a synopsis of a Postgres URL (tests/events/test_store_postgres.py runs the registry on a real server)",
    ("docs/postgres.md", 'createdb --owner registry_owner registry'):
        "an administrator's set-up of a Postgres server with roles and passwords (tests/events/test_roles.py applies "
        "`db roles` on a real server)",
    ("docs/postgres.md", 'registry --db "$URL" verify --json > registry-head.json     '):
        "a backup and restore of a production Postgres database, $URL the reader's",
    ("docs/postgres.md", 'createdb --owner registry_owner registry_restored'):
        "a restore into a production Postgres server",
    ("docs/projections.md", 'registry verify --expect-head 1234:9f2c...e1     # exit 3 un'):
        "1234:9f2c...e1 stands for a head the reader noted (tests/events/test_chain.py checks --expect-head)",
    ("docs/runtime.md", 'registry resolve --workload W --arch sm90 --torch 2.13.0 [--'):
        "a synopsis: W and the bracketed options are placeholders (tests/cli/test_cli_resolve.py runs each form)",
    ("docs/serve.md", 'registry --db postgresql://registry@db/registry serve --port'):
        "serves a Postgres database on a host named db (tests/serve/test_serve_api.py serves a real Postgres)",
    ("docs/serve.md", 'registry token issue --principal gpu-worker-7 --scope ingest'):
        "revokes 3f9c0e1d2a4b5c6d, a key id only the reader's own `token issue` prints (tests/serve/test_serve_tokens.py)",
    ("docs/serve.md", 'registry evaluate modln --server https://registry.example.or'):
        "a worker of a remote server (tests/serve/test_serve_worker.py runs `evaluate --server` against a real one)",
    ("docs/serve.md", 'registry --db postgresql://registry@db/registry serve --host'):
        "serves a Postgres database on a host named db behind a proxy",
}


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
