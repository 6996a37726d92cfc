"""`registry serve` takes what the CLI takes, and refuses what it refuses, in the same words, against a real server
process: a number is a JSON number (never `true` or `"1_5"`), no `NaN`, `Infinity` or `1e999`, no key twice in an
object, no field a model does not name, the CLI's bounds on sizes (the 16 MiB evidence document, the 4 MiB
manifest); an undecodable or 100,000-deep body, an unknown route or a bad query number is a 4xx in the documented
shape, never the framework's own `{"detail": ...}`; and nothing refused is recorded. A registration carries what
it registers: the server reads no file of its own for it.

One server serves the module (starting one costs an interpreter and the API's imports).
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from registry.cli.main import main
from serve_helpers import ServerProcess, seed

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

EXECUTION = {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}
BENCHMARK = {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
             "baseline_s": [2.0, 2.02], "candidate_s": [1.0, 1.01], "schedule": ["BC", "CB"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("input")
    url = f"sqlite:///{folder / 'registry.db'}"
    seeded = seed(url)
    with ServerProcess(url) as server:
        server.url, server.tokens, server.folder = url, seeded.tokens, folder
        with server.client(seeded.tokens["ingest"]) as worker:
            server.session = worker.post("/api/artifacts/wan-fast/sessions",
                                         json={"device": "d", "timer": "cuda_event"}).json()["session"]
        yield server


def head(served) -> int:
    with served.client(served.tokens["read"]) as reader:
        return reader.get("/api/verify").json()["count"]


def post(served, token: str, path: str, content: bytes | str):
    with served.client(served.tokens[token]) as client:
        return client.post(path, content=content, headers={"content-type": "application/json"})


def refused(answer, status: int | tuple[int, ...]) -> str:
    """The one line of a refusal in the documented shape."""
    assert answer.status_code in ((status,) if isinstance(status, int) else status), (answer.status_code, answer.text)
    body = answer.json()
    assert set(body) == {"error"} and "\n" not in body["error"], body
    return body["error"]


def cli_line(served, text: str) -> str:
    """What `registry evidence import --json` answers for a file holding `text`: its one refusal line."""
    path = served.folder / "document.json"
    path.write_bytes(text.encode("utf-8"))
    done = CliRunner().invoke(main, ["--db", served.url, "--actor", "cli", "evidence", "import", str(path), "--json"])
    assert done.exit_code == 1, done.output
    return json.loads(done.stdout)["error"]


def batch_path(served) -> str:
    return f"/api/artifacts/wan-fast/sessions/{served.session}/batches"


@pytest.mark.parametrize("time", ["true", '"1_5"', '" 2.0 "', '"2"', '"1.5e0"', "[2.0]", "{}", "null"])
def test_a_pair_time_that_is_not_a_json_number_is_refused_not_read_as_one(served, time):
    before = head(served)
    answer = post(served, "ingest", batch_path(served),
                  f'{{"batch": "t", "baseline_s": [{time}, 2.0], "candidate_s": [1.0, 1.0]}}')
    assert refused(answer, 422).startswith("baseline_s.0: ")
    assert head(served) == before


@pytest.mark.parametrize("time, line", [("NaN", "the JSON token NaN is not a number the registry accepts"),
                                        ("-Infinity", "the JSON token -Infinity is not a number"),
                                        ("1e999", "baseline[0]: inf is not a positive finite time"),
                                        ("0", "baseline[0]: 0.0 is not a positive finite time"),
                                        ("1" + "0" * 1001, "an integer of 1002 digits")])
def test_a_pair_time_no_float_holds_finitely_is_refused_in_the_registrys_words(served, time, line):
    before = head(served)
    answer = post(served, "ingest", batch_path(served),
                  f'{{"batch": "t", "baseline_s": [{time}], "candidate_s": [1.0]}}')
    assert line in refused(answer, 400)
    assert head(served) == before


def document(**fields) -> dict:
    return {"format": "registry.evidence/1", "artifact": "wan-fast", "evidence": [EXECUTION], **fields}


EVIDENCE_TEXTS = {
    "NaN": json.dumps(document(evidence=[{**BENCHMARK, "baseline_s": [2.0, float("nan")]}])),
    "Infinity": json.dumps(document(evidence=[{**BENCHMARK, "candidate_s": [float("inf"), 1.0]}])),
    "1e999": json.dumps(document(evidence=[BENCHMARK])).replace("2.02", "1e999"),
    "artifact twice": json.dumps(document()).replace('"artifact": "wan-fast"',
                                                     '"artifact": "ltx-fast", "artifact": "wan-fast"'),
    "candidate_calls twice": json.dumps(document()).replace('"candidate_calls": 4',
                                                            '"candidate_calls": 0, "candidate_calls": 4'),
    "evidence twice": json.dumps(document()).replace('"evidence": [', '"evidence": [], "evidence": ['),
    "a field nobody names": json.dumps(document(speedup=9.9)),
    "a string for a number": json.dumps(document(evidence=[{**EXECUTION, "candidate_calls": "4"}])),
    "a bool for a number": json.dumps(document(evidence=[{**EXECUTION, "fallbacks": False}])),
    "40 levels deep": json.dumps(document(evidence=[{**EXECUTION, "note": json.loads("[" * 40 + "]" * 40)}])),
}


@pytest.mark.parametrize("name", list(EVIDENCE_TEXTS))
def test_an_evidence_document_the_cli_refuses_is_refused_by_the_server_in_the_same_line(served, name):
    text = EVIDENCE_TEXTS[name]
    before = head(served)
    line = refused(post(served, "ingest", "/api/evidence", text), 400)
    assert line == cli_line(served, text)
    assert head(served) == before


def test_an_evidence_document_over_the_clis_16_mib_is_refused_unread(served):
    """17 MiB of valid JSON: the CLI refuses the file by its size, the server the body by its length."""
    text = json.dumps(document(evidence=[EXECUTION], run="r" * 10)).replace('"run"', '"pad": "' + "x" * (17 << 20)
                                                                             + '", "run"')
    before = head(served)
    assert "over the 16.0 MiB" in refused(post(served, "ingest", "/api/evidence", text), 413)
    assert "over the 16.0 MiB" in cli_line(served, text)
    assert head(served) == before


@pytest.mark.parametrize("body, line", [(b"\xff\xfe{}", "UTF-16"), (b"{\"batch\": \"\xff\"}", "not UTF-8 text"),
                                        (b"[" * 100_000, "nested more than 32 levels deep"),
                                        (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "nested more than 32 levels"),
                                        (b"", "invalid JSON"), (b"{", "invalid JSON")])
def test_an_undecodable_or_deep_body_is_a_refusal_in_the_documented_shape(served, body, line):
    for path, token in ((batch_path(served), "ingest"), ("/api/evidence", "ingest"), ("/api/workloads", "admin")):
        assert line in refused(post(served, token, path, body), 400), path


# Every route that takes a body: (token, path, a valid body). Each is sent with an extra field, and with each
# field's value replaced by a bool and by a number written as a string.
BODIES = [
    ("ingest", "/api/artifacts/wan-fast/sessions", {"device": "d", "timer": "cuda_event", "arch": "sm90"}),
    ("ingest", "{batches}", {"batch": "k", "baseline_s": [2.0], "candidate_s": [1.0]}),
    ("decide", "/api/artifacts", {"artifact": "wan-x", "workload": "wan-t2v", "kind": "step_cache",
                                  "payload_sha256": "c" * 64}),
    ("person", "/api/artifacts/wan-fast/approve", {"reason": "ok", "verdict": "v"}),
    ("person", "/api/artifacts/wan-fast/revoke", {"reason": "ok"}),
    ("decide", "/api/lock", {"workload": "wan-t2v", "valid_for": "7d"}),
    ("admin", "/api/workloads", {"manifest": "workload: w\n"}),
]


@pytest.mark.parametrize("token, path, body", BODIES, ids=[path for _, path, _ in BODIES])
def test_every_request_model_is_strict_and_closed(served, token, path, body):
    path = path.replace("{batches}", batch_path(served))
    before = head(served)
    assert refused(post(served, token, path, json.dumps({**body, "extra": 1})), 422) \
        == "extra: Extra inputs are not permitted"
    for field, value in body.items():
        for wrong in (True, "1") if not isinstance(value, str) else (True, 1, ["text"]):
            sent = {**body, field: [wrong] if isinstance(value, list) else wrong}
            line = refused(post(served, token, path, json.dumps(sent)), 422)
            assert line.startswith(f"{field}"), (sent, line)
    assert head(served) == before


def test_a_manifest_over_the_clis_4_mib_is_refused_in_the_clis_words(served):
    manifest = "workload: big\n#" + "x" * (4 << 20) + "\n"
    path = served.folder / "big.yaml"
    path.write_text(manifest)
    done = CliRunner().invoke(main, ["--db", served.url, "workload", "declare", str(path), "--json"])
    assert done.exit_code == 1 and "over the 4.0 MiB a manifest may have" in json.loads(done.stdout)["error"]
    answer = post(served, "admin", "/api/workloads", json.dumps({"manifest": manifest}))
    assert refused(answer, 400) == "manifest: 4.0 MiB, over the 4.0 MiB a manifest may have"


@pytest.mark.parametrize("query", ["/api/artifacts/wan-fast?verdicts=1_0", "/api/artifacts/wan-fast?verdicts=%EF%BC%93",
                                   "/api/history/wan-fast?limit=1.0", "/api/history/wan-fast?after=%D9%A3",
                                   "/api/history/wan-fast?after=0x10"])
def test_a_query_number_follows_the_clis_number_rule(served, query):
    with served.client(served.tokens["read"]) as reader:
        assert "ASCII decimal digits" in refused(reader.get(query), 422)
        assert reader.get("/api/history/wan-fast?limit=2&after=+0").status_code == 200


def test_an_unknown_route_or_method_answers_in_the_documented_shape(served):
    with served.client(served.tokens["read"]) as reader:
        assert refused(reader.get("/api/nothing-here"), 404) == "Not Found"
        assert refused(reader.delete("/api/verify"), 405) == "Method Not Allowed"
        assert refused(reader.post("/api/verify", content=b"{}"), 405) == "Method Not Allowed"


def test_a_file_entry_is_refused_and_the_server_reads_no_file_of_its_own(served):
    """The refusal is the same whether the file exists on the server's disk or not: the server never looked."""
    kernel = served.folder / "kernel.py"
    kernel.write_text("def modulated_layernorm(x, scale, shift):\n    return x\n")
    before = head(served)
    lines = set()
    for entry in (f"{kernel}:modulated_layernorm", f"{served.folder / 'absent.py'}:modulated_layernorm"):
        answer = post(served, "decide", "/api/artifacts", json.dumps({
            "artifact": "wan-file", "workload": "wan-t2v", "kind": "fused_kernel", "op": "modulated_layernorm",
            "entry": entry}))
        lines.add(refused(answer, 400).replace(entry, "ENTRY"))
    assert len(lines) == 1 and "reads no file of its own" in lines.pop()
    assert head(served) == before
    # A built-in kernel names the server's own installed code, and is taken.
    answer = post(served, "decide", "/api/artifacts", json.dumps({
        "artifact": "wan-builtin", "workload": "wan-t2v", "kind": "fused_kernel", "op": "modulated_layernorm",
        "entry": "registry.kernels.modln:modulated_layernorm_triton"}))
    assert answer.status_code == 200 and answer.json()["appended"] is True


def test_a_valid_body_is_still_recorded(served):
    answer = post(served, "ingest", batch_path(served),
                  '{"batch": "fine", "baseline_s": [2, 2.5e0], "candidate_s": [1.0, 1.25]}')
    assert answer.status_code == 200 and answer.json()["appended"] is True
    with served.client(served.tokens["read"]) as reader:
        identity = reader.get("/api/artifacts/wan-fast").json()["identity"]
        events = reader.get(f"/api/history/bench:{identity}?limit=1000").json()["events"]
    recorded = next(e["payload"] for e in events if e["payload"].get("batch") == "fine")
    assert (recorded["baseline_s"], recorded["candidate_s"]) == ([2.0, 2.5], [1.0, 1.25])
