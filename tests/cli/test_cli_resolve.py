"""`registry resolve`: every reason code, the deterministic choice, as-of, revocation, exit codes."""
from __future__ import annotations

import json

import pytest
from registry.bundles import REASON_CODES, CallSite, Candidate, Profile, parse_manifest, resolve
from ship_helpers import FINGERPRINT, INPUT, declare, make_bundle, measure_and_promote, ship
from store_helpers import head_of

QUERY = ("--workload", "wan", "--arch", "sm90", "--torch", "2.13.0+cu128", "--cuda", "12.8", "--triton", "nightly",
         "--model", "wan-1.3b", "--revision", "r1", "--fingerprint", FINGERPRINT,
         "--input", "float32:2x8x64:512x64x1:cuda")


@pytest.fixture
def cli(registry_cli):
    declare(registry_cli)
    return registry_cli


def resolved(cli, *args) -> tuple[int, dict]:
    result = cli("resolve", *args, "--json")
    assert result.exit_code in (0, 3), result.output
    return result.exit_code, json.loads(result.output)


def codes(document: dict) -> dict[str, str]:
    return {o["artifact"]: o["code"] for o in document["others"]}


def redeclare(cli, min_ssim: str) -> None:
    """Declare the workload again with another SSIM threshold (and a monitor block): a new contract version."""
    newer = cli.tmp / f"wan-{min_ssim}.yaml"
    newer.write_text((cli.tmp / "wan.yaml").read_text().replace("min_ssim: 0.98", f"min_ssim: {min_ssim}")
                     + "monitor: {alpha: 0.001, reference: gate, margin: 0.0}\n")
    assert cli("workload", "declare", str(newer)).exit_code == 0


def test_every_reason_code_is_produced(cli):
    root = cli.tmp / "bundles"
    ship(cli, root, "stale", 2.0)  # promoted under contract v1, then the workload is declared again
    redeclare(cli, "0.981")
    ship(cli, root, "best", 1.8)
    ship(cli, root, "second", 1.5)
    ship(cli, root, "quarantined", 2.0, worst_ssim=0.9)
    ship(cli, root, "revoked", 2.0)
    assert cli("revoke", "revoked", "--reason", "wrong output on sm90", actor="alice").exit_code == 0
    plain = cli.tmp / "plain.bin"
    plain.write_bytes(b"payload")
    assert cli("artifact", "register", "plain", "--workload", "wan", "--kind", "step_cache",
               "--payload", str(plain)).exit_code == 0
    assert measure_and_promote(cli, "plain", 2.0) == "promoted"
    ship(cli, root, "other-model", 2.0, model={"id": "hunyuan", "revision": "*"})
    ship(cli, root, "other-revision", 2.0, model={"id": "wan-1.3b", "revision": "r0"})
    ship(cli, root, "other-op", 2.0, fingerprint="sha256:attention")
    ship(cli, root, "bf16", 2.0, inputs=[{**INPUT, "dtype": "bfloat16"}])
    ship(cli, root, "blackwell", 2.0, gpu_architectures=["sm100"])
    ship(cli, root, "torch3", 2.0, torch={"min": "3.0"})
    ship(cli, root, "cuda13", 2.0, cuda={"min": "13.0"})
    ship(cli, root, "triton-bound", 2.0, triton={"min": "3.2"})
    ship(cli, root, "training", 2.0, execution_modes=["training"])
    ship(cli, root, "tensor-parallel", 2.0, distributed_modes=["tensor_parallel"])
    ship(cli, root, "regressed", 2.0)
    for batch in range(5):  # ten re-measured pairs at 0.9x, below the gate: the monitor's fewest to alarm
        assert cli("monitor", "record", "regressed", "--batch", f"b{batch}", "--baseline", "0.9,0.9",
                   "--candidate", "1.0,1.0", "--device", "NVIDIA H200", "--software", "torch=2.13.0").exit_code == 0

    status, document = resolved(cli, *QUERY)
    assert status == 0
    assert document["match"]["artifact"] == "best"
    assert codes(document) == {
        "second": "not_selected", "quarantined": "not_promoted", "revoked": "revoked", "plain": "no_bundle",
        "other-model": "model_mismatch", "other-revision": "model_mismatch", "other-op": "fingerprint_mismatch",
        "bf16": "input_signature_mismatch", "blackwell": "gpu_architecture_mismatch",
        "torch3": "torch_version_unsupported", "cuda13": "cuda_version_unsupported",
        "triton-bound": "triton_version_unsupported", "training": "execution_mode_mismatch",
        "tensor-parallel": "distributed_mode_mismatch", "stale": "stale_contract", "regressed": "regressed",
    }
    assert set(codes(document).values()) == set(REASON_CODES)  # every documented code, and no other
    details = {o["artifact"]: o["detail"] for o in document["others"]}
    assert details["revoked"] == "revoked by alice: wrong output on sm90"
    assert "'nightly' does not parse" in details["triton-bound"]
    assert "input 0 (x): dtype float32, the bundle takes bfloat16" == details["bf16"]

    table = cli("resolve", *QUERY)
    assert table.exit_code == 0
    assert "ships best" in table.output and "distributed_mode_mismatch" in table.output


def test_no_match_exits_3(cli):
    ship(cli, cli.tmp / "bundles", "hopper-only", 1.5, gpu_architectures=["sm90"])
    result = cli("resolve", "--workload", "wan", "--arch", "sm80", "--torch", "2.13.0", "--cuda", "12.8")
    assert result.exit_code == 3
    assert "nothing ships" in result.output and "gpu_architecture_mismatch" in result.output


def test_the_choice_is_deterministic_among_several_matches(cli):
    root = cli.tmp / "bundles"
    for name in ("c-tie", "a-tie", "b-tie"):
        ship(cli, root, name, 1.6, source=f"def replacement(x):\n    return '{name}'\n")
    ship(cli, root, "slower", 1.3)
    args = ("--workload", "wan", "--arch", "sm100", "--torch", "2.13.0", "--cuda", "12.8")
    answers = {resolved(cli, *args)[1]["match"]["artifact"] for _ in range(3)}
    assert answers == {"a-tie"}
    document = resolved(cli, *args)[1]
    assert codes(document) == {"b-tie": "not_selected", "c-tie": "not_selected", "slower": "not_selected"}


def test_every_ci_lower_bound_in_the_ranking_states_its_level(cli):
    """The "not chosen" table and the JSON details name the level of each interval, as every other label does."""
    import re

    root = cli.tmp / "bundles"
    ship(cli, root, "faster", 1.6, source="def replacement(x):\n    return 'faster'\n")
    ship(cli, root, "slower", 1.3)
    args = ("--workload", "wan", "--arch", "sm100", "--torch", "2.13.0", "--cuda", "12.8")
    table = cli("resolve", *args)
    assert table.exit_code == 0, table.output
    # The line of the one that ships and the row of the other, which names both (the table may wrap a cell).
    assert table.output.count("CI lower bound") == 3 == table.output.count("two-sided"), table.output
    detail = resolved(cli, *args)[1]["others"][0]["detail"]
    levels = re.findall(r"CI lower bound [0-9.]+ \(([^)]*)\)", detail)
    assert len(levels) == 2 and all(re.fullmatch(r"[0-9]+% two-sided", level) for level in levels), detail


def test_ranking_uses_the_ci_lower_bound_then_the_id(tmp_path):
    manifest = parse_manifest(json.loads((make_bundle(tmp_path, "x") / "bundle.json").read_text()))

    def candidate(name, speedup, ci):
        return Candidate(name, "promoted", manifest, speedup, ci)

    profile = Profile("sm90", "2.13.0", "12.8")
    found = resolve([candidate("wide", 1.5, (1.2, 1.8)), candidate("narrow", 1.5, (1.4, 1.6)),
                     candidate("unknown-ci", 1.5, None), candidate("faster", 1.7, None)], profile)
    assert found.chosen.artifact == "faster"
    without = resolve([candidate("wide", 1.5, (1.2, 1.8)), candidate("narrow", 1.5, (1.4, 1.6)),
                       candidate("unknown-ci", 1.5, None), candidate("also-narrow", 1.5, (1.4, 1.6))], profile)
    assert without.chosen.artifact == "also-narrow"
    assert [o.code for o in without.outcomes] == ["selected", "not_selected", "not_selected", "not_selected"]


def test_unparseable_versions_never_meet_a_bounded_range(tmp_path):
    bounded = parse_manifest(json.loads((make_bundle(tmp_path, "b") / "bundle.json").read_text()))
    unbounded = parse_manifest(json.loads((make_bundle(tmp_path, "u", torch={}, cuda={}) / "bundle.json").read_text()))
    for torch_version in ("banana", None, "2.13.0.custom-build", "v2-nightly"):
        profile = Profile("sm90", torch_version, "12.8")
        found = resolve([Candidate("b", "promoted", bounded), Candidate("u", "promoted", unbounded)], profile)
        by_id = {o.artifact: o.code for o in found.outcomes}
        assert by_id["b"] == "torch_version_unsupported", torch_version
        assert by_id["u"] == "selected"


def test_as_of_answers_what_would_have_shipped(cli):
    root = cli.tmp / "bundles"
    ship(cli, root, "early", 1.4)
    then = head_of(cli.url)
    ship(cli, root, "later", 1.9)
    args = ("--workload", "wan", "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
    assert resolved(cli, *args)[1]["match"]["artifact"] == "later"
    status, past = resolved(cli, *args, "--as-of", str(then))
    assert status == 0 and past["match"]["artifact"] == "early" and past["as_of_position"] == then
    assert "later" not in codes(past)
    status, before = resolved(cli, *args, "--as-of", "1")
    assert status == 3 and before["match"] is None


def test_revocation_removes_an_artifact_from_resolve(cli):
    root = cli.tmp / "bundles"
    ship(cli, root, "kept", 1.4)
    ship(cli, root, "pulled", 1.9)
    args = ("--workload", "wan", "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
    assert resolved(cli, *args)[1]["match"]["artifact"] == "pulled"
    assert cli("revoke", "pulled", "--reason", "NaNs at 720p", actor="bob").exit_code == 0
    document = resolved(cli, *args)[1]
    assert document["match"]["artifact"] == "kept"
    pulled = next(o for o in document["others"] if o["artifact"] == "pulled")
    assert (pulled["code"], pulled["detail"]) == ("revoked", "revoked by bob: NaNs at 720p")


@pytest.mark.parametrize("args, fragment", [
    (("--arch", "hopper"), "architecture 'hopper' is not a GPU architecture"),
    (("--arch", "sm90", "--input", "float32:2x8:1"), "expected DTYPE:SHAPE:STRIDE:DEVICE"),
    (("--arch", "sm90", "--input", "float32:2x8:8x1x1:cuda"), "3 strides for 2 dimensions"),
    (("--arch", "sm90", "--input", "complex32:2:1:cuda"), "dtype 'complex32'"),
    (("--arch", "sm90", "--revision", "r1"), "--revision needs --model"),
    (("--arch", "sm90", "--mode", "Fast Mode"), "execution mode 'Fast Mode'"),
    (("--arch", "sm90", "--as-of", "999"), "beyond the log's head"),
    ((), "give --arch with them (or --detect)"),
    (("--detect", "--arch", "sm90"), "drop --arch"),
])
def test_bad_queries_are_one_line_refusals(cli, args, fragment):
    result = cli("resolve", "--workload", "wan", "--torch", "2.13.0", *args)
    assert result.exit_code == 1, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and fragment in result.stderr, result.stderr


def test_an_unknown_workload_is_refused(cli):
    result = cli("resolve", "--workload", "nope", "--arch", "sm90", "--torch", "2.13.0")
    assert result.exit_code == 1 and "unknown workload 'nope'" in result.stderr


def test_call_site_facts_are_checked_only_when_given(tmp_path):
    manifest = parse_manifest(json.loads((make_bundle(tmp_path, "x") / "bundle.json").read_text()))
    profile = Profile("sm90", "2.13.0", "12.8")
    whole_workload = resolve([Candidate("x", "promoted", manifest)], profile, CallSite())
    assert whole_workload.chosen is not None
    other_site = resolve([Candidate("x", "promoted", manifest)], profile,
                         CallSite(fingerprint="sha256:other"))
    assert [o.code for o in other_site.outcomes] == ["fingerprint_mismatch"]


def test_detect_resolves_for_this_process(cli):
    import torch

    result = cli("resolve", "--workload", "wan", "--detect", "--json")
    assert result.exit_code == 3  # nothing registered yet
    profile = json.loads(result.output)["profile"]
    assert profile["torch"] == torch.__version__ and profile["cuda"] == torch.version.cuda
    bare = cli("resolve", "--workload", "wan")
    assert bare.exit_code == 1 and "--arch and --torch, or --detect" in bare.stderr


def test_a_promotion_under_an_older_contract_does_not_ship_until_judged_again(cli):
    """Only what was promoted under the workload's current contract ships (resolve and lock)."""
    ship(cli, cli.tmp / "bundles", "veteran", 1.5, worst_ssim=0.999)
    ship(cli, cli.tmp / "bundles", "marginal", 1.5, worst_ssim=0.992)
    newer = cli.tmp / "wan-v2.yaml"
    newer.write_text((cli.tmp / "wan.yaml").read_text().replace("min_ssim: 0.98", "min_ssim: 0.995"))
    declared = cli("workload", "declare", str(newer))
    assert declared.exit_code == 0
    assert "registry rejudge wan" in declared.output and "veteran (promoted under v1)" in declared.output
    status, document = resolved(cli, "--workload", "wan", "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
    assert status == 3 and document["match"] is None
    outcome = {o["artifact"]: o for o in document["others"]}["veteran"]
    assert outcome["code"] == "stale_contract" and outcome["note"] == "promoted under contract v1; current v2"
    lock = cli("lock", "--workload", "wan", "--unsigned", "--out", str(cli.tmp / "stale.lock.json"))
    assert lock.exit_code == 3 and not (cli.tmp / "stale.lock.json").exists()

    judged = cli("rejudge", "wan", "--json")
    assert judged.exit_code == 0, judged.output
    verdicts = {v["artifact"]: v for v in json.loads(judged.output)}
    assert {name: v["decision"] for name, v in verdicts.items()} == {"veteran": "promoted", "marginal": "quarantined"}
    assert all(v["contract_version"] == 2 for v in verdicts.values())
    status, document = resolved(cli, "--workload", "wan", "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
    assert status == 0 and document["match"]["artifact"] == "veteran" and "note" not in document["match"]
    assert codes(document) == {"marginal": "not_promoted"}
    again = cli("rejudge", "wan", "--json")
    assert again.exit_code == 0 and json.loads(again.output) == []  # nothing left to judge: nothing appended


def test_rejudge_decides_from_recorded_evidence_without_measuring(cli):
    ship(cli, cli.tmp / "bundles", "veteran", 1.5)
    before = json.loads(cli("show", "veteran", "--json").output)
    redeclare(cli, "0.985")
    head = head_of(cli.url)
    assert json.loads(cli("rejudge", "wan", "--json").output)[0]["position"] == head + 1  # one verdict, nothing else
    after = json.loads(cli("show", "veteran", "--json").output)
    assert after["verdict"]["evidence_ids"] == before["verdict"]["evidence_ids"]
    assert after["contract_version"] == 2 and after["decision"] == "promoted"
