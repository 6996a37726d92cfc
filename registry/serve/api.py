"""`registry serve`'s HTTP API: the use cases of app/ behind scoped tokens, JSON in and out.

Every route names the one scope it needs (`read`, `ingest`, `decide`,
`admin`; docs/serve.md has the table), and the token is read from its
stream on every request (app/tokens.py; its events are read again whenever
the stream's version moved, `KnownTokens`), so a revoked or expired token is
refused on the very next one. A route that acts on a workload (ingest,
decide) checks the token's workload glob against the workload of the
artifact it touches, read from that artifact's read model. Every event the
server appends is by `principal/key id`.

Request bodies are read only once the token has passed, bounded in size
and time, and parsed as strictly as the CLI reads a file (bodies.py); no
route declares a body for FastAPI to read first.

Errors: a refusal (registry.formats.errors.UserError, a StoreError) is a 4xx
whose body is `{"error": <the CLI's one line>}`: 401 for a missing or bad
token, 403 for a scope that does not cover the request, 409 for a write that
lost a race (with `Retry-After: 0`: the same request again may pass) or
reused an idempotency key for other content (without it), 408, 413, 422,
429 or 503 for a body or a stream the server will not take (bodies.py,
live.py), 400 otherwise; an unknown route or method is a 404 or 405 in the
same shape. Anything else is a defect: a 500 whose body names a crash id,
with the traceback in the server's log only.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from registry.app import Registry
from registry.app.bench import PairWriter, pairs
from registry.app.tokens import Grant, KnownTokens, NotPermitted, TokenRefused, authenticate
from registry.events.errors import ConcurrencyError, IdempotencyConflict, StoreError
from registry.formats.errors import UserError, first_line

from . import live
from .heap import give_back_free_pages
from .bodies import (MOST_DOCUMENT_BYTES, CloseOnUnreadBody, LargeBodies, RequestRefused, body_schema, json_body,
                     text_body, validation_line)
from .models import (EVIDENCE_SCHEMA, Declaration, HumanDecisionBody, LockRequest, PairBatch, QueryInteger,
                     Registration, SessionOpen)

LOG = logging.getLogger("registry.serve")
# The most events one page of `history` returns.
MOST_HISTORY_PAGE = 1000

_bearer = HTTPBearer(auto_error=False, description="A token from `registry token issue` (rgt_...).")


@dataclass
class ServerConfig:
    """What the server was started with: the registry it serves and the key its locks are signed with.

    `stopping` is set when the server is asked to stop (server.py): the live view's event streams end at
    their next poll, so a stop never waits for an open page.
    """

    registry: Registry
    signing_key: Any | None = None
    stopping: threading.Event = field(default_factory=threading.Event)


def _status(exc: Exception) -> int:
    if isinstance(exc, RequestRefused):
        return exc.status
    if isinstance(exc, TokenRefused):
        return 401
    if isinstance(exc, NotPermitted):
        return 403
    if isinstance(exc, (ConcurrencyError, IdempotencyConflict)):
        return 409
    return 400


# Threads answering requests at once. Each may keep a writer connection of its own (events/recorder.py) beside
# the one it reads with, so two per thread must fit the engine's pool (SQLAlchemy's default: 5 + 10 overflow);
# more threads would wait on the pool rather than on the database.
WORKER_THREADS = 6


@asynccontextmanager
async def _bounded_threads(_app: FastAPI):
    import anyio.to_thread

    anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
    yield


def create_app(config: ServerConfig) -> FastAPI:
    app = FastAPI(title="registry", version=_version(), lifespan=_bounded_threads,
                  description="An event-sourced promotion registry for GPU kernel artifacts (docs/serve.md).")
    base = config.registry

    @app.exception_handler(UserError)
    @app.exception_handler(StoreError)
    async def refused(_request: Request, exc: Exception) -> JSONResponse:
        headers = ({"WWW-Authenticate": "Bearer"} if isinstance(exc, TokenRefused)
                   else {"Retry-After": "0"} if isinstance(exc, ConcurrencyError)
                   else {"Connection": "close"} if isinstance(exc, RequestRefused) and exc.closes else None)
        return JSONResponse({"error": first_line(exc)}, status_code=_status(exc), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": validation_line(list(exc.errors()))}, status_code=422)

    @app.exception_handler(HTTPException)
    async def not_here(_request: Request, exc: HTTPException) -> JSONResponse:
        """An unknown route or method (404, 405): the documented shape, never the framework's own."""
        return JSONResponse({"error": f"{exc.detail}"}, status_code=exc.status_code, headers=exc.headers)

    app.add_middleware(CloseOnUnreadBody)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        crash = uuid.uuid4().hex[:12]
        LOG.error("crash %s on %s %s", crash, request.method, request.url.path, exc_info=exc)
        return JSONResponse({"error": f"internal error (crash id {crash}); the server's log has the details",
                             "crash_id": crash}, status_code=500)

    known = KnownTokens()
    # Pair batches are recorded in groups by one writer thread (group commit, app/bench.py); their route waits
    # for its answer without holding a request thread, so every batch in flight can join the next group.
    pair_writer = PairWriter()

    def token(credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Grant:
        return authenticate(base, None if credentials is None else credentials.credentials, known=known)

    # A body is read only once the token has passed (its dependency runs first); a route names its scope's
    # dependency before its body, so a scope that does not cover the request is refused before the body too.
    large = LargeBodies()

    def body_of(model: type) -> Callable[..., Any]:
        return json_body(model, token, large=large)

    streams = live.Streams(base, lambda presented: authenticate(base, presented, known=known), config.stopping)

    def acting(grant: Grant) -> Registry:
        """The one registry the server built, for the request's actor (it shares the engine; nothing is built)."""
        return base.acting(grant.actor)

    def scoped(scope: str, *, person: bool = False) -> Callable[[Grant], Grant]:
        def dependency(grant: Grant = Depends(token)) -> Grant:
            grant.holds(scope, person=person)
            return grant
        return dependency

    def ingesting(grant: Grant) -> Callable[[str], None]:
        """The scope check a session's use case runs on the workload of the artifact it has just read."""
        return lambda workload: grant.require("ingest", workload)

    def workload_of(artifact: str) -> str:
        from registry.app.evidence import capture_subject

        return capture_subject(base, artifact).registration["workload"]

    # -- reads ---------------------------------------------------------------------------------------------------

    @app.get("/api/whoami", tags=["read"])
    def whoami(grant: Grant = Depends(token)) -> dict:
        """What the presented token grants (any valid token)."""
        return grant.to_dict()

    @app.get("/api/artifacts/{artifact}", tags=["read"])
    def show(artifact: str, verdicts: Annotated[QueryInteger, Query(ge=0, le=1000)] = 20,
             _grant: Grant = Depends(scoped("read"))) -> dict:
        """An artifact's state as `registry show --json` prints it."""
        from registry.app.show import show_artifact

        return show_artifact(base, artifact, verdicts).to_dict()

    @app.get("/api/artifacts/{artifact}/bench", tags=["read"])
    def bench_status(artifact: str, _grant: Grant = Depends(scoped("read"))) -> dict:
        """The artifact's benchmark record (`registry bench status --json`)."""
        from registry.app.bench import benchmark_record

        return {"artifact": artifact, **benchmark_record(base, artifact).to_dict()}

    @app.get("/api/history/{stream}", tags=["read"])
    def history(stream: str, after: Annotated[QueryInteger, Query(ge=0, le=2**62)] = 0,
                limit: Annotated[QueryInteger, Query(ge=1, le=MOST_HISTORY_PAGE)] = 100,
                _grant: Grant = Depends(scoped("read"))) -> dict:
        """One page of a stream's events after version `after`; `next` is the version to ask after, or null."""
        from registry.formats.names import artifact_stream

        name = stream if ":" in stream else artifact_stream(stream)
        events = base.store.recorder.select_stream(name, after_version=after, limit=limit)
        return {"stream": name, "events": [event.to_dict() for event in events],
                "next": events[-1].version if len(events) == limit else None}

    @app.get("/api/report", tags=["read"])
    def report(workload: str | None = Query(None, min_length=1, max_length=128),
               _grant: Grant = Depends(scoped("read"))) -> Response:
        """The report as `registry report --json` prints it."""
        from registry.app.reports import build
        from registry.projections.report import report_json

        built, _state = build(base, workload=workload, position=None, stale_days=30)
        return Response(report_json(built), media_type="application/json")

    @app.get("/api/verify", tags=["read"])
    def verify(_grant: Grant = Depends(scoped("read"))) -> dict:
        """Walk the hash chain (`registry verify --json`)."""
        found = base.store.verify()
        return {"intact": found.intact, "count": found.count,
                "head": {"position": found.head_position, "hash": found.head_hash},
                "broken_at": found.broken_at, "problem": found.problem}

    @app.get("/api/resolve", tags=["read"])
    def resolve(workload: str = Query(min_length=1, max_length=128), arch: str = Query(min_length=1, max_length=32),
                torch: str | None = Query(None, min_length=1, max_length=64),
                cuda: str | None = Query(None, min_length=1, max_length=64),
                triton: str | None = Query(None, min_length=1, max_length=64),
                _grant: Grant = Depends(scoped("read"))) -> dict:
        """Which promoted bundle of a workload a runtime may load, and why not each other (`registry resolve`)."""
        from registry.app.resolve import resolve_workload
        from registry.bundles import Profile

        return resolve_workload(base, workload, Profile(arch, torch, cuda, triton, "inference", "single")).to_dict()

    @app.get("/api/live", tags=["read"])
    def live_state(_grant: Grant = Depends(scoped("read"))) -> dict:
        """What the live page draws: each workload's artifacts, the monitors, each speed record's bounds figure.
        The pages the read freed go back to the system at once (serve/heap.py): it is a server's largest read."""
        try:
            return live.snapshot(base)
        finally:
            give_back_free_pages()

    @app.get("/api/artifacts/{artifact_id}/page", tags=["read"])
    def artifact_page(artifact_id: str, _grant: Grant = Depends(scoped("read"))) -> dict:
        """One artifact's page as the live view shows it: the HTML report's own section for it."""
        return live.artifact_page(base, artifact_id)

    @app.get("/api/live/events", tags=["read"], response_class=Response)
    async def live_events(grant: Grant = Depends(scoped("read")),
                          credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Response:
        """Server-sent events: `head` with the log's position whenever it moves (polled every 0.5 s); the stream
        ends when its token is revoked or expires (`end`), when the server stops, and after 300 s."""
        return streams.response(grant.key_id, credentials.credentials, grant.not_after)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        """The live page: a shell holding no data; it reads with the token given in its URL's fragment."""
        return HTMLResponse(live.PAGE)

    # -- ingest: evidence, sessions and pairs for the token's workloads -------------------------------------------

    @app.get("/api/artifacts/{artifact}/subject", tags=["ingest"])
    def subject(artifact: str, grant: Grant = Depends(scoped("ingest"))) -> dict:
        """What an evaluation measures: the registration and its workload's current contract."""
        from registry.app.evidence import capture_subject
        from registry.app.workloads import current_contract

        found = capture_subject(base, artifact)
        workload = found.registration["workload"]
        grant.require("ingest", workload)
        return {"artifact": artifact, "registration": found.registration,
                "contract": current_contract(base, workload).contract.canonical()}

    @app.post("/api/evidence", tags=["ingest"], openapi_extra=body_schema(EVIDENCE_SCHEMA))
    def evidence(grant: Grant = Depends(scoped("ingest")),
                 text: str = Depends(text_body("evidence document", token, most=MOST_DOCUMENT_BYTES,
                                               large=large))) -> dict:
        """Record a registry.evidence/1 document (all of it or nothing), as `registry evidence import`."""
        from registry.app.evidence import import_document

        artifact, recorded = import_document(acting(grant), text, authorize=ingesting(grant))
        return {"artifact": artifact, "positions": recorded.positions, "appended": recorded.appended}

    @app.post("/api/artifacts/{artifact}/sessions", tags=["ingest"], openapi_extra=body_schema(SessionOpen))
    def open_session(artifact: str, grant: Grant = Depends(scoped("ingest")),
                     body: SessionOpen = Depends(body_of(SessionOpen))) -> dict:
        """Open a benchmark session (`registry bench open`)."""
        from registry.app.bench import open_session as open_one

        name, record = open_one(acting(grant), artifact, body.device, body.timer, body.arch,
                                authorize=ingesting(grant))
        return {"session": name, "artifact": artifact, **record.to_dict()}

    @app.post("/api/artifacts/{artifact}/sessions/{session}/batches", tags=["ingest"],
              openapi_extra=body_schema(PairBatch))
    async def record_batch(artifact: str, session: str, grant: Grant = Depends(scoped("ingest")),
                           body: PairBatch = Depends(body_of(PairBatch))) -> dict:
        """Append one batch of pairs (`registry bench record`); the same batch key again appends nothing."""
        loop = asyncio.get_running_loop()
        answered: asyncio.Future = loop.create_future()
        batch = pairs(acting(grant), artifact, session, body.baseline_s, body.candidate_s, body.batch,
                      authorize=ingesting(grant))
        pair_writer.submit(batch, lambda outcome: _deliver(loop, answered, outcome))
        outcome = await answered
        if isinstance(outcome, Exception):
            raise outcome
        appended, record = outcome
        return {"artifact": artifact, "session": session, "batch": body.batch, "appended": appended,
                **record.to_dict()}

    # -- decide ---------------------------------------------------------------------------------------------------

    @app.post("/api/artifacts", tags=["decide"], openapi_extra=body_schema(Registration))
    def register(grant: Grant = Depends(scoped("decide")), body: Registration = Depends(body_of(Registration))) -> dict:
        """Register an artifact (`registry artifact register`) for a workload the token reaches: what the request
        carries and nothing else (a payload by its digest, a built-in kernel entry; never a file of the server's)."""
        from registry.app.workloads import register_artifact

        grant.require("decide", body.workload)
        body.refuse_file_entry()
        done = register_artifact(acting(grant), body.artifact, workload=body.workload, kind=body.kind,
                                 backend=body.backend, op=body.op, entry=body.entry,
                                 payload_sha256=body.payload_sha256, new_identity=body.new_identity)
        return {"artifact": done.artifact, "payload_sha256": done.payload_sha256, "appended": done.appended}

    @app.post("/api/artifacts/{artifact}/promote", tags=["decide"])
    def promote(artifact: str, grant: Grant = Depends(scoped("decide"))) -> dict:
        """Run the gate and record its verdict (`registry promote --json`)."""
        from registry.app.decisions import promote as run_promote

        grant.require("decide", workload_of(artifact))
        outcome = run_promote(acting(grant), artifact)
        return {**outcome.verdict, "artifact": artifact, "appended": outcome.appended,
                "contract_version": outcome.contract_version, "benchmark_attempts": outcome.benchmark_attempts}

    def human(action: str):
        def decide(artifact: str, grant: Grant = Depends(scoped("decide", person=True)),
                   body: HumanDecisionBody = Depends(body_of(HumanDecisionBody))) -> dict:
            from registry.app.decisions import human_decision

            grant.require("decide", workload_of(artifact), person=True)
            position = human_decision(acting(grant), artifact, action, body.reason, body.verdict)
            return {"artifact": artifact, "action": action, "person": grant.actor, "position": position}

        decide.__name__ = action
        decide.__doc__ = f"A person's {action} (`registry {action}`): a person's token with the decide scope only."
        return decide

    for action in ("approve", "revoke"):
        app.post(f"/api/artifacts/{{artifact}}/{action}", tags=["decide"],
                 openapi_extra=body_schema(HumanDecisionBody))(human(action))

    @app.post("/api/lock", tags=["decide"], openapi_extra=body_schema(LockRequest))
    def lock(grant: Grant = Depends(scoped("decide")), body: LockRequest = Depends(body_of(LockRequest))) -> dict:
        """A lock of the workload's promoted bundles, signed by the server's key (`registry lock`)."""
        from registry.app.lock import export_lock, signed_lock
        from registry.bundles.signed_lock import parse_duration

        grant.require("decide", body.workload)
        if config.signing_key is None:
            raise UserError("this server holds no signing key (start it with --key); it signs no lock")
        validity = parse_duration(body.valid_for)
        document = export_lock(base, body.workload)
        if not document["artifacts"]:
            raise UserError(f"nothing to lock: no promoted bundle of {body.workload} exists")
        return signed_lock(document, config.signing_key, validity)

    # -- admin ----------------------------------------------------------------------------------------------------

    @app.post("/api/workloads", tags=["admin"], openapi_extra=body_schema(Declaration))
    def declare(grant: Grant = Depends(scoped("admin")),
                body: Declaration = Depends(json_body(Declaration, token, most=MOST_DOCUMENT_BYTES, large=large))) \
            -> dict:
        """Declare a workload contract from its manifest's YAML text (`registry workload declare`)."""
        from registry.app.rejudge import must_rejudge
        from registry.app.workloads import declare_workload
        from registry.contracts import Contract

        contract = Contract.from_yaml(body.manifest_text())
        registry = acting(grant)
        declared = declare_workload(registry, contract)
        return {"workload": contract.workload, "contract_version": declared.version,
                "contract_hash": declared.content_hash, "appended": declared.appended,
                "must_rejudge": [entry["artifact"] for entry in must_rejudge(registry, contract.workload)]}

    return app


def _deliver(loop: asyncio.AbstractEventLoop, answered: asyncio.Future, outcome: Any) -> None:
    """From the pair writer's thread: hand `outcome` to the request waiting on `loop`. A loop already closed (the
    server stopping) has no one waiting, and must not stop the writer, which answers the other batches too."""
    try:
        loop.call_soon_threadsafe(_settle, answered, outcome)
    except RuntimeError:
        pass


def _settle(answered: asyncio.Future, outcome: Any) -> None:
    """Give a waiting request its outcome, unless it was cancelled meanwhile (its client went away)."""
    if not answered.done():
        answered.set_result(outcome)


def _version() -> str:
    from registry import __version__

    return __version__
