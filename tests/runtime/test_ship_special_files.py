""""Nothing hangs": special files named as a lock file, a bundle manifest, a bundle file or a payload.

Each is refused in one line by the shared reader (registry.formats.documents: a
regular file only, its size checked before a byte is read), never read. Each
command runs in its own process under a hang guard (a timeout far above what
a refusal takes), so a reader that blocks on a FIFO or reads /dev/zero
forever fails the test instead of stopping the suite.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from registry.app.workloads import MAX_PAYLOAD_BYTES
from registry.bundles.lock import MAX_LOCK_BYTES
from ship_helpers import declare, make_bundle, ship
from paths import ROOT

HANG_GUARD_S = 120


def run(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
    """`registry ARGS` in a fresh process; a hang is a failure, not a stuck suite."""
    command = [sys.executable, "-m", "registry", *(("--db", url) if url else ()), *args]
    env = {key: value for key, value in os.environ.items() if key != "REGISTRY_DATABASE_URL"}
    try:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                              env={**env, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: registry {' '.join(args)}")


def refused(done: subprocess.CompletedProcess, fragment: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)  # only its size could be read cheaply, and only its size is
    return path


def test_a_special_file_as_the_lock_file_is_refused(fifo, tmp_path):
    refused(run("lock", "verify", str(fifo)), "a FIFO (named pipe), not a regular file")
    refused(run("lock", "verify", "/dev/zero"), "/dev/zero: a character device, not a regular file")
    refused(run("lock", "verify", str(sparse(tmp_path / "huge.json", MAX_LOCK_BYTES + 1))), "over the")


def test_a_special_file_as_a_payload_is_refused(registry_cli, fifo, tmp_path):
    declare(registry_cli)
    for payload, fragment in ((fifo, "a FIFO (named pipe), not a regular file"),
                              ("/dev/zero", "a character device, not a regular file"),
                              (sparse(tmp_path / "huge.bin", MAX_PAYLOAD_BYTES + 1), "over the 1024.0 MiB")):
        refused(run("artifact", "register", "p", "--workload", "wan", "--kind", "step_cache", "--payload",
                    str(payload), url=registry_cli.url), fragment)


def test_a_special_file_as_a_bundle_manifest_or_bundle_file_is_refused(registry_cli, tmp_path):
    declare(registry_cli)
    manifest_fifo = make_bundle(tmp_path, "manifest-fifo")
    (manifest_fifo / "bundle.json").unlink()
    os.mkfifo(manifest_fifo / "bundle.json")
    refused(run("artifact", "register", "x", "--workload", "wan", "--kind", "step_cache", "--bundle",
                str(manifest_fifo), url=registry_cli.url), "a FIFO (named pipe), not a regular file")
    file_fifo = make_bundle(tmp_path, "file-fifo", extra_files={"table.bin": "x"})
    (file_fifo / "table.bin").unlink()
    os.mkfifo(file_fifo / "table.bin")
    refused(run("artifact", "register", "y", "--workload", "wan", "--kind", "step_cache", "--bundle",
                str(file_fifo), url=registry_cli.url), "table.bin is not a regular file")


def test_special_files_in_locked_bundles_are_named_by_lock_verify(registry_cli):
    declare(registry_cli)
    root = registry_cli.tmp / "bundles"
    ship(registry_cli, root, "fast", 1.5)
    lock = registry_cli.tmp / "registry.lock.json"
    assert registry_cli("lock", "--workload", "wan", "--unsigned", "--out", str(lock)).exit_code == 0
    (root / "fast" / "bundle.json").unlink()
    os.mkfifo(root / "fast" / "bundle.json")
    done = run("lock", "verify", str(lock), "--bundles", str(root), "--json")
    assert done.returncode == 3, done.stderr
    problems = json.loads(done.stdout)["problems"]
    assert [(p["artifact"], p["code"]) for p in problems] == [("fast", "bundle_mismatch")]
    assert "a FIFO (named pipe), not a regular file" in problems[0]["detail"]


RUNTIME = """
import json, sys
from registry.bundles import Profile
from registry.runtime import LoadError, LockRefused, load, resolve
lock, bundles, fifo_lock = sys.argv[1:4]
try:
    resolve("wan", Profile("sm90", "2.13.0", "12.8"), lock=fifo_lock, trusted_keys=[sys.argv[4]])
except LockRefused as refused:
    print(json.dumps({"lock": refused.code, "detail": refused.detail}))
answer = resolve("wan", Profile("sm90", "2.13.0", "12.8"), lock=lock, trusted_keys=[sys.argv[4]])
try:
    load(answer.match, trusted_root=bundles)
except LoadError as refused:
    print(json.dumps({"load": str(refused)}))
"""


def test_the_runtime_refuses_special_files_without_hanging(registry_cli, fifo):
    declare(registry_cli)
    root = registry_cli.tmp / "bundles"
    ship(registry_cli, root, "fast", 1.5)
    key, lock = registry_cli.tmp / "signing.key", registry_cli.tmp / "registry.lock.json"
    assert registry_cli("keys", "init", str(key)).exit_code == 0
    assert registry_cli("lock", "--workload", "wan", "--key", str(key), "--out", str(lock)).exit_code == 0
    (root / "fast" / "bundle.json").unlink()
    os.mkfifo(root / "fast" / "bundle.json")
    try:
        done = subprocess.run([sys.executable, "-c", RUNTIME, str(lock), str(root), str(fifo), f"{key}.pub"],
                              cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("the runtime hung on a FIFO")
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert first["lock"] == "malformed" and "a FIFO (named pipe), not a regular file" in first["detail"]
    assert "fast: refused:" in second["load"] and "a FIFO (named pipe), not a regular file" in second["load"]


def test_a_special_file_as_a_key_is_refused(registry_cli, fifo, tmp_path):
    lock = tmp_path / "any.json"
    lock.write_text("{}")
    refused(run("keys", "show", "--key", str(fifo)), "a FIFO (named pipe), not a regular file")
    refused(run("lock", "verify", str(lock), "--key", "/dev/zero"), "/dev/zero: a character device")
    refused(run("lock", "verify", str(lock), "--key", str(fifo)), "a FIFO (named pipe), not a regular file")
