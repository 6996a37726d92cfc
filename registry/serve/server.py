"""Starting the server: the bind address checked (loopback unless --allow-remote), then uvicorn.

TLS is a proxy's job (docs/serve.md, "Behind a proxy"): the server speaks
plain HTTP, so by default it binds loopback only and refuses any other
address unless told, in so many words, that something in front of it
terminates TLS.
"""
from __future__ import annotations

import errno
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
    SIGTERM or SIGINT stops the workers and then the parent by the same
    signal (as one process ends), and when one worker ends by itself the
    others are stopped and the server ends with its status.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(bind_refusal(host, port, exc)) from None
    sock.listen(2048)
    if ready is not None:
        ready(sock.getsockname()[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if workers == 1:
        _answer(registry, signing_key, sock, deliver_hooks=True)
        return
    registry.engine.dispose()
    children: list[int] = []
    received = _stop_on_signals(children)  # before the first fork: no signal may find the parent without it
    stopping = {signal.SIGTERM, signal.SIGINT}
    for index in range(workers):
        # Held across the fork: the parent's handler must see every child it started, and never run in a child
        # before the child has put back its own.
        signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # uvicorn installs its own once it runs
            _end_with(parent)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
            try:
                _answer(registry, signing_key, sock, deliver_hooks=index == 0)  # one deliverer per server
            except BaseException:  # noqa: BLE001 - a worker that crashed prints it and exits 70
                traceback.print_exc()
                os._exit(70)
            os._exit(0)
        children.append(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
    sock.close()
    status = _supervise(children)
    for signum in received[:1]:  # stopped by a signal: end by it, as one process does once uvicorn has stopped
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
    raise SystemExit(status)


def bind_refusal(host: str, port: int, exc: OSError) -> str:
    """One line for a port the server cannot bind, naming it and the way out."""
    if exc.errno == errno.EADDRINUSE:
        why = "is already in use (another server, or an earlier `registry serve` still running)"
    elif exc.errno == errno.EACCES:
        why = "needs privileges this user lacks (ports below 1024)"
    else:
        why = f"cannot be bound ({exc.strerror})"
    return f"--port {port} on {host} {why}; choose another --port, or --port 0 to take any free one (printed on start)"


def _stopping_server(config, stopping):
    """uvicorn's server, which also tells the app it is stopping (`ServerConfig.stopping`) the moment it is asked
    to: the live view's event streams end at once instead of holding the stop until its grace period runs out."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            stopping.set()
            super().handle_exit(sig, frame)

    return Server(config)


def _answer(registry: Registry, signing_key, sock, *, deliver_hooks: bool = False) -> None:
    """Answer requests on `sock` in this process until told to stop; with `deliver_hooks`, run the webhook
    deliverer beside the API (registry/app/hooks.py), stopped with it."""
    import uvicorn

    from .api import ServerConfig, create_app
    from .connections import HeadTimedProtocol
    from .heap import limit_arenas

    limit_arenas()  # before the first thread of this process (serve/heap.py)
    _import_what_requests_import()
    settings = ServerConfig(registry, signing_key)
    app = create_app(settings)
    if deliver_hooks:
        from registry.app.hooks import Deliverer

        Deliverer(registry, settings.stopping).start()
    # Idle keep-alive connections are kept 75 s (uvicorn's default is 5 s): a client reusing one the server has
    # just closed gets no answer, so a short limit turns ordinary pauses between a worker's requests into errors.
    # A request's head must arrive within connections.HEAD_SECONDS, whatever the keep-alive.
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                            timeout_keep_alive=75, lifespan="on", http=HeadTimedProtocol)
    _stopping_server(config, settings.stopping).run(sockets=[sock])


def _import_what_requests_import() -> None:
    """Import, before the request threads start, the modules a request imports on first use (a command imports
    them only when asked, for its start-up time): two first requests importing one at once can find it half
    initialized, an ImportError and a 500 (a soak's first live read did)."""
    import importlib

    for module in ("registry.projections.view", "registry.projections.report", "registry.projections.headline",
                   "registry.projections.html_report", "registry.app.reports", "registry.app.artifact_page"):
        importlib.import_module(module)


def _end_with(parent: int) -> None:
    """In a worker process: be sent SIGTERM when ``parent``, the process that supervises the workers, ends, even
    killed with no chance to stop them (SIGKILL, the kernel's OOM killer). Otherwise its workers would keep
    answering on the port, each with its own registry, with nothing left to stop them. Exits at once when the
    parent has already gone. On Linux (``prctl(PR_SET_PDEATHSIG)``); elsewhere the workers are stopped only by
    their parent."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the request above: no signal will come
        os._exit(0)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _stop(children: list[int]) -> None:
    """Ask every worker process still running to stop."""
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _stop_on_signals(children: list[int]) -> list[int]:
    """SIGTERM or SIGINT to the parent stops the workers (the parent then ends once they have); the signals
    received, in order."""
    received: list[int] = []

    def handler(signum, _frame) -> None:
        received.append(signum)
        _stop(children)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return received


def _supervise(children: list[int]) -> int:
    """Wait for the worker processes; stop them all when one ends; the first one's exit status."""
    first = None
    while children:
        pid, status = os.wait()
        children.remove(pid)
        if first is None:
            code = os.waitstatus_to_exitcode(status)
            first = code if code >= 0 else 128 - code  # killed by a signal: the shell's 128 + its number
            _stop(children)
    return first or 0
