"""`registry serve` under hostile load keeps serving, against a real server process on loopback: unauthenticated and
oversized bodies refused before they are read, bodies that stall or are cut short, hundreds of open live streams
and a revoked token's streams, clients that trickle their request's head or never send one. Meanwhile a real
request is answered in under 2 s, the server's resident memory stays bounded, and nothing partial is written.

Needs seconds: the server cuts off a request head that has not arrived within connections.HEAD_SECONDS (10 s) and a
body that stopped arriving for bodies.BODY_IDLE_SECONDS (10 s). The slow clients are started with the server and
run beside the other tests, so the module waits for those limits once, at its end (about 12 s in all). All traffic
goes to 127.0.0.1, and every client is bounded in count (at most 300 streams, 60 slow clients) and in time.
"""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from registry.app import open_registry
from registry.app.tokens import issue_token, revoke_token
from registry.serve.bodies import BODY_IDLE_SECONDS, MOST_DOCUMENT_BYTES
from registry.serve.connections import HEAD_SECONDS
from registry.serve.live import MOST_STREAMS_PER_TOKEN
from serve_helpers import ServerProcess, seed
from limits import HANG_GUARD_S

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

# What "keeps serving" means here (the issue's words): a real request answered within this long.
ANSWERED_WITHIN_S = 2.0
# How far the server's resident memory may rise over the module's hostile load. A 200 MiB body read whole took it up
# by about 600 MB. Here the most comes from the two large bodies read and parsed at once (bodies.MOST_LARGE_BODIES):
# each 15 MiB body is held as bytes, then as text, then parsed (about 140 MB for the two, measured); 300 open
# streams add about 10 MB.
MOST_RSS_RISE_MB = 200
STREAMS = 300
SLOW_HEADS, SILENT, STALLED_BODIES = 40, 10, 10
MIB = 1 << 20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Sampler(threading.Thread):
    """The server's resident memory, every 0.1 s, for the module's life."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.start_mb, self.most_mb, self.stopped = pid, rss_mb(pid), 0.0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            try:
                self.most_mb = max(self.most_mb, rss_mb(self.pid))
            except OSError:
                return


class SlowClients(threading.Thread):
    """Clients that trickle a request head a byte at a time, open a connection and say nothing, or send a body's
    head and a few bytes of it and then stop; each records when the server closed it and what it answered."""

    def __init__(self, host: str, port: int, token: str):
        super().__init__(daemon=True)
        self.host, self.port, self.token = host, port, token
        self.closed_after: dict[str, list[float]] = {"head": [], "silent": [], "body": []}
        self.answers: list[bytes] = []
        self.done = threading.Event()

    def run(self) -> None:
        asyncio.run(self.main())
        self.done.set()

    async def main(self) -> None:
        await asyncio.gather(*(self.trickle() for _ in range(SLOW_HEADS)), *(self.silent() for _ in range(SILENT)),
                             *(self.stall() for _ in range(STALLED_BODIES)))

    async def trickle(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        started = time.monotonic()
        head = f"GET /api/verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.token}\r\n\r\n".encode()
        for byte in head[:-4]:  # never the end of the head
            writer.write(bytes([byte]))
            try:
                await writer.drain()
                if await _closed(reader, 0.25):
                    break
            except OSError:
                break
        self.closed_after["head"].append(time.monotonic() - started)
        writer.close()

    async def silent(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        started = time.monotonic()
        await reader.read()  # until the server closes it
        self.closed_after["silent"].append(time.monotonic() - started)
        writer.close()

    async def stall(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        writer.write(f"POST /api/evidence HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.token}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{{\"format\": ".encode())
        await writer.drain()
        started = time.monotonic()
        self.answers.append(await reader.read())  # the answer, then the server closes the connection
        self.closed_after["body"].append(time.monotonic() - started)
        writer.close()


async def _closed(reader: asyncio.StreamReader, wait: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout=wait) == b""
    except (asyncio.TimeoutError, TimeoutError):
        return False


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'registry.db'}"
    seeded = seed(url)
    registry = open_registry(url, actor="lead")
    readers = [issue_token(registry, f"watcher-{i}", ["read"])[0]
               for i in range(-(-STREAMS // MOST_STREAMS_PER_TOKEN))]
    everything = issue_token(registry, "slow", ["read", "ingest"], workload="*")[0]
    registry.close()
    with ServerProcess(url) as server:
        host, port = server.base.removeprefix("http://").split(":")
        server.url, server.tokens, server.readers, server.address = url, seeded.tokens, readers, (host, int(port))
        with server.client(seeded.tokens["ingest"]) as worker:
            server.session = worker.post("/api/artifacts/wan-fast/sessions",
                                         json={"device": "d", "timer": "cuda_event"}).json()["session"]
        server.batches = 0
        answered_in_time(server)  # the modules a request imports, loaded before memory is watched
        server.sampler = Sampler(server.process.pid)
        server.sampler.start()
        server.slow = SlowClients(host, int(port), everything)
        server.slow.start()
        yield server
        server.sampler.stopped.set()


def head(served) -> int:
    registry = open_registry(served.url)
    try:
        return registry.store.head_position()
    finally:
        registry.close()


def answered_in_time(served) -> int:
    """A real read and a real pair batch, each answered within ANSWERED_WITHIN_S; the events it appended (1)."""
    with served.client(served.tokens["read"]) as reader:
        started = time.monotonic()
        assert reader.get("/api/artifacts/wan-fast").status_code == 200
        assert time.monotonic() - started < ANSWERED_WITHIN_S
    served.batches += 1
    with served.client(served.tokens["ingest"]) as worker:
        started = time.monotonic()
        # At the gate's ratio exactly: the record never decides, so it never closes to later batches.
        answer = worker.post(f"/api/artifacts/wan-fast/sessions/{served.session}/batches",
                             json={"batch": f"real-{served.batches}", "baseline_s": [1.2], "candidate_s": [1.0]})
        assert answer.status_code == 200 and time.monotonic() - started < ANSWERED_WITHIN_S, answer.text
    return 1


def push(served, head_lines: str, total: int, *, chunked: bool = False) -> tuple[int, bytes, float]:
    """Send a request head, then up to `total` bytes of body as fast as the server takes them: (bytes the kernel
    accepted before the server closed the connection, the server's answer, seconds to the answer)."""
    sock = socket.create_connection(served.address)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    sock.sendall(f"{head_lines}Host: x\r\nContent-Type: application/json\r\n{framing}\r\n\r\n".encode())
    answer, answered = bytearray(), []
    started = time.monotonic()

    def read() -> None:
        while True:
            try:
                part = sock.recv(65536)
            except OSError:
                break
            if not part:
                break
            if not answer:
                answered.append(time.monotonic() - started)
            answer.extend(part)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    block = b"1" * MIB
    sent = 0
    try:
        while sent < total:
            sent += sock.send(f"{len(block):x}\r\n".encode() + block + b"\r\n" if chunked else block)
    except OSError:  # the server closed the connection: what was not read was never taken
        pass
    reader.join(timeout=HANG_GUARD_S)
    sock.close()
    return sent, bytes(answer), answered[0] if answered else float("inf")


def status_and_error(answer: bytes) -> tuple[int, str, dict[str, str]]:
    head_text, _, rest = answer.partition(b"\r\n\r\n")
    lines = head_text.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    body = rest
    if headers.get("transfer-encoding") == "chunked":
        size, _, rest = rest.partition(b"\r\n")
        body = rest[:int(size, 16)]
    return int(lines[0].split()[1]), json.loads(body)["error"], headers


@pytest.mark.parametrize("token, status", [(None, 401), ("read", 403)])
def test_a_200_mib_body_without_a_token_that_covers_it_is_refused_before_it_is_read(served, token, status):
    before = head(served)
    auth = "" if token is None else f"Authorization: Bearer {served.tokens[token]}\r\n"
    sent, answer, seconds = push(served, f"POST /api/evidence HTTP/1.1\r\n{auth}", 200 * MIB)
    code, error, headers = status_and_error(answer)
    assert code == status and "\n" not in error and headers["connection"] == "close"
    assert sent < 40 * MIB, f"{sent / MIB:.0f} MiB taken"  # the socket buffers' worth, not the body
    assert seconds < ANSWERED_WITHIN_S and head(served) == before
    answered_in_time(served)


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_100_mb_body_past_its_bound_is_refused_and_nothing_is_written(served, chunked):
    """Declared, it is refused before a byte of it is read; chunked, once the bytes read pass the route's bound."""
    before = head(served)
    sent, answer, _ = push(served, f"POST /api/evidence HTTP/1.1\r\nAuthorization: Bearer {served.tokens['ingest']}"
                                   "\r\n", 100 * MIB, chunked=chunked)
    code, error, headers = status_and_error(answer)
    assert code == 413 and "over the 16.0 MiB" in error and headers["connection"] == "close"
    assert sent < (MOST_DOCUMENT_BYTES if not chunked else 2 * MOST_DOCUMENT_BYTES) + 24 * MIB
    assert head(served) == before
    answered_in_time(served)


def test_many_large_and_deep_bodies_at_once_leave_a_real_request_answered(served):
    """Twelve authenticated 15 MiB bodies, half of them one deep nest, at once: at most two are read at a time,
    each refused in one line, nothing written, and a real request is answered meanwhile."""
    before = head(served)
    token = served.tokens["ingest"]
    deep = b"[" * (15 * MIB)
    wide = b'{"format": "registry.evidence/1", "artifact": "wan-fast", "pad": "' + b"x" * (15 * MIB) + b'"}'
    results = []

    def send(body: bytes) -> None:
        with served.client(token) as client:
            results.append(client.post("/api/evidence", content=body, timeout=120))

    senders = [threading.Thread(target=send, args=(deep if i % 2 else wide,)) for i in range(12)]
    for sender in senders:
        sender.start()
    appended = answered_in_time(served)
    for sender in senders:
        sender.join(timeout=HANG_GUARD_S)
    assert sorted(r.status_code for r in results) == [400] * 12, [r.text[:200] for r in results]
    assert all(set(r.json()) == {"error"} and "\n" not in r.json()["error"] for r in results)
    assert head(served) == before + appended


def test_a_body_cut_short_writes_nothing(served):
    before = head(served)
    document = json.dumps({"format": "registry.evidence/1", "artifact": "wan-fast",
                           "evidence": [{"kind": "execution", "candidate_calls": 4, "fallbacks": 0}]}).encode()
    sock = socket.create_connection(served.address)
    sock.sendall(f"POST /api/evidence HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.tokens['ingest']}\r\n"
                 f"Content-Length: {len(document)}\r\n\r\n".encode() + document[:len(document) // 2])
    sock.close()
    appended = answered_in_time(served)
    assert head(served) == before + appended


def test_hundreds_of_live_streams_keep_the_server_answering_and_a_revoked_tokens_streams_end(served):
    asyncio.run(_streams(served))


async def _streams(served) -> None:
    host, port = served.address
    opened = []
    for i in range(STREAMS):
        reader, writer = await asyncio.open_connection(host, port)
        token = served.readers[i // MOST_STREAMS_PER_TOKEN]
        writer.write(f"GET /api/live/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        opened.append((token, reader, writer))
    statuses = await asyncio.gather(*(reader.readline() for _, reader, _ in opened))
    assert {status.split()[1] for status in statuses} == {b"200"}, set(statuses)
    await asyncio.to_thread(answered_in_time, served)  # one more append: the head moves for every stream
    revoked = served.readers[0]
    await asyncio.to_thread(_revoke, served, revoked)
    started = time.monotonic()
    ends = await asyncio.gather(*(_until(reader, b"event: end") for token, reader, _ in opened if token == revoked))
    assert all(ends) and time.monotonic() - started < 5.0  # promptly: within a poll or two of the revocation
    # Every other stream is still open and has heard of the appends since it opened.
    alive = await asyncio.gather(*(_until(reader, b"event: head")
                                   for token, reader, _ in opened if token != revoked))
    assert all(alive)
    # A token holds at most MOST_STREAMS_PER_TOKEN streams at once.
    refused = await asyncio.to_thread(_get, served, "/api/live/events", served.readers[1])
    assert refused.status_code == 429 and "live streams open" in refused.json()["error"]
    await asyncio.to_thread(answered_in_time, served)
    for _, _, writer in opened:
        writer.close()


def _get(served, path: str, token: str):
    with served.client(token) as client:
        return client.get(path)


def _revoke(served, token: str) -> None:
    registry = open_registry(served.url, actor="lead")
    revoke_token(registry, token.split("_")[1], "watched too much")
    registry.close()


async def _until(reader: asyncio.StreamReader, marker: bytes, wait: float = HANG_GUARD_S) -> bool:
    seen = b""
    deadline = time.monotonic() + wait
    while marker not in seen:
        try:
            part = await asyncio.wait_for(reader.read(4096), timeout=max(0.0, deadline - time.monotonic()))
        except (asyncio.TimeoutError, TimeoutError):
            return False
        if not part:
            return False
        seen = seen[-100:] + part
    return True


def test_slow_clients_are_cut_off_in_bounded_time_while_the_server_answers_and_memory_stays_bounded(served):
    """Last in the module: the slow clients started with the server have met their limits by now (or soon)."""
    answered_in_time(served)
    assert served.slow.done.wait(HEAD_SECONDS + BODY_IDLE_SECONDS + 30)
    closed = served.slow.closed_after
    assert len(closed["head"]) == SLOW_HEADS and max(closed["head"]) < HEAD_SECONDS + 3, closed["head"]
    assert len(closed["silent"]) == SILENT and max(closed["silent"]) < HEAD_SECONDS + 3, closed["silent"]
    assert len(closed["body"]) == STALLED_BODIES and max(closed["body"]) < BODY_IDLE_SECONDS + 3, closed["body"]
    for answer in served.slow.answers:
        code, error, _ = status_and_error(answer)
        assert code == 408 and "then nothing for" in error
    answered_in_time(served)
    rise = served.sampler.most_mb - served.sampler.start_mb
    assert rise < MOST_RSS_RISE_MB, f"resident memory rose {rise:.0f} MB (from {served.sampler.start_mb:.0f} MB)"

