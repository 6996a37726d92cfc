"""The isolated harness's plumbing: frames a hostile worker could send, and workers that misbehave.

Frames are read from real pipes' worth of bytes; workers are real processes
running candidate modules written to a temporary folder.
"""
from __future__ import annotations

import io
import json
import os
import struct
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.kernels import wire
from registry.kernels.checks import SPOT_CHECK_EPS, spot_check
from registry.kernels.evaluate import evaluate_kernel


def _frame(header: dict, payload: bytes = b"") -> io.BytesIO:
    text = json.dumps(header).encode()
    return io.BytesIO(struct.pack("<Q", len(text)) + text + payload)


def test_a_permuted_dense_tensor_crosses_with_its_layout():
    t = torch.arange(24, dtype=torch.float16).reshape(2, 3, 4).permute(2, 0, 1)
    stream = io.BytesIO()
    wire.write_frame(stream, {"op": "x"}, [t])
    stream.seek(0)
    header, (back,) = wire.read_frame(stream, byte_budget=1 << 20)
    assert header["op"] == "x" and back.stride() == t.stride() and torch.equal(back, t)


@pytest.mark.parametrize("meta,message", [
    ({"dtype": "float16", "shape": [4], "strides": [2], "nbytes": 8}, "not a dense tensor"),
    ({"dtype": "float16", "shape": [4], "strides": [1], "nbytes": 16}, "not a dense tensor"),
    ({"dtype": "os.system", "shape": [1], "strides": [1], "nbytes": 2}, "unknown dtype"),
    ({"dtype": "float16", "shape": [-1], "strides": [1], "nbytes": 2}, "bad shape"),
    ({"dtype": "float16", "shape": [1 << 40], "strides": [1], "nbytes": 1 << 41}, "more than the"),
])
def test_frames_that_lie_about_their_tensors_are_refused(meta, message):
    with pytest.raises(wire.WireError, match=message):
        wire.read_frame(_frame({"tensors": [meta]}, b"\0" * 16), byte_budget=1 << 20)


def test_a_huge_header_or_a_cut_frame_is_refused_before_allocation():
    with pytest.raises(wire.WireError, match="frame header of"):
        wire.read_frame(io.BytesIO(struct.pack("<Q", 1 << 50)), byte_budget=0)
    with pytest.raises(wire.WireError, match="cut short"):
        wire.read_frame(_frame({"tensors": [{"dtype": "uint8", "shape": [8], "strides": [1], "nbytes": 8}]}, b"abc"),
                        byte_budget=8)
    nested = b"[" * 200_000  # within the header limit, deeper than the JSON parser goes
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.read_frame(io.BytesIO(struct.pack("<Q", len(nested)) + nested), byte_budget=0)


def test_spot_check_separates_rounding_from_a_result_for_other_inputs():
    reference = torch.linspace(-4, 4, 64).to(torch.bfloat16)
    one_ulp = (reference.view(torch.int16) + 1).view(torch.bfloat16)
    assert spot_check("y", reference, one_ulp, "byte_equal", None) is None
    other = torch.linspace(4, -4, 64).to(torch.bfloat16)
    assert "of the largest reference value" in spot_check("y", reference, other, "byte_equal", None)
    nan = reference.clone()
    nan[3] = float("nan")
    assert "NaN or inf" in spot_check("y", reference, nan, "byte_equal", None)
    assert SPOT_CHECK_EPS * torch.finfo(torch.bfloat16).eps < 0.02


interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs under the interpreter")


@pytest.fixture
def candidates(tmp_path):
    (tmp_path / "isolation_candidates.py").write_text(textwrap.dedent('''
        import os
        from registry.kernels.modln import modulated_layernorm_triton

        def chatty(x, scale, shift):
            print("hello from the candidate", flush=True)
            os.write(1, b"\\x00" * 64)  # raw bytes on fd 1 as well
            return modulated_layernorm_triton(x, scale, shift)

        def exits(x, scale, shift):
            os._exit(3)
    '''))
    return lambda name: f"{tmp_path / 'isolation_candidates.py'}:{name}"


def _evaluate(entry):
    return evaluate_kernel("modulated_layernorm", entry, corpus="cpu", runs=2, warmup=0, policy="byte_equal",
                           tolerances_by_dtype=None)


@pytest.mark.device
@interpreted
def test_a_candidate_writing_to_stdout_cannot_corrupt_the_protocol(candidates):
    parity, _, execution = _evaluate(candidates("chatty"))
    assert all(leaf["byte_equal"] for leaf in parity["leaves"]) and execution["candidate_calls"] > 0


@pytest.mark.device
@interpreted
def test_a_worker_that_exits_is_a_recorded_failure_not_a_crash(candidates):
    (failure,) = _evaluate(candidates("exits"))
    assert failure["kind"] == "failure" and failure["stage"] == "parity"
    assert failure["error"].startswith("WorkerDied: the candidate's worker process sent no valid answer")
    assert "(exit status 3)" in failure["error"]


_metas = st.fixed_dictionaries({
    "dtype": st.sampled_from(["float16", "bfloat16", "float32", "uint8", "int64", "os", "", "Tensor"]),
    "shape": st.lists(st.integers(-2, 6), max_size=3),
    "strides": st.lists(st.integers(-2, 40), max_size=3),
    "nbytes": st.one_of(st.integers(-1, 200), st.booleans(), st.floats(allow_nan=False)),
})


@settings(max_examples=200, deadline=None)
@given(st.lists(_metas, max_size=3), st.binary(max_size=300), st.integers(0, 400))
def test_any_frame_a_worker_sends_is_read_or_refused_as_a_wire_error(metas, payload, budget):
    """Whatever a hostile worker writes, the harness gets tensors or a WireError, nothing else."""
    try:
        header, tensors = wire.read_frame(_frame({"tensors": metas}, payload), byte_budget=budget)
    except wire.WireError:
        return
    assert len(tensors) == len(metas)
    assert sum(t.untyped_storage().nbytes() for t in tensors) <= budget


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_raw_bytes_never_escape_as_anything_but_a_wire_error(data):
    try:
        wire.read_frame(io.BytesIO(data), byte_budget=64)
    except wire.WireError:
        pass


def test_reading_the_worker_works_past_select_s_descriptor_limit():
    """A process already holding more than 1024 descriptors (a long-lived service, a long test run) still reads
    its worker: select() refuses such descriptors ("filedescriptor out of range"), poll() does not."""
    import resource
    import time

    from registry.kernels.isolation import _DeadlineReader

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard descriptor limit here is {hard}, below what the case needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while len(held) < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        read_end, write_end = os.pipe()
        held += [read_end, write_end]
        assert read_end > 1024
        os.write(write_end, b"answer")
        assert _DeadlineReader(read_end, time.monotonic() + 5).read(6) == b"answer"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("raised,said", [("ValueError('bad\\nsecond line')", "ValueError: bad"),
                                         ("ValueError()", "ValueError"), ("KeyError()", "KeyError")])
def test_a_candidate_that_fails_at_import_is_named_by_the_first_line_of_its_error(tmp_path, raised, said):
    """The worker's own loader (in this process: no worker started), an empty message included."""
    import sys

    from registry.kernels.entries import EntryError
    from registry.kernels.worker import CANDIDATE_MODULE, _load_candidate

    candidate = {"name": "cand.py", "function": "f", "source": f"raise {raised}\n"}
    try:
        with pytest.raises(EntryError) as refused:
            _load_candidate("cand.py:f", candidate, str(tmp_path))
    finally:
        sys.modules.pop(CANDIDATE_MODULE, None)
    assert str(refused.value) == f"entry 'cand.py:f': loading cand.py failed: {said}"


def test_a_baseline_wait_is_read_from_proc_and_unreported_where_proc_has_none():
    """`_waits` reads this host's schedstat (real /proc); a pid without one is unreported, never 0 s waited.

    `_waited_s` counts the worker's threads' waits (a thread born since from 0,
    one gone not at all) and this thread's wait only beyond what the worker ran
    meanwhile: woken by the request, the worker taking this thread's CPU is the
    call running, not the call held up.
    """
    import subprocess
    import sys

    from registry.kernels.isolation import _waited_s, _waits

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reading = _waits(child.pid)
        assert reading is not None and set(reading) == {"harness", str(child.pid)}
    finally:
        child.kill()
        child.wait()
    assert _waits(child.pid) is None  # gone: no /proc entry to read
    before = {"harness": (100, 50), "7": (1_000, 200), "8": (10, 10)}
    after = {"harness": (200, 3_050), "7": (2_000, 700), "9": (500, 300)}  # 8 ended, 9 was born
    # worker waits 500 + 300; the harness waited 3,000 while the worker ran 1,000 + 500 of it
    assert _waited_s(before, after) == (800 + 1_500) / 1e9
    assert _waited_s(before, None) is None and _waited_s(None, after) is None
