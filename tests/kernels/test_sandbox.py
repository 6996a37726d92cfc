"""The sandbox every candidate process runs in, attacked from inside by a real candidate module.

One hostile module tries, at import time in a sandboxed worker (where every
candidate's code first runs), to write outside its tmpfs (the registry's
package and its ``__pycache__``, site-packages, its own folder, the harness's
working directory, the database's folder), to read the database, the signing
key and the harness's environment, to read and write the harness's memory, to
signal it, to reach a socket it listens on, and to leave a double-forked,
``setsid`` daemon behind, and to list the descriptors it inherited and the
processes it can see or signal (it runs beside a baseline worker in one
jail, as an evaluation's candidate does). It reports what it got in the
error it raises, which is all it can send back; each test then checks one of those effects
from outside: files unchanged, secrets absent from anything that came back,
the harness's memory and signal count as they were, no connection accepted,
no process left. The worker is started once for all of them (module scope):
each start imports torch, which takes seconds.
"""
from __future__ import annotations

import ast
import ctypes
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch
from limits import HANG_GUARD_S

import registry
from registry.kernels.isolation import CandidateError, CandidateWorker, candidate_text, start_workers
from registry.kernels.ops import get_operation
from registry.kernels.sandbox import harness_digest, require_sandbox
from store_helpers import opened

PACKAGE = Path(registry.__file__).resolve().parent
MARKER = f"sandbox-daemon-{secrets.token_hex(8)}"

ATTACK = '''
import ctypes, os, signal, socket, sys, time

found = []

def attempt(what, fn):
    try:
        found.append(f"{{what}}: GOT {{fn()!r}}"[:300])
    except BaseException as exc:
        found.append(f"{{what}}: {{type(exc).__name__}}")

def write(path):
    with open(path, "ab") as fh:
        fh.write(b"# written by a candidate\\n")
    return "written"

def read(path):
    with open(path, "rb") as fh:
        return fh.read(4096)

for number, path in enumerate({writes!r}):  # by number: the harness keeps only the first 2,000 characters
    attempt(f"write {{number}}", lambda: write(path))
for number, path in enumerate({reads!r}):
    attempt(f"read {{number}}", lambda: read(path))
attempt("environ", lambda: [v for v in os.environ.values()])
attempt("harness environ", lambda: read(f"/proc/{harness}/environ"))

def harness_memory(mode):
    with open(f"/proc/{harness}/mem", mode) as fh:
        fh.seek({address})
        if mode == "r+b":
            fh.write(b"X" * {length})
        return fh.read({length})

attempt("harness memory read", lambda: harness_memory("rb"))
attempt("harness memory write", lambda: harness_memory("r+b"))

class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def vm_read():
    buffer = ctypes.create_string_buffer({length})
    local, remote = IoVec(ctypes.addressof(buffer), {length}), IoVec({address}, {length})
    libc = ctypes.CDLL(None, use_errno=True)
    got = libc.syscall(310, {harness}, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got < 0:
        raise OSError(ctypes.get_errno(), "process_vm_readv")
    return buffer.raw

attempt("process_vm_readv", vm_read)
def attach():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, {harness}, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
    return "attached"

attempt("ptrace attach", attach)
attempt("processes", lambda: sorted(int(name) for name in os.listdir("/proc") if name.isdigit()))

def reachable():
    found = []
    for pid in range(2, 4096):
        try:
            os.kill(pid, 0)
            found.append(pid)
        except ProcessLookupError:
            pass
        except PermissionError:
            found.append(-pid)
    return found

attempt("pids in reach", reachable)
attempt("signal harness", lambda: os.kill({harness}, signal.SIGUSR1))
attempt("signal everyone", lambda: os.kill(-1, signal.SIGUSR1))
attempt("signal harness group", lambda: os.killpg({harness_group}, signal.SIGUSR1))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect({unix_path!r}))

def daemon():
    ready_r, ready_w = os.pipe()
    os.set_inheritable(ready_w, True)
    if os.fork() == 0:
        try:
            os.setsid()
        except OSError:
            pass
        if os.fork() == 0:  # says "up" once it runs under its marked command line
            os.execv(sys.executable, [sys.executable, "-c", "import os, sys, time; os.write(int(sys.argv[1]), "
                                      "b'up'); time.sleep(600)", str(ready_w), {marker!r}])
        os._exit(0)
    os.close(ready_w)
    try:
        return os.read(ready_r, 2)
    finally:
        os.close(ready_r)

attempt("daemon", daemon)
def descriptors():
    return sorted((int(fd), os.readlink(f"/proc/self/fd/{{fd}}")) for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{{fd}}"))

attempt("descriptors", descriptors)
attempt("end", lambda: "end")
raise RuntimeError(" | ".join(found))


def kernel(x):  # the entry registration checks for; never reached
    return x
'''


@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory):
    """Run the attack once in a sandboxed worker; what it reported, and the outside state before and after."""
    try:
        require_sandbox()
    except ValueError as exc:
        pytest.skip(str(exc))
    base = tmp_path_factory.mktemp("sandbox")
    candidate_dir, db_dir, keys_dir = base / "candidate", base / "db", base / "keys"
    for folder in (candidate_dir, db_dir, keys_dir):
        folder.mkdir()
    secret, name = secrets.token_hex(16), secrets.token_hex(8)
    database = db_dir / "registry.db"
    with sqlite3.connect(database) as db:
        db.execute("create table secrets (value text)")
        db.execute("insert into secrets values (?)", (secret,))
    key = keys_dir / "signing.pem"
    key.write_text(f"-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n")
    key.chmod(0o600)
    memory = ctypes.create_string_buffer(f"harness-memory-{secret}".encode())
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    unix_path = str(base / "harness.sock")
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(unix_path)
    unix_listener.listen()
    unix_listener.setblocking(False)
    writes = [PACKAGE / "__init__.py", PACKAGE / "kernels" / "__pycache__" / "evaluate.cpython-311.pyc",
              PACKAGE / "sandbox_written.py", Path(torch.__file__).parent.parent / "sandbox_written.pth",
              candidate_dir / "sitecustomize.py", candidate_dir / "attack_candidate.py", Path.cwd() / "sandbox_written",
              database, db_dir / "sandbox_written", key, Path("/usr/lib") / f"sandbox_written_{name}",
              Path("/tmp") / f"sandbox_written_{name}"]
    before = {path: path.read_bytes() if path.exists() else None for path in writes}
    (candidate_dir / "attack_candidate.py").write_text(textwrap.dedent(ATTACK.format(
        writes=[str(p) for p in writes], reads=[str(database), str(key)], harness=os.getpid(),
        harness_group=os.getpgid(0), address=ctypes.addressof(memory), length=len(memory.raw),
        port=listener.getsockname()[1], unix_path=unix_path, marker=MARKER)))
    before[candidate_dir / "attack_candidate.py"] = (candidate_dir / "attack_candidate.py").read_bytes()
    signals: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: signals.append(number))
    os.environ["REGISTRY_SIGNING_KEY"] = key.read_text()
    entry = f"{candidate_dir / 'attack_candidate.py'}:kernel"  # a candidate is its file, sent as text
    worker = CandidateWorker(entry, torch.device("cpu"), screen=False, candidate=candidate_text(entry))
    baseline = CandidateWorker(get_operation("modulated_layernorm").reference, torch.device("cpu"), screen=False)
    try:
        start_workers([worker, baseline], sandboxed=True)  # one jail, as an evaluation's two workers share
        with pytest.raises(CandidateError) as raised:
            worker.__enter__()
        channel = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in (worker.to_worker.fileno(), worker.answers)}
        daemons_during = _processes_with(MARKER)
        cgroups_during = [_read(f"/proc/{pid}/cgroup") for pid in daemons_during]  # seen from outside the jail
    finally:
        worker.close()
        baseline.close()
        del os.environ["REGISTRY_SIGNING_KEY"]
        signal.signal(signal.SIGUSR1, previous)
    report = str(raised.value)
    yield {"report": report, "secret": secret, "name": name, "before": before, "memory": memory,
           "memory_before": f"harness-memory-{secret}".encode(), "signals": signals, "listeners": (listener, unix_listener),
           "daemons_during": daemons_during, "daemons_after": _processes_with(MARKER),
           "cgroups_during": cgroups_during, "confinement": worker.confinement, "channel": channel,
           "writes": writes}
    listener.close()
    unix_listener.close()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _processes_with(marker: str) -> list[int]:
    """Pids of every process on this machine whose command line holds ``marker`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _outcome(report: str, what: str) -> str:
    return next(part for part in report.split(" | ") if part.startswith(what + ":"))


def test_the_candidate_ran_and_reported(sandbox_run):
    """The attack got to its end, and its whole report came back: the harness keeps only the first 2,000
    characters of a candidate's error, and a cut report would hide the outcomes the tests below read (it
    once named each path it wrote, and a longer checkout path cut off the descriptors)."""
    assert sandbox_run["report"].split(" | ")[-1] == "end: GOT 'end'"


def test_a_candidate_cannot_write_outside_its_tmpfs(sandbox_run):
    for path, content in sandbox_run["before"].items():
        assert (path.read_bytes() if path.exists() else None) == content, path
    own_tmp = sandbox_run["writes"].index(Path("/tmp") / f"sandbox_written_{sandbox_run['name']}")
    assert "GOT 'written'" in _outcome(sandbox_run["report"], f"write {own_tmp}")
    assert sandbox_run["report"].count("GOT 'written'") == 1  # its own /tmp only, which the harness never sees


def test_a_candidate_cannot_read_the_database_or_the_keys(sandbox_run):
    report, secret = sandbox_run["report"], sandbox_run["secret"]
    assert secret not in report
    for what in ("read", "environ", "harness environ"):
        assert what in report
    assert "REGISTRY_" not in report


def test_a_candidate_cannot_read_or_write_the_harness_memory(sandbox_run):
    assert sandbox_run["memory"].raw.rstrip(b"\0") == sandbox_run["memory_before"]
    for what in ("harness memory read", "harness memory write", "process_vm_readv"):
        assert "GOT" not in _outcome(sandbox_run["report"], what)


def test_a_candidate_cannot_signal_the_harness(sandbox_run):
    assert sandbox_run["signals"] == []


def test_a_candidate_cannot_open_a_network_socket(sandbox_run):
    for listener in sandbox_run["listeners"]:
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert _outcome(sandbox_run["report"], "tcp") == "tcp: PermissionError"
    assert _outcome(sandbox_run["report"], "unix") == "unix: PermissionError"


def test_a_candidate_leaves_no_process_behind(sandbox_run):
    assert "daemon: GOT b'up'" in sandbox_run["report"] and sandbox_run["daemons_during"]  # it did start one
    assert sandbox_run["daemons_after"] == []


def test_a_candidate_names_no_process_but_its_own(sandbox_run):
    """Started beside a baseline worker in one jail, as in an evaluation, the candidate is pid 1 of a pid
    namespace of its own: /proc shows only itself, and no pid names another process, so it can signal
    neither the baseline's worker nor the zygote (in the user-namespace path all three share one uid: before
    each worker had its own pid namespace, a candidate there stopped and continued the baseline's worker)."""
    assert _outcome(sandbox_run["report"], "processes") == "processes: GOT [1]"
    assert _outcome(sandbox_run["report"], "pids in reach") == "pids in reach: GOT []"


def test_a_candidate_inherits_no_descriptor_but_its_own(sandbox_run):
    """The zygote holds every worker's pipes when it forks one (an evaluation's baseline's requests, answers
    and status among them), and the launcher was handed them all; a worker that kept any could answer for
    another or forge its status. The candidate holds /dev/null, its stderr file and its own two pipes to the
    harness, nothing else (a new hostile variant: before the sandbox each worker was a process of its own,
    started with only its three standard descriptors)."""
    held = dict(ast.literal_eval(_outcome(sandbox_run["report"], "descriptors").partition("GOT ")[2]))
    assert held[0] == "/dev/null" and held[1] == held[2] != held[0]  # stdout and stderr: its stderr file
    assert {target for fd, target in held.items() if fd > 2} == sandbox_run["channel"]


def test_the_launcher_reports_the_memory_bound_that_held(sandbox_run):
    """What the evidence names as the jail's confinement is what the launcher achieved: the daemon the attack
    left in the jail is in a registry-sandbox cgroup (read from outside) exactly when the report says
    jail_cgroup; otherwise the per-process address-space limit of a CPU worker is the bound."""
    in_jail_cgroup = [("/registry-sandbox-" in text) for text in sandbox_run["cgroups_during"]]
    assert in_jail_cgroup and len(set(in_jail_cgroup)) == 1
    assert sandbox_run["confinement"] == {
        "identity": "sandbox_uid" if os.geteuid() == 0 else "user_namespace",
        "memory": "jail_cgroup" if in_jail_cgroup[0] else "process_rlimits"}


# ---- what evidence says about the sandbox, and what the gate makes of it ----

def _decide(**execution_fields):
    from registry.gate import ArtifactFacts

    from gate_evidence import decide_execution

    return decide_execution({"kind": "execution", "candidate_calls": 40, "fallbacks": 0, **execution_fields},
                            ArtifactFacts("modln", "fused_kernel"))


DIGEST = "ab" * 32


def test_the_gate_holds_a_candidate_run_without_the_sandbox():
    assert _decide(sandbox="linux-ns-seccomp/1", harness_sha256=DIGEST).decision == "promoted"
    verdict = _decide(sandbox="none", harness_sha256=DIGEST)
    assert (verdict.decision, verdict.rule) == ("held", "execution.unsandboxed")
    assert "--insecure-no-sandbox" in verdict.reasons[0]


def test_the_gate_holds_launch_counts_taken_inside_the_candidates_process():
    verdict = _decide(sandbox="linux-ns-seccomp/1", harness_sha256=DIGEST, launch_signal="candidate_process")
    assert (verdict.decision, verdict.rule) == ("held", "execution.launches_unverified")
    assert "inside the candidate's own process" in verdict.reasons[0]


@pytest.mark.parametrize("fields, message", [
    ({"sandbox": "linux-ns-seccomp/1"}, "name the harness together"),
    ({"harness_sha256": DIGEST}, "name the harness together"),
    ({"sandbox": "chroot", "harness_sha256": DIGEST}, "is not one of"),
    ({"sandbox": "none", "harness_sha256": "not-a-digest"}, "sha256"),
    ({"launch_signal": "outside"}, "is not one of"),
    ({"confinement": {"identity": "sandbox_uid", "memory": "jail_cgroup"}}, "no sandbox is named"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,
      "confinement": {"identity": "harness_user", "memory": "process_rlimits"}}, "is not what"),
    ({"sandbox": "none", "harness_sha256": DIGEST,
      "confinement": {"identity": "user_namespace", "memory": "none"}}, "is not what"),
    ({"sandbox": "none", "harness_sha256": DIGEST,
      "confinement": {"identity": "harness_user", "memory": "jail_cgroup"}}, "bounds nothing"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,
      "confinement": {"identity": "unreported", "memory": "jail_cgroup"}}, "reported together"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,
      "confinement": {"identity": "sandbox_uid", "memory": "swap"}}, "is not one of"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST, "confinement": {"identity": "sandbox_uid"}},
     "required"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,  # counted calls, of a jail never built
      "confinement": {"identity": "unreported", "memory": "unreported"}}, "no jail was built"),
])
def test_sandbox_fields_that_say_nothing_or_something_unknown_are_refused(fields, message):
    from registry.formats.evidence.errors import EvidenceError
    from registry.formats.evidence.items import parse_item

    with pytest.raises(EvidenceError, match=message):
        parse_item({"kind": "execution", "candidate_calls": 1, "fallbacks": 0, **fields})


@pytest.mark.parametrize("document, message", [
    ({"sandbox": "none"}, "name the harness together"),
    ({"sandbox": "none", "harness_sha256": DIGEST, "item": {"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST}},
     "another sandbox, harness"),
    ({"sandbox": "none", "harness_sha256": DIGEST, "item": {"sandbox": "none", "harness_sha256": "cd" * 32}},
     "another sandbox, harness"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,
      "confinement": {"identity": "sandbox_uid", "memory": "jail_cgroup"},
      "item": {"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,
               "confinement": {"identity": "sandbox_uid", "memory": "process_rlimits"}}}, "or confinement"),
    ({"confinement": {"identity": "unreported", "memory": "unreported"}}, "no sandbox is named"),
    ({"sandbox": "linux-ns-seccomp/1", "harness_sha256": DIGEST,  # the item names no confinement of its own
      "confinement": {"identity": "unreported", "memory": "unreported"}}, "nothing of the candidate's ran"),
])
def test_a_document_naming_its_harness_must_agree_with_its_items(document, message):
    from registry.formats.evidence.document import parse_document
    from registry.formats.evidence.errors import EvidenceError

    item = {"kind": "execution", "candidate_calls": 1, "fallbacks": 0, **document.pop("item", {})}
    with pytest.raises(EvidenceError, match=message):
        parse_document({"format": "registry.evidence/1", "artifact": "modln", **document, "evidence": [item]})
    unreported = {"identity": "unreported", "memory": "unreported"}  # a jail never built: nothing of it ran
    agreeing = parse_document({"format": "registry.evidence/1", "artifact": "modln", "sandbox": "linux-ns-seccomp/1",
                               "harness_sha256": DIGEST, "confinement": unreported,
                               "evidence": [{"kind": "failure", "stage": "load",
                                             "error": "WorkerDied: the sandbox for the candidate could not be built"}]})
    assert (agreeing.sandbox, agreeing.harness_sha256, agreeing.confinement) == ("linux-ns-seccomp/1", DIGEST,
                                                                                  unreported)


MANIFEST = """
workload: wan-modln-op
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""


@pytest.mark.device
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the cpu corpus runs under the interpreter")
def test_evaluate_insecure_no_sandbox_records_it_and_promote_holds_it(registry_cli):
    """A whole evaluation (two pairs, under the interpreter: about a minute on a loaded machine): the only
    way to show the flag's evidence reaches the gate through the CLI."""
    cli = registry_cli
    (cli.tmp / "op.yaml").write_text(MANIFEST)
    assert cli("workload", "declare", str(cli.tmp / "op.yaml")).exit_code == 0
    assert cli("artifact", "register", "modln", "--workload", "wan-modln-op", "--kind", "fused_kernel", "--op",
               "gated_residual", "--entry", "registry.kernels.gated:gated_residual_triton").exit_code == 0
    evaluated = cli("evaluate", "modln", "--warmup", "0", "--insecure-no-sandbox", "--json")
    assert evaluated.exit_code == 0, evaluated.output
    execution = next(item for item in json.loads(evaluated.output)["evidence"] if item["kind"] == "execution")
    assert execution["sandbox"] == "none" and execution["harness_sha256"] == harness_digest()
    assert execution["confinement"] == {"identity": "harness_user", "memory": "none"}
    verdict = json.loads(cli("promote", "modln", "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "execution.unsandboxed"


# ---- the path a harness that is not root takes: a user namespace ----

USER_NAMESPACE_PROBE = r'''
import json, os, socket, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from sandbox_launch import confine
config = json.loads(sys.argv[-1])
confine(config, config["probe_ids"])
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
seen = {key: status[key].strip() for key in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")}
seen.update(uid=os.getuid(), uid_map=open("/proc/self/uid_map").read().split(),
            pids=sorted(int(name) for name in os.listdir("/proc") if name.isdigit()))
def attempt(name, fn):
    try:
        fn()
        seen[name] = "GOT"
    except OSError as exc:
        seen[name] = exc.strerror
attempt("write package", lambda: open(os.path.join(sys.argv[2], "userns_written"), "w"))
attempt("socket", socket.socket)
attempt("setsid", os.setsid)
attempt("write tmp", lambda: open("/tmp/userns_written", "w"))
print(json.dumps(seen))
'''


def _unprivileged_interpreter(ids: dict[str, int]) -> str:
    """An interpreter the unprivileged user can run the launcher with (it needs only the standard library)."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            done = subprocess.run([python, "-I", "-S", "-c", "import ctypes, json, resource"], env={},
                                  capture_output=True, timeout=30, **ids)
        except OSError:
            continue
        if done.returncode == 0:
            return python
    pytest.skip("no interpreter the unprivileged user can run")


def test_a_harness_that_is_not_root_confines_through_a_user_namespace():
    """The launcher and `confine` as a harness that is not root runs them (as the user `nobody` when this
    suite runs as root, else as this user): its own uid is the only one mapped, as the namespace's root;
    every capability set is empty, no new privileges, the filter on; the package is read-only, sockets
    and new sessions refused, only its private /tmp writable, and no process of the machine visible. A
    pid 1 that confines itself as a worker would, with no torch: well under a second."""
    from registry.kernels.sandbox import _LAUNCHER, Sandbox

    try:
        require_sandbox()
    except ValueError as exc:
        pytest.skip(str(exc))
    ids = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        ids = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    uid, gid = ids.get("user", os.getuid()), ids.get("group", os.getgid())
    python = _unprivileged_interpreter(ids)
    box = Sandbox("cpu")
    try:
        config = box.launch_config([python, "-I", "-S", "-c", USER_NAMESPACE_PROBE, str(_LAUNCHER), str(PACKAGE)], [])
        config.update(user_namespace=True, set_ids=False, uid=uid, gid=gid, probe_ids={"uid": 0, "gid": 0})
        for folder in (box.staging, box.staging / "root"):
            os.chown(folder, uid, gid)
        done = subprocess.run([python, "-I", "-S", str(_LAUNCHER), json.dumps(config)], env={}, capture_output=True,
                              text=True, timeout=60, **ids)
    finally:
        box.close()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["uid"] == 0 and seen["uid_map"] == ["0", str(uid), "1"]
    assert {seen[key] for key in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")} == {"0000000000000000"}
    assert (seen["NoNewPrivs"], seen["Seccomp"]) == ("1", "2")
    assert seen["pids"] == [1]
    assert (seen["write package"], seen["socket"], seen["setsid"], seen["write tmp"]) == (
        "Read-only file system", "Operation not permitted", "Operation not permitted", "GOT")
    assert not (PACKAGE / "userns_written").exists()


HONEST_CANDIDATE = """
from registry.kernels.modln import modulated_layernorm_triton


def modulated_layernorm(x, scale, shift):
    return modulated_layernorm_triton(x, scale, shift)
"""

RUN_AS_USER = r"""
import json, subprocess, sys
done = [subprocess.run([sys.executable, "-m", "registry", *argv], capture_output=True, text=True)
        for argv in json.loads(sys.argv[1])]
print(json.dumps([[d.returncode, d.stdout, d.stderr] for d in done]))
"""


def _blocked_ancestor(path: Path) -> Path | None:
    """The outermost folder on ``path``'s way that a user owning nothing may not enter, or None."""
    for folder in [*reversed(path.parents), path]:
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def _as_fresh_user(uid: int, argv: list[str], home: Path) -> list[str]:
    """``argv`` run as ``uid`` (no groups, no capabilities) with a bare environment, in a mount namespace of
    its own where each folder of this interpreter's, its venv's and this checkout's, hidden from other users
    by a closed folder above it (a pyenv under /root), is reachable again through a tmpfs laid over that folder
    with only these paths bound into it; nothing else of the machine's changes."""
    needed = sorted({Path(p).resolve() for p in (sys.base_prefix, sys.prefix, PACKAGE.parent)})
    needed = [p for p in needed if not any(q != p and q in p.parents for q in needed)]
    by_blocked: dict[Path, list[Path]] = {}
    for path in needed:
        blocked = _blocked_ancestor(path)
        if blocked == path:
            pytest.skip(f"{path} is closed to every other user: no unprivileged harness could run this interpreter")
        if blocked is not None:
            by_blocked.setdefault(blocked, []).append(path)
    script = ["set -e"]
    for n, (blocked, paths) in enumerate(by_blocked.items()):
        holds = [home / f".hold-{n}-{i}" for i in range(len(paths))]
        script += [f"mkdir {shlex.quote(str(h))} && mount --bind {shlex.quote(str(p))} {shlex.quote(str(h))}"
                   for h, p in zip(holds, paths)]
        script.append(f"mount -t tmpfs -o mode=0755 registry-test {shlex.quote(str(blocked))}")
        script += [f"mkdir -p {shlex.quote(str(p))} && mount --move {shlex.quote(str(h))} {shlex.quote(str(p))}"
                   for h, p in zip(holds, paths)]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "USER": f"u{uid}", "LOGNAME": f"u{uid}",
           "LANG": "C.UTF-8", **{k: os.environ[k] for k in ("TRITON_INTERPRET",) if k in os.environ}}
    script.append("exec " + shlex.join(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "env", "-i",
                                        *(f"{k}={v}" for k, v in env.items()), *argv]))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]


def test_a_whole_evaluation_by_a_harness_that_is_not_root(request, sqlite_template):
    """`artifact register`, `evaluate` (two pairs) and `promote` of an honest candidate file, run by a harness
    that is not root (a fresh uid with no groups and no capabilities when this suite runs as root) on a SQLite
    file and a candidate in a folder of that user's: the jail is built through a user namespace, the evidence
    says so, and the registry records and judges the evaluation exactly as it does a root harness's
    (tests/cli/test_cli_evaluate.py). Needs seconds (one evaluation under the interpreter, about ten on a quiet
    machine): the only check that the unprivileged path carries a whole evaluation, which no root run can
    show. Skips, as lacking the kind of machine, only where this kernel refuses unprivileged user namespaces."""
    from click.testing import CliRunner

    from registry.cli.main import main

    try:
        require_sandbox()
    except ValueError as exc:
        pytest.skip(str(exc))
    if os.geteuid() == 0 and not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("util-linux's setpriv and unshare are needed to run a harness as another user")
    uid = os.geteuid() if os.geteuid() != 0 else 0x30000000 + secrets.randbelow(0x0FFF0000)
    if os.geteuid() == 0:
        probe = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "unshare", "--user",
                                "true"], capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            request.node.add_marker(pytest.mark.device)  # another kind of machine: strict mode lets this skip pass
            pytest.skip(f"this kernel gives no user namespace to a user that is not root ({probe.stderr.strip()})")
    home = Path(tempfile.mkdtemp(prefix="registry-unprivileged-"))
    try:
        url = f"sqlite:///{home / 'registry.db'}"
        shutil.copyfile(sqlite_template, home / "registry.db")
        (home / "op.yaml").write_text(MANIFEST)
        (home / "honest.py").write_text(HONEST_CANDIDATE)
        declared = CliRunner().invoke(main, ["--db", url, "workload", "declare", str(home / "op.yaml")])
        assert declared.exit_code == 0, declared.output
        for path in (home, *home.iterdir()):
            os.chown(path, uid, uid)
        commands = [["--db", url, "--actor", "tester", *args] for args in (
            ("artifact", "register", "honest", "--workload", "wan-modln-op", "--kind", "fused_kernel", "--op",
             "modulated_layernorm", "--entry", f"{home / 'honest.py'}:modulated_layernorm"),
            ("evaluate", "honest", "--warmup", "0"), ("promote", "honest", "--json"))]
        argv = [sys.executable, "-c", RUN_AS_USER, json.dumps(commands)]
        done = subprocess.run(_as_fresh_user(uid, argv, home) if os.geteuid() == 0 else argv, cwd=home,
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 0, done.stderr
        (registered, _, register_err), (evaluated, _, evaluate_err), (promoted, verdict, _) = json.loads(done.stdout)
        assert (registered, evaluated, promoted) == (0, 0, 3), register_err + evaluate_err
        events = list(opened(url).store.read_stream("artifact:honest"))
        assert [e.type for e in events] == ["ArtifactRegistered", "ParityMeasured", "BenchmarkMeasured",
                                            "ExecutionObserved", "VerdictRendered"]
        execution = events[3].payload["item"]
        assert execution["sandbox"] == "linux-ns-seccomp/1" and execution["harness_sha256"] == harness_digest()
        on_gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"  # no address-space limit
        assert execution["confinement"] == {"identity": "user_namespace", "memory": "none" if on_gpu else "process_rlimits"}
        assert execution["candidate_calls"] > 0 and execution["fallbacks"] == 0
        assert json.loads(verdict)["rule"] == "execution.launches_unverified"
        verified = CliRunner().invoke(main, ["--db", url, "verify"])
        assert verified.exit_code == 0, verified.output
    finally:
        shutil.rmtree(home, ignore_errors=True)


MEMORY_HOG = r'''
import os, signal, sys
with open("/proc/self/cgroup") as fh:
    print(fh.read().strip().replace("\n", "|"), flush=True)
children = []
for _ in range(4):  # four processes that each touch 96 MiB: over the jail's 256 MiB together, none alone
    pid = os.fork()
    if pid == 0:
        hog = bytearray(b"\1") * (96 << 20)
        os.read(os.open("/dev/zero", os.O_RDONLY), 1)  # the pages are written; hold them a moment
        signal.pause()
    children.append(pid)
killed = 0
for _ in children:
    pid, status = os.wait()
    killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if killed == 1:  # the first kill shows the bound: let the rest go
        for other in children:
            try:
                os.kill(other, signal.SIGKILL)
            except ProcessLookupError:
                pass
print(killed, flush=True)
'''


def test_the_jail_s_processes_share_one_memory_bound_where_a_cgroup_can_be_made():
    """A jail of a root harness is one memory cgroup: four processes that each write 96 MiB (none over its
    own limit) together pass a 256 MiB jail bound, the kernel's OOM killer ends one of them inside the jail,
    the launcher outside lives and exits with pid 1's status, and the cgroup is gone afterwards. Where this
    machine's harness is not root or has no writable memory controller, only the per-process limits hold
    (docs/kernels.md), and this test skips saying so. No torch: under two seconds."""
    from registry.kernels.sandbox import _LAUNCHER, Sandbox
    from registry.kernels.sandbox_launch import _memory_cgroup_parent

    try:
        require_sandbox()
    except ValueError as exc:
        pytest.skip(str(exc))
    found = _memory_cgroup_parent() if os.geteuid() == 0 else None
    if found is None:
        pytest.skip("no memory cgroup this harness may make: the jail's memory is bounded per process only")
    parent = found[0]
    box = Sandbox("cpu")
    try:
        config = box.launch_config([sys.executable, "-I", "-S", "-c", MEMORY_HOG], [])
        config["memory_bytes"] = 256 << 20
        launcher = subprocess.Popen([sys.executable, "-I", "-S", str(_LAUNCHER), json.dumps(config)], env={},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = launcher.communicate(timeout=60)
    finally:
        box.close()
    assert launcher.returncode == 0, err
    cgroups, killed = out.split()
    assert "registry-sandbox" not in cgroups  # the jail's own cgroup namespace: it sees its cgroup as its root
    assert int(killed) >= 1, out
    # Its own cgroup, by the launcher's pid: another worker of a parallel run may hold a jail of its own now.
    assert f"registry-sandbox-{launcher.pid}" not in os.listdir(parent)


LEAVES_ITS_CGROUP = '''
import os, sys
from registry.kernels.sandbox_launch import enter_memory_cgroup, leave_memory_cgroup
sys.stdin.readline()  # meanwhile the test leaves a cgroup under this process's pid, as a killed launcher would
held = enter_memory_cgroup(64 << 20)
print(held is not None and held[2] == f"registry-sandbox-{os.getpid()}", flush=True)
leave_memory_cgroup(held)
'''


def test_a_leftover_cgroup_under_the_launcher_s_own_pid_does_not_stop_it():
    """A launcher killed before it removed its cgroup leaves it, named by its pid; the machine reuses pids (32768
    of them by default), and a later launcher given that pid must still make its own jail's cgroup. Before, it
    kept a leftover whose pid was alive (its own), and its mkdir failed: the sandbox could not be built."""
    from registry.kernels.sandbox_launch import _memory_cgroup_parent

    found = _memory_cgroup_parent() if os.geteuid() == 0 else None
    if found is None:
        pytest.skip("no memory cgroup this harness may make: the jail's memory is bounded per process only")
    launcher = subprocess.Popen([sys.executable, "-c", LEAVES_ITS_CGROUP], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    leftover = Path(found[0]) / f"registry-sandbox-{launcher.pid}"
    try:
        leftover.mkdir()
        out, err = launcher.communicate("\n", timeout=HANG_GUARD_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if leftover.exists():
            leftover.rmdir()
    assert (launcher.returncode, out.strip()) == (0, "True"), err
    assert not leftover.exists()  # made again as the launcher's own, and removed as it left


def test_a_cuda_jail_binds_the_driver_s_folder_that_its_binds_do_not_carry():
    """NVIDIA's images keep libcuda under a mount of its own inside /usr, which a (non-recursive) bind of /usr
    leaves out; or in a folder no bind covers. Either is bound; a folder /usr's bind carries is not bound twice."""
    from registry.kernels.sandbox import driver_binds

    binds = ["/usr", "/lib", "/opt/venv", "/sys"]
    assert driver_binds("/usr/local/nvidia/lib64", binds, ["/", "/usr/local/nvidia", "/proc"]) == ["/usr/local/nvidia"]
    assert driver_binds("/usr/local/nvidia/lib64", binds, ["/", "/usr/local/nvidia/lib64"]) == [
        "/usr/local/nvidia/lib64"]
    assert driver_binds("/usr/lib/x86_64-linux-gnu", binds, ["/", "/usr/local/nvidia"]) == []
    assert driver_binds("/usr/lib/x86_64-linux-gnu", binds, ["/", "/usr"]) == []
    assert driver_binds("/opt/nvidia/lib", binds, ["/", "/proc"]) == ["/opt/nvidia/lib"]
    assert driver_binds("/usrx/lib", binds, ["/"]) == ["/usrx/lib"]
    assert driver_binds(None, binds, ["/"]) == []


SOCKET_FAMILIES = """
import socket
for name, make in (("unix", lambda: socket.socket(socket.AF_UNIX)), ("inet", lambda: socket.socket(socket.AF_INET)),
                   ("inet6", lambda: socket.socket(socket.AF_INET6)), ("pair", socket.socketpair)):
    try:
        made = make()
    except PermissionError:
        print(name, "refused")
    else:
        print(name, "made")
"""


@pytest.mark.parametrize("unix_sockets", [False, True])
def test_a_cuda_jail_s_filter_lets_only_unix_sockets_through(unix_sockets):
    """NVIDIA's driver opens an AF_UNIX socket in cuInit and fails with error 304 when it is refused (seen on an
    H200: cuInit answered 304 under the filter and 0 with AF_UNIX allowed). A CUDA jail's filter allows that
    family alone; every other family, and socketpair, stay refused, and a CPU jail refuses them all."""
    from registry.kernels import sandbox_launch

    def confined() -> None:
        sandbox_launch._libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, as confine() sets it
        sandbox_launch.install_filter(sandbox_launch.arch(), unix_sockets=unix_sockets)

    done = subprocess.run([sys.executable, "-I", "-c", SOCKET_FAMILIES], capture_output=True, text=True,
                          preexec_fn=confined, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [f"unix {'made' if unix_sockets else 'refused'}", "inet refused",
                                          "inet6 refused", "pair refused"]


def test_only_a_cuda_jail_asks_for_unix_sockets():
    from registry.kernels.sandbox import Sandbox

    for device_type, allowed in (("cpu", False), ("cuda", True)):
        box = Sandbox(device_type)
        try:
            assert box.launch_config([sys.executable], [])["unix_sockets"] is allowed
        finally:
            box.close()
