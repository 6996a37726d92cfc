"""Evaluation runner: a candidate kernel against its torch reference, as evidence items.

The candidate is hostile code until shown otherwise (docs/kernels.md, "Threat
model"). It runs in a worker process of its own (registry/kernels/worker.py,
driven by registry/kernels/isolation.py) that never holds an expected output,
the comparator or the clock; this process keeps all three.

Stages, in order: ``load`` (start the worker, import the entry there, screen
its source, build the seeded corpus), ``parity`` (reference vs candidate on
every corpus case), ``benchmark`` (paired ABBA timing; each call runs every
case on inputs drawn fresh from a secret seed, and every candidate call is
checked), ``integrity`` (held-out shapes and value scales, run twice;
launch ablation). Launches are counted by hooks inside Triton, whoever makes
them; the execution item counts those of parity and benchmark.

If a stage raises, or a check refuses the candidate (a CandidateRefused naming
the technique class, registry/kernels/checks.py), the result is a single
``failure`` item naming that stage: evidence from the stages before it is
dropped, so a half-finished evaluation can never be read as a finished one
(docs/architecture.md, gate step 1). A caller's own mistake (unknown op, bad
run count, a tolerance policy missing a tolerance) is raised instead, because
it says nothing about the candidate.
"""
from __future__ import annotations

import inspect
import secrets
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from registry.formats.errors import UserError
from registry.formats.evidence.schemas import LAUNCH_SIGNALS, UNREPORTED
from registry.evidence.parity import POLICIES, compare_outputs, dtype_name, validate_tolerance
from registry.evidence.source_screen import screen_source
from registry.evidence.timing import abba_schedule, peak_bandwidth, triton_interpreter_active
from registry.kernels.checks import (HELD_OUT, IMPOSSIBLE_SPEED, NON_FINITE, NONDETERMINISTIC, NOT_FROM_KERNEL,
                                     STALE, CandidateRefused, as_outputs, refuse_bad_outputs, refuse_idle,
                                     refuse_mutated_inputs, refuse_worker_report, spot_check)
from registry.kernels.isolation import CallResult, CandidateError, CandidateWorker, candidate_text, start_workers
from registry.kernels.sandbox import PROFILE, UNSANDBOXED, harness_digest
from registry.kernels.ops import get_operation, resolve_entry

EVIDENCE_FORMAT = "registry.evidence/1"
LAUNCH_SIGNAL = LAUNCH_SIGNALS[0]
"""Where the launch count and the ablation run: hooks inside the candidate's own process, which it can
read and rewrite (docs/kernels.md, "What remains out of reach"); the gate holds evidence that says so."""
ISOLATED_TIMING_NOTE = ("timed by the harness process around the worker's run, which synchronises the whole "
                        "device before it answers; inputs staged and L2 flushed (256 MB write) before each call")


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


@dataclass
class _Session:
    """One evaluation's workers (the candidate's, and the baseline's that never loads it) and what the harness
    has seen of the candidate so far."""

    worker: CandidateWorker
    baseline: CandidateWorker
    spec: Any
    policy: str
    tolerances: Mapping[str, Mapping[str, float]] | None
    device: torch.device
    launches: int = 0
    fallbacks: int = 0
    interpreted: int = 0
    idle_calls: list[str] = field(default_factory=list)
    candidate_calls: int = 0

    def run(self, arm: str, labels: Sequence[str], inputs: Sequence[tuple[torch.Tensor, ...]], where: str, *,
            ablate: bool = False, count: bool = True) -> CallResult:
        """One call of ``arm`` on ``inputs``; the candidate's calls are checked before anything is returned."""
        output_bytes = sum(2 * t.numel() * t.element_size() * len(self.spec.outputs) for args in inputs for t in args)
        call = (self.worker if arm == "C" else self.baseline).call(arm, inputs, output_bytes, ablate=ablate)
        if arm != "C":
            return call
        refuse_worker_report(call, where, first_call=not self.candidate_calls)
        self.candidate_calls += 1
        if count:
            self.launches += sum(call.launches)
            self.fallbacks += call.fallbacks
            self.interpreted += call.interpreted
        self.idle_calls += [f"{where} {label}" for label, n in zip(labels, call.launches) if n == 0]
        refuse_bad_outputs(call.outputs, labels, self.spec.outputs)
        refuse_mutated_inputs(inputs, call.inputs_after, labels)
        return call

    def require_launches(self, call: CallResult, where: str) -> None:
        """After its outputs were checked: a call that launched nothing while others did is refused."""
        refuse_idle(call, where, kernel_seen=self.launches > 0 or any(call.launches))

    def tolerance(self, dtype: torch.dtype) -> Mapping[str, float] | None:
        return self.tolerances[dtype_name(dtype)] if self.policy == "tolerance" else None

    def spot_check(self, technique: str, where: str, labels: Sequence[str],
                   inputs: Sequence[tuple[torch.Tensor, ...]], call: CallResult) -> None:
        """Refuse the call if any output is not the reference's for these inputs."""
        reference = resolve_entry(self.spec.reference)
        for label, args, got in zip(labels, inputs, call.outputs):
            expected = as_outputs(reference(*args))
            if len(got) != len(expected):
                raise CandidateRefused(technique, f"{where} {label}: {len(got)} outputs, expected {len(expected)}")
            for out_name, ref, cand in zip(self.spec.outputs, expected, got):
                why = spot_check(f"{label}.{out_name}", ref, cand.to(ref.device), self.policy,
                                 self.tolerance(ref.dtype))
                if why is not None:
                    nonfinite = technique == STALE and "NaN or inf" in why
                    raise CandidateRefused(NON_FINITE if nonfinite else technique, f"{where}: {why}")


def _parity(session: _Session, cases: Sequence[Any], inputs: Sequence[tuple[torch.Tensor, ...]],
            approx_math: list[str] | None, tick: Callable[[], None]) -> dict[str, Any]:
    reference = resolve_entry(session.spec.reference)
    leaves: list[dict[str, Any]] = []
    for case, args in zip(cases, inputs):
        expected = reference(*args)
        call = session.run("C", [case.label], [args], f"parity call on {case.label}")
        got = [out.to(session.device) for out in call.outputs[0]]  # compared where the reference lives
        names = [f"{case.label}.{out}" for out in session.spec.outputs]
        declared = session.tolerances if session.policy == "tolerance" else None
        leaves += compare_outputs(expected, tuple(got) if len(got) != 1 else got[0], names, session.policy,
                                  declared)["leaves"]
        session.require_launches(call, f"parity call on {case.label}")
        tick()
    item: dict[str, Any] = {"kind": "parity", "policy": session.policy, "leaves": leaves}
    if approx_math is not None:
        item["approx_math"] = approx_math
    return item


def fresh_inputs(spec: Any, cases: Sequence[Any], device: torch.device) -> list[tuple[torch.Tensor, ...]]:
    """Every case's inputs drawn again from a seed only this process knows, in storage of their own."""
    return [spec.make_inputs(replace(case, seed=secrets.randbits(62)), device) for case in cases]


def _floor_seconds(bytes_moved: int, device_name: str | None) -> float | None:
    peak = peak_bandwidth(device_name) if device_name else None
    return None if peak is None else bytes_moved / peak


def ticker(total: int, progress: Callable[[int, int], None] | None) -> Callable[[], None]:
    """A function to call once per corpus case compared and per timed or warm-up call: ``progress(done, total)``."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    return tick


def paired_calls(pairs: int, warmup: int) -> Iterator[tuple[str, bool, str]]:
    """(arm, timed, where) of every call: ``warmup`` untimed then ``pairs`` timed ABBA pairs, in order."""
    orders = [(order, False) for order in (abba_schedule(warmup) if warmup else [])]
    orders += [(order, True) for order in abba_schedule(pairs)]
    for index, (order, timed) in enumerate(orders):
        for arm in order:
            yield arm, timed, f"{'timed' if timed else 'warm-up'} call {index + 1}"


def time_pairs(session: _Session, cases: Sequence[Any], pairs: int, warmup: int, *, bytes_moved: int,
               tick: Callable[[], None], notes: str) -> dict[str, Any]:
    """``warmup`` untimed then ``pairs`` timed ABBA pairs; a paired benchmark item.

    Every call, warm-up or timed, baseline or candidate, gets fresh inputs
    drawn from its own secret seed, so warm-up calls look exactly like timed
    ones and nothing a call leaves behind is the answer to the next. Every
    candidate call's outputs are checked against the reference on its inputs,
    and its inputs checked unchanged. The clock is this process's, around the
    worker's run-and-synchronise; a candidate time below the op's byte floor
    over the device's peak bandwidth is refused. Each timed baseline call's
    wait for a CPU, as this process saw it from outside the worker
    (isolation.py `_waits`; None where unreported), is ``baseline_waited_s``;
    the candidate's is never read.
    """
    schedule = abba_schedule(pairs)
    labels = [case.label for case in cases]
    floor = _floor_seconds(bytes_moved, session.worker.device_name)
    times: dict[str, list[float]] = {"B": [], "C": []}
    waited: list[float | None] = []
    for arm, timed, where in paired_calls(pairs, warmup):
        inputs = fresh_inputs(session.spec, cases, session.device)
        call = session.run(arm, labels, inputs, where)
        if arm == "C":
            session.spot_check(STALE, where, labels, inputs, call)
            session.require_launches(call, where)
            if floor is not None and call.seconds < floor:
                raise CandidateRefused(IMPOSSIBLE_SPEED, (
                    f"{where} took {call.seconds:.3g} s, below the {floor:.3g} s that moving "
                    f"{bytes_moved} bytes takes at {session.worker.device_name}'s peak bandwidth"))
        if timed:
            times[arm].append(call.seconds)
            if arm == "B":
                waited.append(call.waited_s)
        tick()
    timer, device = timer_names(session)
    interpreted = timer == "interpreter"
    item: dict[str, Any] = {
        "kind": "benchmark", "protocol": "paired", "device": device, "timer": timer,
        "baseline_s": times["B"], "candidate_s": times["C"], "baseline_waited_s": waited, "schedule": schedule,
        "warmup": warmup, "arch": session.worker.arch,
    }
    if floor is not None and not interpreted:
        item["bandwidth_share"] = floor / statistics.median(times["C"])
    item["notes"] = notes + ("" if interpreted else "; " + ISOLATED_TIMING_NOTE)
    return item


def timer_names(session: _Session) -> tuple[str, str]:
    """(timer, device) a benchmark of this worker records: the interpreter's, once anything ran interpreted."""
    if session.interpreted > 0 or triton_interpreter_active():
        return "interpreter", "cpu (triton interpreter)"
    return "perf_counter", session.worker.device_name or "cpu"


class PairBatches(Protocol):
    """A benchmark session that takes pairs batch by batch (registry/app/bench.py, BatchedSession)."""

    def next_size(self) -> int:
        """Pairs to time next; 0 when the session is done (decided, or out of pairs)."""

    def add(self, baseline: list[float], candidate: list[float]) -> None:
        """Record one timed batch."""


class SessionRefused(Exception):
    """The registry refused to open the session or take a batch: the caller's matter, raised past the
    failure items (it says nothing about the candidate)."""

    def __init__(self, refusal: UserError):
        super().__init__(str(refusal))
        self.refusal = refusal


def time_batches(session: _Session, cases: Sequence[Any], open_batches: Callable[[str, str], PairBatches],
                 warmup: int, *, bytes_moved: int, tick: Callable[[], None], notes: str) -> None:
    """Timed pairs in batches handed to a benchmark session, until it asks for none (``run_batches``), each
    batch timed exactly as ``time_pairs`` times a whole benchmark."""
    run_batches(lambda size, first: time_pairs(session, cases, size, warmup if first else 0,
                                                bytes_moved=bytes_moved, tick=tick, notes=notes),
                timer_names(session), session.worker.arch, open_batches)


def run_batches(timed: Callable[[int, bool], dict[str, Any]], opened: tuple[str, str], arch: str,
                open_batches: Callable[..., PairBatches]) -> None:
    """Give a benchmark session batches of timed pairs until it asks for none.

    The session is opened (``open_batches(timer, device, arch)``) after parity and
    before the first timed call, with the names every batch is then timed
    under; a batch timed under another timer (the candidate started running
    interpreted) is a failure, not a batch of that session. ``timed(size,
    first)`` times one batch as a benchmark item; only the first has warm-up
    pairs.
    """
    try:
        batches = open_batches(*opened, arch)
    except UserError as exc:
        raise SessionRefused(exc) from exc
    first = True
    while size := batches.next_size():
        item = timed(size, first)
        first = False
        if (item["timer"], item["device"]) != opened:
            raise RuntimeError(f"a batch was timed by {item['timer']} on {item['device']}, but the session was "
                               f"opened for {opened[0]} on {opened[1]}")
        try:
            batches.add(item["baseline_s"], item["candidate_s"])
        except UserError as exc:
            raise SessionRefused(exc) from exc


def _held_out_cases(cases: Sequence[Any]) -> list[Any]:
    """Two shapes outside the corpus, drawn at random from the first and last cases, with secret seeds."""
    rng = secrets.SystemRandom()
    held = []
    for i, case in enumerate((cases[0], cases[-1])):
        held.append(replace(case, label=f"held-out{i}", batch=case.batch + rng.randint(0, 1),
                            seq=rng.randint(1, case.seq + 3), dim=case.dim + rng.randint(1, 16),
                            seed=secrets.randbits(62)))
    return held


def _rescaled(inputs: tuple[torch.Tensor, ...], exponent: int) -> tuple[torch.Tensor, ...]:
    """Activations (16-bit inputs) times 2**exponent: exact, and outside the corpus's value range."""
    return tuple(t * 2.0 ** exponent if t.dtype in (torch.bfloat16, torch.float16) else t for t in inputs)


def integrity(session: _Session, cases: Sequence[Any]) -> None:
    """The checks that run after the benchmark, outside the counted calls.

    Held-out shapes with values rescaled up and down (a power of two), each
    run twice in fresh storage: both runs must agree bit for bit, and with
    the reference. Then, if any kernel launched, one call on fresh inputs
    with every launch made a no-op: an output that still matches the
    reference did not come from the kernels.
    """
    rng = secrets.SystemRandom()
    held = _held_out_cases(cases)
    exponents = [rng.randint(5, 7), -rng.randint(3, 6)]
    inputs = [_rescaled(session.spec.make_inputs(case, session.device), e) for case, e in zip(held, exponents)]
    labels = [case.label for case in held]
    first = session.run("C", labels, inputs, "held-out call", count=False)
    session.spot_check(HELD_OUT, "held-out call", labels, inputs, first)
    session.require_launches(first, "held-out call")
    second = session.run("C", labels, inputs, "held-out call (repeat)", count=False)
    session.require_launches(second, "held-out call (repeat)")
    for label, a_row, b_row in zip(labels, first.outputs, second.outputs):
        for out_name, a, b in zip(session.spec.outputs, a_row, b_row):
            if not (a.shape == b.shape and a.stride() == b.stride() and torch.equal(
                    a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))):
                raise CandidateRefused(NONDETERMINISTIC, f"{label}.{out_name}: two runs on the same values differ")
    if session.idle_calls and session.launches:
        raise CandidateRefused(NOT_FROM_KERNEL, f"{session.idle_calls[0]} returned without launching a kernel")
    if not session.launches:
        return
    labels = [case.label for case in cases]
    inputs = fresh_inputs(session.spec, cases, session.device)
    ablated = session.run("C", labels, inputs, "ablated call", ablate=True, count=False)
    reference = resolve_entry(session.spec.reference)
    for label, args, got in zip(labels, inputs, ablated.outputs):
        expected = as_outputs(reference(*args))
        for out_name, ref, cand in zip(session.spec.outputs, expected, got):
            if spot_check(f"{label}.{out_name}", ref, cand.to(ref.device), session.policy,
                          session.tolerance(ref.dtype)) is None:
                raise CandidateRefused(NOT_FROM_KERNEL, (
                    f"{label}.{out_name} is still the reference's with every kernel launch made a no-op"))


def open_workers(stack: ExitStack, entry: str, reference: str, device: torch.device, *, screen: bool,
                 sandboxed: bool, candidate: dict[str, str] | None = None,
                 observed: dict[str, Any] | None = None) -> tuple[CandidateWorker, CandidateWorker]:
    """The candidate's worker and the baseline's (the reference alone), started together (one jail, whose
    zygote imports torch once and forks both) and answering their hellos; closed when ``stack`` ends.
    ``observed["confinement"]`` is set to what the jail's launcher reported, before either hello."""
    worker = CandidateWorker(entry, device, screen=screen, sandboxed=sandboxed, candidate=candidate)
    stack.callback(worker.close)
    baseline = CandidateWorker(reference, device, screen=False, sandboxed=sandboxed)
    stack.callback(baseline.close)
    start_workers([worker, baseline], sandboxed=sandboxed)
    if observed is not None:
        observed["confinement"] = worker.confinement
    worker.begin()
    baseline.begin()
    return worker.finish(), baseline.finish()


def execution_item(session: _Session, profile: str) -> dict[str, Any]:
    """The execution item: launches and fallbacks as the candidate's worker counted them, the sandbox the
    candidate ran in and the bounds its launcher reported, the digest of the harness that measured, and where
    the launch count came from."""
    return {"kind": "execution", "candidate_calls": session.launches, "fallbacks": session.fallbacks,
            "sandbox": profile, "harness_sha256": harness_digest(), "confinement": dict(session.worker.confinement),
            "launch_signal": LAUNCH_SIGNAL}


def evaluate_kernel(op_name: str, entry: str, *, corpus: str, runs: int, warmup: int, policy: str,
                    tolerances_by_dtype: Mapping[str, Mapping[str, float]] | None,
                    progress: Callable[[int, int], None] | None = None,
                    open_batches: Callable[[str, str], PairBatches] | None = None,
                    sandboxed: bool = True, entry_sha256: str | None = None,
                    observed: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Evidence items [parity, benchmark, execution] for ``entry`` as an ``op_name`` kernel,
    or [failure] naming the stage that raised or the check that refused the candidate.

    The candidate runs in its own sandboxed process (:mod:`registry.kernels.isolation`,
    :mod:`registry.kernels.sandbox`), the baseline arm in a second one that never loads it;
    this one keeps the inputs, the references, the comparator and the clock. ``sandboxed=False``
    (``--insecure-no-sandbox``) runs both as this user, and the execution item says so.
    ``progress(done, total)`` counts corpus cases compared, then timed and
    warm-up calls. With ``open_batches`` the pairs go to a benchmark session
    batch by batch (``time_batches``; at most ``runs`` of them) and the items
    are [parity, execution]: the session's events are the timing evidence.
    A refusal of the session is raised (as the UserError it is), not recorded.
    ``observed`` (a dict), when given, receives the ``confinement`` the sandbox's launcher reported, for the
    document around a failure too (``evidence_document``); it stays empty when no worker was started.
    """
    spec = get_operation(op_name)
    cases = spec.corpus(corpus)
    _check_request(cases, runs, warmup, policy, tolerances_by_dtype)
    device = execution_device(corpus)
    tick = ticker(len(cases) + 2 * (warmup + runs), progress)
    candidate = candidate_text(entry, entry_sha256)  # a file swapped since registration is refused, not run
    stage = "load"
    try:
        with ExitStack() as stack:
            # a candidate file is screened as the text read here, never as what its worker says it is
            worker, baseline = open_workers(stack, entry, spec.reference, device,
                                            screen=policy == "byte_equal" and candidate is None,
                                            sandboxed=sandboxed, candidate=candidate, observed=observed)
            source = candidate["source"] if candidate is not None else worker.source
            approx_math = screen_source(source) if policy == "byte_equal" else None
            inputs = [spec.make_inputs(case, device) for case in cases]
            session = _Session(worker, baseline, spec, policy, tolerances_by_dtype, device)
            stage = "parity"
            parity = _parity(session, cases, inputs, approx_math, tick)
            stage = "benchmark"
            bytes_moved = sum(spec.cost(case).bytes for case in cases)
            notes = (f"{op_name} on the {corpus} corpus: each timed call runs all {len(cases)} cases; "
                     f"baseline {spec.reference}, candidate {entry}")
            if open_batches is None:
                benchmark = [time_pairs(session, cases, runs, warmup, bytes_moved=bytes_moved, tick=tick,
                                        notes=notes)]
            else:
                time_batches(session, cases, open_batches, warmup, bytes_moved=bytes_moved, tick=tick, notes=notes)
                benchmark = []
            stage = "integrity"
            integrity(session, cases)
    except SessionRefused as exc:
        raise exc.refusal from None
    except CandidateError as exc:
        return [{"kind": "failure", "stage": stage, "error": f"{exc.type_name}: {exc}"}]
    except Exception as exc:  # noqa: BLE001 - any failure of the candidate becomes evidence of failure
        return [failure_item(stage, exc)]
    return [parity, *benchmark, execution_item(session, PROFILE if sandboxed else UNSANDBOXED)]


def evidence_document(artifact: str, items: Sequence[Mapping[str, Any]], run: str | None = None, *,
                      sandbox: str | None = None, confinement: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Wrap evidence items as a ``registry.evidence/1`` document for ``registry evidence import``; with
    ``sandbox`` (what ``registry evaluate`` passes), naming that profile, this harness's digest and the
    ``confinement`` the launcher reported (both unreported when none was), so a document of nothing but a
    failure says what ran it too."""
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
    if sandbox is not None:
        doc["sandbox"], doc["harness_sha256"] = sandbox, harness_digest()
        doc["confinement"] = dict(confinement or {"identity": UNREPORTED, "memory": UNREPORTED})
    doc["evidence"] = [dict(item) for item in items]
    return doc
