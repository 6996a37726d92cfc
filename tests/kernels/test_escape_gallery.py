"""The escape gallery: candidates in tests/gallery/escape_*.py that attack the log, the harness, the installed
code and the checks, each through `registry artifact register`, `evaluate` and `promote`.

`evaluate` and `promote` run in `registry` processes (a candidate that kills or rewrites its harness must
hit that process, never pytest; a patched package must meet the next process that imports it). `promote` is a
fresh interpreter each time. Every `evaluate` runs in one long-lived harness process of the installed copy
(tests/support/process_forks.py's `CommandHost`), one escape after another, as a process that evaluates one
candidate after another does (`registry demo`, a re-verifying worker): its warm zygote, which imports torch
and Triton once, forks every escape's jail, so an escape that reached the zygote or the harness would show in
the escapes after it, and each escape saves an interpreter's start-up and two imports of torch (about 1.5
CPU-s). All run on one SQLite registry per module, with a throwaway copy of the registry package as the installed code: the
harness imports the copy, so an escape that writes "the installed package" writes only the copy (and each
escape that writes one checks the copy's marker first). Registering (before any candidate code runs) and
the checks afterwards (the chain's walk, the copy against its manifest) are the same use cases called in
this process, by the code under test rather than by the copy the candidate could have reached: about two
seconds of CPU less per escape than three more `registry` processes. Each test asserts what a refusal
means here: the evaluation recorded as the one failure naming what stopped it (or, for a candidate honest
underneath, no effect of its attack), `promote` not promoting, the chain and the installed copy intact,
no process or file of the candidate's left behind, and no event beyond the registration, one evaluation
and one verdict.

Each escape's docstring says what it did against the code of `main` before the sandbox's checks left
the candidate's reach (a scratch clone at that commit, its CLI run with the candidate registered as a
module: ``--entry escape_x:modulated_layernorm`` with the candidate's folder on PYTHONPATH, as that entry
form required). Most are refused by the sandbox
(registry/kernels/sandbox.py); the sitecustomize one by the candidate being a file loaded from a private
copy. Two (the canary, the forged counter) are not caught by any check: what holds them is the gate's rule
that a launch count from inside the candidate's process shows nothing (execution.launches_unverified).
Escapes 13-17 (the wire framed or flooded by the candidate, a fork bomb, memory and tmpfs exhaustion) came
later: 13 and 14 were shown against the harness before it screened its own copy of the source and cut
a frame's error text; the three resource ones are bounded by limits that already existed and are not run
against an unbounded harness (they would take the machine's process table, memory or disk).
Each test takes one evaluation under the interpreter (1-4 s on a quiet two-core machine; one refused at load is the
quick end); the module's setup copies the package and writes its manifest (a second or two).
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from gallery import candidate_file
from gallery._escape import COPY_MARKER
from process_forks import CommandHost
from registry.app.install import check_install, package_folder, write_manifest
from registry.app.workloads import register_artifact
from registry.cli.main import main
from registry.kernels.sandbox import SandboxUnavailable, require_sandbox
from store_helpers import opened
from paths import GALLERY, ROOT

pytestmark = [pytest.mark.device, pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                                     reason="the gallery runs under the interpreter")]

WORKLOAD = """
workload: escape-modln
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""
COMMAND_TIMEOUT_S = 600
PRELOADED = ("registry.cli.main",)
"""What the harness process that runs every `evaluate` imports first: the installed copy's command line."""
LEFTOVER_NAMES = ("escape-daemon", "escape-leftover", "escape-forkbomb")
BLOCKED = ("No such file or directory", "Permission denied", "Operation not permitted", "Read-only file system",
           "File too large", "No space left", "no `registry evaluate` in reach")
"""What the sandbox's refusal of a file, /proc or process operation reads like in the recorded error (the
last: the escape's parent in the jail is the sandbox's own pid 1, and no harness is visible)."""


@dataclass
class Home:
    root: Path
    url: str
    env: dict[str, str]
    manifest: Path
    package: Path  # the copy the registry processes import


def _command(home: Home, *args: str) -> list[str]:
    return [sys.executable, "-m", "registry", "--db", home.url, *args]


def _run(home: Home, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_command(home, *args), cwd=cwd or home.root, env=home.env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Iterator[Home]:
    """One registry with the workload declared, run from a marked copy of the registry package.

    The copy lives beside the repository's own package, not in the temporary folder: the sandbox binds the
    harness's package folder into a jail whose temporary folder is a tmpfs of its own.
    """
    try:
        require_sandbox()
    except SandboxUnavailable as exc:  # as tests/kernels/test_sandbox.py: a skip REGISTRY_TEST_STRICT=1 refuses
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("escapes")
    installed = Path(tempfile.mkdtemp(prefix=".escape-gallery-", dir=ROOT))
    copy = installed / "registry"
    shutil.copytree(package_folder(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / COPY_MARKER).write_text("a throwaway copy: the escape gallery may write it\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("REGISTRY_", "PYTHON"))}
    env.update(PYTHONPATH=str(copy.parent), TRITON_INTERPRET="1")
    home = Home(root, f"sqlite:///{root / 'registry.db'}", env, root / "install-manifest.json", copy)
    (root / "workload.yaml").write_text(WORKLOAD)
    for args in (("init",), ("workload", "declare", str(root / "workload.yaml"))):  # no candidate yet: in process
        done = CliRunner().invoke(main, ["--db", home.url, "--actor", "reviewer", *args])
        assert done.exit_code == 0, done.output
    write_manifest(home.manifest, package=copy)  # what `install-manifest` run from the copy writes
    yield home
    shutil.rmtree(installed)


@pytest.fixture(scope="module")
def harness(home) -> Iterator[CommandHost]:
    """The one harness process every escape's `evaluate` runs in, started with the registry processes' environment
    (the installed copy first on its path)."""
    host = CommandHost(home.env, PRELOADED)
    host.zygotes = set()  # the warm zygotes seen as its children after an evaluation: one, the same every time
    yield host
    host.close()


@dataclass
class Attempt:
    artifact: str
    folder: Path
    evaluated: subprocess.CompletedProcess
    verdict: dict
    events: list[tuple[str, dict]]
    elsewhere: list[tuple[str, str]]  # events on any other stream since the escape was registered

    @property
    def types(self) -> list[str]:
        return [kind for kind, _ in self.events]


def _events(home: Home) -> list[tuple[str, str, dict]]:
    with sqlite3.connect(home.root / "registry.db") as db:
        rows = db.execute("SELECT stream, type, payload FROM events ORDER BY position").fetchall()
    return [(stream, kind, json.loads(payload)) for stream, kind, payload in rows]


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``, now."""
    return {int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()}


def _leftovers() -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() in LEFTOVER_NAMES:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture
def attempt(home, harness):
    """Register, evaluate and promote one escape; afterwards end whatever it left running (what a test
    asserts about leftovers it asserts itself, before this cleanup)."""

    def run(escape: str) -> Attempt:
        artifact = escape.replace("_", "-")
        before = len(_events(home))
        folder = home.root / escape
        folder.mkdir()
        entry = f"{candidate_file(escape, folder)}:modulated_layernorm"
        registry = opened(home.url, actor="reviewer")  # reads the file for its digest, never imports it
        try:
            registered = register_artifact(registry, artifact, workload="escape-modln", kind="fused_kernel",
                                           op="modulated_layernorm", entry=entry)
        finally:
            registry.engine.dispose()
        assert registered.appended
        evaluated = harness.run_command("registry.cli.main:main", "registry",
                                        ["--db", home.url, "evaluate", artifact, "--warmup", "0"], cwd=folder,
                                        env=home.env, timeout=COMMAND_TIMEOUT_S)
        harness.zygotes |= _children(harness.server.pid)
        assert len(harness.zygotes) == 1, f"the harness has started warm zygotes {harness.zygotes}"
        promoted = _run(home, "promote", artifact, "--json", cwd=folder)
        verdict = json.loads(promoted.stdout) if promoted.stdout.strip() else {"decision": promoted.stderr}
        stream = f"artifact:{artifact}"
        events = _events(home)[before:]
        return Attempt(artifact, folder, evaluated, verdict, [(kind, body) for name, kind, body in events
                                                              if name == stream],
                       [(name, kind) for name, kind, _ in events if name != stream])

    yield run
    for pid in _leftovers():
        os.kill(pid, signal.SIGKILL)
    for stray in Path("/dev/shm").glob("escape-*"):
        stray.unlink()


def _verified(home: Home, attempt: Attempt) -> None:
    """Nothing outside the escape's own stream, nothing left running, the chain and the install intact."""
    assert attempt.elsewhere == [], attempt.elsewhere
    assert _leftovers() == [], "the candidate left processes behind"
    registry = opened(home.url, actor="reviewer", read_only=True)
    try:
        chain = registry.store.verify()
    finally:
        registry.engine.dispose()
    assert chain.intact, (chain.broken_at, chain.problem)
    install = check_install(home.manifest, package=home.package)
    assert install.intact, install.summary()


def refused(home: Home, attempt: Attempt, *classes: str) -> str:
    """The evaluation is the one recorded failure, naming one of ``classes``; promote holds on it."""
    assert attempt.evaluated.returncode == 4, attempt.evaluated.stderr
    assert attempt.types == ["ArtifactRegistered", "EvaluationFailed", "VerdictRendered"]
    error = attempt.events[1][1]["error"]
    assert any(name in error for name in classes), error
    assert attempt.verdict["decision"] == "held" and attempt.verdict["rule"] == "evaluation_failed"
    _verified(home, attempt)
    return error


def without_effect(home: Home, attempt: Attempt) -> dict:
    """A candidate whose attack did nothing it could show: an evaluation's events, held by the gate because
    its launch count came from its own process (execution.launches_unverified, the class the sandbox leaves
    to a signal from outside it); returns the benchmark event."""
    assert attempt.evaluated.returncode == 0, attempt.evaluated.stderr
    assert attempt.types == ["ArtifactRegistered", "ParityMeasured", "BenchmarkMeasured", "ExecutionObserved",
                             "VerdictRendered"]
    assert attempt.verdict["decision"] == "held", attempt.verdict
    assert attempt.verdict["rule"] == "execution.launches_unverified", attempt.verdict
    _verified(home, attempt)
    return dict(attempt.events[2][1])


# -- the log, written from inside ------------------------------------------------------------------

def test_01_log_forged_through_the_api(home, attempt):
    """On main: promoted. The worker read `--db` and the artifact from /proc/<ppid>/cmdline, appended
    VerdictRendered(promoted) through registry.app.decisions; the evaluation was recorded after it and
    `promote` returned the standing verdict; `registry verify` passed (the chain is the store's own)."""
    refused(home, attempt("escape_log_forge"), *BLOCKED)


def test_02_log_forged_then_the_harness_killed(home, attempt):
    """On main: promoted, with no evaluation in the log at all: the forged verdict, then SIGKILL of the
    harness (evaluate exited -9 with nothing recorded), so the log read [registered, promoted]."""
    refused(home, attempt("escape_log_forge_kill"), *BLOCKED)


def test_03_a_daemon_writes_after_evaluate_returned(home, attempt):
    """On main: promoted after evaluate had returned an honest run: the setsid grandchild outlived the
    worker's process group and appended the verdict once the harness had exited."""
    refused(home, attempt("escape_daemon"), *BLOCKED)


def test_11_log_found_through_the_harness_s_descriptors(home, attempt):
    """On main: promoted. The worker found the registry through /proc/<ppid>/fd (the harness holds the
    SQLite file open), no URL needed, and forged the verdict there."""
    refused(home, attempt("escape_proc_fd"), *BLOCKED)


# -- the harness, rewritten from inside ------------------------------------------------------------

def test_04_the_harness_s_integrity_checks_rewritten_through_proc_mem(home, attempt):
    """On main: a torch-computed result with a token launch (technique 13, otherwise refused as "result not
    from the kernel") recorded as a clean evaluation: /proc/<ppid>/mem opened read-write, the integrity
    function's bytecode found and made to return at once, so no held-out or ablated call ran."""
    refused(home, attempt("escape_proc_mem"), *BLOCKED)


# -- every later process, poisoned -----------------------------------------------------------------

def test_05_the_installed_package_patched(home, attempt):
    """On main: promoted by the next `registry promote` (a new process importing the patched
    registry/gate/decide.py of the copy), and nothing in the log or `registry verify` showed it."""
    refused(home, attempt("escape_package_patch"), *BLOCKED)


def test_06_a_forged_pyc_with_the_original_s_mtime_and_size(home, attempt):
    """On main: promoted by the next `registry promote`: Python loaded the forged .pyc (its header holds the
    untouched source's mtime and size); the source file still reads honest."""
    refused(home, attempt("escape_pyc_forge"), *BLOCKED)


def test_07_sitecustomize_in_the_candidate_s_folder_is_never_imported(home, attempt):
    """On main: promoted by the next `registry promote` run with the candidate's folder on PYTHONPATH (which
    a module entry needed): Python imported the sitecustomize.py the candidate wrote there at start-up.
    Now the candidate is a file: the worker loads a copy in a folder of its own, which the harness removes,
    and no registry process has the candidate's folder on its import path."""
    tried = attempt("escape_sitecustomize")
    without_effect(home, tried)
    assert not (tried.folder / "sitecustomize.py").exists()
    # The worker's copy and what it wrote are gone, so the attack is shown to work where it can: the same
    # candidate run as a plain process (a second or two of CPU, torch's import) writes its sitecustomize.py,
    # and the next interpreter with that folder on its path runs the promoting gate the file installs.
    scratch = home.root / "escape_sitecustomize_unconfined"
    scratch.mkdir()
    wrote = subprocess.run([sys.executable, str(candidate_file("escape_sitecustomize", scratch))], cwd=scratch,
                           env=home.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert wrote.returncode == 0 and (scratch / "sitecustomize.py").exists(), wrote.stderr
    poisoned = subprocess.run([sys.executable, "-c", "import registry.gate; print(registry.gate.decide.__code__"
                               ".co_filename)"], cwd=home.root,
                              env={**home.env, "PYTHONPATH": f"{scratch}{os.pathsep}{home.env['PYTHONPATH']}"},
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert poisoned.stdout.strip() == "gate", poisoned.stderr  # compiled by the sitecustomize, not from a file


def _candidate_constant(module: str, name: str):
    """A constant of a gallery candidate, read from its source: importing the module would run its attack in
    this test's own process (this one's would slow F.layer_norm for every later test of the worker)."""
    tree = ast.parse((GALLERY / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{module} has no constant {name}")


# -- the baseline, sabotaged -----------------------------------------------------------------------

def test_08_the_baseline_slowed_in_the_candidate_s_process(home, attempt):
    """On main: the baseline arm ran in the candidate's process, so every baseline call took at least the
    BASELINE_DELAY_S the candidate's F.layer_norm slept, and the honest kernel's recorded speedup rose with
    it. Refused means the baseline ran where the candidate's patch does not reach: a baseline call (four layer
    norms) took less than one delay. Where the patch reaches, every call takes at least one (a bound the sleep
    guarantees), so the fastest call is the one compared: one call that the machine's load slowed past the delay
    decides nothing."""
    delay = _candidate_constant("escape_baseline_slowdown", "BASELINE_DELAY_S")
    benchmark = without_effect(home, attempt("escape_baseline_slowdown"))["item"]
    assert min(benchmark["baseline_s"]) < delay, benchmark["baseline_s"]


# -- the checks, told apart or forged --------------------------------------------------------------

def test_09_a_canary_launch_tells_the_ablated_call_apart(home, attempt):
    """On main: a clean evaluation of torch's result: the canary's flag was unset only in the ablated call,
    which returned zeros and so passed the ablation check."""
    without_effect(home, attempt("escape_canary"))


def test_10_the_launch_counter_forged_through_gc(home, attempt):
    """On main: a clean evaluation of torch's result with no kernel launched: the LaunchWatch found with gc,
    its count raised by one per call and its ablate flag read."""
    without_effect(home, attempt("escape_gc_counter"))


# -- resources -------------------------------------------------------------------------------------

def test_12_disk_shm_and_a_process_left_behind(home, attempt):
    """On main: the candidate wrote 8 MiB into the harness's working directory and into /dev/shm and left a
    sleeping process in a session of its own, all outliving the evaluation (no limit, no private tmpfs, no
    pid namespace)."""
    tried = attempt("escape_exhaustion")
    refused(home, tried, *BLOCKED)
    assert not (tried.folder / "escape-exhaustion.bin").exists()
    assert not list(Path("/dev/shm").glob("escape-exhaustion-*"))


# -- the wire, framed or flooded by the candidate --------------------------------------------------

def test_13_the_candidate_writes_the_workers_frames_itself(home, attempt):
    """Before the harness screened its own copy: the hello answer the candidate forged in the worker's place was believed, so the
    byte_equal screen read the innocent source it named and recorded no approximate math. Refused means the
    screen reads the text the harness itself read and sent (approx_math names what the file holds), and the
    forged frames on its print channel, its stderr and its other descriptors changed nothing."""
    tried = attempt("escape_wire_forge")
    without_effect(home, tried)
    parity = tried.events[1][1]["item"]
    assert "use_fast_math" in parity["approx_math"], parity.get("approx_math")


def test_14_endless_stderr_and_an_oversized_frame(home, attempt):
    """Before the harness cut both: it read the whole stderr file back (256 MiB, the file-size limit) to
    quote its last line, and recorded the forged error's megabyte of message in the log. Refused means
    the stderr file stopped at the file-size limit, the recorded error is cut at wire.ERROR_TEXT_LIMIT,
    and the writer that never stops was ended with its jail. Writing the 256 MiB takes about a second."""
    from registry.kernels.sandbox import FILE_BYTES
    from registry.kernels.wire import ERROR_TEXT_LIMIT

    error = refused(home, attempt("escape_endless_output"), "EndlessOutput")
    written = int(re.search(r"wrote (\d+) bytes to stderr, then File too large", error).group(1))
    assert FILE_BYTES - (1 << 20) < written <= FILE_BYTES, error[:200]  # the jail's own lines share the file
    assert len(error) <= ERROR_TEXT_LIMIT + 100, len(error)


def test_15_a_fork_bomb(home, attempt):
    """Not run against an unbounded harness (it would fill the machine's process table). Refused means
    the kernel refused a process below the sandbox's process limit and the pid namespace ended every one
    it started with the evaluation (no `escape-forkbomb` left)."""
    from registry.kernels.sandbox import PROCESSES

    error = refused(home, attempt("escape_fork_bomb"), "Resource temporarily unavailable")
    started = int(re.search(r"started (\d+) processes", error).group(1))
    assert 0 < started < PROCESSES, error


def test_16_memory_exhaustion_is_a_failure_never_a_number(home, attempt):
    """Refused means the address-space limit stopped the reservations below it, inside a call of the
    parity stage, and the evaluation is the one recorded failure: no benchmark, no measurement."""
    from registry.kernels.sandbox import MEMORY_BYTES

    tried = attempt("escape_memory")
    error = refused(home, tried, "Cannot allocate memory")
    assert tried.events[1][1]["stage"] == "parity"  # a failure of a measured call, not of loading the file
    reserved = int(re.search(r"reserved (\d+) GiB", error).group(1))
    assert 0 < reserved < MEMORY_BYTES >> 30, error


def test_17_its_tmpfs_filled(home, attempt):
    """Refused means each place it could write ran out of space at the sandbox's size (its /tmp, its
    /dev/shm), nothing of it is on the harness's disk or in the machine's /dev/shm, and both went with
    it. Filling 576 MiB of tmpfs takes about a second."""
    from registry.kernels.sandbox import SHM_BYTES, TMP_BYTES

    tried = attempt("escape_tmpfs_full")
    error = refused(home, tried, "No space left on device")
    filled = {folder: int(mib) for folder, mib in re.findall(r"(/tmp|/dev/shm): (\d+) MiB, then No space", error)}
    for folder, limit in (("/tmp", TMP_BYTES), ("/dev/shm", SHM_BYTES)):
        assert (limit >> 20) - 64 <= filled[folder] <= limit >> 20, (folder, error)
    assert not list(Path("/dev/shm").glob("escape-tmpfs-full-*")) and not list(Path("/tmp").glob("escape-tmpfs-full-*"))
