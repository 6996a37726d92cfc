"""The registry's own cubins: a bundle's TTIR compiled again in the sandbox, never the bytes the bundle carried.

Registration of a `triton_kernel` bundle asks for every (kernel, target)
of its spec to be rebuilt from its TTIR with the pinned Triton and
requires the rebuilt cubin to equal the bundle's byte for byte; the
launcher only ever loads the rebuilt bytes. The rebuild runs in a jail of
its own (registry/kernels/sandbox.py: no network, a private /tmp, its own
uid, no capabilities, the syscall filter) whose pid 1 is
registry/kernels/rebuild_worker.py: it is sent the TTIR text and the
options the registry chose, and answers cubins and Triton's metadata. No
candidate Python runs anywhere (a TTIR file is read by MLIR's parser), and
a hostile TTIR that crashes or hangs the compiler does so in the jail: a
refusal, never a number.
"""
from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from typing import Any

from registry.formats.errors import UserError, first_line
from registry.kernels.sandbox import Sandbox, sandbox_problem, setup_failure

REBUILD_SECONDS_PER_JOB = 60
REBUILD_START_SECONDS = 60
MAX_ANSWER_BYTES = 1 << 30


class RebuildFailed(UserError):
    """The sandboxed rebuild did not answer (a crash, the deadline, a jail that could not be built)."""


@dataclass(frozen=True)
class RebuildJob:
    ttir: str
    arch: str
    options: dict[str, Any]


@dataclass(frozen=True)
class Rebuilt:
    """One job's answer: the cubin and Triton's metadata, or the error that stopped its compile."""

    cubin: bytes | None
    metadata: dict[str, Any] | None
    error: str | None = None


def rebuild(jobs: list[RebuildJob]) -> list[Rebuilt]:
    """Every job compiled in one sandboxed process, answers in the order of `jobs`."""
    if not jobs:
        return []
    problem = sandbox_problem()
    if problem is not None:
        raise RebuildFailed(f"this machine cannot build the sandbox the registry rebuilds cubins in ({problem}); "
                            "nothing recorded")
    sandbox = Sandbox("cpu")
    timeout = REBUILD_START_SECONDS + REBUILD_SECONDS_PER_JOB * len(jobs)
    request = json.dumps({"jobs": [{"ttir": j.ttir, "arch": j.arch, "options": j.options} for j in jobs]})
    try:
        done = subprocess.run(sandbox.module_command("registry.kernels.rebuild_worker"), input=request.encode(),
                              capture_output=True, timeout=timeout, env={})
    except subprocess.TimeoutExpired:
        raise RebuildFailed(f"the sandboxed rebuild of {len(jobs)} cubins passed its {timeout} s deadline; "
                            "nothing recorded") from None
    finally:
        sandbox.close()
    stderr = done.stderr.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0:
        why = stderr[-1] if stderr else f"exit status {done.returncode}"
        what = "the rebuild's sandbox could not be built" if setup_failure(done.returncode) else \
            "the sandboxed rebuild failed"
        raise RebuildFailed(f"{what} ({why[:400]}); nothing recorded")
    try:
        answers = json.loads(done.stdout[:MAX_ANSWER_BYTES])["answers"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RebuildFailed(f"the sandboxed rebuild answered no result ({first_line(exc)}); nothing recorded") \
            from None
    if len(answers) != len(jobs):
        raise RebuildFailed(f"the sandboxed rebuild answered {len(answers)} of {len(jobs)} jobs; nothing recorded")
    return [Rebuilt(None, None, answer["error"]) if "error" in answer else
            Rebuilt(base64.b64decode(answer["cubin"]), answer["metadata"]) for answer in answers]
