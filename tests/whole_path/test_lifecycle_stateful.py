"""Random lifecycles through the CLI on a real SQLite file, checked as they go.

A hypothesis state machine registers and re-registers artifacts of the three
tiers (perceptual, advisory, exact; bundle and backend changes, and back to
earlier claims), registers the same bundle under new ids, imports evidence
of every kind (passing, failing, contradictory, for another payload),
records failures, promotes, approves, revokes and re-declares contracts
(then approves or revokes what was decided before). At the end of each
example (after every step in one example: tests/support/stateful_checks.py):
(a) an artifact shown promoted rests on a verdict for its current identity,
    decided with no open failure on evidence of that identity (bound to its
    payload) that passes, by this test's own reading of the contract it was
    decided under; an approval answers a recorded verdict of that identity;
(b) a full replay, from stored events and from the lean reader, gives the
    state the live read models hold;
(c) no command exits with a traceback;
(d) whatever `resolve` ships is promoted for its current identity;
(e) every verdict's benchmark attempts are those of its bytes in its workload, counted from the log;
(f) every state the read models hold has the shape its declaration in registry/projections/read_models/ gives.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule
from registry.bundles import verify_directory
from registry.cli.main import main
from registry.events.identity import artifact_identity
from read_side import Reads
from registry.projections import RegistryState, verify_projections
from registry.projections.fold import fold
from registry.projections.items import attach_items
from registry.projections.record_items import attach_state_documents
from registry.projections.record_readings import keep_readings
from ship_helpers import make_bundle
from stateful_checks import CheckedAtTheEnd, CopiedStart, checked_after_every_step
from state_shapes import registry_shape_problems
from store_helpers import opened

ARTIFACTS = {"sage": ("wan", "attention_backend"), "cache": ("ltx", "step_cache"), "kernel": ("exact", "fused_kernel")}
PAYLOADS = ("build-1", "build-2", "build-3")
BACKENDS = ("SAGE_ATTN", "FLASH_ATTN")
MIN_SSIM = (0.98, 0.99, 0.995)
NEEDED = {"wan": ("execution", "benchmark", "perceptual"), "exact": ("execution", "benchmark", "parity")}
MIN_SPEEDUP = 1.1


def manifest(workload: str, min_ssim: float) -> str:
    if workload == "exact":
        return (f"workload: exact\nfidelity: {{tier: exact}}\n"
                f"speed: {{min_speedup: {MIN_SPEEDUP}, runs_per_arm: 2, protocol: paired, decision: point}}\n")
    tier = "perceptual" if workload == "wan" else "advisory"
    return (f"workload: {workload}\n"
            f"fidelity: {{tier: {tier}, min_ssim: {min_ssim}, frame_set: fs-8, seed: 1024}}\n"
            f"speed: {{min_speedup: {MIN_SPEEDUP}, runs_per_arm: 2, protocol: paired, decision: point}}\n")


def execution_item(ok: bool, backend: str | None) -> dict:
    item = {"kind": "execution", "candidate_calls": 40 if ok else 0, "fallbacks": 0 if ok else 3}
    if backend:
        item.update(requested_backend=backend, effective_backend=backend if ok else "TORCH_SDPA")
    return item


def benchmark_item(ratio: float) -> dict:
    return {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
            "baseline_s": [2.0, 2.02], "candidate_s": [2.0 / ratio, 2.02 / ratio], "schedule": ["BC", "CB"]}


def perceptual_item(worst: float, status: str = "ok") -> dict:
    return {"kind": "perceptual", "frame_set": "fs-8", "seed": 1024, "ssim": [0.999, worst], "lpips": None,
            "vbench": None, "stage_status": status}


def parity_item(state: str) -> dict:
    leaf = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16",
            "reference_shape": [2, 4], "candidate_shape": [2, 4], "reference_strides": [4, 1],
            "candidate_strides": [4, 1], "byte_equal": True, "max_abs_error": 0.0, "max_rel_error": 0.0,
            "has_nan": False, "has_inf": False, "nonfinite_mismatch": False}
    if state == "contradictory":
        leaf.update(max_abs_error=0.5)  # byte-equal, yet half a unit apart
    elif state == "unequal":
        leaf.update(byte_equal=False, max_abs_error=0.01, max_rel_error=0.01)
    return {"kind": "parity", "policy": "byte_equal", "leaves": [leaf]}


ITEMS = {
    "execution_ok": lambda backend: execution_item(True, backend),
    "execution_fallback": lambda backend: execution_item(False, backend),
    "benchmark_fast": lambda backend: benchmark_item(1.4),
    "benchmark_slow": lambda backend: benchmark_item(1.0),
    "perceptual_good": lambda backend: perceptual_item(0.9995),
    "perceptual_bad": lambda backend: perceptual_item(0.9),
    "perceptual_timeout": lambda backend: perceptual_item(0.9995, "timeout"),
    "parity_equal": lambda backend: parity_item("equal"),
    "parity_unequal": lambda backend: parity_item("unequal"),
    "parity_contradictory": lambda backend: parity_item("contradictory"),
}
STAGES = ("execution", "benchmark", "perceptual", "parity", "load", "upload")


def passes(kind: str, item: dict, min_ssim: float) -> bool:
    """This test's own reading of a passing item (independent of the gate's code)."""
    if kind == "execution":
        return item["candidate_calls"] > 0 and item["fallbacks"] == 0 \
            and item.get("effective_backend") == item.get("requested_backend")
    if kind == "parity":
        return all(leaf["byte_equal"] and leaf["reference_dtype"] == leaf["candidate_dtype"]
                   and leaf["reference_shape"] == leaf["candidate_shape"] for leaf in item["leaves"])
    if kind == "benchmark":
        ratios = sorted(b / c for b, c in zip(item["baseline_s"], item["candidate_s"]))
        return ratios[0] >= MIN_SPEEDUP
    return item["stage_status"] == "ok" and min(item["ssim"]) >= min_ssim


EVIDENCE_TYPES = {"execution": "ExecutionObserved", "benchmark": "BenchmarkMeasured",
                  "perceptual": "PerceptualMeasured", "parity": "ParityMeasured"}
# This test's own reading of docs/gate.md "Lifecycle": which evidence shows a failed stage has since succeeded.
CLEARED_BY = {"execution": "ExecutionObserved", "load": "ExecutionObserved", "benchmark": "BenchmarkMeasured",
              "perceptual": "PerceptualMeasured", "parity": "ParityMeasured"}


def completed(event) -> bool:
    return event.type != "PerceptualMeasured" or event.payload["item"]["stage_status"] == "ok"


def decided_on(stream: list, verdict_position: int, identity: str) -> list:
    """The events a verdict at `verdict_position` could rest on, read from the log (not from the fold).

    Those of the verdict's identity, whenever it was registered (its history
    belongs to it, however often it is registered) and, for evidence, after
    the identity's last revoke (failures survive a revoke).
    """
    before = [e for e in stream if e.position < verdict_position and e.payload.get("identity") == identity]
    revoked = max((e.position for e in before if e.type == "HumanDecision" and e.payload["action"] == "revoke"),
                  default=0)
    return [e for e in before
            if e.type == "EvaluationFailed" or (e.type in EVIDENCE_TYPES.values() and e.position > revoked)]


class Lifecycle(CheckedAtTheEnd):
    START = CopiedStart()  # init, three workloads, three bundles, three artifacts: about a second of CLI calls

    @initialize()
    def open_registry_file(self):
        self.folder = Path(tempfile.mkdtemp(prefix="lifecycle-"))
        self.url = f"sqlite:///{self.folder / 'registry.db'}"
        self.runner = CliRunner()
        self.artifacts = dict(ARTIFACTS)  # the fixed three, and any the `rename` rule adds
        self.renamed = 0
        self.__dict__.update(self.START.start(self.folder, self.start_registry))

    def start_registry(self) -> dict:
        self.files = 0
        self.min_ssim = {"wan": {}, "ltx": {}, "exact": {}}  # workload -> contract version -> min_ssim
        self.run_ok("init")
        for workload in self.min_ssim:
            self.declare(workload, MIN_SSIM[0])
        self.payload_digests = {}
        for name in PAYLOADS:  # each payload is a bundle, so `resolve` can ship what is promoted
            directory = make_bundle(self.folder / "bundles", name, source=f"def replacement(x):\n    return ({name!r}, x)\n")
            self.payload_digests[name] = verify_directory(directory).digest
        for artifact in ARTIFACTS:
            self.register(artifact, PAYLOADS[0], BACKENDS[0])
        return {"files": self.files, "min_ssim": self.min_ssim, "payload_digests": self.payload_digests}

    def release(self):
        folder = getattr(self, "folder", None)
        if folder is not None:
            shutil.rmtree(folder)  # the folder this machine created for its own registry

    # -- running the CLI ---------------------------------------------------------------------

    def run(self, *args: str, actor: str = "tester"):
        result = self.runner.invoke(main, ["--db", self.url, "--actor", actor, *args])
        # (c) a refusal or a verdict, never a crash
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
        assert result.exit_code in (0, 1, 3), (args, result.exit_code, result.output)
        if result.exit_code == 1:
            assert len(result.output.strip().splitlines()) == 1, (args, result.output)
        return result

    def run_ok(self, *args: str):
        result = self.run(*args)
        assert result.exit_code == 0, (args, result.output)
        return result

    def write(self, name: str, text: str) -> str:
        self.files += 1
        path = self.folder / f"{self.files}-{name}"
        path.write_text(text)
        return str(path)

    def declare(self, workload: str, min_ssim: float):
        result = json.loads(self.run_ok("workload", "declare", self.write(f"{workload}.yaml", manifest(workload, min_ssim)),
                                        "--json").output)
        self.min_ssim[workload][result["contract_version"]] = min_ssim
        return result["contract_version"]

    def register(self, artifact: str, payload: str, backend: str):
        workload, kind = ARTIFACTS[artifact]
        self.run_ok("artifact", "register", artifact, "--workload", workload, "--kind", kind,
                    "--backend", backend, "--bundle", str(self.folder / "bundles" / payload), "--new-identity")

    def state(self, artifact: str) -> dict:
        return json.loads(self.run_ok("show", artifact, "--json").output)

    # -- rules -----------------------------------------------------------------------------------

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)), payload=st.sampled_from(PAYLOADS),
          backend=st.sampled_from(BACKENDS))
    def re_register(self, artifact, payload, backend):
        self.register(artifact, payload, backend)

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)),
          names=st.lists(st.sampled_from(sorted(ITEMS)), min_size=1, max_size=3),
          bound=st.sampled_from(["none", "current", "other"]))
    def import_evidence(self, artifact, names, bound):
        state = self.state(artifact)
        document = {"format": "registry.evidence/1", "artifact": artifact,
                    "evidence": [ITEMS[name](state["backend"]) for name in names]}
        if bound == "current" and state["payload_sha256"]:
            document["payload_sha256"] = state["payload_sha256"]
        elif bound == "other":
            document["payload_sha256"] = "0f" * 32
        result = self.run("evidence", "import", self.write("evidence.json", json.dumps(document)))
        if bound == "other":
            assert result.exit_code == 1  # another payload (or a contradictory leaf, checked first)

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)))
    def import_a_passing_set(self, artifact):
        """Everything a tier needs, passing: the state the other rules then try to spoil."""
        self.import_evidence(artifact, ["execution_ok", "benchmark_fast", "perceptual_good", "parity_equal"], "current")

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)), stage=st.none() | st.sampled_from(STAGES),
          later=st.lists(st.sampled_from(sorted(ITEMS)), max_size=2), bound=st.sampled_from(["none", "current"]),
          claims=st.integers(0, len(PAYLOADS) * len(BACKENDS) - 2), decide_by_hand=st.booleans())
    def evaluate_spoil_and_promote(self, artifact, stage, later, bound, claims, decide_by_hand):
        """A new identity and a passing set, then perhaps a failed stage and more evidence, then the gate."""
        state = self.state(artifact)
        others = [(payload, backend) for payload in PAYLOADS for backend in BACKENDS
                  if (backend, self.payload_digests[payload]) != (state["backend"], state["payload_sha256"])]
        self.register(artifact, *others[claims % len(others)])
        self.import_a_passing_set(artifact)
        if stage is not None:
            self.fail_a_stage(artifact, stage)
        if later:
            self.import_evidence(artifact, later, bound)
        self.promote(artifact)
        if decide_by_hand:
            self.human(artifact, "fitting", stale=False)

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)), stage=st.sampled_from(STAGES))
    def fail_a_stage(self, artifact, stage):
        document = {"format": "registry.evidence/1", "artifact": artifact,
                    "evidence": [{"kind": "failure", "stage": stage, "error": "it crashed"}]}
        payload = self.state(artifact)["payload_sha256"]
        if payload:  # once other bytes were registered, a document must name the ones it measured
            document["payload_sha256"] = payload
        self.run_ok("evidence", "import", self.write("failure.json", json.dumps(document)))

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)))
    def promote(self, artifact):
        self.run("promote", artifact)

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)), action=st.sampled_from(["approve", "revoke", "fitting"]),
          stale=st.booleans())
    def human(self, artifact, action, stale):
        """A person's decision: the one the state calls for ("fitting"), or one that must be refused."""
        state = self.state(artifact)
        if action == "fitting":
            action = "approve" if state["decision"] == "recorded" else "revoke"
        extra = []
        earlier = [v["event_id"] for v in state["verdicts"] if v["event_id"] != state["verdict_event_id"]]
        if stale and earlier:
            extra = ["--verdict", earlier[-1]]
        result = self.run(action, artifact, "--reason", "looked at it", *extra)
        if extra:
            assert result.exit_code == 1, result.output

    @rule(workload=st.sampled_from(["wan", "ltx"]), min_ssim=st.sampled_from(MIN_SSIM))
    def redeclare(self, workload, min_ssim):
        self.declare(workload, min_ssim)

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)), back=st.integers(0, 5))
    def return_to_earlier_bytes(self, artifact, back):
        """Register claims this artifact had before: their own history counts again, nothing else's."""
        registry = opened(self.url)
        try:
            earlier = [e.payload for e in registry.store.read_stream(f"artifact:{artifact}")
                       if e.type == "ArtifactRegistered"]
        finally:
            registry.engine.dispose()
        chosen = earlier[-1 - back % len(earlier)]
        payload = next(name for name, digest in self.payload_digests.items() if digest == chosen["payload_sha256"])
        self.register(artifact, payload, chosen["backend"])

    @rule(artifact=st.sampled_from(["cache", "sage"]), min_ssim=st.sampled_from(MIN_SSIM),
          action=st.sampled_from(["approve", "revoke"]))
    def redeclare_then_decide(self, artifact, min_ssim, action):
        """A person acting on a verdict given under the contract before a re-declaration."""
        workload = ARTIFACTS[artifact][0]
        before = self.state(artifact)
        version = self.declare(workload, min_ssim)
        result = self.run(action, artifact, "--reason", "after the contract moved")
        if action == "approve" and before["verdict_event_id"] is not None and before["contract_version"] != version:
            assert result.exit_code == 1, result.output  # the verdict was not given under the current contract

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)))
    def rename(self, artifact):
        """The same bytes under a new artifact id: a passing set and the gate, with the payload's attempts."""
        state = self.state(artifact)
        self.renamed += 1
        new_id = f"{artifact}-renamed-{self.renamed}"
        self.artifacts[new_id] = ARTIFACTS[artifact]
        payload = next(name for name, digest in self.payload_digests.items() if digest == state["payload_sha256"])
        workload, kind = ARTIFACTS[artifact]
        self.run_ok("artifact", "register", new_id, "--workload", workload, "--kind", kind,
                    "--backend", state["backend"], "--bundle", str(self.folder / "bundles" / payload))
        self.import_a_passing_set(new_id)
        self.promote(new_id)

    # -- hostile steps: each checks its own invariant, no whole-log work -----------------

    def events(self) -> int:
        import sqlite3

        with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
            return conn.execute("SELECT count(*) FROM events").fetchone()[0]

    @rule(artifact=st.sampled_from(sorted(ARTIFACTS)), action=st.sampled_from(["promote", "approve", "revoke"]),
          damage=st.sampled_from(["DELETE FROM projection_artifacts WHERE artifact = '{a}'",
                                  "UPDATE projection_artifacts SET state = replace(state, '\"decision\":', "
                                  "'\"decision\": ') WHERE artifact = '{a}'",
                                  "DROP TABLE projection_verdicts", "DROP TABLE projection_payload_counts"]))
    def decide_on_a_damaged_read_model(self, artifact, action, damage):
        """No decision is made on a row that does not match its log: one line naming replay, nothing appended."""
        import sqlite3

        self.state(artifact)  # caught up, so the damage is to rows that hold the whole log
        with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
            conn.execute(damage.format(a=artifact))
        before = self.events()
        result = self.run(action, artifact, *(() if action == "promote" else ("--reason", "on damaged rows")))
        assert result.exit_code == 1 and "registry replay" in result.output, (damage, result.output)
        assert self.events() == before
        self.run_ok("replay")

    @rule(name=st.sampled_from(["\u0441ache", "\uff43ache", "cache\ufe0f", "ca\u034fche", "sage\udcff",
                                "e\u0301-new"]))
    def register_a_hostile_name(self, name):
        """Undecodable, invisible or look-alike ids are refused in one line; an NFD id is stored as NFC."""
        before = self.events()
        result = self.run("artifact", "register", name, "--workload", "ltx", "--kind", "step_cache",
                          "--bundle", str(self.folder / "bundles" / PAYLOADS[0]))
        if name == "e\u0301-new":
            assert result.exit_code == 0, result.output
            assert self.state("\u00e9-new")["artifact"] == "\u00e9-new"
            self.artifacts["\u00e9-new"] = ("ltx", "step_cache")
            return
        assert result.exit_code == 1 and self.events() == before, result.output

    # -- shipping ----------------------------------------------------------------------------------
    # Lock export and verification after each step belong here (the invariant that every lock field
    # equals the registry's, and that whatever ships is promoted under the current contract).

    # -- invariants --------------------------------------------------------------------------------

    def whole_checks(self):
        if not hasattr(self, "folder"):
            return
        shown = {artifact: self.state(artifact) for artifact in self.artifacts}  # nothing changes while checking
        self.promoted_means_shown_good(shown)
        self.whatever_ships_is_promoted_for_its_current_identity(shown)
        self.replay_gives_the_same_state()

    def promoted_means_shown_good(self, shown: dict):
        """(a) for every artifact shown promoted."""
        registry = opened(self.url)
        try:
            store = registry.store
            by_id = {event.event_id: event for event in store.read_all()}
            registrations = {e.stream: e.payload for e in by_id.values() if e.type == "ArtifactRegistered"}
            for artifact, (workload, _) in self.artifacts.items():
                state = shown[artifact]
                registration = [e.payload for e in store.read_stream(f"artifact:{artifact}")
                                if e.type == "ArtifactRegistered"][-1]
                identity = artifact_identity(registration)
                assert state["identity"] == identity
                for found in state["evidence"].values():  # nothing bound to another payload counts
                    event = by_id[found["event_id"]]
                    assert event.payload["identity"] == identity
                    assert event.payload["payload_sha256"] == registration["payload_sha256"]
                if state["decision"] != "promoted":
                    continue
                verdict_event = by_id[state["verdict_event_id"]]
                assert verdict_event.payload["identity"] == identity and verdict_event.position > min(
                    e.position for e in store.read_stream(f"artifact:{artifact}")
                    if e.type == "ArtifactRegistered" and artifact_identity(e.payload) == identity)
                # attempts count per payload within the workload, under every artifact id and identity
                payload = verdict_event.payload["payload_sha256"]
                assert verdict_event.payload["benchmark_attempts"] == sum(
                    1 for e in by_id.values() if e.type == "BenchmarkMeasured" and e.position < verdict_event.position
                    and e.payload["payload_sha256"] == payload and registrations[e.stream]["workload"] == workload)
                if state["decided_by"] == "human":
                    assert state["human"]["action"] == "approve"
                    assert state["human"]["verdict_event_id"] == state["verdict_event_id"]
                    assert verdict_event.payload["verdict"]["decision"] == "recorded"
                    continue
                min_ssim = self.min_ssim[workload][verdict_event.payload["contract_version"]]
                used = set(verdict_event.payload["verdict"]["evidence_ids"])
                seen = decided_on(store.read_stream(f"artifact:{artifact}"), verdict_event.position, identity)
                assert all(event.payload["identity"] == identity for event in seen)
                for failed in (e for e in seen if e.type == "EvaluationFailed"):
                    assert any(e.type == CLEARED_BY.get(failed.payload["stage"]) and e.position > failed.position
                               and completed(e) for e in seen), f"promoted with stage {failed.payload['stage']} open"
                for kind in NEEDED[workload]:
                    latest = [e for e in seen if e.type == EVIDENCE_TYPES[kind]][-1]
                    assert latest.event_id in used
                    assert passes(kind, latest.payload["item"], min_ssim), (kind, latest.payload["item"])
        finally:
            registry.engine.dispose()

    def whatever_ships_is_promoted_for_its_current_identity(self, shown: dict):
        """`resolve` ships only an artifact promoted for the identity it claims now, on the bundle it registered.

        (That the promotion was judged under the workload's current contract is
        resolve's contract-version rule; its check belongs beside the lock rules below.)
        """
        for workload in ("wan", "ltx", "exact"):
            result = self.run("resolve", "--workload", workload, "--arch", "sm90", "--torch", "2.5.0", "--cuda", "12.4",
                              "--json")
            match = json.loads(result.output)["match"] if result.exit_code == 0 else None
            if match is None:
                continue
            state = shown[match["artifact"]]
            assert state["decision"] == "promoted", (match, state["decision"])
            assert state["workload"] == workload
            registration = self.registration(match["artifact"])
            assert state["identity"] == artifact_identity(registration)
            assert state["payload_sha256"] == registration["payload_sha256"]
            verdict = next(v for v in state["verdicts"] if v["event_id"] == state["verdict_event_id"])
            assert verdict["identity"] == state["identity"]

    def registration(self, artifact: str) -> dict:
        registry = opened(self.url)
        try:
            return [e.payload for e in registry.store.read_stream(f"artifact:{artifact}")
                    if e.type == "ArtifactRegistered"][-1]
        finally:
            registry.engine.dispose()

    def replay_gives_the_same_state(self):
        """(b) the live read models equal a full replay, by either reader."""
        registry = opened(self.url)
        try:
            report = verify_projections(registry.store)
            assert report.ok, report.summary()
            live = Reads(registry.store).state()
            from_stored = fold(RegistryState(), registry.store.read_all())
            keep_readings(registry.store, from_stored.records.values(), from_stored.workloads.get)  # as a catch-up
            attach_items(registry.store, from_stored.artifacts.values())  # the fold references items by position
            attach_state_documents(registry.store, from_stored)  # and speed records their documents
            assert from_stored.to_dict() == live.to_dict()
            assert registry_shape_problems(live) == []  # (f)
        finally:
            registry.engine.dispose()


Lifecycle.TestCase.settings = settings(max_examples=40, stateful_step_count=15, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])
TestLifecycle = Lifecycle.TestCase
TestLifecycleCheckedAfterEveryStep = checked_after_every_step(Lifecycle, Lifecycle.TestCase.settings)
