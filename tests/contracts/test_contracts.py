"""Workload manifests: building validates everything; invalid manifests never exist."""
from __future__ import annotations

import copy
import math
import os
import re

import pytest
import yaml

from registry.contracts import (
    Contract,
    ContractError,
    FidelityBudget,
    ParityPolicy,
    SpeedGate,
    Tolerance,
    load_manifest,
)
from registry.formats.documents import MAX_MANIFEST_BYTES
from paths import ROOT

FULL = """
workload: wan-t2v-1.3b-480p
model: {id: Wan-AI/Wan2.1-T2V-1.3B, revision: main}
sampling: {height: 480, width: 832, frames: 49, steps: 20, seed: 1024, dtype: bfloat16}
parity:
  policy: tolerance
  tolerances: {bfloat16: {atol: 0.02, rtol: 0.02, max_abs: 1.0}}
fidelity:
  tier: perceptual
  min_ssim: 0.97
  max_lpips: 0.05
  min_vbench: 0.8
  frame_set: wan-1.3b-fixed-seed-8
  seed: 1024
  frames: 8
speed:
  min_speedup: 1.3
  runs_per_arm: 16
  protocol: paired
  max_cv: 0.03
  require_conclusive: false
  max_peak_memory_regression: 0.1
tags: [wan, attention]
"""


def full() -> dict:
    return yaml.safe_load(FULL)


def with_change(path: str, value: object) -> dict:
    """The full manifest with one field set (value `...` deletes it)."""
    manifest = full()
    *parents, leaf = path.split(".")
    node = manifest
    for key in parents:
        node = node[key]
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return manifest


def test_full_manifest_builds_with_every_field():
    contract = Contract.from_yaml(FULL)
    assert contract.workload == "wan-t2v-1.3b-480p"
    assert contract.tier == "perceptual"
    assert contract.parity.policy == "tolerance"
    assert contract.tolerance_for("bfloat16") == Tolerance(atol=0.02, rtol=0.02, max_abs=1.0)
    assert contract.fidelity.thresholds == {"ssim": 0.97, "lpips": 0.05, "vbench": 0.8}
    assert contract.fidelity.frame_set == "wan-1.3b-fixed-seed-8"
    assert (contract.fidelity.seed, contract.fidelity.frames) == (1024, 8)
    assert contract.speed is not None and contract.speed.runs_per_arm == 16
    assert contract.speed_gate == 1.3 and contract.speed_ceiling is None
    assert contract.model is not None and contract.model.revision == "main"
    assert contract.sampling is not None and contract.sampling.dtype == "bfloat16"
    assert contract.tags == ("attention", "wan")


def test_minimal_manifest_fills_documented_defaults():
    contract = Contract.from_yaml("workload: w\n")
    assert contract.tier == "exact"
    assert contract.parity.policy == "byte_equal"
    assert contract.speed is None
    assert contract.speed_gate is None and contract.speed_ceiling is None
    canonical = contract.canonical()
    assert canonical["fidelity"]["tier"] == "exact"
    assert canonical["parity"] == {"policy": "byte_equal", "tolerances": {}}
    assert canonical["speed"] is None


def test_equivalent_manifests_have_equal_canonical_form_and_hash():
    implicit = Contract.from_yaml(
        "workload: w\nspeed: {min_speedup: 1, runs_per_arm: 4, protocol: paired}\n"
        "fidelity: {tier: perceptual, min_ssim: 1, frame_set: f}\ntags: [b, a]\n"
    )
    explicit = Contract.from_yaml(
        "tags: [a, b, a]\nparity: {policy: byte_equal}\n"
        "fidelity: {frame_set: f, min_ssim: 1.0, tier: perceptual, seed: null}\n"
        "speed: {protocol: paired, runs_per_arm: 4, min_speedup: 1.0, require_conclusive: false}\n"
        "workload: w\n"
    )
    assert implicit.canonical() == explicit.canonical()
    assert implicit.content_hash() == explicit.content_hash()
    assert len(implicit.content_hash()) == 64


def test_a_changed_threshold_changes_the_hash():
    base = Contract.from_mapping(full())
    changed = Contract.from_mapping(with_change("fidelity.min_ssim", 0.96))
    assert base.content_hash() != changed.content_hash()


def test_canonical_form_is_plain_json_and_rebuilds_the_same_contract():
    contract = Contract.from_yaml(FULL)
    canonical = contract.canonical()
    rebuilt = {key: value for key, value in canonical.items() if value is not None}
    for block in ("fidelity", "speed", "sampling", "model"):
        rebuilt[block] = {k: v for k, v in rebuilt[block].items() if v is not None}
    rebuilt["parity"]["tolerances"] = {
        dtype: {k: v for k, v in tol.items() if v is not None}
        for dtype, tol in rebuilt["parity"]["tolerances"].items()
    }
    assert Contract.from_mapping(rebuilt).content_hash() == contract.content_hash()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("fidelity.min_ssim", 1.2, "fidelity.min_ssim: 1.2 is outside [-1, 1]"),
        ("fidelity.min_ssim", -1.5, "fidelity.min_ssim: -1.5 is outside [-1, 1]"),
        ("fidelity.max_lpips", -0.01, "fidelity.max_lpips: -0.01 is below 0"),
        ("fidelity.min_vbench", 1.01, "fidelity.min_vbench: 1.01 is outside [0, 1]"),
        ("fidelity.min_ssim", math.nan, "fidelity.min_ssim: nan is not a finite number"),
        ("fidelity.max_lpips", math.inf, "fidelity.max_lpips: inf is not a finite number"),
        ("fidelity.min_ssim", True, "fidelity.min_ssim: expected a number, got bool True"),
        ("fidelity.min_ssim", "0.9", "fidelity.min_ssim: '0.9' is text, not a number: it is quoted in the manifest"),
        ("fidelity.frame_set", ..., "fidelity.frame_set: required by a perceptual budget"),
        ("fidelity.tier", "lenient", "fidelity.tier: 'lenient' is not one of exact, perceptual, advisory"),
        ("fidelity.frames", 0, "fidelity.frames: 0 is below the minimum 1"),
        ("fidelity.bogus", 1, "fidelity.bogus: unknown field"),
        ("speed.min_speedup", 0.99, "speed.min_speedup: 0.99 is below 1.0"),
        ("speed.ceiling_share", 0.3, "speed: declare exactly one of min_speedup or ceiling_share"),
        ("speed.min_speedup", ..., "speed: declare exactly one of min_speedup or ceiling_share"),
        ("speed.runs_per_arm", 1, "speed.runs_per_arm: 1 is below the minimum 2"),
        ("speed.runs_per_arm", 15, "speed.runs_per_arm: 15 is odd"),
        ("speed.runs_per_arm", 16.0, "speed.runs_per_arm: expected an integer"),
        ("speed.runs_per_arm", ..., "speed.runs_per_arm: required"),
        ("speed.protocol", ..., "speed.protocol: required"),
        ("speed.protocol", "abba", "speed.protocol: 'abba' is not one of paired, sequential"),
        ("speed.max_cv", 0.0, "speed.max_cv: 0.0 must be above 0"),
        ("speed.max_peak_memory_regression", -0.1, "speed.max_peak_memory_regression: -0.1 is negative"),
        ("speed.require_conclusive", "yes", "speed.require_conclusive: expected true or false"),
        ("speed.warmup", 3, "speed.warmup: unknown field"),
        ("parity.policy", "close_enough", "parity.policy: 'close_enough' is not one of byte_equal, tolerance"),
        ("parity.tolerances", ..., "parity.tolerances: the tolerance policy needs a tolerance"),
        ("parity.tolerances", {}, "parity.tolerances: the tolerance policy needs a tolerance"),
        ("parity.tolerances.bfloat16.atol", -0.1, "parity.tolerances.bfloat16.atol: -0.1 is negative"),
        ("parity.tolerances.bfloat16.rtol", -1, "parity.tolerances.bfloat16.rtol: -1 is negative"),
        ("parity.tolerances.bfloat16.max_abs", -1.0, "parity.tolerances.bfloat16.max_abs: -1.0 is negative"),
        ("parity.tolerances.bfloat16.atol", ..., "parity.tolerances.bfloat16.atol: required"),
        ("parity.tolerances.bfloat16.rtol", math.nan, "parity.tolerances.bfloat16.rtol: nan is not a finite"),
        ("parity.tolerances.bfloat16.ulp", 2, "parity.tolerances.bfloat16.ulp: unknown field"),
        ("parity.tolerances.int32", {"atol": 0, "rtol": 0}, "parity.tolerances.int32: a tolerance applies only"),
        ("sampling.height", 0, "sampling.height: 0 is below the minimum 1"),
        ("sampling.fps", 16, "sampling.fps: unknown field"),
        ("model.id", ..., "model.id: required"),
        ("model.weights", "x", "model.weights: unknown field"),
        ("workload", ..., "workload: required"),
        ("workload", "  ", "workload: '  ' starts with ' '"),
        ("workload", "wan:480p", "workload: 'wan:480p' contains ':'"),
        ("owner", "me", "owner: unknown field"),
        ("tags", "wan", "tags: expected a list"),
        ("tags", ["ok", 3], "tags[1]: expected a non-empty string"),
    ],
)
def test_invalid_manifests_name_the_field(path, value, message):
    with pytest.raises(ContractError) as caught:
        Contract.from_mapping(with_change(path, value))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_exact_budget_refuses_perceptual_fields():
    for field, value in (("min_ssim", 0.9), ("max_lpips", 0.1), ("min_vbench", 0.5),
                         ("frame_set", "f"), ("seed", 1), ("frames", 8)):
        with pytest.raises(ContractError, match=rf"^fidelity\.{field}: an exact budget"):
            Contract.from_mapping({"workload": "w", "fidelity": {field: value}})


def test_perceptual_budget_needs_a_threshold():
    with pytest.raises(ContractError, match="needs at least one of min_ssim, max_lpips, min_vbench"):
        Contract.from_mapping({"workload": "w", "fidelity": {"tier": "perceptual", "frame_set": "f"}})


def test_advisory_budget_may_carry_thresholds_frame_set_or_nothing():
    with_budget = Contract.from_mapping({"workload": "w", "fidelity": {
        "tier": "advisory", "min_ssim": 0.9, "frame_set": "f"}})
    assert with_budget.tier == "advisory" and with_budget.fidelity.thresholds == {"ssim": 0.9}
    assert Contract.from_mapping({"workload": "w", "fidelity": {"tier": "advisory"}}).fidelity.thresholds == {}


def test_tolerances_under_byte_equal_are_refused():
    with pytest.raises(ContractError, match="parity.tolerances: declared under policy byte_equal"):
        Contract.from_mapping({"workload": "w", "parity": {"tolerances": {"float32": {"atol": 0, "rtol": 0}}}})


def test_tolerance_for_returns_declared_tolerance_or_raises_never_defaults():
    contract = Contract.from_yaml(FULL)
    assert contract.tolerance_for("torch.bfloat16").atol == 0.02
    with pytest.raises(ContractError, match="^no tolerance declared for dtype float16$"):
        contract.tolerance_for("float16")
    with pytest.raises(ContractError, match="^no tolerance declared for dtype float32$"):
        Contract.from_yaml("workload: w\n").tolerance_for("float32")


def test_same_dtype_declared_twice_is_refused():
    tol = {"atol": 0.1, "rtol": 0.1}
    with pytest.raises(ContractError, match="declared twice"):
        Contract.from_mapping({"workload": "w", "parity": {
            "policy": "tolerance", "tolerances": {"bfloat16": tol, "torch.bfloat16": tol}}})


def test_tolerance_policy_must_cover_the_sampled_dtype():
    manifest = with_change("sampling.dtype", "float16")
    with pytest.raises(ContractError, match=r"no tolerance declared for dtype float16 \(sampling.dtype\)"):
        Contract.from_mapping(manifest)


@pytest.mark.parametrize(
    ("share", "gate", "ceiling"),
    [
        (0.2717, 1 + 0.5 * (1 / (1 - 0.2717) - 1), 1 / (1 - 0.2717)),
        (0.5, 1.5, 2.0),
        (0.16, 1.10, 1 / 0.84),  # half the headroom is 1.095, so the 1.10 floor applies
    ],
)
def test_ceiling_share_derives_the_gate_from_amdahls_law(share, gate, ceiling):
    contract = Contract.from_mapping(with_change("speed", {
        "ceiling_share": share, "runs_per_arm": 4, "protocol": "sequential"}))
    assert contract.speed_gate == pytest.approx(gate, rel=1e-12)
    assert contract.speed_ceiling == pytest.approx(ceiling, rel=1e-12)
    assert contract.speed_gate <= contract.speed_ceiling


@pytest.mark.parametrize("share", [0.05, 0.09])
def test_ceiling_below_the_floor_gate_is_unreachable(share):
    with pytest.raises(ContractError, match=r"speed.ceiling_share: .* the workload is unreachable"):
        Contract.from_mapping({"workload": "w", "speed": {
            "ceiling_share": share, "runs_per_arm": 4, "protocol": "paired"}})


@pytest.mark.parametrize("share", [0.0, 1.0, -0.2, 1.5])
def test_ceiling_share_outside_the_open_unit_interval_is_refused(share):
    with pytest.raises(ContractError, match=r"speed.ceiling_share: .* is outside \(0, 1\)"):
        Contract.from_mapping({"workload": "w", "speed": {
            "ceiling_share": share, "runs_per_arm": 4, "protocol": "paired"}})


def test_sequential_protocol_allows_an_odd_run_count():
    manifest = with_change("speed.protocol", "sequential")
    manifest["speed"]["runs_per_arm"] = 15
    speed = Contract.from_mapping(manifest).speed
    assert speed is not None and (speed.protocol, speed.runs_per_arm) == ("sequential", 15)


@pytest.mark.parametrize("spelling", ["1e-5", "1.0e300", "1E+3"])
def test_yaml_exponent_read_as_text_gets_a_hint_in_yaml_terms(spelling):
    text = f"workload: w\nparity: {{policy: tolerance, tolerances: {{float32: {{atol: {spelling}, rtol: 0.0}}}}}}\n"
    with pytest.raises(ContractError) as caught:
        Contract.from_yaml(text)
    assert str(caught.value) == (
        f"parity.tolerances.float32.atol: '{spelling}' is text, not a number: YAML reads a number with an exponent "
        "only with a decimal point and a signed exponent (1.0e+3, 2.5e-2)")


def test_a_quoted_number_is_named_as_quoted():
    text = 'workload: w\nspeed: {min_speedup: "1.2", runs_per_arm: 4, protocol: paired}\n'
    with pytest.raises(ContractError, match="^speed.min_speedup: '1.2' is text, not a number: it is quoted in the "
                                             "manifest; remove the quotes$"):
        Contract.from_yaml(text)


def test_an_unknown_sampling_dtype_is_refused():
    with pytest.raises(ContractError, match="^sampling.dtype: 'notadtype' is not a dtype"):
        Contract.from_yaml("workload: w\nsampling: {dtype: notadtype}\n")
    assert Contract.from_yaml("workload: w\nsampling: {dtype: torch.uint8}\n").sampling.dtype == "uint8"


@pytest.mark.parametrize(("value", "message"), [
    ("9" * 401, "speed.min_speedup: an integer too large to be a finite number"),
    ("9" * 5001, "manifest line 2: an integer of 5001 digits; a value here has at most 1000"),
    ("1" + "_0" * 1000, "manifest line 2: an integer of 1001 digits; a value here has at most 1000"),
])
def test_huge_integers_are_refused_in_the_users_terms(value, message):
    text = f"workload: w\nspeed: {{min_speedup: {value}, runs_per_arm: 4, protocol: paired}}\n"
    with pytest.raises(ContractError) as caught:
        Contract.from_yaml(text)
    assert str(caught.value) == message


@pytest.mark.parametrize("text", ['workload: "w\\ud800"\n', 'workload: w\ntags: ["\\udfff"]\n',
                                  'workload: w\n"\\ud800": 1\n'])
def test_a_lone_surrogate_is_refused_while_parsing(text):
    with pytest.raises(ContractError, match="^manifest: .*holds a lone surrogate \\(U\\+D800 to U\\+DFFF\\)"):
        Contract.from_yaml(text)


def test_nesting_is_limited_to_32_levels():
    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth
    with pytest.raises(ContractError, match="^manifest: nested more than 32 levels deep$"):
        Contract.from_yaml(f"workload: w\ntags: {nested(32)}\n")
    with pytest.raises(ContractError, match="^tags\\[0\\]: expected a non-empty string"):  # 32 levels are read
        Contract.from_yaml(f"workload: w\ntags: {nested(31)}\n")


def test_yaml_nan_token_is_refused():
    with pytest.raises(ContractError, match="fidelity.min_ssim: nan is not a finite number"):
        Contract.from_yaml("workload: w\nfidelity: {tier: perceptual, frame_set: f, min_ssim: .nan}\n")


def test_duplicate_yaml_keys_are_refused():
    with pytest.raises(ContractError, match=r"min_ssim: duplicate key \(line 5\)"):
        Contract.from_yaml("workload: w\nfidelity:\n  tier: perceptual\n  min_ssim: 0.9\n  min_ssim: 0.1\n"
                           "  frame_set: f\n")


@pytest.mark.parametrize("text", ["workload: [w", "- a\n- b\n", "", "workload: w\n  bad: indent\n"])
def test_unparseable_or_non_mapping_yaml_is_one_line_error(text):
    with pytest.raises(ContractError) as caught:
        Contract.from_yaml(text)
    assert "\n" not in str(caught.value)


def test_direct_construction_validates_too():
    with pytest.raises(ContractError, match="fidelity.frame_set: required"):
        FidelityBudget(tier="perceptual", min_ssim=0.9)
    with pytest.raises(ContractError, match="speed.min_speedup: 0.5 is below 1.0"):
        SpeedGate(runs_per_arm=4, protocol="paired", min_speedup=0.5)
    with pytest.raises(ContractError, match="parity.tolerances: the tolerance policy needs"):
        ParityPolicy(policy="tolerance")
    with pytest.raises(ContractError, match="workload: '' is empty"):
        Contract(workload="")


def test_contract_is_immutable():
    contract = Contract.from_yaml(FULL)
    with pytest.raises(AttributeError):
        contract.workload = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        contract.parity.tolerances["float16"] = Tolerance(1, 1)  # type: ignore[index]


def test_from_mapping_does_not_mutate_its_input():
    manifest = full()
    before = copy.deepcopy(manifest)
    Contract.from_mapping(manifest)
    assert manifest == before


def test_load_manifest_reads_a_file(tmp_path):
    path = tmp_path / "wan.yaml"
    path.write_text(FULL, encoding="utf-8")
    assert load_manifest(path).workload == "wan-t2v-1.3b-480p"


def test_load_manifest_errors_are_one_line_and_name_the_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ContractError, match="missing.yaml: cannot read manifest"):
        load_manifest(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("workload: w\nfidelity: {tier: exact, min_ssim: 0.9}\n", encoding="utf-8")
    with pytest.raises(ContractError) as caught:
        load_manifest(broken)
    assert "broken.yaml: fidelity.min_ssim: an exact budget" in str(caught.value)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("workload: [\n", encoding="utf-8")
    with pytest.raises(ContractError) as caught:
        load_manifest(invalid)
    assert "invalid.yaml: manifest: invalid YAML" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_only_a_regular_file_of_bounded_size_in_utf8_is_read(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ContractError, match="fifo.yaml: a FIFO \\(named pipe\\), not a regular file"):
        load_manifest(fifo)  # refused before reading: it would block
    with pytest.raises(ContractError, match="^/dev/zero: a character device, not a regular file"):
        load_manifest("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"workload: w\n" + b"#" * MAX_MANIFEST_BYTES)
    with pytest.raises(ContractError, match="big.yaml: 4.0 MiB, over the 4.0 MiB a manifest may have"):
        load_manifest(big)
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_text("workload: w\n", encoding="utf-16")
    with pytest.raises(ContractError, match="utf16.yaml: the manifest is UTF-16 text; save it as UTF-8"):
        load_manifest(utf16)
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("workload: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ContractError, match="latin1.yaml: not UTF-8 text \\(byte 13\\); save the manifest as UTF-8"):
        load_manifest(latin1)


def test_every_example_in_the_workload_manifest_page_is_a_valid_manifest():
    """docs/workloads.md shows an example per tier; each must build, so the page cannot drift from the code."""
    page = (ROOT / "docs" / "workloads.md").read_text(encoding="utf-8")
    examples = re.findall(r"```yaml\n(.*?)```", page, flags=re.S)
    tiers = [Contract.from_yaml(example).tier for example in examples]
    assert sorted(set(tiers)) == ["advisory", "exact", "perceptual"] and len(examples) == 4
    assert Contract.from_yaml(examples[0]).speed_gate == pytest.approx(1.18660, abs=1e-4)
