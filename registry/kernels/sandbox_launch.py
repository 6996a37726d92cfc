"""The sandbox launcher: builds the candidate's jail from Linux primitives; confines each worker in it.

Run by the harness (:mod:`registry.kernels.isolation`, with the config of
:mod:`registry.kernels.sandbox`) as ``python -I -S sandbox_launch.py CONFIG``
before any candidate code exists, importing nothing but the standard
library, so it starts in tens of milliseconds. CONFIG is a JSON object. In
order:

1. ``unshare`` new mount, pid, network, IPC, UTS and cgroup namespaces (and a
   user namespace when the harness is not root, mapping its uid to the
   namespace's root), then ``fork``: the child is pid 1 of the new pid
   namespace, so when it ends the kernel kills everything left in it,
   whatever session or process group that joined;
2. in the child, a new root on a size-limited tmpfs holding read-only binds
   of the interpreter, the packages and the registry's own package (nothing
   of the candidate's: its file arrives as text), a minimal ``/dev`` (null,
   zero, full, random, urandom, and on a GPU the NVIDIA nodes), a fresh
   ``/proc`` of the new pid namespace; then ``pivot_root``, the old root
   detached, the new root remounted read-only; then it makes itself
   non-dumpable and execs the config's ``argv`` (the zygote,
   :mod:`registry.kernels.zygote`) with the scrubbed environment (``launch``
   runs these two steps in a fork of the warm zygote too, whose pid 1 then
   forks the workers without an exec: :func:`registry.kernels.zygote.serve_jails`);
3. ``confine`` runs in each worker the zygote forks (each the pid 1 of a pid
   namespace of its own, ``pid_namespace_for_next_worker``), before the worker
   serves: its own mount namespace with a private ``/tmp`` and ``/dev/shm``
   (tmpfs, size-limited) and a ``/proc`` of its pid namespace, resource limits, every capability dropped from the
   bounding and ambient sets and cleared, supplementary groups cleared, the
   worker's own uid and gid (a root harness), ``PR_SET_NO_NEW_PRIVS``,
   non-dumpable, parent-death SIGKILL, and a seccomp-BPF filter refusing
   (EPERM) ptrace, process_vm_readv/writev, setsid, setpgid, mounts and the
   new mount API, pivot_root, chroot, unshare, setns, clone with namespace
   flags, bpf, perf_event_open, keyrings, io_uring, userfaultfd, module and
   kexec loading, and socket and socketpair (the channel to the harness is
   the pipes it inherited; a CUDA jail's filter allows socket for AF_UNIX alone, which NVIDIA's driver
   needs in cuInit); ``clone3`` answers ENOSYS so the C library falls
   back to ``clone``, whose flags the filter can read; a foreign
   architecture is killed.

Before step 1, a harness that is root and finds a memory controller it may
write (cgroup v2, or v1's ``memory`` hierarchy) puts the launcher into a
cgroup of its own under its current one, with ``memory_bytes`` as the limit
of memory and swap for everything the jail holds together (its processes and
the tmpfs pages they write); the OOM killer ends a process of the jail, never
one outside it. The launcher's parent moves back out and removes the cgroup
when pid 1 has ended. Where no such controller can be written, only the
per-process limits bound memory (docs/kernels.md says so). Which of the two
held, and the identity the workers get, the launcher writes as the first line
of each worker's status pipe before it forks pid 1 (``report_confinement``):
what every evidence document of the evaluation names as its ``confinement``.

Any failure before the ``execve`` exits with ``SETUP_FAILED`` after one line
on stderr starting with ``sandbox:`` (the zygote's workers do the same); the
harness turns that into a refusal or a recorded failure, never an
unsandboxed run. ``--probe`` (exec'd as pid 1 instead of the zygote) confines
itself as a worker would and exits: how the harness asks whether this
machine can build the sandbox at all. The launcher's parent stays outside,
waits for pid 1 and exits with its status (128 + the signal when killed).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import signal
import sys
import time
from typing import Callable, NoReturn

SETUP_FAILED = 121

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | \
    CLONE_NEWNET

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_CAPBSET_DROP = 1, 4, 22, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
SECCOMP_MODE_FILTER = 2

# seccomp return values and classic BPF opcodes (linux/seccomp.h, linux/filter.h)
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
EPERM, ENOSYS = 1, 38
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
AF_UNIX = 1
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16

# The calls the filter refuses, by name; then per architecture: the audit arch value, the numbers the
# filter treats apart, and the refused calls' numbers in the order of REFUSED.
REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "setsid", "setpgid", "mount", "umount2", "pivot_root",
           "chroot", "unshare", "setns", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "socket",
           "socketpair", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "kexec_load",
           "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at", "open_tree",
           "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "swapon", "swapoff", "reboot",
           "acct")
_ARCHES = {
    "x86_64": {"audit": 0xC000003E, "pivot_root": 155, "clone": 56, "clone3": 435, "x32_bit": 0x40000000,
               "numbers": (101, 310, 311, 112, 109, 165, 166, 155, 161, 272, 308, 321, 298, 250, 248, 249, 41, 53,
                           425, 426, 427, 323, 246, 320, 175, 313, 176, 304, 428, 429, 430, 431, 432, 433, 442,
                           167, 168, 169, 163)},
    "aarch64": {"audit": 0xC00000B7, "pivot_root": 41, "clone": 220, "clone3": 435, "x32_bit": None,
                "numbers": (117, 270, 271, 157, 154, 40, 39, 41, 51, 97, 268, 280, 241, 219, 217, 218, 198, 199,
                            425, 426, 427, 282, 104, 294, 105, 273, 106, 265, 428, 429, 430, 431, 432, 433, 442,
                            224, 225, 142, 89)},
}

_RLIMITS = {"as": "RLIMIT_AS", "nofile": "RLIMIT_NOFILE", "nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE",
            "cpu": "RLIMIT_CPU", "core": "RLIMIT_CORE"}


class SetupError(Exception):
    """A step of building the jail failed: the worker must not start."""


CGROUP_ROOT = "/sys/fs/cgroup"


def _memory_cgroup_parent() -> tuple[str, str] | None:
    """This process's memory cgroup folder and its version ("v2" or "v1"), or None without a writable one."""
    try:
        with open("/proc/self/cgroup") as fh:
            lines = [line.rstrip("\n").split(":", 2) for line in fh]
    except OSError:
        return None
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            folder = f"{CGROUP_ROOT}/memory{path}"
            if os.access(folder, os.W_OK) and os.path.exists(f"{folder}/memory.limit_in_bytes"):
                return folder.rstrip("/"), "v1"
    for _, controllers, path in lines:
        if controllers == "":
            folder = f"{CGROUP_ROOT}{path}".rstrip("/")
            try:
                with open(f"{folder}/cgroup.subtree_control") as fh:
                    delegated = "memory" in fh.read().split()
            except OSError:
                continue
            if delegated and os.access(folder, os.W_OK):
                return folder, "v2"
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def enter_memory_cgroup(limit: int) -> tuple[int, int, str] | None:
    """Move this process into a new memory cgroup limited to ``limit`` bytes of memory and swap (see the
    module docstring). Returns what leaving needs, held open now: the jail's ``pivot_root`` moves this
    process's root too (one mount namespace), so no path of the machine's resolves afterwards."""
    found = _memory_cgroup_parent()
    if found is None:
        return None
    parent, version = found
    name = f"registry-sandbox-{os.getpid()}"
    # The empty cgroups of launchers killed before they could remove theirs; one may bear this launcher's own pid
    # (the machine reuses pids, and this launcher has made none yet), and would refuse its mkdir below.
    for leftover in os.listdir(parent):
        if leftover.startswith("registry-sandbox-") and (
                leftover == name or not os.path.exists(f"/proc/{leftover.rpartition('-')[2]}")):
            try:
                os.rmdir(f"{parent}/{leftover}")
            except OSError:
                pass
    folder = f"{parent}/{name}"
    os.mkdir(folder)
    try:
        if version == "v1":
            _write(f"{folder}/memory.limit_in_bytes", str(limit))
            if os.path.exists(f"{folder}/memory.memsw.limit_in_bytes"):
                _write(f"{folder}/memory.memsw.limit_in_bytes", str(limit))
        else:
            _write(f"{folder}/memory.max", str(limit))
            if os.path.exists(f"{folder}/memory.swap.max"):
                _write(f"{folder}/memory.swap.max", "0")
        held = os.open(parent, os.O_RDONLY | os.O_DIRECTORY), os.open(f"{parent}/cgroup.procs", os.O_WRONLY)
        _write(f"{folder}/cgroup.procs", str(os.getpid()))
    except OSError:
        os.rmdir(folder)
        raise
    return (*held, name)


CGROUP_DRAIN_S = 5.0
"""How long the launcher waits for the jail's cgroup to empty before removing it. When pid 1 ends, the kernel
kills the rest of its namespace, but their exits (an OOM-killed process freeing its memory) finish after
``waitpid`` returns, and until then ``rmdir`` answers EBUSY."""


def leave_memory_cgroup(cgroup: tuple[int, int, str] | None) -> None:
    """Back into the cgroup it left, then remove the jail's once the processes pid 1's end killed are gone."""
    if cgroup is None:
        return
    parent, procs, name = cgroup
    deadline = time.monotonic() + CGROUP_DRAIN_S
    try:
        os.write(procs, str(os.getpid()).encode())
        while True:
            try:
                os.rmdir(name, dir_fd=parent)
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)
    except OSError:
        pass  # an empty cgroup left behind holds no process; the next launcher removes it


def report_confinement(config: dict, cgroup: tuple | None) -> None:
    """Tell the harness, on each worker's status pipe and before the jail exists, what this launch achieved:
    the identity its workers get and the bound on the jail's memory (the cgroup entered, else the per-process
    address-space limit where there is one, else none). No worker ever holds a status pipe."""
    memory = "jail_cgroup" if cgroup is not None else "process_rlimits" if "as" in config["limits"] else "none"
    line = json.dumps({"identity": "user_namespace" if config["user_namespace"] else "sandbox_uid",
                       "memory": memory}) + "\n"
    for worker in config["workers"]:
        os.write(worker["fds"]["status"], line.encode())


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _prctl(option: int, arg: int, what: str) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), what)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())  # noqa: E731 - the one-line encoder of the call below
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def arch() -> dict:
    """The syscall table of this machine; SetupError on an architecture the filter does not know."""
    table = _ARCHES.get(platform.machine())
    if table is None or len(table["numbers"]) != len(REFUSED):
        raise SetupError(f"no syscall filter for the {platform.machine()} architecture")
    return table


def filter_program(table: dict, *, unix_sockets: bool = False) -> list[tuple[int, int, int, int]]:
    """The seccomp-BPF program as (code, jt, jf, k) instructions: refusals by number, clone by its flags.

    With ``unix_sockets`` (a CUDA jail: NVIDIA's driver opens an AF_UNIX socket in cuInit and fails the whole
    initialisation when it is refused) ``socket`` is allowed for AF_UNIX alone. The jail has a network
    namespace of its own, so no abstract socket of the host is reachable, and no socket file of the host is
    in its file system; every other family stays refused."""
    socket = table["numbers"][REFUSED.index("socket")]
    body: list[tuple] = [(LD_ABS_W, 0, 0, ARCH_OFFSET), (JEQ_K, "next", "kill", table["audit"]),
                         (LD_ABS_W, 0, 0, NR_OFFSET)]
    if table["x32_bit"] is not None:
        body.append((JGE_K, "deny", "next", table["x32_bit"]))
    body.append((JEQ_K, "enosys", "next", table["clone3"]))
    body.append((JEQ_K, "clone", "next", table["clone"]))
    if unix_sockets:
        body.append((JEQ_K, "socket", "next", socket))
    for number in sorted(set(table["numbers"]) - ({socket} if unix_sockets else set())):
        body.append((JEQ_K, "deny", "next", number))
    body.append((RET_K, 0, 0, RET_ALLOW))
    labels = {"clone": len(body)}
    body += [(LD_ABS_W, 0, 0, ARG0_OFFSET), (JSET_K, "deny", "next", NAMESPACE_FLAGS), (RET_K, 0, 0, RET_ALLOW)]
    if unix_sockets:
        labels["socket"] = len(body)
        body += [(LD_ABS_W, 0, 0, ARG0_OFFSET), (JEQ_K, "next", "deny", AF_UNIX), (RET_K, 0, 0, RET_ALLOW)]
    labels["deny"] = len(body)
    body.append((RET_K, 0, 0, RET_ERRNO | EPERM))
    labels["enosys"] = len(body)
    body.append((RET_K, 0, 0, RET_ERRNO | ENOSYS))
    labels["kill"] = len(body)
    body.append((RET_K, 0, 0, RET_KILL_PROCESS))
    program = []
    for at, (code, jt, jf, k) in enumerate(body):
        def offset(label):
            return 0 if label in (0, "next") else labels[label] - at - 1
        program.append((code, offset(jt), offset(jf), k))
    return program


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install_filter(table: dict, *, unix_sockets: bool = False) -> None:
    program = filter_program(table, unix_sockets=unix_sockets)
    array = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), array)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp filter")


HELD_TMP = "/.jail-tmp"
"""Where a worker holds the jail's /tmp while it mounts its own over it (a harness installed under /tmp)."""


def _ensure(path: str, *, directory: bool) -> None:
    if directory:
        os.makedirs(path, exist_ok=True)
    elif not os.path.lexists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _bind(source: str, target: str, *, writable: bool = False) -> None:
    """Bind ``source`` at ``target`` (a path inside the new root); read-only, nosuid, nodev unless told."""
    if os.path.islink(source):  # /lib -> usr/lib on merged-/usr systems: the same link in the new root
        if not os.path.lexists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(source), target)
        return
    _ensure(target, directory=os.path.isdir(source))
    _mount(source, target, None, MS_BIND)
    if writable:
        return
    kept = os.statvfs(source).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)  # ST_* bits equal MS_* ones
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | kept |
           (0 if source.startswith("/dev/") else MS_NODEV))


def _build_root(config: dict) -> None:
    root = config["root"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("sandbox-root", root, "tmpfs", MS_NOSUID, "mode=0755,size=16m")
    # /tmp before the binds: a harness whose interpreter or package lives under /tmp has those binds placed
    # inside it, and each worker carries them over to the /tmp of its own (confine)
    os.makedirs(root + "/tmp")
    _mount("sandbox-tmp", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=1777,size={config['tmp_bytes']},nr_inodes={config['tmp_inodes']}")
    os.makedirs(root + HELD_TMP)
    for path in config["binds"]:
        if os.path.lexists(path):
            _bind(path, root + path)
    os.makedirs(root + "/dev", exist_ok=True)
    _mount("sandbox-dev", root + "/dev", "tmpfs", MS_NOSUID, "mode=0755,size=64k")
    for node in config["devices"]:
        _bind(node, root + node, writable=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/dev/shm")
    _mount("sandbox-shm", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={config['shm_bytes']}")
    os.makedirs(root + "/proc")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + "/.old")
    if _libc.syscall(arch()["pivot_root"], root.encode(), (root + "/.old").encode()) != 0:
        raise SetupError(f"pivot_root: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "detach the old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _user_namespace(uid: int, gid: int) -> None:
    """Unprivileged harness: its own uid and gid (nothing else) become root of the new user namespace, so the
    zygote keeps the capabilities it needs there to give each worker its own mounts, then drops them."""
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"0 {gid} 1")


def pid_namespace_for_next_worker() -> None:
    """In the zygote, before it forks a worker: that worker is pid 1 of a pid namespace of its own, inside the
    jail's, so no worker can name (signal, or find in /proc) another, the zygote or anything outside. The
    kernel makes a new one only from the caller's own: the namespace the last worker got is left first."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY)
    try:
        _check(_libc.setns(own, CLONE_NEWPID), "back to the jail's pid namespace")
    finally:
        os.close(own)
    _check(_libc.unshare(CLONE_NEWPID), "unshare the next worker's pid namespace")


def confine(config: dict, worker: dict) -> None:
    """In a process forked by the zygote, before any candidate code: its own mount namespace with a fresh
    /tmp and /dev/shm and a /proc of its own pid namespace, then limits, identity, no capabilities, no new
    privileges, and the syscall filter."""
    import resource

    _check(_libc.unshare(CLONE_NEWNS), "unshare the worker's mounts")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("sandbox-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={config['shm_bytes']}")
    under_tmp = [path for path in config["binds"] if path.startswith("/tmp/") and os.path.lexists(path)]
    if under_tmp:  # hold the jail's /tmp (and the binds in it) while this worker's own is mounted
        _mount("/tmp", HELD_TMP, None, MS_BIND | MS_REC)
    _mount("sandbox-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=1777,size={config['tmp_bytes']},nr_inodes={config['tmp_inodes']}")
    for path in under_tmp:
        _bind(HELD_TMP + path[len("/tmp"):], path)
    if under_tmp:  # nothing of the jail's /tmp stays reachable but the read-only binds
        _check(_libc.umount2(HELD_TMP.encode(), MNT_DETACH), "detach the jail's /tmp")
    for name, value in config["limits"].items():
        resource.setrlimit(getattr(resource, _RLIMITS[name]), (value, value))
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clear ambient capabilities")
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap, f"drop capability {cap}")
    if config["set_ids"]:
        os.setgroups([])
        os.setresgid(worker["gid"], worker["gid"], worker["gid"])
        os.setresuid(worker["uid"], worker["uid"], worker["uid"])
    _clear_capabilities()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "parent-death signal")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "no new privileges")
    _prctl(PR_SET_DUMPABLE, 0, "not dumpable")
    install_filter(arch(), unix_sockets=config["unix_sockets"])
    os.chdir("/tmp")


def _clear_capabilities() -> None:
    """capset with every set empty (also in a user namespace, where no setresuid drops them)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "clear capabilities")


def _exec_pid_one(config: dict) -> None:
    """What pid 1 becomes when the launcher runs as its own process: the config's ``argv``, exec'd."""
    os.execve(config["argv"][0], config["argv"] + [json.dumps(config)], config["env"])


def _child(config: dict, become: Callable[[dict], None]) -> None:
    _build_root(config)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "parent-death signal")
    _prctl(PR_SET_DUMPABLE, 0, "not dumpable")
    become(config)


def main(argv: list[str]) -> None:
    if argv[1] == "--probe":  # exec'd inside a finished jail: confine as a worker would be, then end
        config = json.loads(argv[2])
        try:
            confine(config, config["probe_ids"])
        except (SetupError, OSError) as exc:
            print(f"sandbox: {exc}", file=sys.stderr, flush=True)
            os._exit(SETUP_FAILED)
        os._exit(0)
    try:
        config = json.loads(argv[1])
    except ValueError as exc:
        print(f"sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
    launch(config, _exec_pid_one)


def launch(config: dict, become: Callable[[dict], None]) -> NoReturn:
    """Steps 1 and 2 of the module docstring for ``config``, in this process: pid 1 of the new jail runs
    ``become(config)`` once its root is built (``_exec_pid_one``, or the warm zygote's own code,
    :mod:`registry.kernels.zygote`); this process waits for it outside and exits with its status."""
    try:
        arch()  # refuse an unknown architecture before anything changes
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "parent-death signal")
        cgroup = enter_memory_cgroup(config["memory_bytes"]) if config["set_ids"] else None
        if config["user_namespace"]:
            _check(_libc.unshare(NAMESPACE_FLAGS), "unshare")
            _user_namespace(config["uid"], config["gid"])
        else:
            _check(_libc.unshare(NAMESPACE_FLAGS & ~CLONE_NEWUSER), "unshare")
        report_confinement(config, cgroup)
    except (SetupError, OSError, ValueError, KeyError, IndexError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
    pid = os.fork()
    if pid == 0:
        try:
            _child(config, become)
        except BaseException as exc:  # noqa: BLE001 - nothing but the worker may run past this point
            print(f"sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
    null = os.open(os.devnull, os.O_RDWR)  # the pipes belong to the workers: their ends close them
    os.dup2(null, 0)
    os.dup2(null, 1)
    for worker in config["workers"]:
        for fd in worker["fds"].values():
            os.close(fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(SETUP_FAILED)
        except InterruptedError:
            continue
    leave_memory_cgroup(cgroup)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv)
