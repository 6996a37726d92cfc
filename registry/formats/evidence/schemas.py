"""The fields of each evidence item kind: {field: (required, checker)}, one table a kind.

Raw measurement only: every timing, every per-frame score, every parity leaf;
what the registry derives from them is computed in `derived`, never taken
from the client (docs/evidence-format.md has each field and its rules).
"""
from __future__ import annotations

import re
from typing import Any

from registry.formats.evidence.errors import KIT, EvidenceError
from registry.formats.evidence.leaves import leaf
from registry.formats.ranks import MAX_RUNS_PER_ARM

KINDS = ("execution", "benchmark", "parity", "perceptual", "failure")
TIMERS = ("cuda_event", "perf_counter", "interpreter", "emulator")
ORDERS = ("BC", "CB")
METRICS = ("ssim", "lpips", "vbench")
SANDBOX_PROFILES = ("linux-ns-seccomp/1", "none")  # registry/kernels/sandbox.py: PROFILE, UNSANDBOXED
LAUNCH_SIGNALS = ("candidate_process", "harness_launcher")
"""Where registry evaluate's launch count came from (docs/kernels.md): hooks inside the candidate's own process,
or the registry's own launcher, which launched the registry's cubins of a triton_kernel bundle itself."""
HARNESS_LAUNCHER = LAUNCH_SIGNALS[1]
MAX_LAUNCH_CALLS = 250_000
"""Most launcher calls one execution item lists (a benchmark arm holds at most 100,000 runs)."""
MAX_LAUNCHES_PER_CALL = 4096
UNREPORTED = "unreported"  # the launcher never said: the jail was not built, no candidate code ran
IDENTITIES = ("sandbox_uid", "user_namespace", "harness_user", UNREPORTED)
MEMORY_BOUNDS = ("jail_cgroup", "process_rlimits", "none", UNREPORTED)
"""What the launcher reports it achieved for one jail (docs/evidence-format.md, "confinement"): the identity its
workers run under and the bound that held the jail's memory."""


def confinement(value: Any, path: str) -> dict[str, str]:
    """{identity, memory}: both reported, or both unreported."""
    block = KIT.mapping(value, path)
    KIT.only_known(block, ("identity", "memory"), path)
    checked = KIT.fields(block, {"identity": (True, KIT.one_of(IDENTITIES)),
                                 "memory": (True, KIT.one_of(MEMORY_BOUNDS))}, path)
    if (checked["identity"] == UNREPORTED) != (checked["memory"] == UNREPORTED):
        raise EvidenceError(f"{path}: identity and memory are reported together; one unreported means neither was")
    return checked


def check_confinement(sandbox: str | None, bounds: dict[str, str] | None, path: str) -> None:
    """Refuse a confinement no run of that sandbox profile could report."""
    if bounds is None:
        return
    if sandbox is None:
        raise EvidenceError(f"{path}.confinement: names the bounds of a sandbox, and no sandbox is named")
    unsandboxed = sandbox == SANDBOX_PROFILES[1]
    if (bounds["identity"] == "harness_user") != unsandboxed and bounds["identity"] != UNREPORTED:
        raise EvidenceError(f"{path}.confinement.identity: {bounds['identity']!r} is not what the {sandbox!r} profile "
                            "runs a candidate as")
    if unsandboxed and bounds["memory"] not in ("none", UNREPORTED):
        raise EvidenceError(f"{path}.confinement.memory: {bounds['memory']!r}, but the {sandbox!r} profile bounds "
                            "nothing")


_KERNEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}@sm_[0-9]{2,3}[af]?")


def kernel_key(value: Any, path: str) -> str:
    """``kernel@arch`` (``modln@sm_90a``): how evidence names one cubin of a triton_kernel bundle."""
    if not isinstance(value, str) or not _KERNEL_KEY.fullmatch(value):
        raise EvidenceError(f"{path}: {str(value)[:80]!r} is not a kernel@arch name such as modln@sm_90a")
    return value


def cubins(value: Any, path: str) -> dict[str, str]:
    """{kernel@arch: sha256} of the cubins the launcher loaded: non-empty."""
    block = KIT.mapping(value, path)
    if not block:
        raise EvidenceError(f"{path}: names no cubin")
    for key, digest in block.items():
        kernel_key(key, f"{path} key")
        KIT.sha256(digest, f"{path}.{key}")
    return block


def launches(value: Any, path: str) -> list[list[str]]:
    """One list per launcher call: the kernel@arch names it launched, in order."""
    if isinstance(value, list) and len(value) > MAX_LAUNCH_CALLS:
        raise EvidenceError(f"{path}: {len(value)} calls; an execution item lists at most {MAX_LAUNCH_CALLS}")

    def call(names: Any, where: str) -> list[str]:
        if isinstance(names, list) and len(names) > MAX_LAUNCHES_PER_CALL:
            raise EvidenceError(f"{where}: {len(names)} launches; a call lists at most {MAX_LAUNCHES_PER_CALL}")
        return KIT.list_of(kernel_key)(names, where)

    return KIT.list_of(call)(value, path)


def _positive_time(value: Any, path: str) -> float:
    number = KIT.number(value, path)
    if number <= 0:
        raise EvidenceError(f"{path}: {number} is not a positive time")
    return number


def _runs(value: Any, path: str) -> list[float]:
    """One arm's run times; over MAX_RUNS_PER_ARM is refused before any element is read."""
    if isinstance(value, list) and len(value) > MAX_RUNS_PER_ARM:
        raise EvidenceError(f"{path}: {len(value)} runs; a benchmark arm carries at most {MAX_RUNS_PER_ARM}")
    return KIT.list_of(_positive_time)(value, path)


def _waits(value: Any, path: str) -> list[float | None]:
    """The baseline arm's waits for a CPU, one per pair: seconds >= 0, or null where the harness could not
    tell (never 0 for that); the length is checked against the pairs in derived.py."""
    if isinstance(value, list) and len(value) > MAX_RUNS_PER_ARM:
        raise EvidenceError(f"{path}: {len(value)} waits; a benchmark arm carries at most {MAX_RUNS_PER_ARM}")
    return KIT.list_of(KIT.nullable(KIT.bounded(0.0, None, "wait")))(value, path)


def _frame_count(value: Any, path: str) -> int:
    if KIT.count(value, path) == 0:
        raise EvidenceError(f"{path}: 0 frames")
    return value


def _metric_map(value: Any, path: str) -> dict[str, str]:
    """{metric: text}, as the perceptual harness names each metric's backend or why it is absent."""
    mapping = KIT.mapping(value, path)
    for metric, text in mapping.items():
        KIT.choice(metric, METRICS, f"{path}.{metric}")
        KIT.text(text, f"{path}.{metric}")
    return mapping


_nullable_count = KIT.nullable(KIT.count)
SPECS: dict[str, dict[str, tuple[bool, Any]]] = {
    "execution": {
        "candidate_calls": (True, KIT.count),
        "fallbacks": (True, KIT.count),
        "requested_backend": (False, KIT.nullable(KIT.text)),
        "effective_backend": (False, KIT.nullable(KIT.text)),
        "sandbox": (False, KIT.one_of(SANDBOX_PROFILES)),
        "harness_sha256": (False, KIT.sha256),
        "launch_signal": (False, KIT.one_of(LAUNCH_SIGNALS)),
        "confinement": (False, confinement),
        "cubins": (False, cubins),
        "launches": (False, launches),
    },
    "benchmark": {
        "protocol": (True, KIT.one_of(("paired", "sequential"))),
        "device": (True, KIT.text),
        "timer": (True, KIT.one_of(TIMERS)),
        "baseline_s": (True, _runs),
        "candidate_s": (True, _runs),
        "baseline_waited_s": (False, KIT.nullable(_waits)),
        "schedule": (False, KIT.nullable(KIT.list_of(KIT.one_of(ORDERS)))),
        "warmup": (False, _nullable_count),
        "bandwidth_share": (False, KIT.nullable(KIT.bounded(0.0, None, "bandwidth share"))),
        "notes": (False, KIT.nullable(KIT.note)),
        "arch": (False, KIT.nullable(KIT.arch)),
    },
    "parity": {
        "policy": (False, KIT.nullable(KIT.one_of(("byte_equal", "tolerance")))),
        "leaves": (True, KIT.list_of(leaf)),
        "approx_math": (False, KIT.nullable(KIT.list_of(KIT.text, allow_empty=True))),
    },
    "perceptual": {
        "frame_set": (True, KIT.name),
        "seed": (True, KIT.integer),
        "frames": (False, KIT.nullable(_frame_count)),
        "ssim": (False, KIT.nullable(KIT.list_of(KIT.bounded(-1.0, 1.0, "SSIM")))),
        "lpips": (False, KIT.nullable(KIT.list_of(KIT.bounded(0.0, None, "LPIPS")))),
        "vbench": (False, KIT.nullable(KIT.bounded(0.0, 1.0, "VBench"))),
        "stage_status": (True, KIT.text),
        "backends": (False, KIT.nullable(_metric_map)),
        "absent": (False, KIT.nullable(_metric_map)),
    },
    "failure": {
        "stage": (True, KIT.text),
        "error": (True, KIT.text),
    },
}
