"""Starting the server: the bind address checked (loopback unless --allow-remote), then uvicorn.

TLS is a proxy's job (docs/serve.md, "Behind a proxy"): the server speaks
plain HTTP, so by default it binds loopback only and refuses any other
address unless told, in so many words, that something in front of it
terminates TLS.
"""
from __future__ import annotations

import ipaddress
import logging

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


def serve(registry: Registry, host: str, port: int, *, signing_key=None, ready=None) -> None:
    """Serve until interrupted; `ready(port)` is called once the socket listens (the port chosen when 0)."""
    import socket

    import uvicorn

    from .api import ServerConfig, create_app

    app = create_app(ServerConfig(registry, signing_key))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    if ready is not None:
        ready(sock.getsockname()[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # Idle keep-alive connections are kept 75 s (uvicorn's default is 5 s): a client reusing one the server has
    # just closed gets no answer, so a short limit turns ordinary pauses between a worker's requests into errors.
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                            timeout_keep_alive=75, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
