"""The web stack alone: `registry serve`'s two ingest routes, answered without the registry (benchmarks/serve.py --floor).

The same FastAPI and uvicorn settings as the server (registry/serve/server.py),
the same request models parsed and the same bearer header read, the same bound
on answering threads (registry/serve/api.py's lifespan), but no token check,
no database and no use case: each batch is answered as taken. What the
benchmark's clients reach against it is the most any server on this stack can
answer on this machine beside those clients, so the ratio of the server's rate
to this one says how much of the load target the registry's own work leaves
unmet, and how much the machine does.

    .venv/bin/python benchmarks/serve_floor.py    (prints "floor on http://127.0.0.1:PORT", then answers)
"""
from __future__ import annotations

import socket
import uuid

import uvicorn
from fastapi import Depends, FastAPI
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from registry.serve.api import _bounded_threads
from registry.serve.connections import HeadTimedProtocol
from registry.serve.models import PairBatch, SessionOpen

_bearer = HTTPBearer(auto_error=False)


def create_floor_app() -> FastAPI:
    app = FastAPI(title="registry floor", lifespan=_bounded_threads)

    def token(credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> str | None:
        return None if credentials is None else credentials.credentials

    @app.post("/api/artifacts/{artifact}/sessions")
    def open_session(artifact: str, body: SessionOpen, _token: str | None = Depends(token)) -> dict:
        return {"session": uuid.uuid4().hex[:12], "artifact": artifact, "device": body.device}

    @app.post("/api/artifacts/{artifact}/sessions/{session}/batches")
    def record_batch(artifact: str, session: str, body: PairBatch, _token: str | None = Depends(token)) -> dict:
        return {"artifact": artifact, "session": session, "batch": body.batch, "appended": True,
                "pairs": len(body.baseline_s)}

    return app


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # as registry/serve/server.py
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # as registry/serve/server.py listens
    print(f"floor on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(create_floor_app(), log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                            timeout_keep_alive=75, lifespan="on", http=HeadTimedProtocol)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
