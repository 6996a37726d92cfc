"""Reading MotionKernel's documents: what each one is, and what the registry may make of it.

MotionKernel (the optimizer many teams ran before this registry) leaves a
campaign tree of JSON documents. This module decides each document's kind by
its content and turns it into a plan the app layer records (docs/import.md):

- a **dispatch measurement** (`motionkernel.dispatch-measurement`, schema
  versions 1 and 2 sequential, 3 paired) holds raw runs, so it becomes an
  ordinary `registry.evidence/1` document (execution, benchmark, parity) that
  the gate judges under a declared contract; the document's own speedup and
  variance figures are never read, only its runs. What the document itself
  concluded is kept as a recorded verdict, to be compared with the registry's;
- an **artifact manifest**, a **support run**, an **attention campaign
  receipt** and a **fidelity verdict** are summaries without raw data: they
  become outcome records that reports show with their origin and that the gate
  never reads.

Pure: no database, no torch. Every refusal is a `MotionKernelError` with one
line naming the field.
"""
from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from datetime import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.formats.evidence.document import FORMAT as EVIDENCE_FORMAT
from registry.formats.fields import FieldKit, is_count, is_finite_number
from registry.formats.names import name_refusal
from registry.formats.errors import UserError

SYSTEM = "motionkernel"
SCHEMA_PREFIX = "motionkernel."
DISPATCH_SCHEMA = "motionkernel.dispatch-measurement"
SUPPORT_RUN_SCHEMA = "motionkernel.support-run"
DISPATCH_VERSIONS = (1, 2, 3)
SUPPORT_RUN_VERSIONS = (1,)
ARTIFACT_MANIFEST_VERSIONS = (1,)
# The support matrix's outcomes, best first (docs/import.md, "Support matrix").
OUTCOMES = ("promoted", "candidates_found", "no_worthwhile_candidate", "quarantined", "held", "not_attempted")
# MotionKernel's promotion decisions, in the matrix's words.
PROMOTION_OUTCOME = {
    "promoted": "promoted", "rejected": "no_worthwhile_candidate", "quarantined": "quarantined",
    "held": "held", "pending": "candidates_found",
}
_ID_PART = re.compile(r"[^A-Za-z0-9._-]+")
KINDS = ("dispatch_measurement", "artifact_manifest", "support_run", "attention_campaign", "fidelity_verdict")


class MotionKernelError(UserError):
    """A MotionKernel document the import refuses: one line naming where and why."""


_KIT = FieldKit(MotionKernelError)


@dataclass(frozen=True)
class ImportPlan:
    """What one document becomes: an artifact to register (if any), evidence, and outcome records."""

    kind: str
    schema: str | None
    schema_version: int | None
    workload: str
    artifact: str | None = None
    artifact_kind: str | None = None
    backend: str | None = None
    evidence: dict[str, Any] | None = None
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def document_time(self) -> str | None:
        """When the document says it was measured or decided (its outcome's recorded_utc), if it says."""
        return next((o["recorded_utc"] for o in self.outcomes if o.get("recorded_utc")), None)


def claims_motionkernel(doc: Any) -> bool:
    """Whether a document says it is MotionKernel's (a `motionkernel.*` schema)."""
    return isinstance(doc, Mapping) and isinstance(doc.get("schema"), str) and doc["schema"].startswith(SCHEMA_PREFIX)


def classify(doc: Any) -> str | None:
    """The document's kind by content, or None when it is nothing MotionKernel wrote that we read."""
    if not isinstance(doc, Mapping):
        return None
    schema = doc.get("schema")
    if schema == DISPATCH_SCHEMA:
        return "dispatch_measurement"
    if schema == SUPPORT_RUN_SCHEMA:
        return "support_run"
    if isinstance(doc.get("operation"), Mapping) and isinstance(doc.get("promotion"), Mapping):
        return "artifact_manifest"
    if isinstance(doc.get("arms"), Mapping) and "workload_id" in doc:
        return "attention_campaign"
    if set(doc) == {"evidence", "verdict"}:
        return "fidelity_verdict"
    return None


def plan_import(doc: Any, *, workload: str | None = None) -> ImportPlan:
    """The plan for one parsed document; `workload` names one where the document names none."""
    kind = classify(doc)
    if kind is None:
        if claims_motionkernel(doc):
            raise MotionKernelError(f"schema: {doc['schema']!r} is not a MotionKernel schema this import reads")
        raise MotionKernelError("document: not a MotionKernel document this import reads")
    return _READERS[kind](doc, workload)


def _dispatch(doc: Mapping[str, Any], workload: str | None) -> ImportPlan:
    version = _version(doc, DISPATCH_VERSIONS)
    name = _name(doc, "workload_id")
    arch = _arch(doc.get("arch"), "arch")
    status = doc.get("status")
    if status is not None and status != "ok":
        raise MotionKernelError(f"status: {status!r}: the measurement did not complete, so it holds no runs to judge")
    native, candidate = _arm(doc, "native"), _arm(doc, "candidate")
    environment = doc.get("environment") if isinstance(doc.get("environment"), Mapping) else {}
    device = _optional_text(environment.get("gpu_name"), "environment.gpu_name") or "unrecorded GPU"
    benchmark: dict[str, Any] = {
        "kind": "benchmark", "device": device, "timer": "perf_counter",
        "baseline_s": native, "candidate_s": candidate, "arch": arch,
        "notes": "end-to-end generation wall times imported from a MotionKernel dispatch measurement",
    }
    if version == 3:
        benchmark.update(protocol="paired", schedule=_schedule(doc, len(native), len(candidate)))
    else:
        benchmark["protocol"] = "sequential"
    items = [
        {"kind": "execution", "candidate_calls": _count(doc, "candidate_calls"),
         "fallbacks": _count(doc, "runtime_fallbacks")},
        benchmark,
    ]
    parity = _frame_parity(doc.get("parity"))
    if parity is not None:
        items.append(parity)
    root = _optional_text(doc.get("artifact_root"), "artifact_root")
    artifact = _derived_id("mk", name, root or name, arch)
    recorded = _recorded_dispatch_verdict(doc)
    outcome = {
        "workload": name, "artifact": artifact, "arch": arch, "outcome": None,
        "recorded_verdict": recorded, "recorded_utc": _time(doc.get("created_utc"), "created_utc"),
        "model_id": _optional_name(doc.get("model_id"), "model_id"), "family": _family(doc),
        "summary": {"schema_version": version, "artifact_root": root, "gate": doc.get("gate"),
                    "e2e": doc.get("e2e"), "variance": doc.get("variance")},
    }
    return ImportPlan(
        kind="dispatch_measurement", schema=DISPATCH_SCHEMA, schema_version=version, workload=name,
        artifact=artifact, artifact_kind="fused_kernel",
        evidence={"format": EVIDENCE_FORMAT, "artifact": artifact, "evidence": items},
        outcomes=[outcome],
    )


def _arm(doc: Mapping[str, Any], arm: str) -> list[float]:
    block = doc.get(arm)
    if not isinstance(block, Mapping):
        raise MotionKernelError(f"{arm}: missing; a dispatch measurement needs both arms' raw runs")
    runs = block.get("runs")
    if not isinstance(runs, list) or not runs:
        raise MotionKernelError(f"{arm}.runs: expected a non-empty list of wall times in seconds")
    for i, value in enumerate(runs):
        if not is_finite_number(value) or value <= 0:
            raise MotionKernelError(f"{arm}.runs[{i}]: {_shown(value)} is not a positive finite time in seconds")
    return [float(value) for value in runs]


def _schedule(doc: Mapping[str, Any], native: int, candidate: int) -> list[str]:
    """Schema 3 (paired, ABBA): `schedule` gives each pair's order, A the native arm."""
    schedule = doc.get("schedule")
    if not isinstance(schedule, list) or not schedule:
        raise MotionKernelError("schedule: a paired (schema_version 3) measurement needs its pair order list")
    if not native == candidate == len(schedule):
        raise MotionKernelError(
            f"schedule: {len(schedule)} pairs for {native} native and {candidate} candidate runs; they must agree"
        )
    orders = {"AB": "BC", "BA": "CB"}
    for i, order in enumerate(schedule):
        if order not in orders:
            raise MotionKernelError(f"schedule[{i}]: {order!r} is not 'AB' (native first) or 'BA'")
    return [orders[order] for order in schedule]


def _frame_parity(parity: Any) -> dict[str, Any] | None:
    """The frame comparison as one parity leaf: byte-equal only when the document shows it.

    MotionKernel compared decoded frame arrays (integer pixels, which cannot be
    NaN or inf). A float frame dtype leaves the NaN question open, so such a
    comparison is not imported as parity evidence. Each side's frames were
    decoded from a video file into a fresh row-major array, so their strides
    follow from their shapes; the leaf records both sides. A document that
    names only the optimized side gives a one-sided leaf, which the gate holds.
    """
    if parity is None:
        return None
    if not isinstance(parity, Mapping):
        raise MotionKernelError("parity: expected an object")
    native_dtype = _optional_text(parity.get("native_dtype"), "parity.native_dtype")
    dtype = _optional_text(parity.get("optimized_dtype"), "parity.optimized_dtype")
    shape, native_shape = parity.get("optimized_shape"), parity.get("native_shape")
    if dtype is None or not _is_shape(shape):
        raise MotionKernelError("parity: needs optimized_dtype and optimized_shape (a list of sizes)")
    if not (dtype.startswith("uint") or dtype.startswith("int")):
        return None
    shown_equal = (
        parity.get("passed") is True and parity.get("policy") == "byte_equal" and native_dtype == dtype
        and native_shape == shape
    )
    leaf: dict[str, Any] = {"name": "frames"}
    if native_dtype is not None and _is_shape(native_shape):
        for side, side_dtype, side_shape in (("reference", native_dtype, native_shape), ("candidate", dtype, shape)):
            leaf.update({f"{side}_dtype": side_dtype, f"{side}_shape": list(side_shape),
                         f"{side}_strides": _row_major_strides(side_shape)})
    else:
        leaf.update(dtype=dtype, shape=list(shape))
    leaf.update(byte_equal=shown_equal, max_abs_error=None, max_rel_error=None, has_nan=False, has_inf=False,
                reference_has_nan=False, reference_has_inf=False)
    return {"kind": "parity", "policy": "byte_equal", "leaves": [leaf]}


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(is_count(v) for v in value)


def _row_major_strides(shape: list[int]) -> list[int]:
    """Element strides of a C-contiguous array of `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def _recorded_dispatch_verdict(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the document concluded for itself: its speedup against its own gate, parity, gating validity."""
    e2e = doc.get("e2e") if isinstance(doc.get("e2e"), Mapping) else {}
    speedup, gate = e2e.get("speedup_median"), doc.get("gate")
    if not (is_finite_number(speedup) and is_finite_number(gate)):
        return None
    parity = doc.get("parity") if isinstance(doc.get("parity"), Mapping) else {}
    variance = doc.get("variance") if isinstance(doc.get("variance"), Mapping) else {}
    passed = speedup >= gate and parity.get("passed") is True and variance.get("valid_for_gating") is not False
    basis = f"speedup_median {speedup}x against its gate {gate}x, parity passed: {parity.get('passed')}"
    if "valid_for_gating" in variance:
        basis += f", valid_for_gating: {variance['valid_for_gating']}"
    return {"decision": "pass" if passed else "fail", "basis": basis}


def _artifact_manifest(doc: Mapping[str, Any], workload: str | None) -> ImportPlan:
    version = doc.get("schema_version")
    if version is not None and version not in ARTIFACT_MANIFEST_VERSIONS:
        raise MotionKernelError(f"schema_version: {version!r} is not one this import reads ({ARTIFACT_MANIFEST_VERSIONS})")
    promotion, operation = doc["promotion"], doc["operation"]
    evidence = doc.get("evidence") if isinstance(doc.get("evidence"), Mapping) else {}
    generation = evidence.get("generation") if isinstance(evidence.get("generation"), Mapping) else {}
    name = _workload_name(generation.get("workload_id"), workload, "evidence.generation.workload_id")
    compatibility = doc.get("compatibility") if isinstance(doc.get("compatibility"), Mapping) else {}
    arches = compatibility.get("gpu_architectures") or []
    arch = _arch(arches[0], "compatibility.gpu_architectures[0]") if arches and arches[0] != "*" else None
    decision = _text(promotion.get("decision"), "promotion.decision")
    if decision not in PROMOTION_OUTCOME:
        raise MotionKernelError(f"promotion.decision: {decision!r} is not one of {', '.join(PROMOTION_OUTCOME)}")
    label = _optional_text(doc.get("artifact_id"), "artifact_id") or _optional_text(operation.get("name"), "operation.name")
    fingerprint = _optional_text(operation.get("graph_fingerprint"), "operation.graph_fingerprint")
    artifact = _derived_id("mk", label or name, fingerprint or label or name, arch)
    outcome = {
        "workload": name, "artifact": artifact, "arch": arch, "outcome": PROMOTION_OUTCOME[decision],
        "recorded_verdict": {"decision": decision, "basis": _optional_text(promotion.get("reason"), "promotion.reason")},
        "recorded_utc": _time(promotion.get("decided_at"), "promotion.decided_at"),
        "model_id": _optional_name(compatibility.get("model_id"), "compatibility.model_id"),
        "family": _family(doc),
        "summary": {"operation": dict(operation), "compatibility": dict(compatibility),
                    "evidence": dict(evidence), "promotion": dict(promotion)},
    }
    return ImportPlan(kind="artifact_manifest", schema=None, schema_version=version, workload=name,
                      artifact=artifact, artifact_kind="fused_kernel", outcomes=[outcome])


def _support_run(doc: Mapping[str, Any], workload: str | None) -> ImportPlan:
    version = _version(doc, SUPPORT_RUN_VERSIONS)
    name = _name(doc, "workload_id")
    outcome = _text(doc.get("outcome"), "outcome")
    if outcome not in OUTCOMES:
        raise MotionKernelError(f"outcome: {outcome!r} is not one of {', '.join(OUTCOMES)}")
    source = doc.get("source") if isinstance(doc.get("source"), Mapping) else {}
    record = {
        "workload": name, "artifact": None, "arch": _arch(doc.get("arch"), "arch"), "outcome": outcome,
        "recorded_verdict": None, "recorded_utc": _time(doc.get("recorded_utc"), "recorded_utc"),
        "model_id": _optional_name(doc.get("model_id"), "model_id"), "family": _family(doc),
        "summary": {"source": dict(source), "evidence": doc.get("evidence"), "reason": doc.get("reason")},
    }
    return ImportPlan(kind="support_run", schema=SUPPORT_RUN_SCHEMA, schema_version=version, workload=name,
                      outcomes=[record])


def _attention_campaign(doc: Mapping[str, Any], workload: str | None) -> ImportPlan:
    """An attention A/B receipt: arm summaries and a fidelity verdict, no raw runs."""
    name = _name(doc, "workload_id")
    arch = _arch(doc.get("arch"), "arch") if doc.get("arch") is not None else None
    fidelity = doc.get("fidelity") if isinstance(doc.get("fidelity"), Mapping) else {}
    quality = fidelity.get("verdict") if isinstance(fidelity.get("verdict"), Mapping) else {}
    speedup, gate = doc.get("speedup_median"), doc.get("min_end_to_end_speedup")
    passed = is_finite_number(speedup) and is_finite_number(gate) and speedup >= gate and quality.get("passed") is True
    backend = _optional_name(doc.get("backend") or doc.get("candidate_backend"), "backend")
    label = backend or "attention"
    artifact = _derived_id("mk", f"{name}-{label}", f"{name}/{label}", arch)
    record = {
        "workload": name, "artifact": artifact, "arch": arch,
        "outcome": "promoted" if passed else "no_worthwhile_candidate",
        "recorded_verdict": {"decision": "pass" if passed else "fail",
                             "basis": f"speedup_median {speedup}x against {gate}x, fidelity passed: {quality.get('passed')}"},
        "recorded_utc": _time(doc.get("created_utc"), "created_utc"),
        "model_id": _optional_name(doc.get("model_id"), "model_id"), "family": _family(doc),
        "summary": {"speedup_median": speedup, "min_end_to_end_speedup": gate, "fidelity": dict(fidelity),
                    "budget": doc.get("budget")},
    }
    return ImportPlan(kind="attention_campaign", schema=None, schema_version=None, workload=name,
                      artifact=artifact, artifact_kind="attention_backend", backend=label, outcomes=[record])


def _fidelity_verdict(doc: Mapping[str, Any], workload: str | None) -> ImportPlan:
    evidence, verdict = doc["evidence"], doc["verdict"]
    if not isinstance(evidence, Mapping) or not isinstance(verdict, Mapping):
        raise MotionKernelError("evidence, verdict: expected objects")
    name = _workload_name(evidence.get("workload_id"), workload, "evidence.workload_id")
    passed = verdict.get("passed")
    if not isinstance(passed, bool):
        raise MotionKernelError("verdict.passed: expected true or false")
    record = {
        "workload": name, "artifact": None, "arch": None, "outcome": None,
        "recorded_verdict": {"decision": "pass" if passed else "fail", "basis": "fidelity verdict"},
        "recorded_utc": None, "model_id": None, "family": _family(doc),
        "summary": {"evidence": dict(evidence), "verdict": dict(verdict)},
    }
    return ImportPlan(kind="fidelity_verdict", schema=None, schema_version=None, workload=name, outcomes=[record])


_READERS = {
    "dispatch_measurement": _dispatch,
    "artifact_manifest": _artifact_manifest,
    "support_run": _support_run,
    "attention_campaign": _attention_campaign,
    "fidelity_verdict": _fidelity_verdict,
}


def _version(doc: Mapping[str, Any], known: tuple[int, ...]) -> int:
    version = doc.get("schema_version")
    if version not in known or isinstance(version, bool):
        raise MotionKernelError(
            f"schema_version: {version!r} is not one this import reads for {doc.get('schema')} "
            f"({', '.join(map(str, known))})"
        )
    return version


def _name(doc: Mapping[str, Any], key: str) -> str:
    return _named(doc.get(key), key)


def _named(value: Any, where: str) -> str:
    """A value the registry records as a name (a workload, a backend, a model): the naming rule (docs/names.md)."""
    if not isinstance(value, str) or not value.strip():
        return _text(value, where)  # refuses it as no text at all
    refusal = name_refusal(value)
    if refusal is not None:
        raise MotionKernelError(f"{where}: {refusal}")
    return value


def _optional_name(value: Any, where: str) -> str | None:
    return None if value is None else _named(value, where)


def _workload_name(value: Any, fallback: str | None, where: str) -> str:
    if value is None and fallback is None:
        raise MotionKernelError(f"{where}: the document names no workload; give one with --workload")
    return _named(value if value is not None else fallback, where)


def _time(value: Any, where: str) -> str | None:
    """A document's time: ISO 8601 with a UTC offset, as MotionKernel writes it; anything else is refused.

    Reports compare and age these times (the support matrix's staleness), so
    a time that cannot be read would be a time nobody can show.
    """
    if value is None:
        return None
    text = _text(value, where)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise MotionKernelError(f"{where}: {_shown(text)} is not an ISO 8601 time such as "
                                "2026-08-02T19:00:00+00:00") from None
    if moment.tzinfo is None:
        raise MotionKernelError(f"{where}: {_shown(text)} names no UTC offset, so the moment it means is unknown")
    return text


def _text(value: Any, where: str) -> str:
    """A non-empty string without control characters (a newline would forge a row, an escape drive a terminal)."""
    if not isinstance(value, str) or not value.strip():
        raise MotionKernelError(f"{where}: expected a non-empty string, got {_shown(value)}")
    control = next((char for char in value if unicodedata.category(char) == "Cc"), None)
    if control is not None:
        raise MotionKernelError(f"{where}: {_shown(value)} contains the control character U+{ord(control):04X}")
    return value


def _optional_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _arch(value: Any, where: str) -> str:
    return _KIT.arch(value, where, allow_cpu=False)


def _count(doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key)
    if not is_count(value):
        raise MotionKernelError(f"{key}: expected a whole number >= 0, got {value!r}")
    return value


_LARGEST_FLOAT = int(sys.float_info.max)
# How much of a refused value a message quotes.
_QUOTED = 40


def _shown(value: Any) -> str:
    """A refused value as a message quotes it: repr, shortened (a 401-digit integer is named by its length)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LARGEST_FLOAT:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "…"


def _family(doc: Mapping[str, Any]) -> str | None:
    """The model family the document names, if any (the support matrix derives one otherwise)."""
    return _optional_name(doc.get("family"), "family")


def _derived_id(prefix: str, label: str, identity: str, arch: str | None) -> str:
    """A stable artifact id for a document that names none: readable label + digest of what identifies it."""
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    readable = _ID_PART.sub("-", label).strip("-")[:60] or "artifact"
    return "-".join(part for part in (prefix, readable, arch, digest) if part)
