"""Evaluation runner: a candidate kernel against its torch reference, as evidence items.

Stages, in order: ``load`` (resolve the entry, screen its source, build the
seeded corpus), ``parity`` (reference vs candidate on every corpus case),
``benchmark`` (paired ABBA timing; each timed call runs every case). The
launch counter watches parity and benchmark to produce the execution item.

If a stage raises, the result is a single ``failure`` item naming that stage:
evidence from the stages before it is dropped, so a half-finished evaluation
can never be read as a finished one (docs/architecture.md, gate step 1). A caller's own
mistake (unknown op, bad run count, a tolerance policy missing a tolerance)
is raised instead, because it says nothing about the candidate.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from registry.errors import UserError
from registry.evidence.parity import POLICIES, compare_outputs, validate_tolerance
from registry.evidence.source_screen import screen_source
from registry.evidence.timing import abba_schedule, time_paired, triton_interpreter_active
from registry.kernels.launches import counting
from registry.kernels.ops import get_operation, resolve_entry

EVIDENCE_FORMAT = "registry.evidence/1"


def failure_item(stage: str, exc: BaseException) -> dict[str, str]:
    """The failure item for an evaluation stage that raised ``exc``."""
    return {"kind": "failure", "stage": stage, "error": f"{type(exc).__name__}: {exc}"}


def execution_device(corpus: str) -> torch.device:
    """Where kernels run: CPU under Triton's interpreter, else the current CUDA device."""
    if triton_interpreter_active():
        if corpus == "gpu":
            raise UserError("the gpu corpus is not run under TRITON_INTERPRET=1 (hours on CPU); use --corpus cpu")
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    raise UserError("no CUDA device and TRITON_INTERPRET is off: Triton kernels cannot run here")


def candidate_source(fn: Callable) -> str:
    """Source of the module defining ``fn`` and of the same-package modules it uses."""
    module = inspect.getmodule(fn)
    if module is None:
        raise ValueError(f"cannot find the module of {fn!r} to screen its source")
    package = module.__name__.split(".")[0]
    modules = {module.__name__: module}
    for value in vars(module).values():
        name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if isinstance(name, str) and name.split(".")[0] == package and name in sys.modules:
            modules.setdefault(name, sys.modules[name])
    return "\n".join(inspect.getsource(modules[name]) for name in sorted(modules))


def _check_request(cases: Sequence[Any], runs: int, warmup: int, policy: str,
                   tolerances_by_dtype: Mapping[str, Mapping[str, float]] | None) -> None:
    abba_schedule(runs)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    if policy not in POLICIES:
        raise ValueError(f"unknown parity policy {policy!r}; expected one of {list(POLICIES)}")
    if policy == "tolerance":
        for dtype in sorted({c.dtype for c in cases}):
            if tolerances_by_dtype is None or dtype not in tolerances_by_dtype:
                raise ValueError(f"tolerance policy: no tolerance declared for dtype {dtype}")
            validate_tolerance(tolerances_by_dtype[dtype])


def _run_all(fn: Callable, inputs: Sequence[tuple[torch.Tensor, ...]]) -> None:
    for args in inputs:
        fn(*args)


def _parity(spec: Any, cases: Sequence[Any], inputs: Sequence[tuple[torch.Tensor, ...]], reference: Callable,
            candidate: Callable, policy: str, tolerances: Mapping[str, Mapping[str, float]] | None,
            approx_math: list[str] | None, tick: Callable[[], None]) -> dict[str, Any]:
    leaves: list[dict[str, Any]] = []
    for case, args in zip(cases, inputs):
        expected = reference(*args)
        own = tuple(a.clone() for a in args)
        got = candidate(*own)
        for k, (a, b) in enumerate(zip(args, own)):
            if not torch.equal(a, b):
                raise ValueError(f"candidate wrote to its input {k} on {case.label}")
        names = [f"{case.label}.{out}" for out in spec.outputs]
        declared = tolerances if policy == "tolerance" else None
        leaves += compare_outputs(expected, got, names, policy, declared)["leaves"]
        tick()
    item: dict[str, Any] = {"kind": "parity", "policy": policy, "leaves": leaves}
    if approx_math is not None:
        item["approx_math"] = approx_math
    return item


def evaluate_kernel(op_name: str, entry: str, *, corpus: str, runs: int, warmup: int, policy: str,
                    tolerances_by_dtype: Mapping[str, Mapping[str, float]] | None,
                    progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Evidence items [parity, benchmark, execution] for ``entry`` as an ``op_name`` kernel,
    or [failure] naming the stage that raised.

    ``progress(done, total)`` counts corpus cases compared, then timed and
    warm-up calls.
    """
    spec = get_operation(op_name)
    cases = spec.corpus(corpus)
    _check_request(cases, runs, warmup, policy, tolerances_by_dtype)
    device = execution_device(corpus)
    total, done = len(cases) + 2 * (warmup + runs), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    try:
        candidate = resolve_entry(entry)
        reference = resolve_entry(spec.reference)
        approx_math = screen_source(candidate_source(candidate)) if policy == "byte_equal" else None
        inputs = [spec.make_inputs(case, device) for case in cases]
    except Exception as exc:  # noqa: BLE001 - any load error becomes evidence of failure
        return [failure_item("load", exc)]
    with counting() as tally:
        try:
            parity = _parity(spec, cases, inputs, reference, candidate, policy, tolerances_by_dtype,
                             approx_math, tick)
        except Exception as exc:  # noqa: BLE001
            return [failure_item("parity", exc)]
        try:
            benchmark = time_paired(
                lambda: _run_all(reference, inputs), lambda: _run_all(candidate, inputs), runs, warmup, device,
                bytes_moved=sum(spec.cost(case).bytes for case in cases), triton_candidate=True,
                interpreted=tally.interpreted_launches > 0,
                progress=lambda _d, _t: tick(),
                notes=(f"{op_name} on the {corpus} corpus: each timed call runs all {len(cases)} cases; "
                       f"baseline {spec.reference}, candidate {entry}"))
        except Exception as exc:  # noqa: BLE001
            return [failure_item("benchmark", exc)]
    execution = {"kind": "execution", "candidate_calls": tally.launches, "fallbacks": tally.fallbacks}
    return [parity, benchmark, execution]


def evidence_document(artifact: str, items: Sequence[Mapping[str, Any]], run: str | None = None) -> dict[str, Any]:
    """Wrap evidence items as a ``registry.evidence/1`` document for ``registry evidence import``."""
    if not isinstance(artifact, str) or not artifact.strip():
        raise ValueError(f"artifact must be a non-empty string, got {artifact!r}")
    if run is not None and (not isinstance(run, str) or not run.strip()):
        raise ValueError(f"run must be a non-empty string when given, got {run!r}")
    if not items:
        raise ValueError("an evidence document needs at least one item")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("kind"), str):
            raise ValueError(f"evidence item {i} is not a mapping with a 'kind'")
    doc: dict[str, Any] = {"format": EVIDENCE_FORMAT, "artifact": artifact}
    if run is not None:
        doc["run"] = run
    doc["evidence"] = [dict(item) for item in items]
    return doc
