"""What the harness checks on every call of an isolated candidate, and how it refuses one.

Each refusal names the technique class it caught, so the failure the registry
records (and the gate's reason when promote holds the artifact) says which
kind of cheat was seen, not only that something differed:

- ``not a plain output``: an output that is not a plain dense torch.Tensor with
  a storage of its own (a lazy subclass, a view);
- ``stale result``: a warm-up or timed call, on inputs drawn fresh from a seed
  the worker never saw, whose output is not the reference's for those inputs
  (cached, batched, static or freed-memory results; warm-up detection);
- ``non-finite output``: NaN or inf where the reference has none;
- ``held-out input``: wrong on a shape and value scale outside the declared
  corpus (a specialised fast path; precision that holds only on the corpus);
- ``nondeterministic output``: two runs on the same values, in fresh storage,
  not bitwise identical (uninitialised memory);
- ``result not from the kernel``: a call that launched no kernel while others
  did, or a result that survives with every launch made a no-op;
- ``harness tampering``: a timer, synchroniser, comparator or launch hook
  replaced inside the worker;
- ``background work``: threads or child processes a call left running;
- ``impossible speed``: a time below the op's bytes over the device's peak
  bandwidth;
- ``out-of-bounds write``: a compiled kernel run by the harness launcher
  changed a guard region around a buffer, or an input buffer;
- ``launch deadline``: a compiled kernel still running at the launcher's
  deadline (a spin loop); ``kernel fault``: one the device stopped (an
  illegal address).

A candidate that writes to its inputs keeps the older refusal, ``candidate
wrote to its input K on CASE`` (a ValueError), so earlier evidence reads the same.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from registry.evidence.parity import compare_leaf

SPOT_CHECK_EPS = 2
"""Under ``byte_equal``, how far a spot-checked output on fresh inputs may be from the reference:
every element within SPOT_CHECK_EPS x the output dtype's machine epsilon x the largest |reference|
element (a normwise bound, as in Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
section 1.2). The parity item, on the declared corpus, still requires equal bytes; spot checks only
have to tell a result computed for these inputs from one that was not. Honest kernels that sum a row
in another order than torch differ from it by one ulp on some draws, and by a few subnormal steps
where a result cancels to near zero (measured: 280 random inputs per built-in op); a result for other
inputs is off by the size of the values themselves."""

NOT_PLAIN = "not a plain output"
STALE = "stale result"
NON_FINITE = "non-finite output"
HELD_OUT = "held-out input"
NONDETERMINISTIC = "nondeterministic output"
NOT_FROM_KERNEL = "result not from the kernel"
TAMPERING = "harness tampering"
BACKGROUND = "background work"
IMPOSSIBLE_SPEED = "impossible speed"
OUT_OF_BOUNDS = "out-of-bounds write"
DEADLINE = "launch deadline"
FAULT = "kernel fault"


class CandidateRefused(Exception):
    """A candidate caught doing something an honest kernel does not; the message names the class."""

    def __init__(self, technique: str, detail: str) -> None:
        super().__init__(f"{technique}: {detail}")
        self.technique = technique


def normwise_error(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """max |c - r| over elements finite in both, over max |r| (0.0 when r is all zero or non-finite)."""
    both = torch.isfinite(reference) & torch.isfinite(candidate)
    if not bool(both.any()):
        return 0.0
    r, c = reference.double()[both], candidate.double()[both]
    scale = float(r.abs().max())
    diff = float((c - r).abs().max())
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def spot_check(name: str, reference: torch.Tensor, candidate: torch.Tensor, policy: str,
               tolerance: Mapping[str, float] | None) -> str | None:
    """Why ``candidate`` is not the reference's output for the same inputs, or None if it is.

    Under ``tolerance`` the declared tolerance decides (max_abs cap included);
    under ``byte_equal`` the normwise error must be within SPOT_CHECK_EPS machine epsilons.
    """
    leaf = compare_leaf(name, reference, candidate, "tolerance" if policy == "tolerance" else "byte_equal", tolerance)
    for side in ("dtype", "shape", "strides"):
        if leaf[f"reference_{side}"] != leaf[f"candidate_{side}"]:
            return f"{name}: {side} {leaf['candidate_' + side]}, the reference's is {leaf['reference_' + side]}"
    if leaf.get("nonfinite_mismatch"):
        return f"{name}: NaN or inf where the reference has none (or in other places)"
    if leaf["byte_equal"]:
        return None
    if policy == "tolerance":
        cap = (tolerance or {}).get("max_abs")
        if leaf["outside_tolerance"] or (cap is not None and leaf["max_abs_error"] > cap):
            return (f"{name}: {leaf['outside_tolerance']} elements outside the declared tolerance "
                    f"(max abs error {leaf['max_abs_error']:.3g})")
        return None
    if not reference.is_floating_point():
        return f"{name}: bytes differ"
    error, bound = normwise_error(reference, candidate), SPOT_CHECK_EPS * torch.finfo(reference.dtype).eps
    if error > bound:
        return (f"{name}: off by {error:.3g} of the largest reference value (bound {bound:.3g}; "
                f"max abs error {leaf['max_abs_error']:.3g})")
    return None


def refuse_bad_outputs(outputs: Sequence[Sequence[torch.Tensor | str]], labels: Sequence[str],
                       names: Sequence[str]) -> None:
    """Refuse any output the worker could not hand over as a plain dense tensor of its own."""
    for label, row in zip(labels, outputs):
        for k, out in enumerate(row):
            if isinstance(out, str):
                out_name = names[k] if len(row) == len(names) else f"output {k}"
                raise CandidateRefused(NOT_PLAIN, f"{label}.{out_name} is {out}")


def refuse_mutated_inputs(sent: Sequence[Sequence[torch.Tensor]], after: Sequence[Sequence[torch.Tensor]],
                          labels: Sequence[str]) -> None:
    """The older input-mutation refusal: inputs must come back with the bytes they were sent with."""
    for label, before_args, after_args in zip(labels, sent, after):
        for k, (a, b) in enumerate(zip(before_args, after_args)):
            same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(
                a.detach().cpu().contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
            if not same:
                raise ValueError(f"candidate wrote to its input {k} on {label}")


def refuse_worker_report(call: Any, where: str, *, first_call: bool) -> None:
    """Refuse tampering and background work the worker shows after a call.

    Threads that appear during the worker's first candidate call are let be:
    compilers and drivers start their pools on first use. A thread started
    then and still alive later is in every later call's "before", so it can
    only race the copy of outputs that follows each "done".
    """
    if call.replaced:
        raise CandidateRefused(TAMPERING, f"{where}: replaced {', '.join(call.replaced[:5])} in the worker")
    if (call.extra_tasks and not first_call) or call.extra_children:
        parts = [f"{call.extra_tasks} thread(s)"] if call.extra_tasks else []
        parts += [f"child process(es) {call.extra_children[:5]}"] if call.extra_children else []
        raise CandidateRefused(BACKGROUND, f"{where}: the call returned leaving {' and '.join(parts)} running")


def refuse_idle(call: Any, where: str, *, kernel_seen: bool) -> None:
    """Refuse a call in which some case launched no kernel while the candidate launches kernels elsewhere."""
    if kernel_seen and not all(call.launches):
        idle = call.launches.index(0)
        raise CandidateRefused(NOT_FROM_KERNEL, f"{where}: case {idle} returned without launching a kernel")


def as_outputs(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)
