"""Request bodies of `registry serve`: read only after the token is checked, bounded in size and time, and parsed
as strictly as the CLI reads a file.

FastAPI reads and parses a route's declared body before it runs any
dependency, so a token check could only ever come after the whole body was
in memory (a 200 MiB body took an unauthenticated request to about 635 MB),
and its parser takes what the CLI refuses (`NaN`, `Infinity`, a key given
twice, nesting 100,000 deep, `"1_5"` as a number). So no route declares a
body: each takes it from a dependency of this module that depends on the
token first, and

- refuses a body past its route's bound before reading it when its
  `Content-Length` says so, and as soon as the bytes read pass it otherwise
  (413), so at most the bound is ever held;
- refuses a body that stops arriving (408): no part for BODY_IDLE_SECONDS,
  or not all of it within BODY_SECONDS;
- reads at most MOST_LARGE_BODIES bodies past LARGE_BODY_BYTES at once: the
  others wait, unread (the client's bytes stay in its socket), so memory is
  bounded however many large bodies arrive together;
- decodes the bytes as a document file is decoded (UTF-8, no byte-order
  mark) and parses them with the CLI's JSON reader
  (registry/formats/documents.py `load_json`: no NaN or Infinity, no key
  twice in an object, at most MAX_DEPTH levels), then validates a strict,
  closed model (no bool as a number, no number from a string, no field the
  model does not name), each refusal one line in the error shape
  docs/serve.md names.

A refusal made before a large body was read whole closes the connection
(`CloseOnUnreadBody`): otherwise the server would go on reading, and
dropping, whatever the client still sends.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

from fastapi import Depends, Request
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from registry.formats.documents import MAX_EVIDENCE_BYTES, document_text, load_json, too_large
from registry.formats.errors import UserError

# The most bytes a request body may have: an evidence document (the CLI's own bound, and so also a workload
# manifest's body, whose manifest text has the CLI's 4 MiB bound) or any other body (a pair batch of the most
# pairs a batch may hold is under half of it).
MOST_DOCUMENT_BYTES = MAX_EVIDENCE_BYTES
MOST_BODY_BYTES = 1024 * 1024
# A body must keep arriving: no pause longer than this between two parts, and all of it within BODY_SECONDS.
BODY_IDLE_SECONDS = 10.0
BODY_SECONDS = 120.0
# Bodies past this size are read (and handled) at most MOST_LARGE_BODIES at a time in a server process.
LARGE_BODY_BYTES = 1024 * 1024
MOST_LARGE_BODIES = 2

Model = TypeVar("Model", bound=BaseModel)


class RequestRefused(UserError):
    """A request the server refuses before any use case runs; `status` is its HTTP status, and `closes` whether its
    connection ends with the answer (a body left half read)."""

    status = 400
    closes = False


class BodyTooLarge(RequestRefused):
    status = 413
    closes = True


class BodyTooSlow(RequestRefused):
    status = 408
    closes = True


class BodyInvalid(RequestRefused):
    """A body that parses but does not fit its route's model."""

    status = 422


class LargeBodies:
    """The slots for reading bodies past LARGE_BODY_BYTES in one server process."""

    def __init__(self, slots: int = MOST_LARGE_BODIES):
        self.slots = slots
        self._semaphore: asyncio.Semaphore | None = None

    def semaphore(self) -> asyncio.Semaphore:
        if self._semaphore is None:  # made on the server's loop, on first use
            self._semaphore = asyncio.Semaphore(self.slots)
        return self._semaphore


async def read_body(request: Request, most: int, large: LargeBodies) -> bytearray:
    """The request's body, at most `most` bytes, arriving in time; taking a large-body slot past LARGE_BODY_BYTES
    (released by the caller's `release`, stored on the request)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > most:
        raise BodyTooLarge(too_large(int(declared), most, "request body", "request body"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BODY_SECONDS
    received = bytearray()
    if declared is not None and declared.isdigit() and int(declared) > LARGE_BODY_BYTES:
        await _take_slot(request, large)
    parts = request.stream().__aiter__()
    while True:
        wait = min(BODY_IDLE_SECONDS, deadline - loop.time())
        try:
            part = await asyncio.wait_for(parts.__anext__(), timeout=max(wait, 0.0))
        except StopAsyncIteration:
            break
        except (asyncio.TimeoutError, TimeoutError):
            raise BodyTooSlow(f"request body: {len(received)} bytes arrived, then nothing for "
                              f"{BODY_IDLE_SECONDS:g} s (or not all of it within {BODY_SECONDS:g} s); nothing "
                              "recorded") from None
        except ClientDisconnect:
            raise RequestRefused("request body: the client went away before sending all of it; nothing recorded") \
                from None
        received += part
        if len(received) > most:
            raise BodyTooLarge(f"request body: over the {most / (1024 * 1024):.1f} MiB a request body may have")
        if len(received) > LARGE_BODY_BYTES and not getattr(request.state, "large_slot", False):
            await _take_slot(request, large)
    return received


async def _take_slot(request: Request, large: LargeBodies) -> None:
    semaphore = large.semaphore()
    await semaphore.acquire()
    request.state.large_slot = True
    request.state.release_slot = semaphore.release


def _release(request: Request) -> None:
    release = getattr(request.state, "release_slot", None)
    if release is not None:
        request.state.release_slot = None
        release()


def parse_model(raw: bytes | bytearray, model: type[Model]) -> Model:
    """A body's bytes as `model`: decoded and parsed as the CLI reads a JSON file, then validated strictly."""
    text = document_text(raw, "request body", "request body", MOST_DOCUMENT_BYTES)
    found = load_json(text, "request body")
    try:
        return model.model_validate(found)
    except ValidationError as exc:
        raise BodyInvalid(validation_line(exc.errors())) from None


def validation_line(errors: list[dict[str, Any]]) -> str:
    """The first of pydantic's errors as one line: where, then what (a validator's own refusal in its words)."""
    first = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ())) or "request"
    error = (first.get("ctx") or {}).get("error")
    message = str(error) if first.get("type") == "value_error" and error is not None else first.get("msg",
                                                                                                  "invalid")
    return f"{where}: {message}".replace("\n", " ")


def json_body(model: type[Model], authenticated: Callable[..., Any], *, most: int = MOST_BODY_BYTES,
              large: LargeBodies) -> Callable[..., Any]:
    """A dependency giving the request's body as `model`, read only once `authenticated` (the token's dependency)
    has passed."""

    async def body(request: Request, _grant: Any = Depends(authenticated)):
        try:
            yield parse_model(await read_body(request, most, large), model)
        finally:
            _release(request)

    return body


def text_body(what: str, authenticated: Callable[..., Any], *, most: int, large: LargeBodies) -> Callable[..., Any]:
    """A dependency giving the request's body as the text of a document (`what`), read only once `authenticated`
    has passed; what the text holds is the use case's to check, as for a file the CLI reads."""

    async def body(request: Request, _grant: Any = Depends(authenticated)):
        try:
            yield document_text(await read_body(request, most, large), "request body", what, most)
        finally:
            _release(request)

    return body


def body_schema(schema: dict[str, Any] | type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI `requestBody` of a route whose body a dependency reads (`openapi_extra`): a model's schema, or
    the schema given, so the published schema stays exact."""
    if isinstance(schema, type):
        schema = schema.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# A body declared at most this long that is left unread is read and dropped by the server as usual, and its
# connection kept: closing a connection whose client is still sending makes the kernel answer the late bytes with a
# reset, which can reach the client before the refusal does.
DRAINED_BODY_BYTES = 64 * 1024


class CloseOnUnreadBody:
    """ASGI middleware: a response sent before a large (or chunked) request body was read whole says `Connection:
    close`, so the server stops reading there instead of reading and dropping the rest (a refused 200 MiB body)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not _too_long_to_drain(scope):
            await self.app(scope, receive, send)
            return
        done = False

        async def receiving():
            nonlocal done
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        async def sending(message):
            if message["type"] == "http.response.start" and not done:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receiving, sending)


def _too_long_to_drain(scope) -> bool:
    """Whether the request declares a body too long to drain: chunked, or past DRAINED_BODY_BYTES."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return not value.strip().isdigit() or int(value) > DRAINED_BODY_BYTES
    return False
