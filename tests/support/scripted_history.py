"""One scripted history of the registry, appended with the store as the application layer would.

It covers every rule of the fold: evidence scoped to the current payload, failures cleared by later evidence, a
verdict, a contract change, a revoke that restarts the evidence scope, an approve, a quarantine and a
re-registered payload. The projections' tests read it back; the read models', the reports' and the memory tests
build on it. The `store` and `history` fixtures give each test a registry of its own holding a copy of the history
as this worker process appended it once per backend.
"""
from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from registry.events.store import EventStore, NewEvent
from registry.formats.evidence.items import parse_item
from registry.gate.model import Margin, Verdict

from store_helpers import opened_store

SHA_SAGE = "a1" * 32
SHA_RMS = "b2" * 32
SHA_RMS_2 = "b3" * 32
SHA_CACHE = "c4" * 32
SHA_FA3 = "d5" * 32

WAN_V1 = {
    "workload": "wan-t2v",
    "fidelity": {"tier": "perceptual", "min_ssim": 0.97, "max_lpips": 0.05, "frame_set": "wan-fs8", "seed": 1024, "frames": 4},
    "speed": {"min_speedup": 1.3, "ceiling_share": None, "runs_per_arm": 8, "protocol": "paired", "decision": "point", "max_cv": 0.05},
}
WAN_V2 = {**WAN_V1, "fidelity": {**WAN_V1["fidelity"], "min_ssim": 0.98}}
LTX = {
    "workload": "ltx-video",
    "fidelity": {"tier": "exact"},
    "speed": {"min_speedup": None, "ceiling_share": 0.2717, "runs_per_arm": 8, "protocol": "paired", "decision": "point", "max_cv": 0.05},
}
COSMOS = {
    "workload": "cosmos",
    "fidelity": {"tier": "advisory", "min_ssim": 0.9, "frame_set": "wan-fs8"},
    "speed": {"min_speedup": 1.1, "ceiling_share": None, "runs_per_arm": 8, "protocol": "paired", "decision": "point", "max_cv": None},
}


# -- building the scripted history ------------------------------------------------------

def execution(calls: int = 120) -> dict:
    return parse_item({"kind": "execution", "candidate_calls": calls, "fallbacks": 0,
                       "requested_backend": "SAGE", "effective_backend": "SAGE"})


def benchmark(factor: float) -> dict:
    base = [0.0100, 0.0102, 0.0101, 0.0103, 0.0100, 0.0102, 0.0101, 0.0104]
    return parse_item({"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H100", "timer": "cuda_event",
                       "baseline_s": base, "candidate_s": [b / factor for b in base], "schedule": ["BC", "CB"] * 4})


def perceptual(ssim: list[float], lpips: list[float] | None) -> dict:
    return parse_item({"kind": "perceptual", "frame_set": "wan-fs8", "seed": 1024, "frames": len(ssim),
                       "ssim": ssim, "lpips": lpips, "vbench": None, "stage_status": "ok"})


def parity() -> dict:
    return parse_item({"kind": "parity", "policy": "byte_equal", "leaves": [
        {"name": "out", "dtype": "bfloat16", "shape": [2, 64], "byte_equal": True, "max_abs_error": 0.0,
         "max_rel_error": 0.0, "has_nan": False, "has_inf": False}]})


def verdict(decision: str, tier: str, rule: str, margins: list[Margin], speedup: float | None,
            evidence_ids: list[str]) -> dict:
    ci = None if speedup is None else (round(speedup * 0.97, 4), round(speedup * 1.03, 4))
    return Verdict(decision=decision, tier=tier, reasons=[f"{rule}: scripted"], margins=margins, speedup=speedup,
                   speedup_ci=ci, rule=rule, evidence_ids=evidence_ids).to_dict()


def margin(metric: str, value: float, threshold: float, higher_is_better: bool = True) -> Margin:
    signed = value - threshold if higher_is_better else threshold - value
    return Margin(metric, value, threshold, signed, signed >= 0)


def _clock_past(moment: datetime) -> datetime:
    """The clock's first reading after `moment`: ordering by the clock itself, not by a sleep's length."""
    while (now := datetime.now(timezone.utc)) <= moment:
        pass
    return now


class History:
    """Appends the scripted history; remembers positions and event ids by label."""

    def __init__(self, store: EventStore):
        self.store = store
        self.at: dict[str, int] = {}
        self.times: dict[str, datetime] = {}

    def event_id(self, label: str) -> str:
        return self.store.read_all(after_position=self.at[label] - 1, limit=1)[0].event_id

    def evidence(self, label: str, artifact: str, sha: str, event_type: str, item: dict) -> int:
        return self.add(label, f"artifact:{artifact}", event_type,
                        {"artifact": artifact, "payload_sha256": sha, "run": label, "item": item})

    def workload(self, label: str, contract: dict, version: int) -> int:
        return self.add(label, f"workload:{contract['workload']}", "WorkloadDeclared", {
            "workload": contract["workload"], "contract_version": version,
            "contract_hash": f"{version:064x}", "contract": contract})

    def register(self, label: str, artifact: str, workload: str, kind: str, sha: str, backend: str | None = None) -> int:
        return self.add(label, f"artifact:{artifact}", "ArtifactRegistered", {
            "artifact": artifact, "kind": kind, "workload": workload, "payload_sha256": sha,
            "backend": backend, "op": "attention" if backend else "rms_norm", "entry": f"kernels.{artifact}:run"})

    def render(self, label: str, artifact: str, sha: str, workload: str, version: int, result: dict) -> int:
        return self.add(label, f"artifact:{artifact}", "VerdictRendered", {
            "artifact": artifact, "payload_sha256": sha, "workload": workload, "contract_version": version,
            "contract_hash": f"{version:064x}", "gate_version": "gate/1", "verdict": result})

    def human(self, label: str, artifact: str, sha: str, action: str) -> int:
        return self.add(label, f"artifact:{artifact}", "HumanDecision", {
            "artifact": artifact, "payload_sha256": sha, "action": action,
            "reason": f"scripted {action}", "person": "Ada Lovelace"})

    def add(self, label: str, stream: str, event_type: str, payload: dict) -> int:
        if self.times:
            _clock_past(max(self.times.values()))  # the next event is recorded after every marked moment
        [position] = self.store.append(stream, [NewEvent(event_type, payload)], actor="test")
        self.at[label] = position
        return position

    def mark_time(self, label: str) -> None:
        """A moment strictly between the last event and the next one (`add` waits for the clock to pass it)."""
        last = self.store.read_all(after_position=self.store.head_position() - 1)[0].recorded_at
        self.times[label] = _clock_past(last)


def build_history(store: EventStore) -> History:
    h = History(store)
    h.add("frameset", "frameset:wan-fs8", "FrameSetRegistered", {
        "name": "wan-fs8", "seed": 1024, "frames": 4, "height": 32, "width": 32, "channels": 3,
        "dtype": "uint8", "sha256": "e6" * 32})
    h.workload("wan_v1", WAN_V1, 1)
    h.workload("ltx", LTX, 1)
    h.workload("cosmos", COSMOS, 1)
    # sage: a perceptual attention backend; a failed stage, then evidence, then a promotion
    h.register("sage_reg", "sage-attn", "wan-t2v", "attention_backend", SHA_SAGE, backend="SAGE")
    h.evidence("sage_exec", "sage-attn", SHA_SAGE, "ExecutionObserved", execution())
    h.add("sage_fail", "artifact:sage-attn", "EvaluationFailed", {
        "artifact": "sage-attn", "payload_sha256": SHA_SAGE, "run": "r1", "stage": "perceptual",
        "error": "LPIPS backend absent"})
    h.mark_time("after_failure")
    h.evidence("sage_perc", "sage-attn", SHA_SAGE, "PerceptualMeasured",
               perceptual([0.991, 0.975, 0.988, 0.990], [0.012, 0.046, 0.020, 0.015]))
    h.evidence("sage_bench", "sage-attn", SHA_SAGE, "BenchmarkMeasured", benchmark(1.45))
    sage_margins = [margin("ssim", 0.975, 0.97), margin("lpips", 0.046, 0.05, higher_is_better=False),
                    margin("speedup", 1.45, 1.3), margin("baseline_cv", 0.013, 0.05, higher_is_better=False)]
    h.render("sage_verdict", "sage-attn", SHA_SAGE, "wan-t2v", 1,
             verdict("promoted", "perceptual", "speed.passed", sage_margins, 1.45,
                     [h.event_id(k) for k in ("sage_exec", "sage_perc", "sage_bench")]))
    h.mark_time("after_sage_verdict")
    # rms: an exact fused kernel that is correct but not fast enough
    h.register("rms_reg", "rms-fused", "ltx-video", "fused_kernel", SHA_RMS)
    h.evidence("rms_parity", "rms-fused", SHA_RMS, "ParityMeasured", parity())
    h.evidence("rms_bench_1", "rms-fused", SHA_RMS, "BenchmarkMeasured", benchmark(1.02))
    h.evidence("rms_bench_2", "rms-fused", SHA_RMS, "BenchmarkMeasured", benchmark(1.04))
    h.render("rms_verdict", "rms-fused", SHA_RMS, "ltx-video", 1,
             verdict("rejected", "exact", "speed.below_gate", [margin("speedup", 1.04, 1.1865)], 1.04, []))
    # the wan contract tightens; sage is revoked, then re-measured (no new verdict yet)
    h.workload("wan_v2", WAN_V2, 2)
    h.human("sage_revoke", "sage-attn", SHA_SAGE, "revoke")
    h.evidence("sage_exec_2", "sage-attn", SHA_SAGE, "ExecutionObserved", execution(64))
    # late evidence for a payload sage never had: out of scope
    h.evidence("sage_stray", "sage-attn", "ff" * 32, "BenchmarkMeasured", benchmark(9.0))
    # cache: advisory tier, recorded by the gate, approved by a person
    h.register("cache_reg", "step-cache", "cosmos", "step_cache", SHA_CACHE)
    h.render("cache_verdict", "step-cache", SHA_CACHE, "cosmos", 1,
             verdict("recorded", "advisory", "advisory", [margin("ssim", 0.93, 0.9), margin("speedup", 1.6, 1.1)],
                     1.6, []))
    h.human("cache_approve", "step-cache", SHA_CACHE, "approve")
    # fa3: perceptual, fails its SSIM budget
    h.register("fa3_reg", "fa3-approx", "wan-t2v", "attention_backend", SHA_FA3, backend="FA3")
    h.evidence("fa3_perc", "fa3-approx", SHA_FA3, "PerceptualMeasured",
               perceptual([0.99, 0.95, 0.96, 0.97], None))
    h.render("fa3_verdict", "fa3-approx", SHA_FA3, "wan-t2v", 2,
             verdict("quarantined", "perceptual", "fidelity.failed", [margin("ssim", 0.95, 0.98)], None,
                     [h.event_id("fa3_perc")]))
    # rms gets a new payload: a fresh start
    h.register("rms_reg_2", "rms-fused", "ltx-video", "fused_kernel", SHA_RMS_2)
    return h


def open_store(url: str) -> EventStore:
    """A store on `url`, its schema upgraded, disposed of when the test ends."""
    return opened_store(url, migrate=True)


# Per backend, the scripted history as appended once by this worker process: where it is kept (a closed SQLite
# file, or a Postgres database nobody is connected to) and the positions and moments it marked.
_APPENDED: dict[str, tuple[str, dict[str, int], dict[str, datetime]]] = {}


def _appended_once(request, backend: str) -> tuple[str, dict[str, int], dict[str, datetime]]:
    """The scripted history appended into a copy of the worker's migrated template by the first test of this
    process that asks on `backend`, then closed, so that each test's copy of it is a whole one."""
    if backend not in _APPENDED:
        if backend == "sqlite":
            path = request.getfixturevalue("tmp_path_factory").mktemp("history") / "registry.db"
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
            url, kept = f"sqlite:///{path}", str(path)
        else:
            from sqlalchemy.engine import make_url

            from conftest import _fresh_postgres_database

            url = _fresh_postgres_database(request.getfixturevalue("postgres_template"))
            kept = make_url(url).database
        store = opened_store(url)
        try:
            appended = build_history(store)
        finally:
            store.engine.dispose()  # SQLite folds its WAL into the file; Postgres copies a database nobody is in
        assert backend != "sqlite" or not Path(f"{kept}-wal").exists()
        _APPENDED[backend] = (kept, appended.at, appended.times)
    return _APPENDED[backend]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def history_url(request, tmp_path):
    """A registry of its own for the test, holding the scripted history: a copy of the one this worker appended
    (the same events, positions, ids and recorded times as appending it again would give, without the ~100
    appends per test)."""
    from conftest import PG_SKIP, PG_URL, postgres_database_for_a_test

    if request.param == "postgres" and not PG_URL:
        pytest.skip(PG_SKIP)
    kept = _appended_once(request, request.param)[0]
    if request.param == "sqlite":
        shutil.copyfile(kept, tmp_path / "registry.db")
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    yield from postgres_database_for_a_test(kept)


@pytest.fixture
def store(history_url):
    """The test's store, holding the scripted history (`history` names its labels)."""
    store = opened_store(history_url)
    yield store
    store.engine.dispose()


@pytest.fixture
def history(request, store):
    """The scripted history in `store`: its positions and marked moments by label."""
    kept = History(store)
    _, at, times = _appended_once(request, request.node.callspec.params["history_url"])
    kept.at, kept.times = dict(at), dict(times)
    return kept
