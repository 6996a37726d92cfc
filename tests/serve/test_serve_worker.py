"""`registry evaluate --server URL --token T`: a worker with no database records a kernel's evidence and its
benchmark session through a real server process, under its own name; a token for another workload records nothing.
`registry demo --server` carries the demo's whole campaign (its five candidates) through the same server.

Needs seconds: a server process, a Triton kernel evaluated under the interpreter in the worker's process, and
the reduced demo campaign (6 pairs a candidate) timed on the client.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from registry.app.campaign import KERNEL_ARTIFACT
from registry.app.tokens import issue_token
from registry.workloads.candidates import CANDIDATE_NAMES
from limits import HANG_GUARD_S
from serve_helpers import ServerProcess
from store_helpers import head_of, opened

MANIFEST = ("workload: wan-modln-op\nparity: {policy: byte_equal}\n"
            "speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, max_pairs: 40}\n")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('worker') / 'registry.db'}"
    registry = opened(url, actor="lead", create=True)
    tokens = {name: issue_token(registry, name, ["ingest"] if name != "lead" else ["admin", "decide"],
                                workload=glob)[0]
              for name, glob in (("gpu-1", "wan-*"), ("ltx-gpu", "ltx-*"), ("lead", "*"))}
    tokens["demo"] = issue_token(registry, "demo", ["read", "ingest", "decide", "admin"], workload="*", person=True)[0]
    with ServerProcess(url) as server:
        with server.client(tokens["lead"]) as lead:
            assert lead.post("/api/workloads", json={"manifest": MANIFEST}).status_code == 200
            assert lead.post("/api/artifacts", json={
                "artifact": "modln", "workload": "wan-modln-op", "kind": "fused_kernel",
                "op": "modulated_layernorm", "entry": "registry.kernels.modln:modulated_layernorm_triton"
            }, timeout=300).status_code == 200
        server.url, server.tokens = url, tokens
        yield server


def evaluate(served, token, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY_DATABASE_URL", "REGISTRY_TOKEN")}
    return subprocess.run([sys.executable, "-m", "registry", "evaluate", "modln", "--server", served.base,
                           "--token", token, "--warmup", "0", "--runs", "4", "--json"],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


# -- the worker's client: resends under the same key, with backoff ------------------------------------------------

class _Scripted:
    """A real HTTP server on a free loopback port that answers each request by the next step of a script:
    ("late",) answers 200 only once the next request has come (the client gave up waiting for it and sent again:
    late by construction, however slow the machine), (status, headers) answers at once."""

    def __init__(self, steps):
        import http.server
        import threading

        self.steps, self.bodies = list(steps), []
        self.arrived = threading.Condition()
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                with scripted.arrived:
                    scripted.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                    seen = len(scripted.bodies)
                    step = scripted.steps.pop(0)
                    scripted.arrived.notify_all()
                    if step[0] == "late":
                        scripted.arrived.wait_for(lambda: len(scripted.bodies) > seen, HANG_GUARD_S)
                        step = (200, {})
                status, headers = step
                body = json.dumps({"appended": True} if status == 200 else {"error": "lost a race"}).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "application/json",
                                    "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.block_on_close = False  # a late answer's thread is not waited for at the end
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *_exc):
        self.server.shutdown()
        self.server.server_close()


def test_a_batch_whose_answer_is_late_or_that_lost_a_race_is_sent_again_under_its_key():
    from registry.serve.client import RegistryClient

    server = _Scripted([("late",), (409, {"Retry-After": "0"}), (200, {})])
    # The first answer comes only after the resend, whatever the timeout; the two others come at once from a thread
    # of this process over loopback (milliseconds), so a second is the bound on them even on a loaded machine.
    with server as base, RegistryClient(base, "t", timeout=1.0) as client:
        assert client.record_batch("a", "s", "b0", [2.0], [1.0]) == {"appended": True}
        assert client.resent == 2
    # The same body each time: the batch key in it is what lets the server append it once.
    assert len(server.bodies) == 3 and len(set(server.bodies)) == 1 and json.loads(server.bodies[0])["batch"] == "b0"


def test_a_refusal_not_marked_for_retry_is_raised_at_once():
    """A 409 without Retry-After (other pairs under a used key) is final: one request, the server's line."""
    from registry.serve.client import RegistryClient, ServerRefused

    server = _Scripted([(409, {}), (200, {})])
    with server as base, RegistryClient(base, "t", timeout=5) as client:
        with pytest.raises(ServerRefused, match=r"\(409\): lost a race"):
            client.record_batch("a", "s", "b0", [2.0], [1.0])
        assert client.resent == 0
    assert len(server.bodies) == 1


def test_resends_back_off_exponentially_with_full_jitter():
    from registry.serve.client import BACKOFF_BASE, BACKOFF_CAP, backoff_seconds

    assert [backoff_seconds(k, lambda: 1.0) for k in range(3)] == [BACKOFF_BASE, 2 * BACKOFF_BASE, 4 * BACKOFF_BASE]
    assert backoff_seconds(30, lambda: 1.0) == BACKOFF_CAP and backoff_seconds(30, lambda: 0.0) == 0.0
    import random

    draws = [backoff_seconds(4, random.Random(seed).random) for seed in range(200)]
    assert 0 <= min(draws) < 0.1 * 16 * BACKOFF_BASE and 0.9 * 16 * BACKOFF_BASE < max(draws) <= 16 * BACKOFF_BASE


# -- a worker through a real server process -----------------------------------------------------------------------

def test_a_worker_without_a_database_records_evidence_and_pairs_through_the_server(served, tmp_path):
    done = evaluate(served, served.tokens["gpu-1"], tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["appended"] is True and result["session"]["pairs"] == 4
    assert list(tmp_path.iterdir()) == []  # no registry.db, nothing else written where the worker ran
    store = opened(served.url).store
    events = store.read_stream("artifact:modln")
    assert [e.type for e in events[1:]] == ["ParityMeasured", "ExecutionObserved"]  # the pairs are in a session
    key = next(e for e in store.read_all() if e.type == "TokenIssued" and e.payload["principal"] == "gpu-1")
    assert {e.actor for e in events[1:]} == {f"gpu-1/{key.payload['key_id']}"}
    bench = [e for e in store.read_all() if e.stream.startswith("bench:")]
    assert sum(len(e.payload.get("baseline_s", [])) for e in bench) == 4


def test_a_worker_for_another_workload_records_nothing(served, tmp_path):
    before = head_of(served.url)
    done = evaluate(served, served.tokens["ltx-gpu"], tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "does not reach workload wan-modln-op" in done.stderr
    assert head_of(served.url) == before


def test_the_demo_runs_its_whole_campaign_through_the_server(served, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY_DATABASE_URL", "REGISTRY_TOKEN")}
    done = subprocess.run([sys.executable, "-m", "registry", "demo", "--server", served.base, "--token",
                           served.tokens["demo"], "--warmup", "0", "--runs", "6", "--out", "out", "--check", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr  # --check: every verdict as the demo promises on this machine
    result = json.loads(done.stdout)
    assert result["problems"] == []
    assert [row["artifact"] for row in result["rows"]] == [*CANDIDATE_NAMES, KERNEL_ARTIFACT]  # all five
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # bundles and strips; no database
    store = opened(served.url).store
    key = next(e for e in store.read_all() if e.type == "TokenIssued" and e.payload["principal"] == "demo")
    for row in result["rows"]:
        events = store.read_stream(f"artifact:{row['artifact']}")
        assert events[-1].type == "VerdictRendered" and events[-1].payload["verdict"]["decision"] == row["decision"]
        assert {e.actor for e in events} == {f"demo/{key.payload['key_id']}"}
