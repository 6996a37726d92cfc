"""Opening a registry through the CLI: what a URL may name, what looking at a database may change,
and reading without write access.

Tests run as root, where file modes do not stop a write, so "read-only" is
made real two ways: SQLite's own read-only URI (`mode=ro`), and a process
that has dropped root to read a registry in a folder it may not write. Every
case checks the bytes on disk, not only the exit status.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import update
from registry.cli.main import main
from registry.events.canonical import canonical_json
from registry.events.chain import event_hash
from registry.events.errors import StoreError
from registry.events.store import EVENTS, NewEvent

from store_helpers import drop_immutability, head_of, opened, raw
from cli_helpers import one_line_refusal
from paths import ROOT

MANIFEST = """
workload: wan-small
sampling: {height: 64, width: 64, frames: 4, steps: 2, seed: 7, dtype: bfloat16}
speed:
  min_speedup: 1.1
  runs_per_arm: 4
  protocol: paired
  decision: point
"""


def run(url: str | None, *args: str, env: dict | None = None):
    prefix = [] if url is None else ["--db", url]
    return CliRunner().invoke(main, [*prefix, "--actor", "tester", *args], env=env)


def fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file in `folder`: its sha256 and modification time."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.iterdir()) if p.is_file()}


EMPTY = hashlib.sha256(b"").hexdigest()


def written(folder: Path) -> dict[str, str]:
    """What the files in `folder` hold, less what a WAL reader makes beside a closed database: its index
    (`-shm`) and an empty log (`-wal`), which hold nothing of the registry."""
    return {name: digest for name, (digest, _) in fingerprint(folder).items()
            if not name.endswith("-shm") and not (name.endswith("-wal") and digest == EMPTY)}


@pytest.fixture
def populated(registry_cli):
    """A registry with a workload and an artifact, and one event the read models have not caught up with."""
    manifest = registry_cli.tmp / "w.yaml"
    manifest.write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(manifest)).exit_code == 0
    registered = registry_cli("artifact", "register", "k1", "--workload", "wan-small", "--kind", "fused_kernel")
    assert registered.exit_code == 0, registered.output
    assert registry_cli("show", "k1").exit_code == 0  # the read models catch up here
    registry = opened(registry_cli.url)
    late = NewEvent("EvaluationFailed", {"artifact": "k1", "payload_sha256": None, "stage": "benchmark",
                                         "error": "out of memory"})
    [registry_cli.head] = registry.store.append("artifact:k1", [late], actor="tester")  # the read models are behind
    registry.close()
    return registry_cli


def snapshot_copy(url: str, folder: Path) -> Path:
    """A consistent copy of the registry at `url` as one file (no WAL beside it) in `folder`."""
    source = sqlite3.connect(url.removeprefix("sqlite:///"))
    path = folder / "registry.db"
    target = sqlite3.connect(path)
    source.backup(target)
    source.close()
    target.close()
    return path


# -- database URLs -------------------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "postgresql+psycopg2://registry:s3cret@db.example/registry",
    "postgresql+asyncpg://registry:s3cret@db.example/registry",
    "sqlite+aiosqlite:///registry.db",
    "mysql://registry@db.example/registry",
])
def test_an_unsupported_driver_is_refused_naming_the_supported_ones(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["init"], ["show", "x"], ["db", "current"]):
        result = run(url, *args)
        one_line_refusal(result, "unsupported database URL", "sqlite:///PATH or postgresql+psycopg://")
        assert "s3cret" not in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true"])
def test_an_in_memory_registry_is_refused(url):
    for args in (["init"], ["show", "x"], ["verify"]):
        one_line_refusal(run(url, *args), "in-memory SQLite database vanishes")


def test_an_empty_database_url_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_refusal(run("", "init"), "--db is empty")
    one_line_refusal(run(None, "init", env={"REGISTRY_DATABASE_URL": ""}), "REGISTRY_DATABASE_URL is empty")
    one_line_refusal(run("  ", "show", "x"), "--db is empty")
    assert list(tmp_path.iterdir()) == []


# -- looking at something that is not a registry writes nothing ------------------------------------

def test_a_database_that_is_not_a_registry_is_left_byte_for_byte(tmp_path):
    path = tmp_path / "customers.db"
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    other.execute("INSERT INTO customers VALUES (1, 'ada')")
    other.commit()
    other.close()
    before = fingerprint(tmp_path)
    url = f"sqlite:///{path}"
    for args in (["show", "x"], ["history", "x"], ["verify"], ["report"], ["db", "upgrade"], ["replay", "--verify"]):
        one_line_refusal(run(url, *args), "is not a registry database", "registry init")
    one_line_refusal(run(url, "init"), "not a registry's (customers)")
    assert "current (none)" in run(url, "db", "current").output
    assert fingerprint(tmp_path) == before  # same bytes, same times, no WAL files beside it


def test_a_missing_database_is_created_only_by_init(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    for args in (["db", "current"], ["db", "upgrade"], ["show", "x"], ["report"]):
        one_line_refusal(run(url, *args), "no registry database at", "registry init")
    assert list(tmp_path.iterdir()) == []
    assert run(url, "init").exit_code == 0
    assert (tmp_path / "registry.db").exists()


def test_a_command_that_may_write_leaves_the_database_alone_in_its_folder_even_when_refused(populated):
    """SQLite keeps a -wal and a -shm file beside the database while a connection is open, and the last
    connection that may write removes them as it closes, once it has read. Opening looks at the file read-only
    first (which leaves both behind), so every command that may write reads through a connection of its own
    before it answers, even one refused at its input: afterwards the database is alone, and a test comparing
    the folder's bytes sees no file come and go. A command that only reads (`history`, `verify`) opens the file
    read-only, and the empty log and index SQLite leaves then go with the next command that may write."""
    database = Path(populated.url.removeprefix("sqlite:///"))
    (populated.tmp / "bad.json").write_text("{bad")

    def beside() -> list[str]:
        return sorted(path.name for path in database.parent.iterdir() if path.name.startswith(database.name))

    for args in (("evidence", "import", str(populated.tmp / "bad.json")), ("promote", "nobody"), ("show", "k1")):
        populated("history", "artifact:k1")
        assert beside() == [database.name, f"{database.name}-shm", f"{database.name}-wal"]
        assert populated(*args).exit_code in (0, 1)
        assert beside() == [database.name], args


# -- reading never needs write access -------------------------------------------------------------

def test_reading_commands_answer_through_a_read_only_url_and_write_nothing(populated):
    path = Path(populated.url.removeprefix("sqlite:///"))
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    before = written(path.parent)
    db_time = path.stat().st_mtime_ns

    shown = run(read_only, "show", "k1", "--json")
    assert shown.exit_code == 0, shown.output
    # The late failure is there: answered from the log, since the read models cannot be caught up.
    assert [f["position"] for f in json.loads(shown.output)["open_failures"]] == [populated.head]
    report = run(read_only, "report", "--format", "json")
    assert report.exit_code == 0, report.output
    assert json.loads(report.output)["as_of"] == populated.head
    history = run(read_only, "history", "k1", "--json")
    assert history.exit_code == 0 and len(json.loads(history.output)) == 2
    verified = run(read_only, "verify", "--json")
    assert verified.exit_code == 0 and json.loads(verified.output)["head"]["position"] == populated.head
    current = run(read_only, "db", "current", "--json")
    assert current.exit_code == 0 and json.loads(current.output)["current"] == json.loads(current.output)["head"]
    replayed = run(read_only, "replay", "--verify", "--json")
    assert replayed.exit_code == 0 and json.loads(replayed.output)["ok"]

    one_line_refusal(run(read_only, "artifact", "register", "k2", "--workload", "wan-small", "--kind", "module"),
                     "nothing written", "readonly")
    one_line_refusal(run(read_only, "replay"), "the read models cannot be updated: this connection may only read")
    one_line_refusal(run(f"sqlite:///file:{path.parent / 'other.db'}?mode=ro&uri=true", "init"),
                     "no registry database at", "a URL that may write")
    assert written(path.parent) == before and path.stat().st_mtime_ns == db_time


def _unprivileged() -> list[str] | None:
    """A prefix that runs a command as an unprivileged user, or None when this process cannot."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    return None if setpriv is None else [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_a_registry_in_a_read_only_folder_is_read_by_a_process_that_may_not_write(populated):
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("cannot drop root here (no setpriv), and root writes through file modes")
    folder = Path(tempfile.mkdtemp(prefix="registry-ro-"))
    try:
        path = snapshot_copy(populated.url, folder)
        path.chmod(0o444)
        folder.chmod(0o555)
        before = fingerprint(folder)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "REGISTRY_ACTOR": "auditor"}

        def cli(*args: str) -> subprocess.CompletedProcess:
            command = [sys.executable, "-c", "from registry.cli.main import main; main()", "--db", f"sqlite:///{path}"]
            return subprocess.run([*prefix, *command, *args],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

        shown = cli("show", "k1", "--json")
        assert shown.returncode == 0, shown.stderr
        assert [f["position"] for f in json.loads(shown.stdout)["open_failures"]] == [populated.head]
        for args in (["report"], ["verify"], ["history", "k1"], ["db", "current"]):
            result = cli(*args)
            assert result.returncode == 0 and result.stderr == "", (args, result.stderr)
        refused = cli("artifact", "register", "k2", "--workload", "wan-small", "--kind", "module")
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert fingerprint(folder) == before
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


# -- verify: the head it saw, a head known from before, and the order of times ------------------------

def test_verify_reports_its_head_and_sees_a_cut_off_tail_against_a_noted_one(populated):
    url = populated.url
    noted = json.loads(run(url, "verify", "--json").output)
    head = f"{noted['head']['position']}:{noted['head']['hash']}"
    plain = run(url, "verify")
    assert plain.exit_code == 0 and f"head {head}" in plain.output
    holds = run(url, "verify", "--expect-head", head)
    assert holds.exit_code == 0 and f"holds the expected head {head}" in holds.output

    registry = opened(url)
    drop_immutability(registry.engine)
    raw(registry.engine, f"DELETE FROM events WHERE position = {noted['head']['position']}")
    registry.engine.dispose()
    assert run(url, "verify").exit_code == 0  # the chain alone cannot see it
    cut = run(url, "verify", "--expect-head", head)
    assert cut.exit_code == 3
    last = populated.head
    assert (f"chain broken at position {last}: the log ends at position {last - 1}, before the expected head at "
            f"position {last}") in cut.output
    report = json.loads(run(url, "verify", "--json", "--expect-head", head).output)
    assert report["intact"] is False and report["head"]["position"] == last - 1
    assert report["expected_head"] == noted["head"]


@pytest.mark.parametrize("text", ["4", "x:" + "a" * 64, "4:" + "A" * 64, "4:abc", "-1:" + "a" * 64])
def test_a_malformed_expected_head_is_refused(populated, text):
    one_line_refusal(run(populated.url, "verify", "--expect-head", text), "--expect-head", "POSITION:HASH")


def test_verify_finds_where_time_goes_backwards_in_a_tampered_file(populated):
    """Someone with the file rewrote one event's time earlier and re-linked the chain after it."""
    registry = opened(populated.url)
    events = registry.store.read_all()
    drop_immutability(registry.engine)
    prev = events[1].prev_hash
    with registry.engine.begin() as conn:
        for index, event in enumerate(events[1:], start=1):
            moment = events[0].recorded_at - timedelta(hours=1) if index == 1 else event.recorded_at
            fields = {name: getattr(event, name) for name in ("position", "event_id", "stream", "version", "type",
                                                              "schema_version", "actor", "idempotency_key")}
            link = event_hash(prev, **fields, payload=canonical_json(event.payload), recorded_at=moment)
            conn.execute(update(EVENTS).where(EVENTS.c.position == event.position)
                         .values(recorded_at=moment, prev_hash=prev, hash=link))
            prev = link
    registry.engine.dispose()
    result = run(populated.url, "verify")
    assert result.exit_code == 3
    assert "chain broken at position 2: time goes backwards" in result.output


def test_a_registry_opened_for_reading_cannot_be_written_even_where_the_file_could(populated):
    """What `verify` and `history` open: SQLite's read-only mode, so a command that only reads cannot write."""
    registry = opened(populated.url, read_only=True)
    assert registry.store.verify().head_position == populated.head
    with pytest.raises(StoreError, match="nothing written: attempt to write a readonly database"):
        registry.store.append("artifact:k1", [NewEvent("EvaluationFailed", {
            "artifact": "k1", "payload_sha256": None, "stage": "benchmark", "error": "again"})], actor="tester")
    registry.engine.dispose()
    assert head_of(populated.url) == populated.head
