"""Pieces the escape gallery shares: finding the harness through /proc and writing the registry with its own API.

Inlined into each escape's one candidate file (gallery.candidate_file). None
of it is a trick the harness must allow: it is what a candidate can reach in
a worker that runs as the harness's user, with its /proc, its filesystem and
its installed registry.
"""
from __future__ import annotations

import os

from registry.kernels.modln import modulated_layernorm_triton as honest_modln

__all__ = ["COPY_MARKER", "FORGED_VERDICT", "PROMOTING_GATE", "forge_promotion", "gallery_copy_of_the_gate",
           "harness_target", "honest_modln", "proc_text", "registering"]

FORGED_VERDICT = {"decision": "promoted", "tier": "exact", "rule": "speed.passed", "margins": [],
                  "reasons": ["speed.passed: 2.00x, above the declared 1.10x"], "speedup": 2.0,
                  "speedup_ci": [1.9, 2.1]}


def proc_text(pid: int, name: str) -> list[str]:
    """/proc/<pid>/<name> (cmdline, environ) split at its NULs."""
    with open(f"/proc/{pid}/{name}", "rb") as handle:
        return [part.decode("utf-8", "replace") for part in handle.read().split(b"\0") if part]


def registering() -> bool:
    """Whether this process was started to hash the candidate for `artifact register` (what the registry
    did before the sandbox's checks left its reach): the escapes strike only in an evaluation, where their effect would count."""
    return "register" in proc_text(os.getppid(), "cmdline")


def harness_target(pid: int | None = None) -> tuple[str, str]:
    """(database URL, artifact) of the `registry evaluate` that started this worker, read from its /proc."""
    pid = os.getppid() if pid is None else pid
    argv = proc_text(pid, "cmdline")
    if "evaluate" not in argv:
        raise ProcessLookupError(f"no `registry evaluate` in reach: the parent (pid {pid}) runs {argv[:4]}")
    environ = dict(item.partition("=")[::2] for item in proc_text(pid, "environ"))
    url = argv[argv.index("--db") + 1] if "--db" in argv else environ["REGISTRY_DATABASE_URL"]
    return url, argv[argv.index("evaluate") + 1]


def forge_promotion(url: str, artifact: str) -> None:
    """Append a VerdictRendered(promoted) through the registry's own API: promote, the gate's answer replaced.

    The event goes through the store like any other, so the chain stays valid.
    """
    from registry.app import decisions, open_registry

    honest = decisions.decide

    class Forged:
        def __init__(self, verdict):
            self.verdict = verdict

        def to_dict(self):
            return {**self.verdict, **FORGED_VERDICT}

    decisions.decide = lambda contract, evidence, facts: Forged(honest(contract, evidence, facts).to_dict())
    try:
        decisions.promote(open_registry(url), artifact)
    finally:
        decisions.decide = honest


COPY_MARKER = "ESCAPE_GALLERY_COPY"
"""A file inside a registry package folder that marks it a throwaway copy: the only package an escape writes."""

PROMOTING_GATE = '''

_honest_decide = decide


def decide(contract, evidence, artifact):
    import dataclasses
    return dataclasses.replace(_honest_decide(contract, evidence, artifact), decision="promoted",
                               rule="speed.passed", reasons=["speed.passed: 2.00x, above the declared 1.10x"])
'''
"""Appended to registry/gate/decide.py: every later verdict is a promotion."""


def gallery_copy_of_the_gate():
    """registry/gate/decide.py of the registry this process runs, if (and only if) it is a marked throwaway copy."""
    from pathlib import Path

    import registry

    package = Path(registry.__file__).resolve().parent
    if not (package / COPY_MARKER).is_file():
        raise RuntimeError(f"{package} is not a marked gallery copy; this escape writes nothing else")
    return package / "gate" / "decide.py"
