"""Random interleavings through a real `registry serve` process and the CLI on one registry, checked as they go.

A hypothesis state machine issues and revokes tokens of every shape (scopes, workload globs, a person's or
not) on the command line; opens benchmark sessions and sends pair batches over HTTP and through `bench record`,
retrying keys with the same pairs and with other pairs; imports evidence, promotes, approves and revokes over
HTTP and on the command line; records monitor batches and acknowledges alarms on the command line. Every HTTP
answer is the one the permission matrix gives the token at that moment (401 for a revoked token, 403 for a scope
or glob that does not reach, otherwise the use case's own answer), never a 5xx. At the end of each example (after
every step in one example: tests/support/stateful_checks.py):
(a) the permission matrix: every token of the example answers one probe per scope exactly as its scopes, glob
    and revocation say (401 for a revoked token on every probe);
(b) the log's invariants: the chain is intact, the read models equal a replay of the log, each batch key of a
    session and each monitor batch key is recorded once, and no event was appended under a token's name after
    that token's revocation.

The examples share one registry and one server process (starting one costs an interpreter and the API's
imports); each works on artifacts and tokens of its own. Needs seconds: over a hundred HTTP requests and CLI
commands an example.
"""
from __future__ import annotations

import fnmatch
import itertools
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from registry.app import open_registry
from registry.cli.main import main
from serve_helpers import ServerProcess
from stateful_checks import CheckedAtTheEnd, checked_after_every_step

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

# Sessions and batches: a confident record whose pairs sit exactly at the gate, so it never decides or closes.
TIMED = "workload: srv-wan\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 100000}\n"
# Promotion on an evidence document, then a monitor.
WATCHED = ("workload: srv-mon\nfidelity: {tier: perceptual, min_ssim: 0.98, frame_set: fs-8, seed: 1024}\n"
           "speed: {min_speedup: 1.2, runs_per_arm: 2, protocol: paired, decision: point}\n"
           "monitor: {alpha: 0.001, reference: gate, margin: 0.0}\n")
WORKLOADS = {"timed": "srv-wan", "watched": "srv-mon"}
GLOBS = ("srv-*", "srv-wan", "other-*")
SCOPE_SETS = (("read",), ("ingest",), ("decide",), ("admin",), ("read", "ingest"), ("ingest", "decide"),
              ("read", "ingest", "decide", "admin"))
PAIRS = {"at-gate": ([1.2, 1.2], [1.0, 1.0]), "other": ([2.4, 2.4], [2.0, 2.0])}
PASSING = [{"kind": "execution", "candidate_calls": 40, "fallbacks": 0},
           {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
            "baseline_s": [2.0, 2.02], "candidate_s": [1.4, 1.42], "schedule": ["BC", "CB"]},
           {"kind": "perceptual", "frame_set": "fs-8", "seed": 1024, "ssim": [0.999, 0.995], "lpips": None,
            "vbench": None, "stage_status": "ok"}]
SERVED: dict = {}
EXAMPLES = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served-machine")
    url = f"sqlite:///{folder / 'registry.db'}"
    assert CliRunner().invoke(main, ["--db", url, "init"]).exit_code == 0
    for name, manifest in (("timed", TIMED), ("watched", WATCHED)):
        (folder / f"{name}.yaml").write_text(manifest)
        done = CliRunner().invoke(main, ["--db", url, "--actor", "lead", "workload", "declare",
                                         str(folder / f"{name}.yaml")])
        assert done.exit_code == 0, done.output
    with ServerProcess(url) as server, server.client() as client:  # one client (an SSL context each costs ~50 ms)
        SERVED.update(url=url, server=server, client=client)
        yield
    SERVED.clear()


class Token:
    def __init__(self, secret: str, key_id: str, scopes: tuple[str, ...], glob: str | None, person: bool):
        self.secret, self.key_id, self.scopes, self.glob, self.person = secret, key_id, scopes, glob, person
        self.revoked = False

    def refusal(self, scope: str, workload: str | None = None, person: bool = False) -> int | None:
        """The status the permission matrix gives a request needing `scope` (on `workload`), or None: permitted."""
        if self.revoked:
            return 401
        if scope not in self.scopes or (person and not self.person):
            return 403
        if scope in ("ingest", "decide") and not fnmatch.fnmatchcase(workload or "", self.glob or ""):
            return 403
        return None


class ServedRegistry(CheckedAtTheEnd):

    @initialize()
    def start(self):
        self.url, self.server = SERVED["url"], SERVED["server"]
        self.tmp = Path(tempfile.mkdtemp(prefix="served-machine-"))
        self.prefix = f"x{next(EXAMPLES)}"
        self.runner = CliRunner()
        self.tokens: list[Token] = []
        self.sessions: dict[str, list[str]] = {"timed": []}
        self.batches: dict[tuple[str, str], str] = {}  # (session, batch key) -> the pairs' name
        self.monitor_batches = 0
        # A worker and lead, a person and a reader to start with (in the model: their probes are checked too).
        lead = self.issue(("decide", "ingest"), "srv-*", False)
        self.issue(("decide",), "srv-*", True)
        self.issue(("read",), None, False)
        for kind in WORKLOADS:  # one artifact of each workload, registered over HTTP
            answer = self.http(lead, "POST", "/api/artifacts", {
                "artifact": self.artifact(kind), "workload": WORKLOADS[kind], "kind": "step_cache",
                "payload_sha256": f"{next(EXAMPLES):064x}"})
            assert answer.status_code == 200, answer.text
        self.open_a_session(0)

    def release(self):
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    def artifact(self, kind: str) -> str:
        return f"{self.prefix}-{kind}"

    # -- the two doors ------------------------------------------------------------------------------------------

    def cli(self, *args: str, actor: str = "machine"):
        result = self.runner.invoke(main, ["--db", self.url, "--actor", actor, *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.output)
        assert result.exit_code in (0, 1, 3), (args, result.exit_code, result.output)
        if result.exit_code == 1:
            assert len(result.stderr.strip().splitlines()) == 1, (args, result.output)
        return result

    def http(self, token: Token, method: str, path: str, body=None):
        answer = SERVED["client"].request(method, path, json=body, headers={"Authorization": f"Bearer {token.secret}"})
        assert answer.status_code < 500, (method, path, answer.text)
        if answer.status_code >= 400:
            assert set(answer.json()) == {"error"} and "\n" not in answer.json()["error"], answer.text
        return answer

    def expect(self, answer, refusal: int | None, *permitted: int):
        """The answer the matrix gives: its refusal, or (permitted) one of the statuses the use case may give."""
        if refusal is not None:
            assert answer.status_code == refusal, (refusal, answer.status_code, answer.text)
        else:
            assert answer.status_code in (permitted or (200,)), (answer.status_code, answer.text)

    def issue(self, scopes, glob, person) -> Token:
        flags = [arg for scope in scopes for arg in ("--scope", scope)]
        if any(scope in ("ingest", "decide") for scope in scopes):
            flags += ["--workload", glob]
        done = self.cli("token", "issue", "--principal", f"{self.prefix}-p{len(self.tokens)}", *flags,
                        *(["--person"] if person else []), "--json")
        assert done.exit_code == 0, done.output
        issued = json.loads(done.stdout)
        token = Token(issued["token"], issued["key_id"], tuple(issued["scopes"]), issued["workload"], person)
        self.tokens.append(token)
        return token

    def state(self, kind: str) -> dict:
        return json.loads(self.cli("show", self.artifact(kind), "--json").stdout)

    # -- rules ----------------------------------------------------------------------------------------------------

    @rule(scopes=st.sampled_from(SCOPE_SETS), glob=st.sampled_from(GLOBS), person=st.booleans())
    def issue_a_token(self, scopes, glob, person):
        self.issue(scopes, glob, person)

    @rule(which=st.integers(0, 20))
    def revoke_a_token(self, which):
        token = self.tokens[which % len(self.tokens)]
        done = self.cli("token", "revoke", token.key_id, "--reason", "rotated")
        assert done.exit_code == (1 if token.revoked else 0), done.output
        token.revoked = True

    @rule(which=st.integers(0, 20))
    def open_a_session(self, which):
        token = self.tokens[which % len(self.tokens)]
        answer = self.http(token, "POST", f"/api/artifacts/{self.artifact('timed')}/sessions",
                           {"device": "NVIDIA H200", "timer": "cuda_event"})
        self.expect(answer, token.refusal("ingest", WORKLOADS["timed"]))
        if answer.status_code == 200:
            self.sessions["timed"].append(answer.json()["session"])

    @rule(which=st.integers(0, 20), session=st.integers(0, 3), key=st.sampled_from(["k0", "k1", "k2"]),
          pairs=st.sampled_from(sorted(PAIRS)), door=st.sampled_from(["http", "cli"]))
    def record_a_batch(self, which, session, key, pairs, door):
        """A batch under a key: new, retried with the same pairs (nothing appended) or with others (refused)."""
        if not self.sessions["timed"]:
            return
        session = self.sessions["timed"][session % len(self.sessions["timed"])]
        earlier = self.batches.get((session, key))
        baseline, candidate = PAIRS[pairs]
        if door == "http":
            token = self.tokens[which % len(self.tokens)]
            answer = self.http(token, "POST", f"/api/artifacts/{self.artifact('timed')}/sessions/{session}/batches",
                               {"batch": key, "baseline_s": baseline, "candidate_s": candidate})
            refusal = token.refusal("ingest", WORKLOADS["timed"])
            if refusal is None and earlier not in (None, pairs):
                refusal = 409  # other pairs under a key already recorded: final, no Retry-After
                assert "retry-after" not in answer.headers
            self.expect(answer, refusal)
            recorded = answer.status_code == 200
            if recorded:
                assert answer.json()["appended"] is (earlier is None)
        else:
            done = self.cli("bench", "record", self.artifact("timed"), session, "--batch", key,
                            "--baseline", ",".join(map(str, baseline)), "--candidate", ",".join(map(str, candidate)),
                            "--json")
            assert done.exit_code == (0 if earlier in (None, pairs) else 1), done.output
            recorded = done.exit_code == 0
            if recorded:
                assert json.loads(done.stdout)["appended"] is (earlier is None)
        if recorded:
            self.batches[(session, key)] = pairs

    @rule(which=st.integers(0, 20), then_promote=st.integers(0, 20))
    def import_passing_evidence(self, which, then_promote):
        """A passing document over HTTP, and the gate over HTTP: each token answered as the matrix says."""
        token = self.tokens[which % len(self.tokens)]
        answer = self.http(token, "POST", "/api/evidence", {
            "format": "registry.evidence/1", "artifact": self.artifact("watched"), "evidence": PASSING})
        self.expect(answer, token.refusal("ingest", WORKLOADS["watched"]))
        self.promote(then_promote, "watched", "http")

    @rule(which=st.integers(0, 20), kind=st.sampled_from(sorted(WORKLOADS)), door=st.sampled_from(["http", "cli"]))
    def promote(self, which, kind, door):
        if door == "cli":
            assert self.cli("promote", self.artifact(kind)).exit_code in (0, 3)
            return
        token = self.tokens[which % len(self.tokens)]
        answer = self.http(token, "POST", f"/api/artifacts/{self.artifact(kind)}/promote")
        self.expect(answer, token.refusal("decide", WORKLOADS[kind]))

    @rule(which=st.integers(0, 20), kind=st.sampled_from(sorted(WORKLOADS)),
          action=st.sampled_from(["approve", "revoke"]), door=st.sampled_from(["http", "cli"]))
    def decide_by_hand(self, which, kind, action, door):
        if door == "cli":
            self.cli(action, self.artifact(kind), "--reason", "looked at it", actor="alice")
            return
        token = self.tokens[which % len(self.tokens)]
        answer = self.http(token, "POST", f"/api/artifacts/{self.artifact(kind)}/{action}", {"reason": "looked"})
        self.expect(answer, token.refusal("decide", WORKLOADS[kind], person=True), 200, 400)

    @rule(fast=st.booleans())
    def advance_the_watched_artifact(self, fast):
        """The next step of a watched artifact's life: the first token's evidence and promotion over HTTP (a worker
        and lead on every workload, unless revoked since), then monitor batches on the command line (below the
        threshold unless `fast`: two alarm at pair 10), then a person's acknowledgment of the alarm. The first rule
        by name, so the simplest example (every draw zero) walks this path."""
        state = self.state("watched")
        monitor = state["monitor"] or {}
        if state["decision"] != "promoted":
            self.import_passing_evidence(0, 0)
        elif monitor.get("alarm") and not monitor.get("acknowledged"):
            self.acknowledge_the_alarm()
        else:
            self.record_a_monitor_batch(not fast)

    @rule(slow=st.booleans())
    def record_a_monitor_batch(self, slow):
        promoted = self.state("watched")["decision"] == "promoted"
        self.monitor_batches += 1
        ratio = 0.99 if slow else 1.5
        done = self.cli("monitor", "record", self.artifact("watched"), "--batch", f"m{self.monitor_batches}",
                        "--baseline", ",".join(["2.0"] * 5), "--candidate", ",".join([repr(2.0 / ratio)] * 5),
                        "--device", "NVIDIA H200", "--software", "torch=2.13.0", "--json")
        assert done.exit_code == (0 if promoted else 1), done.output

    @rule()
    def acknowledge_the_alarm(self):
        monitor = self.state("watched")["monitor"]
        alarm = (monitor or {}).get("alarm")
        if alarm is None:
            return
        done = self.cli("monitor", "ack", self.artifact("watched"), alarm["event_id"], "--reason", "known",
                        actor="alice")
        assert done.exit_code == (1 if monitor["acknowledged"] else 0), done.output

    # -- invariants -----------------------------------------------------------------------------------------------

    def whole_checks(self):
        if not hasattr(self, "prefix"):
            return
        self.the_permission_matrix_holds()
        self.the_logs_invariants_hold()

    def the_permission_matrix_holds(self):
        """(a) one probe per scope, for every token of the example."""
        probes = [("read", None, "GET", f"/api/artifacts/{self.artifact('timed')}", None),
                  ("ingest", "srv-wan", "GET", f"/api/artifacts/{self.artifact('timed')}/subject", None),
                  ("decide", "srv-mon", "POST", "/api/lock", {"workload": "srv-mon"}),  # no key: 400 once permitted
                  ("admin", None, "POST", "/api/workloads", {"manifest": TIMED})]  # the same contract: appends nothing
        for token in self.tokens:
            for scope, workload, method, path, body in probes:
                self.expect(self.http(token, method, path, body), token.refusal(scope, workload), 200, 400)

    def the_logs_invariants_hold(self):
        """(b) the chain, the read models against a replay, keys recorded once, nothing written by a revoked token."""
        verified = self.cli("verify", "--json")
        assert verified.exit_code == 0 and json.loads(verified.stdout)["intact"], verified.output
        replayed = self.cli("replay", "--verify")
        assert replayed.exit_code == 0, replayed.output
        registry = open_registry(self.url)
        try:
            events = registry.store.read_all()
        finally:
            registry.close()
        batches = [(e.payload["session"], e.payload["batch"]) for e in events if e.type == "BenchmarkPairsRecorded"]
        assert len(batches) == len(set(batches))
        watched = [(e.stream, e.payload["batch"]) for e in events if e.type == "PairsRemeasured"]
        assert len(watched) == len(set(watched))
        revoked_at = {e.payload["key_id"]: e.position for e in events if e.type == "TokenRevoked"}
        for event in events:
            key_id = event.actor.rpartition("/")[2]
            if "/" in event.actor and key_id in revoked_at:
                assert event.position < revoked_at[key_id], (event.type, event.actor)
        mine = {(s, k) for s, k in batches if s in self.sessions["timed"]}
        assert mine == set(self.batches)  # what the model says was recorded, and nothing else


ServedRegistry.TestCase.settings = settings(max_examples=6, stateful_step_count=15, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestServedRegistry = ServedRegistry.TestCase
TestServedRegistryCheckedAfterEveryStep = checked_after_every_step(ServedRegistry, ServedRegistry.TestCase.settings)
