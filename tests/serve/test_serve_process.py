"""`registry serve` as a process a user starts and stops: Ctrl-C with the live view open ends its event stream at
once and exits without a traceback; a port that is taken is named, with the way out (`--port 0`). And a server
that runs for long: its request threads come and go, and each one's append connection goes back with it. And
every connection sends without Nagle's delay.

Starts server processes (a few seconds each on the shared machine).
"""
from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading

from serve_helpers import ServerProcess, seed
from limits import HANG_GUARD_S


def test_ctrl_c_with_the_live_view_open_ends_its_stream_at_once_and_prints_no_traceback(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    seeded = seed(url)
    ended, first_event = [], threading.Event()
    with ServerProcess(url) as server:
        def watch() -> None:  # what the live page holds open: the server-sent events of the log's head
            with server.client(seeded.tokens["read"]) as client, client.stream("GET", "/api/live/events") as events:
                for line in events.iter_lines():
                    if line.startswith("event: head"):
                        first_event.set()
            ended.append(True)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert first_event.wait(HANG_GUARD_S)
        server.process.send_signal(signal.SIGINT)
        server.process.wait(timeout=HANG_GUARD_S)
        watcher.join(HANG_GUARD_S)
        stderr = server.process.errors()
    # Within the stream's next poll (live.POLL_SECONDS), not cut off at the end of the grace period: uvicorn says
    # when it had to cancel what the grace left running. Read from the server's own log, not from a wall-clock
    # bound between two processes, which a loaded machine could fail.
    assert ended and "timeout graceful shutdown exceeded" not in stderr, stderr
    assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr


def test_a_port_in_use_is_named_with_the_way_out(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    seed(url)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "registry", "--db", url, "serve", "--port", str(port)],
                                capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"--port {port} on 127.0.0.1 is already in use" in result.stderr and "--port 0" in result.stderr


def test_the_append_connection_of_a_thread_that_ended_goes_back_to_the_pool(tmp_path):
    """A server's request threads end when idle and new ones start (anyio); each keeps an append connection while
    it lives. Kept after its thread ended, each would stay checked out until the pool (15 connections) had none
    left, and then every request would wait 30 s for one and fail: a server four minutes into a soak did."""
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract
    from store_helpers import opened

    registry = opened(f"sqlite:///{tmp_path / 'registry.db'}", actor="t", create=True)
    declare_workload(registry, Contract.from_yaml("workload: wan-threads\n"))
    for index in range(12):  # one after another, as idle request threads are replaced
        thread = threading.Thread(target=register_artifact, args=(registry, f"a{index}"),
                                  kwargs={"workload": "wan-threads", "kind": "step_cache"})
        thread.start()
        thread.join()
    with registry.view() as view:
        assert sorted(view.artifact_ids("wan-threads")) == sorted(f"a{index}" for index in range(12))
    # Still out: this thread's (it lives) and the last one's (given back when another thread next appends); not 13.
    assert registry.engine.pool.checkedout() == 2


def test_every_connection_sends_its_answers_without_nagle_s_delay():
    """h11 writes an answer's head and body as two sends. With Nagle's algorithm on, the body waited for the
    client to acknowledge the head, and Linux clients delay that by 40 ms: every answer took 44 ms where its work
    took 1-4. asyncio turns the delay off only on sockets made with the TCP protocol number, and the listening
    socket was made without one (as this test makes it), so the server's protocol turns it off on each
    connection. No server process: the protocol on a loopback socket, in this process."""
    import uvicorn
    from uvicorn.server import ServerState

    from registry.serve.connections import HeadTimedProtocol

    config = uvicorn.Config(app=None)
    seen: list[int] = []

    class Probe(HeadTimedProtocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            seen.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def connect_once() -> None:
        listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Probe(config, ServerState(), {}), sock=listening)
        async with server:
            reader, writer = await asyncio.open_connection(*listening.getsockname())
            await asyncio.wait_for(reader.read(), HANG_GUARD_S)  # the probe closes once it has looked
            writer.close()

    asyncio.run(connect_once())
    assert seen and seen[0] != 0, seen
