"""The harness side of the candidate's sandbox: what the jail holds, its limits, and whether this machine has one.

Every process that imports candidate code (the evaluation's candidate
worker, the baseline worker, the registration inspector) is started through
:mod:`registry.kernels.sandbox_launch`, which builds the jail from Linux
namespaces, capability and identity drops, resource limits and a seccomp
filter (docs/kernels.md, "Threat model"). This module decides what goes in:
read-only binds of the interpreter, the installed packages and the
registry's own package, and the device nodes of a GPU run. Nothing of the
candidate's is bound: its one file travels as text in the worker's hello
(:func:`registry.kernels.isolation.candidate_text`) and is written into the
worker's private ``/tmp``, so nothing beside it (a ``sitecustomize.py``, a
database) is ever visible. It also writes the scrubbed environment and names
the profile and the harness digest every evidence document records.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from registry.formats.errors import UserError
from registry.formats.evidence.schemas import SANDBOX_PROFILES
from registry.kernels.sandbox_launch import SETUP_FAILED

PROFILE, UNSANDBOXED = SANDBOX_PROFILES
"""The sandbox every candidate process runs in (sandbox_launch.py's docstring lists what it is), and the
profile evidence names when ``--insecure-no-sandbox`` ran the candidate as the harness's own user."""

MEMORY_BYTES = 16 << 30
"""RLIMIT_AS of a CPU worker (torch and Triton map about 3 GiB of address space before any kernel).
A CUDA worker gets none: the driver reserves address space for unified memory far past any limit."""
JAIL_MEMORY_BYTES = 16 << 30
"""Memory and swap of everything one jail holds together (its processes, their tmpfs pages), where the
launcher can make a memory cgroup (a root harness with a writable controller): the candidate's and the
baseline's workers with torch use under 2 GiB on a CPU."""
OPEN_FILES = 1024
PROCESSES = 512  # RLIMIT_NPROC counts threads of the sandbox's own uid, which no other process has
FILE_BYTES = 256 << 20
CPU_SECONDS = 3600  # an evaluation under the interpreter takes minutes; the harness's call timeouts stay first
TMP_BYTES = 512 << 20  # the private /tmp (a tmpfs in memory): the only place the candidate can write
TMP_INODES = 65536
SHM_BYTES = 64 << 20

SANDBOX_IDS = (0x40000000, 0x7FFF0000)
"""Range a root harness draws each sandbox's uid and gid from: owned by no file and no other process."""

_LAUNCHER = Path(__file__).with_name("sandbox_launch.py")
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache",
                 "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_PASSED_ENV = ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")

HARNESS_MODULES = ("registry.kernels.evaluate", "registry.kernels.isolation", "registry.kernels.worker",
                   "registry.kernels.wire", "registry.kernels.checks", "registry.kernels.launches",
                   "registry.kernels.sandbox", "registry.kernels.sandbox_launch", "registry.kernels.ops",
                   "registry.kernels.corpus", "registry.kernels.reference", "registry.evidence.parity",
                   "registry.evidence.timing", "registry.evidence.source_screen", "registry.kernels.launch_plan",
                   "registry.kernels.launcher", "registry.kernels.launcher_worker", "registry.kernels.launcher_process",
                   "registry.kernels.launch_evaluate", "registry.kernels.tensor_bytes", "registry.kernels.zygote")
"""The code whose digest every evidence document records: what measured, compared, timed and jailed."""


class SandboxUnavailable(UserError):
    """This machine cannot build the sandbox; evaluation refuses unless the user runs it insecurely."""


@functools.cache
def harness_digest() -> str:
    """sha256 over the source of HARNESS_MODULES (name, length, bytes each), as read from disk now."""
    import registry

    root = Path(registry.__file__).resolve().parent
    digest = hashlib.sha256()
    for name in HARNESS_MODULES:
        path = root.joinpath(*name.split(".")[1:]).with_suffix(".py")
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def make_harness_undumpable() -> None:
    """PR_SET_DUMPABLE 0: no process of another uid (nor a same-uid one without CAP_SYS_PTRACE) may read or
    write this process's memory through ptrace or /proc/<pid>/mem, and /proc/<pid> becomes root's."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def _registry_package() -> str:
    import registry

    return str(Path(registry.__file__).resolve().parent)


def _interpreter_paths() -> list[str]:
    """What the worker's interpreter needs, read-only: system libraries, the Python installation, the venv,
    its site-packages, and the registry package itself (an editable install's source is bound, not its tree)."""
    import site

    paths = list(_SYSTEM_PATHS)
    for path in (sys.base_prefix, sys.prefix, *site.getsitepackages(), _registry_package()):
        if path not in paths:
            paths.append(path)
    return paths


def _mount_points() -> list[str]:
    """Every mount point of this process's namespace (/proc/self/mountinfo's fifth field, octal escapes read)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        return [line.split()[4].encode("latin-1", "surrogateescape").decode("unicode_escape")
                for line in info if len(line.split()) > 4]


def _loaded_driver_folder() -> str | None:
    """The folder the CUDA driver (libcuda.so.1) is loaded from, as this machine's loader finds it; None where
    it cannot be loaded. Loading it runs no CUDA call (no cuInit), so the harness holds no context."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5].rstrip("\n")).startswith("libcuda.so"):
                return os.path.dirname(fields[5].rstrip("\n"))
    return None


def driver_binds(folder: str | None, binds: list[str], mount_points: list[str]) -> list[str]:
    """What a CUDA jail must bind beyond ``binds`` for its loader to find the driver in ``folder``.

    NVIDIA's container images often keep the driver's libraries under a mount of their own
    (/usr/local/nvidia/lib64) that a bind of /usr does not carry (a bind is not recursive, so no mount beneath
    a bound folder comes along), or in a folder no bind covers. The first binds that mount, the second the
    folder itself; a folder the binds already carry needs nothing."""
    if folder is None:
        return []
    mount = max((m for m in mount_points if m == "/" or folder == m or folder.startswith(m.rstrip("/") + "/")),
                key=len, default="/")
    for bound in binds:
        if folder == bound or folder.startswith(bound.rstrip("/") + "/"):
            carried = mount == "/" or bound == mount or bound.startswith(mount.rstrip("/") + "/")
            return [] if carried else [mount]
    return [folder]


@functools.cache
def _cuda_driver() -> tuple[list[str], str | None]:
    """The CUDA jail's extra binds and its loader's library path (the driver's folder), read once a process."""
    folder = _loaded_driver_folder()
    return driver_binds(folder, _interpreter_paths() + ["/sys"], _mount_points()), folder


def _device_nodes(device_type: str) -> list[str]:
    nodes = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
    if device_type == "cuda":
        nodes += sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir())
    return nodes


def worker_env(device_type: str) -> dict[str, str]:
    """The scrubbed environment: no REGISTRY_*, no database URL, no harness HOME, nothing not listed here."""
    # the folder the harness's registry package came from (only the package itself is bound there), so the
    # worker runs the registry the harness runs, not whichever one an install's path hook would find
    home = str(Path(_registry_package()).parent)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "USER": "sandbox",
           "LANG": "C.UTF-8", "PYTHONPATH": home, "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1",
           "TRITON_CACHE_DIR": "/tmp/triton"}
    env.update({name: os.environ[name] for name in _PASSED_ENV if name in os.environ})
    if device_type == "cuda" and _cuda_driver()[1] is not None:
        env["LD_LIBRARY_PATH"] = _cuda_driver()[1]  # the harness's own LD_LIBRARY_PATH is not passed on
    return env


def _draw_ids() -> dict[str, int]:
    """A root harness's uid and gid for one worker; a user namespace's only id (its root) otherwise."""
    if os.geteuid() != 0:
        return {"uid": 0, "gid": 0}
    draw = SANDBOX_IDS[0] + secrets.randbelow(SANDBOX_IDS[1] - SANDBOX_IDS[0])
    return {"uid": draw, "gid": draw}


class Sandbox:
    """One jail's staging directory (the new root's mount point) and launch command."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.staging = Path(tempfile.mkdtemp(prefix="registry-sandbox-"))
        (self.staging / "root").mkdir()

    def launch_config(self, argv: list[str], workers: list[dict[str, int]]) -> dict:
        """What the launcher builds: ``argv`` exec'd as pid 1 of the jail, with a worker config (its own
        ids and its descriptors: requests, answers, stderr, status) for each entry of ``workers``."""
        root = os.geteuid() == 0
        limits = {"nofile": OPEN_FILES, "nproc": PROCESSES, "fsize": FILE_BYTES, "cpu": CPU_SECONDS, "core": 0}
        if self.device_type != "cuda":
            limits["as"] = MEMORY_BYTES
        binds = _interpreter_paths() + (["/sys", *_cuda_driver()[0]] if self.device_type == "cuda" else [])
        return {"root": str(self.staging / "root"), "binds": binds,
                "devices": _device_nodes(self.device_type), "unix_sockets": self.device_type == "cuda",
                "limits": limits, "argv": argv,
                "env": worker_env(self.device_type), "user_namespace": not root, "set_ids": root,
                "uid": os.getuid(), "gid": os.getgid(), "probe_ids": _draw_ids(),
                "workers": [dict(_draw_ids(), fds=fds) for fds in workers],
                "memory_bytes": JAIL_MEMORY_BYTES, "tmp_bytes": TMP_BYTES, "tmp_inodes": TMP_INODES, "shm_bytes": SHM_BYTES}

    def command(self, workers: list[dict[str, int]], serve: str = "worker") -> list[str]:
        """The launcher's command line (an isolated interpreter without site: it starts in milliseconds),
        for a jail whose zygote forks one worker per entry of ``workers``, each serving ``serve`` (a key of
        ``zygote.WORKER_MODULES``: the evaluation worker, or the trusted launcher's)."""
        return self._launcher(self.jail_config(workers, serve))

    def jail_config(self, workers: list[dict[str, int]], serve: str = "worker") -> dict:
        """The launch config of a jail whose zygote forks one worker per entry of ``workers``, serving ``serve``:
        what ``command`` runs the launcher with, and what a warm zygote builds the same jail from."""
        zygote = [sys.executable, "-s", "-B", "-m", "registry.kernels.zygote"]
        return dict(self.launch_config(zygote, workers), serve=serve)

    def module_command(self, module: str) -> list[str]:
        """A jail whose pid 1 runs the registry's own `python -m module` with no worker beside it (a one-shot job:
        rebuilding cubins), which confines itself first as a worker is confined (its config's ``probe_ids``)."""
        return self._launcher(self.launch_config([sys.executable, "-s", "-B", "-m", module], []))

    def _launcher(self, config: dict) -> list[str]:
        return [sys.executable, "-I", "-S", str(_LAUNCHER), json.dumps(config)]

    def probe_command(self) -> list[str]:
        """A jail whose pid 1 confines itself as a worker would be, then exits: the whole sandbox, no torch."""
        return self._launcher(self.launch_config([sys.executable, "-I", "-S", str(_LAUNCHER), "--probe"], []))

    def close(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


@functools.cache
def _probe() -> str | None:
    """Why this machine cannot build the sandbox (the launcher's own line), or None when it can."""
    sandbox = Sandbox("cpu")
    try:
        done = subprocess.run(sandbox.probe_command(), capture_output=True, timeout=60, env={},
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the sandbox launcher did not run ({exc})"
    finally:
        sandbox.close()
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"the sandbox launcher exited with status {done.returncode}"


def sandbox_problem() -> str | None:
    """Why this machine cannot build the sandbox (the launcher's own line), or None when it can."""
    return _probe()


def require_sandbox() -> None:
    """Refuse (one line) on a machine that cannot build the sandbox."""
    why = _probe()
    if why is not None:
        raise SandboxUnavailable(f"this machine cannot sandbox a candidate ({why}); nothing was run or recorded "
                                 "(--insecure-no-sandbox runs it as this user, and the gate holds what it records)")


def setup_failure(returncode: int | None) -> bool:
    """Whether a launcher's exit status says the jail could not be built (the worker never started)."""
    return returncode == SETUP_FAILED
