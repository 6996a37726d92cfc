"""Starting the server: the bind address checked (loopback unless --allow-remote), then uvicorn.

TLS is a proxy's job (docs/serve.md, "Behind a proxy"): the server speaks
plain HTTP, so by default it binds loopback only and refuses any other
address unless told, in so many words, that something in front of it
terminates TLS.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import signal
import traceback

from registry.app import Registry
from registry.formats.errors import UserError


def check_bind(host: str, allow_remote: bool) -> str:
    """`host` when it is a loopback address (or `localhost`), or any address with `allow_remote`."""
    if host == "localhost":
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise UserError(f"--host {host!r}: give an IP address to bind (127.0.0.1, ::1, or with --allow-remote "
                        "another)") from None
    if not address.is_loopback and not allow_remote:
        raise UserError(f"--host {host} is not a loopback address: the server speaks plain HTTP, so put a TLS proxy "
                        "in front of it and pass --allow-remote (docs/serve.md)")
    return host


def serve(registry: Registry, host: str, port: int, *, signing_key=None, ready=None, workers: int = 1) -> None:
    """Serve until interrupted; `ready(port)` is called once the socket listens (the port chosen when 0).

    With `workers` above 1, that many forked processes answer on the one
    socket, each with its own connections (none crosses the fork) and its own
    threads. That is safe for the log: appends serialize under the store's
    lock in the database, whichever process sends them, and the read models'
    catch-up is optimistic across processes. The parent only waits: a
    SIGTERM or SIGINT is passed on to the workers, and when one worker ends
    the others are stopped and the server ends with its status.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    if ready is not None:
        ready(sock.getsockname()[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if workers == 1:
        _answer(registry, signing_key, sock)
        return
    registry.engine.dispose()
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            try:
                _answer(registry, signing_key, sock)
            except BaseException:
                traceback.print_exc()
                os._exit(70)
            os._exit(0)
        children.append(pid)
    sock.close()
    raise SystemExit(_supervise(children))


def _answer(registry: Registry, signing_key, sock) -> None:
    """Answer requests on `sock` in this process until told to stop."""
    import uvicorn

    from .api import ServerConfig, create_app

    app = create_app(ServerConfig(registry, signing_key))
    # Idle keep-alive connections are kept 75 s (uvicorn's default is 5 s): a client reusing one the server has
    # just closed gets no answer, so a short limit turns ordinary pauses between a worker's requests into errors.
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                            timeout_keep_alive=75, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def _supervise(children: list[int]) -> int:
    """Wait for the worker processes; stop them all on a signal or when one ends; the first one's exit status."""
    def stop(*_signal) -> None:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    first = None
    while children:
        pid, status = os.wait()
        children.remove(pid)
        if first is None:
            first = os.waitstatus_to_exitcode(status)
            stop()
    return max(first or 0, 0)
