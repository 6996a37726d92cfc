"""A real `registry serve` process on a free port, and a registry seeded with workloads, artifacts and tokens.

The server is started as the command a user runs (`python -m registry --db URL serve --port 0`), in a process of
its own; the port it bound is read from the line it prints once listening. It is stopped by its own pid. The
process is forked from a server that has imported what `registry serve` imports before it listens
(tests/support/process_forks.py), one such server per test process, started with its first `registry serve`:
the suite starts a dozen, and each saves an interpreter's start-up and about 0.5 CPU-s of imports.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
from limits import HANG_GUARD_S
from process_forks import ProcessForks, Started
from registry.app.tokens import issue_token, revoke_token
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract
from store_helpers import opened

WAN = "workload: wan-t2v\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 400}\n"
LTX = "workload: ltx-video\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 400}\n"
# The live view in a browser: the system's Chromium (never a downloaded one), and a watched workload.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WATCHED = ("workload: wan-watched\nfidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}\n"
           "speed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 400}\n"
           "monitor: {alpha: 0.001, reference: gate, margin: 0.0}\n")
# Milliseconds the browser waits for an update to show before calling the page hung (it redraws within a second of
# an append): a hang guard, waited out only by a broken page, so no outcome depends on the machine's load.
WAIT_MS = HANG_GUARD_S * 1000
# How long a server may take to print its listening line before it is called hung: a server that fails to start
# ends its output at once, so this too is waited out only by a hang.
START_SECONDS = HANG_GUARD_S


_TLS = httpx.create_ssl_context()
"""One TLS context for every client the tests make: httpx builds one per client otherwise, loading the CA bundle
each time (about 20 ms of CPU a client). The servers here speak plain HTTP on loopback, so it is never used."""


SERVE_IMPORTS = ("registry.cli.main", "registry.cli.serve_commands", "registry.serve.server", "registry.serve.api",
                 "registry.serve.connections", "uvicorn")
"""What `registry serve` imports before it listens, imported once by the server its processes are forked from."""
_FORKS: list[ProcessForks] = []


def _serve_forks() -> ProcessForks:
    """This test process's server that `registry serve` processes are forked from, started on first use."""
    if not _FORKS or _FORKS[0].server.poll() is not None:
        _FORKS[:] = [ProcessForks({**os.environ, "PYTHONUNBUFFERED": "1"}, SERVE_IMPORTS)]
    return _FORKS[0]


class ServerProcess:
    """`registry serve` on a free loopback port, for as long as the `with` block runs."""

    def __init__(self, url: str, *extra: str):
        self.url, self.extra = url, extra
        self.process: Started | None = None
        self.base = ""

    def __enter__(self) -> "ServerProcess":
        self.process = _serve_forks().start("registry", ["--db", self.url, "serve", "--port", "0", *self.extra],
                                            cwd=Path.cwd(), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + START_SECONDS
        while "\n" not in (printed := self.process.output()) and self.process.poll() is None:
            if time.monotonic() > deadline:
                self.__exit__()
                raise AssertionError(f"registry serve printed nothing within {START_SECONDS} s")
            time.sleep(0.01)
        line = printed.partition("\n")[0]
        if " on http://" not in line:
            err = self.process.errors() if self.process.poll() is not None else ""
            self.__exit__()
            raise AssertionError(f"registry serve did not start: {line!r} {err}")
        self.base = line.split(" on ")[1].split()[0]
        return self

    def __exit__(self, *_exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30, verify=_TLS)


@dataclass
class Seeded:
    """The tokens of a seeded registry by name, and what each is."""

    tokens: dict[str, str] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)


def seed(url: str) -> Seeded:
    """Two workloads (wan-t2v, ltx-video) with an artifact each, and one token per kind the tests need."""
    registry = opened(url, actor="seeder", create=True)
    for manifest in (WAN, LTX):
        declare_workload(registry, Contract.from_yaml(manifest))
    register_artifact(registry, "wan-fast", workload="wan-t2v", kind="step_cache", payload_sha256="a" * 64)
    register_artifact(registry, "ltx-fast", workload="ltx-video", kind="step_cache", payload_sha256="b" * 64)
    seeded = Seeded()
    long_ago = datetime.now(timezone.utc) - timedelta(days=40)
    every = ["read", "ingest", "decide", "admin"]
    for name, scopes, glob, person, now in (
        ("read", ["read"], None, False, None),
        ("ingest", ["ingest"], "wan-*", False, None),
        ("ingest-other", ["ingest"], "ltx-*", False, None),
        ("decide", ["decide"], "wan-*", False, None),
        ("person", ["decide"], "wan-*", True, None),
        ("person-other", ["decide"], "ltx-*", True, None),
        ("admin", ["admin"], None, False, None),
        ("expired", every, "*", True, long_ago),
        ("revoked", every, "*", True, None),
    ):
        token, grant = issue_token(registry, name, scopes, workload=glob, person=person, now=now)
        seeded.tokens[name], seeded.key_ids[name] = token, grant.key_id
    revoke_token(registry, seeded.key_ids["revoked"], "left the team")
    registry.engine.dispose()
    return seeded
