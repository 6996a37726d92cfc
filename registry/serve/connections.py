"""How long the server waits for a request's head: uvicorn's HTTP/1.1 protocol (h11) with a deadline on it.

uvicorn closes a keep-alive connection left idle between requests, but
waits for ever for a request whose head (its line and headers) has started
and not finished, or for a connection that never sends a byte: a client
that trickles its head a byte at a time holds its connection, and its
memory, as long as it likes. Here a head must arrive whole within
HEAD_SECONDS: of the connection opening for the first request, of its first
byte for each later one; otherwise the connection is closed. (The body's own
limits are registry/serve/bodies.py's; h11 bounds a head at 16 KiB.)

Every connection also sends without Nagle's delay (``TCP_NODELAY``). h11
writes a response's head and body as two sends; with Nagle's algorithm on,
the body waits for the client to acknowledge the head, and a client that
delays its acknowledgement (Linux waits 40 ms) holds every answer that long.
asyncio turns the delay off by itself only on sockets made with the TCP
protocol number, which the socket the server binds itself (registry/serve/server.py)
is not, so each connection turns it off here.
"""
from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_SECONDS = 10.0


class HeadTimedProtocol(H11Protocol):
    """H11Protocol whose connections are closed when a request's head takes longer than HEAD_SECONDS."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        send_without_delay(transport)
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self._head_deadline is None and self._between_requests():
            self._await_head()  # the first byte of a later request
        super().data_received(data)
        if not self._between_requests():
            self._stop_waiting()  # the head arrived: the request is the app's now

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _await_head(self) -> None:
        self._head_deadline = self.loop.call_later(HEAD_SECONDS, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()


def send_without_delay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a TCP connection (see the module docstring); a Unix socket has none."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
