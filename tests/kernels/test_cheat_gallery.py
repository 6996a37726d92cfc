"""The cheat gallery: each hostile candidate in tests/gallery/ through `registry evaluate` and `registry promote`.

Every candidate here is a real file registered by its entry string, as a
contributor's would be, and evaluated by the CLI on a real SQLite registry
(Triton's interpreter on CPU). Each test asserts that the evaluation is
recorded as an EvaluationFailed naming the technique class it caught, and
that promote holds the artifact with that reason, never a promotion.

Each docstring says what the harness before the isolation change (the
candidate imported into the harness process, timed there, credited with the
launches it reported) made of the same candidate; that was checked once by
running the gallery against it (`git show <before>:registry/kernels/evaluate.py`).
"Passed" there means parity byte-equal (or within tolerance) and a non-zero
launch count with no fallbacks: the evidence of an honest kernel.
"""
from __future__ import annotations

import json
import os

import pytest

from gallery import candidate_file
from store_helpers import opened

pytestmark = [pytest.mark.device, pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                                     reason="the gallery runs under the interpreter")]

MODLN = """
workload: gallery-modln
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired}
"""
RMS_TOLERANCE = """
workload: gallery-rms
parity:
  policy: tolerance
  tolerances: {bfloat16: {atol: 0.05, rtol: 0.05}, float16: {atol: 0.05, rtol: 0.05}}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired}
"""


@pytest.fixture
def cli(registry_cli):
    for name, text in (("modln.yaml", MODLN), ("rms.yaml", RMS_TOLERANCE)):
        (registry_cli.tmp / name).write_text(text)
        assert registry_cli("workload", "declare", str(registry_cli.tmp / name)).exit_code == 0
    return registry_cli


def refused(cli, module: str, *classes: str, op: str = "modulated_layernorm", workload: str = "gallery-modln") -> str:
    """Register (by its file), evaluate and promote ``gallery/<module>.py``; return the recorded error."""
    artifact = module.replace("_", "-")
    registered = cli("artifact", "register", artifact, "--workload", workload, "--kind", "fused_kernel",
                     "--op", op, "--entry", f"{candidate_file(module, cli.tmp)}:{op}")
    assert registered.exit_code == 0, registered.output
    evaluated = cli("evaluate", artifact, "--warmup", "0")
    assert evaluated.exit_code == 4, evaluated.output
    events = opened(cli.url).store.read_stream(f"artifact:{artifact}")
    assert [e.type for e in events] == ["ArtifactRegistered", "EvaluationFailed"]
    error = events[1].payload["error"]
    assert any(name in error for name in classes), error
    verdict = json.loads(cli("promote", artifact, "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "evaluation_failed"
    assert error in verdict["reasons"][0]
    return error


def test_1_freed_reference_memory(cli):
    """Passes the harness before the isolation change: its own caching allocator hands torch.empty the
    reference's freed fp32 result (checked in 5 runs: parity byte-equal on all 4 corpus cases, 12
    counted launches, no fallbacks). Now no reference runs in the worker on the candidate's inputs,
    and what the allocator hands back is caught on a checked call."""
    refused(cli, "freed_memory", "stale result", "non-finite output")


def test_2_input_mutation(cli):
    """Passes the harness before the isolation change (timed calls were never checked). Now every
    call's inputs come back to the harness and are compared with what it sent."""
    error = refused(cli, "input_mutation", "wrote to its input")
    assert error.startswith("ValueError: candidate wrote to its input 1 on shape0")


def test_3_cached_results(cli):
    """Passes the harness before the isolation change (the same tensors were timed again and again:
    every timed call was a look-up). Now no two calls share values, except the held-out repeat, where
    the content cache answers without launching a kernel. A later call's fresh inputs may land where an
    earlier call's freed ones were (the allocator may reuse an address; nothing promises it will or won't),
    and then the pointer cache answers first, with the earlier result: a stale result. Either refusal
    names a cache."""
    refused(cli, "cached_results", "result not from the kernel", "stale result")


def test_4_batch_and_skip(cli):
    """Passes the harness before the isolation change (4 launches for 4 + 16 calls). Now a call that
    launches nothing while others do is refused."""
    refused(cli, "batch_and_skip", "result not from the kernel")


def test_5_static_state(cli):
    """Passes the harness before the isolation change. Now timed calls get fresh values and are checked."""
    refused(cli, "static_state", "stale result")


def test_6_warmup_detection(cli):
    """Passes the harness before the isolation change (timed calls ran inside a visible timer frame).
    Now warm-up and timed calls are the same protocol, every one checked."""
    refused(cli, "warmup_detection", "stale result")


def test_7_lazy_output(cli):
    """Passes the harness before the isolation change (its comparator's first read ran the kernel,
    outside the clock). Now only a plain torch.Tensor with its own dense storage crosses back."""
    refused(cli, "lazy_output", "not a plain output")


def test_8_harness_patch(cli):
    """Passes the harness before the isolation change (the patched comparator compared the reference
    with itself; the patched clock ran slow; the counter was fed directly). Now the comparator and the
    clock are in another process, and replacing them in the worker is seen and refused."""
    refused(cli, "harness_patch", "harness tampering")


def test_9_background_thread(cli):
    """Passes the harness before the isolation change (the timed outputs were never read). Now the
    harness counts the worker's threads in /proc around every call."""
    refused(cli, "background_thread", "background work")


def test_10_introspection(cli):
    """Passes the harness before the isolation change (the reference's output sat in the caller's frame
    as ``expected``). Now expected outputs never enter the worker: there is nothing to find."""
    refused(cli, "introspection", "stale result")


def test_11_nonfinite_wildcard(cli):
    """Passes the harness before the isolation change (timed outputs unchecked). Now NaN or inf where
    the reference has none refuses the call."""
    refused(cli, "nonfinite_wildcard", "non-finite output")


def test_12_specialised_shapes(cli):
    """Passes the harness before the isolation change (only corpus shapes were run). Now two held-out
    shapes, drawn at random, are checked."""
    refused(cli, "specialised_shapes", "held-out input")


def test_13_reference_with_token_launch(cli):
    """Passes the harness before the isolation change (one counted launch per call). Now one call runs
    with every launch made a no-op, and a result that survives it did not come from the kernel."""
    refused(cli, "reference_with_token_launch", "result not from the kernel")


def test_14_precision_downgrade(cli):
    """Passes the harness before the isolation change. Its evaluate refused a tolerance without
    max_abs, so the workload there declared atol 0.05, rtol 0.05 and max_abs 0.05 for bfloat16 and
    float16 (the same atol and rtol; max_abs only tightens them). Checked in 3 runs: all 4 corpus cases
    within tolerance, none outside (max error 0.0156 on bfloat16, 0.00195 on float16, no NaN or inf),
    12 counted launches, no fallbacks; promote then held it only for interpreter timings, as it holds
    the honest kernel. Now held-out inputs at other value scales push the float16 sum of squares
    past its range."""
    refused(cli, "precision_downgrade", "held-out input", op="rms_norm", workload="gallery-rms")
