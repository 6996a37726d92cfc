"""`registry serve` as a real process on a free port, on SQLite and on Postgres: the permission matrix (every
route against every kind of token, and none, an expired one, a revoked one, one for another workload), a worker
that may record pairs for its workloads and nothing else, idempotent batches, refusals as 4xx in one line.

One server per backend serves the whole module (starting one costs an interpreter and the API's imports).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import PG_SKIP, PG_URL, _fresh_postgres_database
from registry.serve.client import RegistryClient, ServerRefused
from serve_helpers import LTX, WAN, ServerProcess, seed
from store_helpers import opened
from limits import HANG_GUARD_S

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request, tmp_path_factory):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('serve') / 'registry.db'}"
    else:
        if not PG_URL:
            pytest.skip(PG_SKIP)
        url = _fresh_postgres_database()
    seeded = seed(url)
    # On Postgres the server runs as two worker processes (`serve --workers`), so every test below also holds
    # for requests answered by either of them.
    with ServerProcess(url, *(() if request.param == "sqlite" else ("--workers", "2"))) as server:
        server.url, server.seeded, server.clients = url, seeded, {}
        worker = server.client(seeded.tokens["ingest"])
        server.session = worker.post("/api/artifacts/wan-fast/sessions",
                                     json={"device": "NVIDIA H200", "timer": "cuda_event"}).json()["session"]
        yield server


def tokens(served):
    return served.seeded.tokens


# (method, path, body or None, scope it needs, person only): every route of the API.
ROUTES = [
    ("GET", "/api/artifacts/wan-fast", None, "read", False),
    ("GET", "/api/artifacts/wan-fast/bench", None, "read", False),
    ("GET", "/api/history/wan-fast?limit=5", None, "read", False),
    ("GET", "/api/report", None, "read", False),
    ("GET", "/api/verify", None, "read", False),
    ("GET", "/api/resolve?workload=wan-t2v&arch=sm90", None, "read", False),
    ("GET", "/api/live", None, "read", False),
    ("GET", "/api/live/events", None, "read", False),
    ("GET", "/api/artifacts/wan-fast/subject", None, "ingest", False),
    ("POST", "/api/evidence", {"format": "registry.evidence/1", "artifact": "wan-fast", "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}]}, "ingest", False),
    ("POST", "/api/artifacts/wan-fast/sessions", {"device": "d", "timer": "perf_counter"}, "ingest", False),
    ("POST", "/api/artifacts/wan-fast/sessions/{session}/batches",
     {"batch": "m-{n}", "baseline_s": [2.0], "candidate_s": [1.9]}, "ingest", False),
    ("POST", "/api/artifacts", {"artifact": "wan-new-{n}", "workload": "wan-t2v", "kind": "step_cache"},
     "decide", False),
    ("POST", "/api/artifacts/wan-fast/promote", None, "decide", False),
    ("POST", "/api/artifacts/wan-fast/approve", {"reason": "looks right"}, "decide", True),
    ("POST", "/api/artifacts/wan-fast/revoke", {"reason": "pulled"}, "decide", True),
    ("POST", "/api/lock", {"workload": "wan-t2v"}, "decide", False),
    ("POST", "/api/workloads", {"manifest": WAN}, "admin", False),
]
# Token name -> (scope, workload glob reaching wan-t2v, person); None: no token the server accepts.
TOKENS = {
    "none": None, "expired": None, "revoked": None, "garbage": None,
    "read": ("read", False, False), "ingest": ("ingest", True, False), "ingest-other": ("ingest", False, False),
    "decide": ("decide", True, False), "person": ("decide", True, True), "person-other": ("decide", False, True),
    "admin": ("admin", False, False),
}


def expected_status(token: str, scope: str, person_only: bool) -> int | None:
    """401 or 403 when the token must be refused; None when the request must pass the token checks."""
    held = TOKENS[token]
    if held is None:
        return 401
    held_scope, reaches, person = held
    if held_scope != scope or (person_only and not person):
        return 403
    if scope in ("ingest", "decide") and not reaches:
        return 403
    return None


def call(served, token: str, method: str, path: str, body):
    secret = {"none": None, "garbage": "rgt_0000_not-a-token"}.get(token, tokens(served).get(token))
    call.n = getattr(call, "n", 0) + 1
    path = path.replace("{session}", served.session)
    text = None if body is None else json.dumps(body).replace("{n}", str(call.n))
    if token not in served.clients:  # one client per token for the module (each costs a TLS context's setup)
        served.clients[token] = served.client(secret)
    client = served.clients[token]
    if path.endswith("/events"):
        with client.stream(method, path) as response:
            return response.status_code, (json.loads(response.read()) if response.status_code >= 400 else {})
    response = client.request(method, path, content=text, headers={"content-type": "application/json"})
    return response.status_code, response.json()


@pytest.mark.parametrize("token", list(TOKENS))
def test_every_route_admits_exactly_the_tokens_whose_scope_covers_it(served, token):
    for method, path, body, scope, person_only in ROUTES:
        status, answer = call(served, token, method, path, body)
        expected = expected_status(token, scope, person_only)
        where = f"{token} {method} {path}: {status} {answer}"
        if expected is None:
            assert status < 500 and status not in (401, 403), where
        else:
            assert status == expected, where
            assert set(answer) == {"error"} and "\n" not in answer["error"], where


def test_whoami_answers_any_valid_token_and_refuses_the_rest(served):
    for token in TOKENS:
        status, answer = call(served, token, "GET", "/api/whoami", None)
        assert status == (401 if TOKENS[token] is None else 200), (token, answer)
    assert "expired" in call(served, "expired", "GET", "/api/whoami", None)[1]["error"]
    assert "revoked" in call(served, "revoked", "GET", "/api/whoami", None)[1]["error"]


def test_a_wan_worker_records_pairs_for_wan_t2v_under_its_own_name(served):
    with served.client(tokens(served)["ingest"]) as worker:
        opened = worker.post("/api/artifacts/wan-fast/sessions", json={"device": "NVIDIA H200", "timer": "cuda_event"})
        assert opened.status_code == 200, opened.text
        session = opened.json()["session"]
        recorded = worker.post(f"/api/artifacts/wan-fast/sessions/{session}/batches",
                               json={"batch": "b1", "baseline_s": [2.0, 2.0], "candidate_s": [1.0, 1.0]})
        assert recorded.status_code == 200 and recorded.json()["appended"] is True
    with served.client(tokens(served)["read"]) as reader:
        identity = reader.get("/api/artifacts/wan-fast").json()["identity"]
        events = reader.get(f"/api/history/bench:{identity}?limit=1000").json()["events"]
    mine = [e for e in events if e["payload"].get("session") == session]
    assert [e["type"] for e in mine] == ["BenchmarkSessionOpened", "BenchmarkPairsRecorded"]
    assert {e["actor"] for e in mine} == {f"ingest/{served.seeded.key_ids['ingest']}"}


def test_a_wan_worker_cannot_render_a_verdict_or_approve(served):
    with served.client(tokens(served)["ingest"]) as worker:
        for path, body in (("/api/artifacts/wan-fast/promote", None),
                           ("/api/artifacts/wan-fast/approve", {"reason": "mine"})):
            answer = worker.post(path, json=body)
            assert answer.status_code == 403 and "lacks the decide scope" in answer.json()["error"]


def test_a_wan_worker_cannot_declare_a_contract(served):
    with served.client(tokens(served)["ingest"]) as worker:
        answer = worker.post("/api/workloads", json={"manifest": WAN.replace("1.2", "1.0")})
    assert answer.status_code == 403 and "lacks the admin scope" in answer.json()["error"]
    with served.client(tokens(served)["read"]) as reader:
        assert reader.get("/api/history/workload:wan-t2v").json()["events"][-1]["payload"]["contract_version"] == 1


def test_a_wan_worker_cannot_record_for_another_workload(served):
    with served.client(tokens(served)["ingest"]) as worker:
        answer = worker.post("/api/artifacts/ltx-fast/sessions", json={"device": "d", "timer": "perf_counter"})
        assert answer.status_code == 403 and "does not reach workload ltx-video" in answer.json()["error"]
        document = {"format": "registry.evidence/1", "artifact": "ltx-fast",
                    "evidence": [{"kind": "execution", "candidate_calls": 4, "fallbacks": 0}]}
        assert worker.post("/api/evidence", json=document).status_code == 403
        assert worker.get("/api/artifacts/ltx-fast/subject").status_code == 403


def test_no_token_can_issue_a_token(served):
    with served.client(tokens(served)["admin"]) as admin:
        schema = admin.get("/openapi.json").json()
        assert not [path for path in schema["paths"] if "token" in path]
        for path in ("/api/tokens", "/api/token", "/api/tokens/issue"):
            assert admin.post(path, json={"principal": "x", "scopes": ["admin"]}).status_code in (404, 405)
    with served.client(tokens(served)["ingest"]) as worker:
        assert worker.post("/api/tokens", json={"principal": "x", "scopes": ["ingest"]}).status_code in (404, 405)


def test_a_retried_batch_appends_once_and_other_pairs_under_its_key_are_refused(served):
    with served.client(tokens(served)["ingest"]) as worker:
        session = worker.post("/api/artifacts/wan-fast/sessions", json={"device": "d", "timer": "perf_counter"}).json()["session"]
        batch = {"batch": "retry-me", "baseline_s": [2.0, 2.1], "candidate_s": [1.0, 1.1]}
        path = f"/api/artifacts/wan-fast/sessions/{session}/batches"
        answers = [worker.post(path, json=batch).json() for _ in range(3)]
        assert [a["appended"] for a in answers] == [True, False, False]
        other = worker.post(path, json={**batch, "baseline_s": [3.0, 3.0]})
        # Refused for good: a 409 without Retry-After, which a client does not resend (registry/serve/client.py).
        assert other.status_code == 409 and "retry-after" not in other.headers and "\n" not in other.json()["error"]
    with served.client(tokens(served)["read"]) as reader:
        identity = reader.get("/api/artifacts/wan-fast").json()["identity"]
        events = reader.get(f"/api/history/bench:{identity}?limit=1000").json()["events"]
    assert sum(e["payload"].get("batch") == "retry-me" and e["payload"]["session"] == session for e in events) == 1


def test_batches_sent_at_once_append_once_each_and_a_refused_one_leaves_the_others(served):
    """Batches in flight together are recorded in groups (one writer a server process): concurrent distinct
    batches, four copies of one key racing each other, and a batch refused among them."""
    with served.client(tokens(served)["decide"]) as decider:
        assert decider.post("/api/artifacts", json={"artifact": "wan-grouped", "workload": "wan-t2v",
                                                    "kind": "step_cache", "payload_sha256": "c" * 64}).status_code == 200
    with served.client(tokens(served)["ingest"]) as worker:
        session = worker.post("/api/artifacts/wan-grouped/sessions", json={"device": "d", "timer": "perf_counter"}).json()["session"]
    at_gate = {"baseline": [1.2, 1.2], "candidate": [1.0, 1.0]}  # decides nothing: every batch is taken
    sends = ([("ingest", session, f"d{i}") for i in range(8)] + [("ingest", session, "race")] * 4
             + [("ingest", "bs-unknown", "r"), ("ingest-other", session, "elsewhere"), ("revoked", session, "gone")])
    start = threading.Barrier(len(sends))

    def send(where):
        # The worker's own client: a 409 with Retry-After (the other server process's group moved the stream
        # first) is sent again under the same key.
        with RegistryClient(served.base, tokens(served)[where[0]]) as client:
            start.wait()
            try:
                return client.record_batch("wan-grouped", where[1], where[2], **at_gate)
            except ServerRefused as refused:
                return str(refused)

    with ThreadPoolExecutor(len(sends)) as pool:
        answers = list(pool.map(send, sends))
    appended = [answer["appended"] for answer in answers[:12]]
    assert appended[:8] == [True] * 8 and sorted(appended[8:]) == [False, False, False, True], answers
    assert "(400): session bs-unknown is not open" in answers[12]
    assert "(403)" in answers[13] and "wan-t2v" in answers[13], answers[13]
    assert "(401)" in answers[14] and "is revoked" in answers[14], answers[14]
    last = max(answers[:12], key=lambda answer: answer["pairs"])  # the answer of the batch appended last
    assert last["pairs"] == 18
    with served.client(tokens(served)["read"]) as reader:
        identity = reader.get("/api/artifacts/wan-grouped").json()["identity"]
        events = reader.get(f"/api/history/bench:{identity}?limit=1000").json()["events"]
        assert reader.get("/api/artifacts/wan-grouped/bench").json() == {
            key: value for key, value in last.items() if key not in ("session", "batch", "appended")}
        assert reader.get("/api/verify").json()["intact"]
    batches = sorted(e["payload"]["batch"] for e in events if e["type"] == "BenchmarkPairsRecorded")
    assert batches == sorted([f"d{i}" for i in range(8)] + ["race"])


def test_a_token_revoked_on_the_command_line_is_refused_on_the_next_request(served):
    from registry.app.tokens import issue_token

    secret, grant = issue_token(opened(served.url, actor="lead"), "short-lived", ["read"])
    with served.client(secret) as client:
        assert client.get("/api/verify").status_code == 200
        done = subprocess.run([sys.executable, "-m", "registry", "--db", served.url, "token", "revoke", grant.key_id,
                               "--reason", "rotated"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        refused = client.get("/api/verify")
    assert refused.status_code == 401 and refused.json() == {"error": f"token {grant.key_id} is revoked"}


def test_a_person_approves_under_their_own_name_and_a_refusal_keeps_the_clis_line(served):
    with served.client(tokens(served)["person"]) as person:
        refused = person.post("/api/artifacts/wan-fast/approve", json={"reason": "ok"})
        assert refused.status_code == 400 and refused.json()["error"].count("\n") == 0
        unknown = person.post("/api/artifacts/nobody/promote")
        assert unknown.status_code == 400 and unknown.json()["error"].startswith("unknown artifact 'nobody'")
        declared = person.post("/api/workloads", json={"manifest": LTX})
        assert declared.status_code == 403


def test_declare_through_the_server_names_the_admin_as_actor(served):
    with served.client(tokens(served)["admin"]) as admin:
        answer = admin.post("/api/workloads", json={"manifest": LTX.replace("1.2", "1.25")})
        assert answer.status_code == 200 and answer.json()["appended"] is True
        bad = admin.post("/api/workloads", json={"manifest": "workload: [unclosed"})
        assert bad.status_code == 400 and "\n" not in bad.json()["error"]
    with served.client(tokens(served)["read"]) as reader:
        last = reader.get("/api/history/workload:ltx-video").json()["events"][-1]
    assert last["actor"] == f"admin/{served.seeded.key_ids['admin']}"


def test_history_pages_carry_on_where_the_last_one_ended(served):
    with served.client(tokens(served)["read"]) as reader:
        first = reader.get("/api/history/wan-fast?limit=1").json()
        assert len(first["events"]) == 1 and first["next"] == 1
        rest = reader.get(f"/api/history/wan-fast?after={first['next']}&limit=1000").json()
    assert all(e["version"] > 1 for e in rest["events"]) and rest["next"] is None


def test_a_defect_is_a_500_naming_a_crash_id_and_the_traceback_stays_in_the_log(sqlite_url, caplog):
    from fastapi.testclient import TestClient
    from registry.serve.api import ServerConfig, create_app

    app = create_app(ServerConfig(opened(sqlite_url, actor="lead", create=True)))

    @app.get("/defect")
    def defect():
        raise ZeroDivisionError("a bug, not a refusal")

    with caplog.at_level("ERROR", logger="registry.serve"):
        answer = TestClient(app, raise_server_exceptions=False).get("/defect")
    body = answer.json()
    assert answer.status_code == 500 and set(body) == {"error", "crash_id"}
    assert "ZeroDivisionError" not in answer.text and "Traceback" not in answer.text
    assert body["crash_id"] in caplog.text and "ZeroDivisionError" in caplog.text


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_workers_answer_on_one_port_and_stopping_or_killing_the_server_ends_them_all(tmp_path, stop):
    """`serve --workers 2`: two processes answer (each request by one), and stopping the server stops both; so
    does killing it, which gives it no chance to stop them (they are sent SIGTERM as it dies).

    Needs seconds: a server of its own (its stop is what is tested), on a SQLite file."""
    import signal
    import time
    from pathlib import Path

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    reader = seed(url).tokens["read"]

    def started(pid: str) -> str | None:
        """When the process `pid` started (field 22 of its stat), or None when none has that pid: a pid that
        names a process started at another moment is another process (the machine reuses pids)."""
        try:
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
        except OSError:
            return None

    with ServerProcess(url, "--workers", "2") as server:
        pid = server.process.pid
        deadline = time.monotonic() + HANG_GUARD_S
        # the listening line comes before the fork: the socket queues requests meanwhile
        while len(children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split()) < 2:
            assert time.monotonic() < deadline, children
            time.sleep(0.05)
        assert len(children) == 2
        workers = {child: started(child) for child in children}
        for _ in range(4):  # a fresh connection each, so either worker may answer
            with server.client(reader) as client:
                assert client.get("/api/artifacts/wan-fast").json()["artifact"] == "wan-fast"
        signum = signal.SIGTERM if stop == "sigterm" else signal.SIGKILL
        server.process.send_signal(signum)
        assert server.process.wait(timeout=HANG_GUARD_S) == -signum  # as one process ends (uvicorn re-raises it)
        assert None not in workers.values()
        # a killed server's workers end after it: waited for, within the hang guard
        while [child for child, moment in workers.items() if started(child) == moment]:
            assert time.monotonic() < deadline + HANG_GUARD_S, workers
            time.sleep(0.05)


def test_an_answer_for_a_request_whose_loop_has_closed_or_that_was_cancelled_is_dropped():
    """The pair writer hands every batch of its group its answer; one whose server loop has closed (the server
    stopping) must not raise in the writer's thread, which would leave the group's other batches unanswered."""
    import asyncio

    from registry.serve.api import _deliver

    loop = asyncio.new_event_loop()
    answered = loop.create_future()
    loop.close()
    _deliver(loop, answered, (True, None))
    assert not answered.done()
    # A request cancelled while its batch waited (its client gone) is answered to no one, without an error in its loop.
    loop, failed = asyncio.new_event_loop(), []
    loop.set_exception_handler(lambda _loop, context: failed.append(context))
    cancelled = loop.create_future()
    cancelled.cancel()
    _deliver(loop, cancelled, (True, None))
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    assert cancelled.cancelled() and failed == []
