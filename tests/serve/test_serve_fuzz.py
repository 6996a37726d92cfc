"""A fuzz pass over `registry serve`'s OpenAPI schema (schemathesis): at least 1,000 generated requests, valid
and invalid, with a token holding every scope, against a real server process; none may answer 5xx.

Needs tens of seconds: over a thousand HTTP requests, some of which run the gate or build the report.
The live event stream is left out (it streams until closed; the browser test reads it).
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from registry.app.tokens import issue_token
from serve_helpers import ServerProcess, seed
from store_helpers import opened

LEAST_REQUESTS = 1000
EXAMPLES_PER_OPERATION = 32


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'registry.db'}"
    seed(url)
    token, _ = issue_token(opened(url, actor="lead"), "fuzzer", ["read", "ingest", "decide", "admin"],
                           workload="*", person=True)
    with ServerProcess(url) as server:
        yield server, token


def test_no_generated_request_gets_a_server_error(fuzzed):
    import schemathesis
    from schemathesis import GenerationMode

    server, token = fuzzed
    schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json")
    headers = {"Authorization": f"Bearer {token}"}
    sent, errors = [0], []
    for found in schema.get_all_operations():
        operation = found.ok()
        if operation.path.endswith("/live/events"):
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def send(case):
                response = case.call(headers=headers, timeout=60)
                sent[0] += 1
                if response.status_code >= 500:
                    errors.append(f"{case.method} {case.formatted_path} -> {response.status_code} {response.text}")
                assert "Traceback" not in response.text

            send()
    assert not errors, errors[:5]
    print(f"{sent[0]} generated requests")
    assert sent[0] >= LEAST_REQUESTS
