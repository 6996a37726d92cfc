"""Evidence documents: strict validation, refusals by item and field, registry-derived statistics."""
from __future__ import annotations

import copy
import json
import math
import os
import statistics
from pathlib import Path

import pytest

from registry.formats.documents import MAX_EVIDENCE_BYTES, DocumentError
from registry.formats.evidence.document import FORMAT, parse_document, parse_document_text, read_document_file
from registry.formats.evidence.errors import EvidenceError
from registry.formats.evidence.items import parse_item

EXECUTION = {"kind": "execution", "candidate_calls": 30, "fallbacks": 0,
             "requested_backend": "sage", "effective_backend": "sage"}
BENCHMARK = {
    "kind": "benchmark", "protocol": "paired", "device": "NVIDIA H100 80GB", "timer": "cuda_event",
    "baseline_s": [1.30, 1.32, 1.28, 1.31], "candidate_s": [1.00, 1.01, 0.99, 1.00],
    "schedule": ["BC", "CB", "BC", "CB"], "warmup": 2, "bandwidth_share": 0.61, "notes": "clocks locked",
}
PARITY = {
    "kind": "parity", "policy": "tolerance",
    "leaves": [
        {"name": "frames", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16",
         "reference_shape": [1, 16, 13, 60, 104], "candidate_shape": [1, 16, 13, 60, 104],
         "reference_strides": [1297920, 81120, 6240, 104, 1], "candidate_strides": [1297920, 81120, 6240, 104, 1],
         "byte_equal": False, "max_abs_error": 0.0078125, "max_rel_error": 0.01, "has_nan": False,
         "has_inf": False, "reference_has_nan": False, "reference_has_inf": False,
         "nonfinite_mismatch": False, "tolerance": {"atol": 0.02, "rtol": 0.02, "max_abs": 1.0},
         "outside_tolerance": 0},
        {"name": "step", "reference_dtype": "int64", "candidate_dtype": "torch.int64", "reference_shape": [3],
         "candidate_shape": [3], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
         "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False},
    ],
    "approx_math": [],
}
# A leaf as written before leaves recorded both sides: still a valid record (the gate holds it).
ONE_SIDED_PARITY = {
    "kind": "parity", "policy": "byte_equal",
    "leaves": [{"name": "y", "dtype": "bfloat16", "shape": [2, 3], "byte_equal": True, "strides_equal": True,
                "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}],
}
PERCEPTUAL = {
    "kind": "perceptual", "frame_set": "wan-1.3b-fixed-seed-8", "seed": 1024, "frames": 4,
    "ssim": [0.995, 0.9912, 0.999, 0.993], "lpips": [0.001, 0.002, 0.0071, 0.003], "vbench": None,
    "stage_status": "ok", "backends": {"ssim": "registry-ssim 1", "lpips": "lpips 0.1.4"},
    "absent": {"vbench": "no VBench scores were passed in"},
}
FAILURE = {"kind": "failure", "stage": "perceptual", "error": "LPIPS weights are not installed"}


def document(*items: dict, **top: object) -> dict:
    return {"format": FORMAT, "artifact": "sage-attn-v1", "run": "run-1",
            "evidence": [copy.deepcopy(item) for item in items], **top}


def test_a_document_with_every_kind_parses():
    doc = parse_document(document(EXECUTION, BENCHMARK, PARITY, PERCEPTUAL, FAILURE, ONE_SIDED_PARITY))
    assert (doc.artifact, doc.run) == ("sage-attn-v1", "run-1")
    assert [item["kind"] for item in doc.items] == ["execution", "benchmark", "parity", "perceptual", "failure",
                                                    "parity"]
    for item, raw in zip(doc.items, (EXECUTION, BENCHMARK, PARITY, PERCEPTUAL, FAILURE, ONE_SIDED_PARITY)):
        assert {key: value for key, value in item.items() if key != "derived"} == raw
        assert isinstance(item["derived"], dict)
    json.dumps([item for item in doc.items], allow_nan=False)


def test_run_is_optional():
    doc = parse_document({"format": FORMAT, "artifact": "a", "evidence": [EXECUTION]})
    assert doc.run is None


def test_benchmark_derivations():
    derived = parse_item(BENCHMARK)["derived"]
    ratios = [1.30 / 1.00, 1.32 / 1.01, 1.28 / 0.99, 1.31 / 1.00]
    assert derived["ratios"] == pytest.approx(ratios)
    assert derived["speedup"] == pytest.approx(statistics.median(ratios))
    assert derived["baseline_median"] == pytest.approx(1.305)
    assert derived["candidate_mean"] == pytest.approx(1.0)
    assert derived["baseline_cv"] > 0 and derived["runs_per_arm"] == 4
    assert derived["interleaved"] is True
    assert 0 < derived["wilcoxon_p"] <= 1
    low, high = derived["speedup_ci"]
    assert low <= derived["speedup"] <= high


def test_baseline_waits_are_one_per_pair_with_unreported_ones_null_and_only_for_the_paired_protocol():
    raw = {**BENCHMARK, "baseline_waited_s": [0.0, 0.004, None, 0.0]}
    assert parse_item(raw)["baseline_waited_s"] == [0.0, 0.004, None, 0.0]  # stored as sent
    assert parse_item({**BENCHMARK, "baseline_waited_s": None})["derived"] == parse_item(BENCHMARK)["derived"]
    sequential = {key: value for key, value in raw.items() if key != "schedule"}
    with pytest.raises(EvidenceError, match="only the paired protocol has a wait per pair"):
        parse_item({**sequential, "protocol": "sequential"})


def test_sequential_benchmark_allows_unequal_arms_and_no_schedule():
    raw = {**BENCHMARK, "protocol": "sequential", "candidate_s": [1.0, 1.0, 1.0]}
    del raw["schedule"]
    derived = parse_item(raw)["derived"]
    assert derived["speedup"] == pytest.approx(1.305)
    assert derived["interleaved"] is None and derived["ratios"] is None


def test_perceptual_derivations_take_the_worst_frame():
    derived = parse_item(PERCEPTUAL)["derived"]
    assert (derived["worst_ssim"], derived["worst_ssim_frame"]) == (0.9912, 1)
    assert (derived["worst_lpips"], derived["worst_lpips_frame"]) == (0.0071, 2)
    assert derived["frame_count"] == 4 and derived["measured"] == ["ssim", "lpips"]


def test_perceptual_with_only_ssim():
    raw = {**PERCEPTUAL, "lpips": None, "frames": None, "absent": {"lpips": "lpips package not installed"}}
    derived = parse_item(raw)["derived"]
    assert derived["worst_lpips"] is None and derived["measured"] == ["ssim"]
    assert derived["frame_count"] == 4


def test_parity_derivations():
    derived = parse_item(PARITY)["derived"]
    assert derived == {"leaf_count": 2, "all_byte_equal": False, "worst_max_abs_error": 0.0078125,
                       "worst_leaf": "frames"}


@pytest.mark.parametrize(("item", "fields"), [
    (PERCEPTUAL, ("vbench",)),
    (PERCEPTUAL, ("lpips", "vbench")),
    ({**PERCEPTUAL, "absent": None}, ("ssim", "lpips", "vbench")),
    (PARITY, ("leaves.0.max_rel_error",)),
    (PARITY, ("leaves.0.max_abs_error", "leaves.0.max_rel_error")),
])
def test_an_omitted_measurement_means_not_measured_exactly_like_null(item, fields):
    """A first document without VBench (nobody measures it on CPU) is accepted, and reads as unmeasured."""
    omitted, nulled = item, item
    for field in fields:
        omitted, nulled = mutate(omitted, field, ...), mutate(nulled, field, None)
    parsed_omitted, parsed_null = parse_item(omitted), parse_item(nulled)
    assert parsed_omitted["derived"] == parsed_null["derived"]
    assert {key: value for key, value in parsed_omitted.items() if key != "derived"} == omitted  # stored as sent
    if item["kind"] == "perceptual":
        assert not set(parsed_omitted["derived"]["measured"]) & {f.split(".")[-1] for f in fields}


def test_execution_derivation():
    assert parse_item(EXECUTION)["derived"] == {"ran": True}
    assert parse_item({**EXECUTION, "fallbacks": 1})["derived"] == {"ran": False}


def mutate(item: dict, path: str, value: object) -> dict:
    """A copy of `item` with a dotted path set (value `...` deletes); list indices allowed."""
    result = copy.deepcopy(item)
    *parents, leaf = path.split(".")
    node = result
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(leaf)] = value
    elif value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return result


@pytest.mark.parametrize(
    ("item", "path", "value", "message"),
    [
        (EXECUTION, "kind", "timing", "evidence[1].kind: 'timing' is not one of"),
        (EXECUTION, "candidate_calls", -1, "evidence[1].candidate_calls: -1 is negative"),
        (EXECUTION, "candidate_calls", 3.0, "evidence[1].candidate_calls: expected an integer"),
        (EXECUTION, "fallbacks", True, "evidence[1].fallbacks: expected an integer, got bool True"),
        (EXECUTION, "fallbacks", ..., "evidence[1].fallbacks: required"),
        (EXECUTION, "effective_backend", 3, "evidence[1].effective_backend: expected a non-empty string"),
        (EXECUTION, "ran", True, "evidence[1].ran: client-supplied summary refused"),
        (EXECUTION, "host", "gpu-7", "evidence[1].host: unknown field"),
        (BENCHMARK, "speedup", 1.3, "evidence[1].speedup: client-supplied summary refused"),
        (BENCHMARK, "median", 1.0, "evidence[1].median: client-supplied summary refused"),
        (BENCHMARK, "derived", {}, "evidence[1].derived: client-supplied summary refused"),
        (BENCHMARK, "baseline_s.2", 0.0, "evidence[1].baseline_s[2]: 0.0 is not a positive time"),
        (BENCHMARK, "candidate_s.0", -1.0, "evidence[1].candidate_s[0]: -1.0 is not a positive time"),
        (BENCHMARK, "candidate_s.1", math.nan, "evidence[1].candidate_s[1]: nan is not a finite number"),
        (BENCHMARK, "baseline_s.1", math.inf, "evidence[1].baseline_s[1]: inf is not a finite number"),
        (BENCHMARK, "baseline_s.1", True, "evidence[1].baseline_s[1]: expected a number, got bool True"),
        (BENCHMARK, "baseline_s.1", "1.0", "evidence[1].baseline_s[1]: expected a number, got str"),
        (BENCHMARK, "baseline_s", [], "evidence[1].baseline_s: empty list"),
        (BENCHMARK, "baseline_s", 1.0, "evidence[1].baseline_s: expected a list"),
        (BENCHMARK, "candidate_s", [1.0, 1.0, 1.0], "evidence[1].candidate_s: 3 runs but baseline_s has 4"),
        (BENCHMARK, "schedule", ["BC", "CB"], "evidence[1].schedule: 2 entries for 4 pairs"),
        (BENCHMARK, "schedule", ..., "evidence[1].schedule: required for the paired protocol"),
        (BENCHMARK, "schedule.0", "AB", "evidence[1].schedule[0]: 'AB' is not one of BC, CB"),
        (BENCHMARK, "protocol", "abba", "evidence[1].protocol: 'abba' is not one of paired, sequential"),
        (BENCHMARK, "protocol", "sequential", "evidence[1].schedule: only the paired protocol"),
        (BENCHMARK, "timer", "wallclock", "evidence[1].timer: 'wallclock' is not one of"),
        (BENCHMARK, "device", "", "evidence[1].device: expected a non-empty string"),
        (BENCHMARK, "warmup", -1, "evidence[1].warmup: -1 is negative"),
        (BENCHMARK, "bandwidth_share", math.nan, "evidence[1].bandwidth_share: nan is not a finite number"),
        (BENCHMARK, "baseline_waited_s", [0.0, -0.1, None, 0.0],
         "evidence[1].baseline_waited_s[1]: -0.1 is outside the wait range [0, inf)"),
        (BENCHMARK, "baseline_waited_s", [0.0, math.nan, 0.0, 0.0],
         "evidence[1].baseline_waited_s[1]: nan is not a finite number"),
        (BENCHMARK, "baseline_waited_s", [0.0, 0.0, math.inf, 0.0],
         "evidence[1].baseline_waited_s[2]: inf is not a finite number"),
        (BENCHMARK, "baseline_waited_s", [False, 0.0, 0.0, 0.0],
         "evidence[1].baseline_waited_s[0]: expected a number, got bool False"),
        (BENCHMARK, "baseline_waited_s", [0.0, 0.0], "evidence[1].baseline_waited_s: 2 waits for 4 pairs"),
        (BENCHMARK, "baseline_waited_s", [], "evidence[1].baseline_waited_s: empty list"),
        (BENCHMARK, "baseline_waited_s", 0.0, "evidence[1].baseline_waited_s: expected a list"),
        (BENCHMARK, "candidate_waited_s", [0.0] * 4, "evidence[1].candidate_waited_s"),  # never the candidate's
        (PARITY, "leaves", [], "evidence[1].leaves: empty list"),
        (PARITY, "all_byte_equal", True, "evidence[1].all_byte_equal: client-supplied summary refused"),
        (PARITY, "policy", "close", "evidence[1].policy: 'close' is not one of byte_equal, tolerance"),
        (PARITY, "leaves.0.max_abs_error", math.nan, "evidence[1].leaves[0].max_abs_error: nan is not a finite"),
        (PARITY, "leaves.0.max_abs_error", -1.0, "evidence[1].leaves[0].max_abs_error: -1.0 is outside"),
        (PARITY, "leaves.0.has_nan", 0, "evidence[1].leaves[0].has_nan: expected true or false"),
        (PARITY, "leaves.0.candidate_shape", [1, -2], "evidence[1].leaves[0].candidate_shape[1]: -2 is negative"),
        (PARITY, "leaves.0.candidate_shape", ..., "evidence[1].leaves[0].candidate_shape: required"),
        (PARITY, "leaves.0.reference_strides", None, "evidence[1].leaves[0].reference_strides: expected a list"),
        (PARITY, "leaves.0.reference_strides", [1], "leaves[0].reference_strides: 1 strides for 5 dimensions"),
        (PARITY, "leaves.0.candidate_dtype", "notadtype", "leaves[0].candidate_dtype: 'notadtype' is not a dtype"),
        (PARITY, "leaves.0.dtype", "bfloat16", "leaves[0].dtype: a leaf that records reference_* and candidate_*"),
        (PARITY, "leaves.0.strides_equal", True, "leaves[0].strides_equal: a leaf that records reference_*"),
        (PARITY, "leaves.0.outside_tolerance", 3, "leaves[0].outside_tolerance: 3 element(s) outside atol 0.02 "
                                                  "but max_abs_error 0.0078125 is within it"),
        (PARITY, "leaves.0.outside_tolerance", 10**7, "outside_tolerance: 10000000 exceeds the reference's 1297920 elements"),
        (PARITY, "leaves.0.has_nan", True, "leaves[0].nonfinite_mismatch: false but has_nan and reference_has_nan"),
        (PARITY, "leaves.1.candidate_dtype", "int32", "leaves[1].byte_equal: true but dtype differs: "
                                                      "reference int64, candidate int32"),
        (PARITY, "leaves.1.candidate_strides", [2], "leaves[1].byte_equal: true but strides differ: "
                                                    "reference [1], candidate [2]"),
        (ONE_SIDED_PARITY, "leaves.0.strides_equal", False, "leaves[0].strides_equal: false but byte_equal is true"),
        (ONE_SIDED_PARITY, "leaves.0.dtype", "bf16", "leaves[0].dtype: 'bf16' is not a dtype"),
        (ONE_SIDED_PARITY, "leaves.0.shape", ..., "leaves[0].shape: required"),
        (PARITY, "leaves.0.match", True, "evidence[1].leaves[0].match: client-supplied summary refused"),
        (PARITY, "leaves.0.ulp", 3, "evidence[1].leaves[0].ulp: unknown field"),
        (PARITY, "leaves.0.tolerance", ..., "evidence[1].leaves[0].outside_tolerance: counted under no"),
        (PARITY, "leaves.0.tolerance.atol", -0.1, "evidence[1].leaves[0].tolerance.atol: -0.1 is outside"),
        (PARITY, "leaves.1.name", "frames", "evidence[1].leaves[1].name: duplicate leaf name 'frames'"),
        (PARITY, "leaves.1.max_abs_error", 0.5, "evidence[1].leaves[1].max_abs_error: 0.5 but byte_equal is true"),
        (PARITY, "leaves.1.nonfinite_mismatch", True, "leaves[1].nonfinite_mismatch: true but byte_equal"),
        (PARITY, "leaves.1.reference_has_nan", True, "leaves[1].reference_has_nan: differs from has_nan"),
        (PERCEPTUAL, "ssim.1", 1.2, "evidence[1].ssim[1]: 1.2 is outside the SSIM range [-1, 1]"),
        (PERCEPTUAL, "ssim.0", math.nan, "evidence[1].ssim[0]: nan is not a finite number"),
        (PERCEPTUAL, "lpips.2", -0.01, "evidence[1].lpips[2]: -0.01 is outside the LPIPS range [0, inf)"),
        (PERCEPTUAL, "vbench", 1.5, "evidence[1].vbench: 1.5 is outside the VBench range [0, 1]"),
        (PERCEPTUAL, "ssim", [], "evidence[1].ssim: empty list"),
        (PERCEPTUAL, "lpips", [0.1, 0.2], "evidence[1].lpips: 2 frames but ssim has 4"),
        (PERCEPTUAL, "frames", 8, "evidence[1].ssim: 4 values but frames is 8"),
        (PERCEPTUAL, "frames", 0, "evidence[1].frames: 0 frames"),
        (PERCEPTUAL, "seed", 1.5, "evidence[1].seed: expected an integer"),
        (PERCEPTUAL, "seed", False, "evidence[1].seed: expected an integer, got bool False"),
        (PERCEPTUAL, "worst_ssim", 0.9912, "evidence[1].worst_ssim: client-supplied summary refused"),
        (PERCEPTUAL, "absent", {"ssim": "why"}, "evidence[1].absent.ssim: reported absent but ssim has values"),
        (PERCEPTUAL, "backends", {"fid": "x 1"}, "evidence[1].backends.fid: 'fid' is not one of"),
        (PERCEPTUAL, "stage_status", ..., "evidence[1].stage_status: required"),
        (FAILURE, "error", "", "evidence[1].error: expected a non-empty string"),
        (FAILURE, "stage", None, "evidence[1].stage: expected a non-empty string"),
    ],
)
def test_refusals_name_the_item_index_and_field(item, path, value, message):
    doc = document(EXECUTION, mutate(item, path, value))
    with pytest.raises(EvidenceError) as caught:
        parse_document(doc)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({**document(EXECUTION), "format": "registry.evidence/2"}, "format: expected 'registry.evidence/1'"),
        ({k: v for k, v in document(EXECUTION).items() if k != "format"}, "format: expected"),
        ({k: v for k, v in document(EXECUTION).items() if k != "artifact"}, "artifact: required"),
        (document(EXECUTION, artifact=""), "artifact: '' is empty"),
        (document(EXECUTION, run=7), "run: 7 must be a string, not int"),
        (document(EXECUTION, run="a\nb"), "run: 'a\\nb' contains a line break"),
        (document(), "evidence: empty list"),
        (document(EXECUTION, evidence={"kind": "execution"}), "evidence: expected a list"),
        (document(EXECUTION, speedup=1.3), "speedup: client-supplied summary refused"),
        (document(EXECUTION, producer="me"), "producer: unknown field"),
        ([EXECUTION], "document: expected an object"),
        (document(EXECUTION, "not an item"), "evidence[1]: expected an object"),
        (document({"candidate_calls": 1, "fallbacks": 0}), "evidence[0].kind: None is not one of"),
    ],
)
def test_document_level_refusals(doc, message):
    with pytest.raises(EvidenceError) as caught:
        parse_document(doc)
    assert message in str(caught.value)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_text_parser_refuses_nonfinite_json_tokens(token):
    text = json.dumps(document(BENCHMARK)).replace("1.32", token)
    with pytest.raises(EvidenceError, match=f"the JSON token {token} is not a number"):
        parse_document_text(text)


def test_text_parser_parses_valid_json_and_refuses_broken_json():
    assert parse_document_text(json.dumps(document(EXECUTION, PERCEPTUAL))).items[1]["kind"] == "perceptual"
    with pytest.raises(EvidenceError, match="document: invalid JSON"):
        parse_document_text('{"format": ')


def test_parse_document_does_not_mutate_its_input():
    doc = document(BENCHMARK, PERCEPTUAL)
    before = copy.deepcopy(doc)
    parse_document(doc)
    assert doc == before


def test_parse_item_refuses_a_stored_derived_dict():
    item = parse_item(BENCHMARK)
    with pytest.raises(EvidenceError, match="item.derived: client-supplied summary refused"):
        parse_item(item)


# ---- hostile text: refused while parsing, in one line, in the user's terms -------------------------

def benchmark_text(baseline_token: str) -> str:
    return (f'{{"format": "{FORMAT}", "artifact": "a", "evidence": [{{"kind": "benchmark", "protocol": '
            f'"sequential", "device": "d", "timer": "perf_counter", "baseline_s": [1.0, {baseline_token}], '
            '"candidate_s": [1.0, 1.0]}]}')


@pytest.mark.parametrize(("token", "message"), [
    ("9" * 401, "evidence[0].baseline_s[1]: an integer too large to be a finite number"),
    ("9" * 5001, "document: an integer of 5001 digits; a value here has at most 1000"),
    ("-" + "9" * 1001, "document: an integer of 1001 digits; a value here has at most 1000"),
])
def test_huge_integers_are_refused_in_one_line_not_a_traceback(token, message):
    with pytest.raises(EvidenceError) as caught:
        parse_document_text(benchmark_text(token))
    assert str(caught.value) == message


@pytest.mark.parametrize(("text", "key"), [
    ('{"format": "registry.evidence/1", "artifact": "ghost", "artifact": "cand", "evidence": []}', "artifact"),
    ('{"format": "registry.evidence/1", "artifact": "a", "evidence": [{"kind": "execution", '
     '"candidate_calls": 5, "fallbacks": 0, "candidate_calls": 0}]}', "candidate_calls"),
])
def test_duplicate_keys_are_refused_not_resolved_by_the_last(text, key):
    with pytest.raises(EvidenceError, match=f"^document: duplicate key '{key}' in one object"):
        parse_document_text(text)


@pytest.mark.parametrize("escaped", ["\\ud800", "x\\udfff", "\\udc80\\udc80"])
def test_a_lone_surrogate_anywhere_is_refused_while_parsing(escaped):
    for text, where in ((json.dumps(document(EXECUTION)).replace('"run-1"', f'"{escaped}"'), "run: text"),
                        (json.dumps(document(EXECUTION)).replace('"sage"', f'"{escaped}"', 1),
                         "evidence[0].requested_backend: text"),
                        (json.dumps(document(EXECUTION)).replace('"fallbacks"', f'"{escaped}"'), ": the key text")):
        with pytest.raises(EvidenceError) as caught:
            parse_document_text(text)
        assert str(caught.value).startswith("document: ") and where in str(caught.value)
        assert "holds a lone surrogate (U+D800 to U+DFFF)" in str(caught.value)
        str(caught.value).encode("utf-8")  # the message itself is printable text
    paired = json.dumps(document(EXECUTION)).replace('"run-1"', '"r\\ud83d\\ude00"')  # a valid pair is text
    assert parse_document_text(paired).run == "r\U0001F600"


def test_nesting_past_32_levels_is_refused_in_one_line():
    deep = json.dumps(document(EXECUTION)).replace('"run-1"', "[" * 32 + "]" * 32)  # the document is level 1
    with pytest.raises(EvidenceError, match="^document: nested more than 32 levels deep$"):
        parse_document_text(deep)
    with pytest.raises(EvidenceError, match="^document: nested more than 32 levels deep$"):
        parse_document_text("[" * 100_000 + "]" * 100_000)  # past the parser's own recursion too
    shallow = json.dumps(document(EXECUTION)).replace('"run-1"', "[" * 31 + "]" * 31)
    with pytest.raises(EvidenceError, match="^run: .* must be a string, not list"):  # 32 levels are read
        parse_document_text(shallow)


def test_an_evidence_file_must_be_a_regular_utf8_file_within_the_size_limit(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(document(EXECUTION)), encoding="utf-8")
    assert parse_document_text(read_document_file(good)).artifact == "sage-attn-v1"
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, message in (
        (fifo, "fifo.json: a FIFO (named pipe), not a regular file; give the evidence document as a file"),
        (Path("/dev/zero"), "/dev/zero: a character device, not a regular file"),
        (tmp_path, "a directory, not a regular file"),
        (tmp_path / "missing.json", "missing.json: cannot read evidence document: No such file or directory"),
    ):
        with pytest.raises(DocumentError) as caught:
            read_document_file(path)
        assert message in str(caught.value)
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_EVIDENCE_BYTES + 1)  # sparse: the size alone refuses it
    with pytest.raises(DocumentError, match="big.json: 16.0 MiB, over the 16.0 MiB an? evidence document may have"):
        read_document_file(big)
    for encoding, name in (("utf-16", "UTF-16"), ("utf-32", "UTF-32"), ("utf-8-sig", "UTF-8 with a byte-order mark")):
        encoded = tmp_path / f"{encoding}.json"
        encoded.write_text(json.dumps(document(EXECUTION)), encoding=encoding)
        with pytest.raises(DocumentError, match=f"{encoding}.json: the evidence document is {name} text"):
            read_document_file(encoded)
