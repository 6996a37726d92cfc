"""The client a GPU worker records through: `registry evaluate --server URL --token T` and `registry demo --server`.

A worker so equipped needs no database access at all: it reads what it
measures (the registration and the contract) from the server, times its
benchmark pairs in a session the server holds, posting each batch under its
key, and posts the evidence document. A batch whose answer is lost (a timeout,
a dropped connection) is sent again under the same key, and the server appends
it once. A refusal comes back as the server's one line, raised as a UserError,
so the command prints it as it prints its own.
"""
from __future__ import annotations

import random
import time
from typing import Any, Callable

import httpx

from registry.formats.errors import UserError

# How many times a request whose answer was lost is sent again (idempotent requests only).
RETRIES = 5
TIMEOUT_SECONDS = 120.0
# The wait before the k-th resend is drawn uniformly from [0, min(BACKOFF_CAP, BACKOFF_BASE * 2**k)] seconds
# ("full jitter"): clients that timed out together do not come back together, so a slow server is not met
# with a storm of resends.
BACKOFF_BASE = 0.05
BACKOFF_CAP = 2.0


def backoff_seconds(attempt: int, draw: Callable[[], float] = random.random) -> float:
    """How long to wait before resend number `attempt` (0 for the first): exponential with full jitter."""
    return draw() * min(BACKOFF_CAP, BACKOFF_BASE * 2 ** attempt)


class ServerRefused(UserError):
    """The server answered 4xx: its one line."""


class RegistryClient:
    """One server, one token: the requests a worker makes."""

    def __init__(self, base_url: str, token: str, *, timeout: float = TIMEOUT_SECONDS,
                 transport: httpx.BaseTransport | None = None):
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"--server {base_url!r}: expected an http:// or https:// URL")
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {token}"},
                                 timeout=timeout, transport=transport)
        self.resent = 0  # requests sent again, over this client's life

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, *, retry: bool = False) -> dict[str, Any]:
        """The JSON answer; a 4xx raised as ServerRefused.

        With `retry` (idempotent requests only), a lost answer (a timeout, a
        dropped connection) and a refusal the server marks as worth repeating
        (`Retry-After`: a write that lost a race) are sent again, up to
        RETRIES times, each after `backoff_seconds`.
        """
        tries = RETRIES + 1 if retry else 1
        for attempt in range(tries):
            if attempt:
                self.resent += 1
                time.sleep(backoff_seconds(attempt - 1))
            try:
                response = self.http.request(method, path, json=body)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if attempt == tries - 1:
                    raise UserError(f"{self.http.base_url}: no answer ({type(exc).__name__}: {exc})") from None
                continue
            if response.status_code < 400 or "retry-after" not in response.headers or attempt == tries - 1:
                break
        if response.status_code >= 400:
            try:
                line = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                line = response.text.splitlines()[0] if response.text else response.reason_phrase
            raise ServerRefused(f"the server refused {method} {path} ({response.status_code}): {line}")
        return response.json()

    def subject(self, artifact: str) -> dict[str, Any]:
        return self.request("GET", f"/api/artifacts/{artifact}/subject", retry=True)

    def open_session(self, artifact: str, device: str, timer: str, arch: str | None = None) -> dict[str, Any]:
        return self.request("POST", f"/api/artifacts/{artifact}/sessions",
                            {"device": device, "timer": timer, "arch": arch})

    def record_batch(self, artifact: str, session: str, batch: str, baseline: list[float],
                     candidate: list[float]) -> dict[str, Any]:
        """One batch under its key: retried on a lost answer, appended once by the server."""
        return self.request("POST", f"/api/artifacts/{artifact}/sessions/{session}/batches",
                            {"batch": batch, "baseline_s": baseline, "candidate_s": candidate}, retry=True)

    def record_document(self, document: dict[str, Any]) -> dict[str, Any]:
        """An evidence document; a run id makes it idempotent, so only then is a lost answer retried."""
        return self.request("POST", "/api/evidence", document, retry=document.get("run") is not None)


class RemoteSession:
    """A benchmark session the server holds, batch by batch until its record closes (app/bench.py's
    BatchedSession, over HTTP): the record is read from each batch's answer."""

    def __init__(self, client: RegistryClient, artifact: str, *, device: str, timer: str, limit: int | None,
                 arch: str | None = None):
        self.client, self.artifact, self.limit = client, artifact, limit
        self.record = client.open_session(artifact, device, timer, arch)
        self.session = self.record["session"]
        self.pairs = self.batches = 0

    @property
    def max_pairs(self) -> int:
        return self.record["max_pairs"]

    def next_size(self) -> int:
        from registry.app.bench import next_batch_size

        return next_batch_size(self.record["closed"], self.record["max_pairs"] - self.record["pairs"], self.limit,
                               self.pairs)

    def add(self, baseline: list[float], candidate: list[float]) -> None:
        self.pairs += len(baseline)
        self.batches += 1
        self.record = self.client.record_batch(self.artifact, self.session, f"pairs-{self.pairs}", baseline,
                                               candidate)

    def to_dict(self) -> dict[str, Any]:
        from registry.app.bench import measured_summary

        record = self.record
        return measured_summary(record, self.session, self.pairs, self.batches,
                                record["stop"] if record["closed"] else "limit")


def evaluate_through(client: RegistryClient, artifact: str, *, corpus: str | None, runs: int | None, warmup: int,
                     run: str | None, progress: Callable[[int, int], None] | None = None,
                     insecure_no_sandbox: bool = False, bundle: str | None = None) -> dict[str, Any]:
    """`registry evaluate` with every read and append through the server; what it recorded, as --json prints it.

    The candidate runs in the sandbox, as for a local evaluation (registry/kernels/sandbox.py).
    """
    from registry.app.kernels import check_evaluable, measure_kernel
    from registry.kernels.sandbox import require_sandbox

    found = client.subject(artifact)
    registered, canonical = found["registration"], found["contract"]
    check_evaluable(artifact, registered, bundle)
    if not insecure_no_sandbox:
        require_sandbox()
    speed = canonical.get("speed")
    sessions: list[RemoteSession] = []
    open_batches = None
    if speed is not None and speed["decision"] == "confident":
        budget = speed["max_pairs"] if runs is None else runs

        def open_batches(timer: str, device: str, arch: str | None = None) -> RemoteSession:
            sessions.append(RemoteSession(client, artifact, device=device, timer=timer, limit=budget, arch=arch))
            return sessions[-1]

        runs = budget
    elif runs is None:
        if speed is None:
            raise UserError(f"no --runs given and workload {registered['workload']} declares no speed.runs_per_arm")
        runs = speed["runs_per_arm"]
    document, parsed = measure_kernel(artifact, registered, canonical, corpus=corpus, runs=runs, warmup=warmup,
                                      run=run, progress=progress, open_batches=open_batches,
                                      insecure_no_sandbox=insecure_no_sandbox, bundle=bundle)
    recorded = client.record_document(document)
    return {**recorded, "evidence": parsed.items, "session": sessions[0].to_dict() if sessions else None}
