"""An identity's history belongs to it, and an approval answers a verdict that still stands (docs/gate.md, "Lifecycle").

Identities and their histories, end to end through the CLI on a real SQLite file:
re-registering the same bytes again takes up their own evidence, failures,
attempts and verdict; attempts count per payload within a workload; an
approval is refused under a contract that no longer leaves the decision to a
person, or when anything reached the identity after its verdict; a document
that names no payload is refused once other bytes were registered.
"""
from __future__ import annotations


import pytest
from registry.app.workloads import artifact_stream, register_artifact
from registry.formats.evidence.items import parse_item
from cli_helpers import head, one_line_refusal
from lifecycle_helpers import advisory_workload, benchmark, execution, loading, perceptual, promote, show
from store_helpers import opened

CAPPED = """
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, max_benchmark_attempts: 2, decision: point}
"""
ADVISORY = advisory_workload(0.4)


@pytest.fixture
def cli(registry_cli, tmp_path):
    invoke, counter, load = loading(registry_cli, tmp_path)

    def declare(text, name="manifest"):
        path = tmp_path / f"{name}-{next(counter)}.yaml"
        path.write_text(text)
        result = invoke("workload", "declare", str(path))
        assert result.exit_code == 0, result.output

    def register(artifact, payload, workload="wan", kind="attention_backend", backend="SAGE_ATTN"):
        extra = ["--backend", backend] if backend else []
        result = invoke("artifact", "register", artifact, "--workload", workload, "--kind", kind, *extra,
                        "--payload", str(tmp_path / payload), "--new-identity")
        assert result.exit_code == 0, result.output

    declare(CAPPED)
    declare(ADVISORY)
    for name in ("x.bin", "y.bin"):
        (tmp_path / name).write_bytes(f"build {name}".encode())
    invoke.load, invoke.declare, invoke.register = load, declare, register
    return invoke


def digest(cli, payload):
    import hashlib

    return hashlib.sha256((cli.tmp / payload).read_bytes()).hexdigest()


# -- re-registering the same bytes again ---------------------------------------------------------

def test_registering_other_bytes_and_back_keeps_failures_attempts_and_the_cap(cli):
    """Three slow benchmarks over a cap of 2 and an open failure survive X -> Y -> X."""
    cli.register("sage", "x.bin")
    for _ in range(3):
        assert cli.load("sage", [execution(), benchmark(1.0), perceptual()]).exit_code == 0
    assert cli.load("sage", [{"kind": "failure", "stage": "compile", "error": "nvcc died"}]).exit_code == 0
    assert promote(cli, "sage")["decision"] == "held"
    cli.register("sage", "y.bin")
    assert show(cli, "sage")["benchmark_attempts"] == 0
    cli.register("sage", "x.bin")
    state = show(cli, "sage")
    assert state["benchmark_attempts"] == 3 and [f["stage"] for f in state["open_failures"]] == ["compile"]
    assert state["identity_changed"]["returned"] is True
    assert "count again" in cli("show", "sage").output
    assert cli.load("sage", [benchmark(1.5)], payload_sha256=digest(cli, "x.bin")).exit_code == 0
    verdict = promote(cli, "sage")
    assert verdict["decision"] == "held" and verdict["benchmark_attempts"] == 4
    rules = " ".join(verdict["reasons"])
    assert "compile" in rules and "exceed speed.max_benchmark_attempts 2" in rules
    assert cli("resolve", "--json").exit_code != 0 or "sage" not in cli("resolve", "--json").output
    assert cli("replay", "--verify").exit_code == 0


def test_a_final_verdict_of_the_same_bytes_stands_when_they_are_registered_again(cli):
    """A rejection is final for an identity: registering other bytes and back does not reopen it."""
    cli.register("sage", "x.bin")
    cli.load("sage", [execution(), benchmark(1.0), perceptual()])
    assert promote(cli, "sage")["decision"] == "rejected"
    cli.register("sage", "y.bin")
    cli.register("sage", "x.bin")
    assert show(cli, "sage")["decision"] == "rejected"
    cli.load("sage", [benchmark(1.5)], payload_sha256=digest(cli, "x.bin"))
    verdict = promote(cli, "sage")
    assert verdict["decision"] == "rejected" and verdict["appended"] is False


def test_the_same_bytes_under_a_new_artifact_id_do_not_start_a_fresh_count(cli):
    """Attempts count per payload within a workload: a new artifact id over the same bytes continues the count."""
    cli.register("sage", "x.bin")
    for _ in range(2):
        cli.load("sage", [execution(), benchmark(1.0), perceptual()])
    cli.register("sage-again", "x.bin")
    cli.load("sage-again", [execution(), benchmark(1.5), perceptual()])
    verdict = promote(cli, "sage-again")
    assert verdict["decision"] == "held" and verdict["benchmark_attempts"] == 3
    assert any("exceed speed.max_benchmark_attempts 2" in reason for reason in verdict["reasons"])


def test_the_same_bytes_under_another_backend_claim_continue_the_payload_count(cli):
    """A variant: the same payload re-registered with another backend is a new identity, not a fresh count."""
    cli.register("sage", "x.bin")
    for _ in range(2):
        cli.load("sage", [execution(), benchmark(1.0), perceptual()])
    cli.register("sage", "x.bin", backend="FLASH_ATTN")
    cli.load("sage", [execution("FLASH_ATTN"), benchmark(1.5), perceptual()])
    verdict = promote(cli, "sage")
    assert verdict["decision"] == "held" and verdict["benchmark_attempts"] == 3


def test_a_late_result_for_set_aside_bytes_counts_for_them_when_they_return(cli):
    """The re-registration race: evidence measured on X lands while Y is registered; it counts for X only."""
    from registry.app.evidence import capture_subject, evidence_events

    cli.register("sage", "x.bin")
    registry = opened(cli.url)
    try:
        subject = capture_subject(registry, "sage")  # the measurement opens on X
        register_artifact(registry, "sage", workload="wan", kind="attention_backend", backend="SAGE_ATTN",
                          payload=str(cli.tmp / "y.bin"))
        items = [parse_item(item) for item in (execution(), benchmark(1.5), perceptual())]
        registry.store.append(artifact_stream("sage"), evidence_events(subject, None, items), actor="late-worker")
    finally:
        registry.engine.dispose()
    assert show(cli, "sage")["evidence"] == {} and promote(cli, "sage")["decision"] == "held"
    cli.register("sage", "x.bin")
    state = show(cli, "sage")
    assert sorted(state["evidence"]) == ["benchmark", "execution", "perceptual"] and state["benchmark_attempts"] == 1
    assert promote(cli, "sage")["decision"] == "promoted"
    assert cli("replay", "--verify").exit_code == 0


# -- evidence that names no payload ---------------------------------------------------------------

def test_a_document_naming_no_payload_is_refused_once_other_bytes_were_registered(cli):
    cli.register("sage", "x.bin")
    assert cli.load("sage", [execution()]).exit_code == 0  # one payload ever: the document binds to it
    cli.register("sage", "y.bin")
    before = head(cli)
    refused = cli.load("sage", [execution(), benchmark(1.5), perceptual()])
    one_line_refusal(refused)
    assert "payload_sha256" in refused.output and head(cli) == before
    assert cli.load("sage", [execution(), benchmark(1.5), perceptual()],
                    payload_sha256=digest(cli, "y.bin")).exit_code == 0
    assert promote(cli, "sage")["decision"] == "promoted"


def test_a_document_naming_no_payload_is_refused_after_a_round_trip_to_the_same_bytes(cli):
    """A variant: X -> Y -> X leaves X registered, yet a document naming none may have measured Y."""
    cli.register("sage", "x.bin")
    cli.register("sage", "y.bin")
    cli.register("sage", "x.bin")
    before = head(cli)
    one_line_refusal(cli.load("sage", [execution()]))
    assert head(cli) == before


# -- approvals answer a verdict that still stands ---------------------------------------------------

def _recorded(cli, artifact="cache", worst=0.5):
    cli.register(artifact, "x.bin", workload="ltx", kind="step_cache", backend=None)
    cli.load(artifact, [execution(None), benchmark(1.5), perceptual(worst)])
    assert promote(cli, artifact)["decision"] == "recorded"


def test_approve_is_refused_once_the_contract_no_longer_leaves_the_decision_to_a_person(cli):
    """Advisory, recorded at worst SSIM 0.5, re-declared perceptual at 0.98: approve refused."""
    _recorded(cli)
    cli.declare(ADVISORY.replace("tier: advisory, min_ssim: 0.4", "tier: perceptual, min_ssim: 0.98, seed: 1024"))
    before = head(cli)
    refused = cli("approve", "cache", "--reason", "frames look fine")
    one_line_refusal(refused)
    assert "contract v2" in refused.output and head(cli) == before
    assert show(cli, "cache")["decision"] == "recorded"
    assert promote(cli, "cache")["decision"] == "quarantined"  # what the current contract says
    one_line_refusal(cli("approve", "cache", "--reason", "frames look fine"))


def test_approve_is_refused_under_a_re_declared_advisory_contract_until_promote_decides_again(cli):
    """A variant: still advisory, other thresholds; the verdict was not given under them."""
    _recorded(cli)
    cli.declare(ADVISORY.replace("min_ssim: 0.4", "min_ssim: 0.45"))
    one_line_refusal(cli("approve", "cache", "--reason", "frames look fine"))
    assert promote(cli, "cache")["decision"] == "recorded"
    assert cli("approve", "cache", "--reason", "frames look fine").exit_code == 0
    assert show(cli, "cache")["decision"] == "promoted"


@pytest.mark.parametrize("later", [[perceptual(0.2)], [{"kind": "failure", "stage": "perceptual", "error": "oom"}]])
def test_approve_is_refused_when_evidence_or_a_failure_arrived_after_the_verdict(cli, later):
    _recorded(cli)
    assert cli.load("cache", later).exit_code == 0
    before = head(cli)
    refused = cli("approve", "cache", "--reason", "frames look fine")
    one_line_refusal(refused)
    assert "promote" in refused.output and head(cli) == before


def test_approve_is_refused_after_a_revoke_of_a_returned_identity(cli):
    """A revoke after the verdict: approving the verdict it revoked is refused, even with the same claims back."""
    _recorded(cli)
    assert cli("approve", "cache", "--reason", "fine").exit_code == 0
    assert cli("revoke", "cache", "--reason", "second look").exit_code == 0
    cli.register("cache", "y.bin", workload="ltx", kind="step_cache", backend=None)
    cli.register("cache", "x.bin", workload="ltx", kind="step_cache", backend=None)
    assert show(cli, "cache")["decision"] == "held"
    one_line_refusal(cli("approve", "cache", "--reason", "fine"))
