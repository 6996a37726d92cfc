"""Rule 2: the artifact must show it ran.

The motivating failure (docs/architecture.md, "The problem"): an attention backend that
failed to import, a runtime that silently fell back to FlashAttention, and a
campaign that reported ~1.00x for a backend that never executed. So: no
execution evidence holds; zero candidate calls or any fallback quarantines;
an attention backend whose effective backend is not the one requested or
claimed quarantines, naming the backend that really ran.
"""
from __future__ import annotations

from registry.gate.ledger import Ledger
from registry.gate.model import ArtifactFacts, Recorded


def check_execution(recorded: Recorded | None, artifact: ArtifactFacts, ledger: Ledger) -> None:
    if recorded is None:
        ledger.add("execution.missing", "held", "no execution evidence: nothing shows the candidate ran")
        return
    item = ledger.admit(recorded, "execution")
    if item is None:
        return
    effective = item.get("effective_backend")
    ran_instead = f"; '{effective}' ran instead" if effective else ""
    if item["candidate_calls"] == 0:
        ledger.add(
            "execution.fallback", "quarantined",
            f"candidate_calls is 0: the candidate never ran{ran_instead}",
        )
    if item["fallbacks"] > 0:
        ledger.add(
            "execution.fallback", "quarantined",
            f"{item['fallbacks']} fallback(s) recorded: the runtime fell back instead of running the candidate"
            f"{ran_instead}",
        )
    _check_harness(item, ledger)
    _check_launcher(item, artifact, ledger)
    _check_backend(item, artifact, ledger)


def _check_harness(item: dict, ledger: Ledger) -> None:
    """Evidence from `registry evaluate` names the sandbox the candidate ran in and where its launches were
    counted; a candidate run without the sandbox, or counted only inside its own process, is not shown to
    have run honestly (docs/kernels.md, "Threat model")."""
    if item.get("sandbox") == "none":
        ledger.add("execution.unsandboxed", "held",
                   "the candidate ran without the sandbox (--insecure-no-sandbox): it could have rewritten the "
                   "harness, the log or the registry's code")
    if item.get("launch_signal") == "candidate_process":
        ledger.add("execution.launches_unverified", "held",
                   "the launch count and the ablation ran inside the candidate's own process, which can read and "
                   "forge them: nothing outside it shows its kernels produced its outputs")


def _check_launcher(item: dict, artifact: ArtifactFacts, ledger: Ledger) -> None:
    """Launches counted by the registry's own launcher are execution evidence only for the bytes registered: a
    triton_kernel whose evidence names exactly its registered bundle's cubin digests (every cubin loaded is one
    of them). A triton_kernel's execution evidence from anywhere else shows nothing of its cubins."""
    launcher = item.get("launch_signal") == "harness_launcher"
    if artifact.kind != "triton_kernel":
        if launcher:
            ledger.add("execution.launcher_unbound", "held",
                       f"the evidence says the harness launcher ran it, but artifact {artifact.artifact_id} is a "
                       f"{artifact.kind}: the launcher runs only a triton_kernel bundle's cubins")
        return
    if not launcher:
        ledger.add("execution.launcher_unbound", "held",
                   f"artifact {artifact.artifact_id} is a triton_kernel, and its execution evidence does not come "
                   "from the harness launcher (launch_signal harness_launcher): nothing shows its cubins ran")
        return
    registered = artifact.cubins or {}
    for key, digest in sorted(item["cubins"].items()):
        if registered.get(key) != digest:
            held = registered.get(key)
            ledger.add("execution.launcher_unbound", "held",
                       f"cubin {key}: the evidence names sha256 {digest[:12]}, and the registered bundle holds "
                       f"{'sha256 ' + held[:12] if held else 'no such cubin'}: these launches were not of its bytes")
            return


def _check_backend(item: dict, artifact: ArtifactFacts, ledger: Ledger) -> None:
    effective = item.get("effective_backend")
    expected: dict[str, list[str]] = {}
    if item.get("requested_backend"):
        expected.setdefault(item["requested_backend"], []).append("requested")
    if artifact.claimed_backend:
        expected.setdefault(artifact.claimed_backend, []).append(f"claimed by artifact {artifact.artifact_id}")
    if effective is not None:
        for backend, sources in expected.items():
            if backend != effective:
                ledger.add(
                    "execution.backend_mismatch", "quarantined",
                    f"backend '{backend}' ({' and '.join(sources)}) did not run: "
                    f"the effective backend was '{effective}'",
                )
    if artifact.kind != "attention_backend":
        return
    if effective is None:
        ledger.add(
            "execution.backend_unknown", "held",
            "the execution evidence does not name the effective backend, so the attention backend "
            "cannot be shown to have run",
        )
    elif not expected:
        ledger.add(
            "execution.backend_unknown", "held",
            f"neither the evidence (requested_backend) nor the artifact names the backend it claims, "
            f"so the effective backend '{effective}' cannot be checked",
        )
