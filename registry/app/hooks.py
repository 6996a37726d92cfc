"""Webhooks: a team told when an artifact is decided, promoted, regressed or revoked (docs/hooks.md).

A hook is kept as events in its own stream, `hook:<hook id>`: `HookAdded`
(the URL, the events it wants, where its secret is read and an id naming the
secret), one `HookDeliveryAttempted` per attempt to deliver one log event to
it, and `HookRemoved`. Hooks are added and removed only on the command line,
by whoever holds the database, as tokens are: no token can point the
registry at a URL.

The log itself is the outbox. A decision is appended and done; nothing about
a receiver can block it or make it fail. A deliverer (`deliver`: one pass)
reads the events appended since a hook's last attempt, signs each one it
wants (registry.formats.webhooks: HMAC-SHA256 over the delivery id, a
timestamp and the body), POSTs it, and records the attempt; a failed
attempt is retried after RETRY_DELAYS_S, each attempt recorded, until one is
answered 2xx or the delays run out. `registry serve` runs a deliverer in a
thread (`Deliverer`, polling the log's head as its live view does), and
`registry hook deliver [--follow]` runs the same pass where no server runs.

Delivery is at least once: a deliverer that sent a delivery and stopped
before recording it sends it again, under the same id, which a receiver
uses to act once. Two deliverers of one registry (a server and a cron job)
race on a hook's stream: each attempt's append names the version it read,
so only one records it and the other re-reads; the receiver may see a
delivery twice under one id.

The secret never enters the log or a delivery: `secret_file` (absolute) is
read when signing, owner-only, and must still hash to `secret_id`, a
domain-separated SHA-256 prefix of the secret (registry.formats.webhooks
`secret_id`; a secret of at least 32 characters, which `hook secret`
writes from 32 random bytes, so the prefix reveals nothing a guess could use).
"""
from __future__ import annotations

import logging
import os
import secrets
import stat
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

from registry.formats.errors import UserError, first_line
from registry.formats.names import HOOK_PREFIX, hook_stream
from registry.formats.text import check_line, text_arguments
from registry.formats.webhooks import BODY_FORMAT, DeliveryRefused, body_bytes, secret_id, signed_headers

from .context import Registry

LOG = logging.getLogger("registry.hooks")

# What a hook may ask for. A log event is about one or more of them (`event_names`), the most specific first.
EVENTS = ("decision", "promotion", "alarm", "revocation")
# Seconds to wait after each failed attempt before the next; after the last one the delivery is given up.
RETRY_DELAYS_S = (5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0)
# An attempt that gets no answer within this long has failed (connect and read together).
TIMEOUT_S = 10.0
MAX_SECRET_FILE_BYTES = 4096
MAX_URL_CHARACTERS = 2000


def event_names(event_type: str, payload: dict[str, Any]) -> tuple[str, ...]:
    """What a log event is about, most specific first (empty: no hook is told of it)."""
    if event_type == "VerdictRendered":
        return ("promotion", "decision") if payload["verdict"]["decision"] == "promoted" else ("decision",)
    if event_type == "HumanDecision":
        return ("promotion", "decision") if payload["action"] == "approve" else ("revocation", "decision")
    if event_type == "RegressionDetected":
        return ("alarm",)
    return ()


# The event types a deliverer reads the log for.
SUBJECT_TYPES = ("VerdictRendered", "HumanDecision", "RegressionDetected")


@dataclass
class Hook:
    """One webhook as its stream tells it: what it wants, where its secret is, what was delivered."""

    hook_id: str
    url: str
    events: list[str]
    secret_file: str
    secret_id: str
    added_position: int
    added_at: str
    added_by: str
    version: int  # its stream's version: the next append expects it
    removed: dict[str, Any] | None = None
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)  # delivery -> its latest attempt
    attempt_count: int = 0

    @property
    def cursor(self) -> int:
        """The log position up to which every event it wants has had an attempt."""
        return max([self.added_position, *(a["position"] for a in self.attempts.values())])

    def summary(self) -> dict[str, Any]:
        latest = list(self.attempts.values())
        failing = [a for a in latest if a["outcome"] == "failed"]
        return {"hook": self.hook_id, "url": self.url, "events": self.events, "secret_file": self.secret_file,
                "secret_id": self.secret_id, "added_at": self.added_at, "added_by": self.added_by,
                "removed": self.removed, "deliveries": len(latest),
                "delivered": sum(1 for a in latest if a["outcome"] == "delivered"),
                "retrying": sum(1 for a in failing if a["next_attempt_after"]),
                "given_up": sum(1 for a in failing if not a["next_attempt_after"]),
                "attempts": self.attempt_count,
                "last_attempt": max(latest, key=lambda a: a["recorded_at"]) if latest else None}


def _hook_from(events) -> Hook:
    first = events[0]
    if first.type != "HookAdded":
        raise UserError(f"stream {first.stream} does not start with a HookAdded event")
    added = first.payload
    hook = Hook(added["hook_id"], added["url"], list(added["events"]), added["secret_file"], added["secret_id"],
                first.position, first.recorded_at.isoformat(), first.actor, len(events))
    for event in events[1:]:
        if event.type == "HookRemoved":
            hook.removed = {"reason": event.payload["reason"], "by": event.actor,
                            "at": event.recorded_at.isoformat(), "position": event.position}
        elif event.type == "HookDeliveryAttempted":
            hook.attempts[event.payload["delivery"]] = {**event.payload, "recorded_at": event.recorded_at.isoformat()}
            hook.attempt_count += 1
    return hook


def read_hook(registry: Registry, hook_id: str) -> Hook:
    """The hook's state from its stream; an unknown id is refused."""
    events = registry.store.read_stream(hook_stream(hook_id))
    if not events:
        raise UserError(f"no hook {hook_id!r} (`registry hook list` lists them)")
    return _hook_from(events)


def list_hooks(registry: Registry, *, removed: bool = False) -> list[Hook]:
    """Every hook, in the order added (removed ones only when asked)."""
    hooks = [_hook_from(registry.store.read_stream(stream)) for stream in registry.store.streams(HOOK_PREFIX)]
    return sorted((h for h in hooks if removed or h.removed is None), key=lambda h: h.added_position)


def check_url(url: str) -> str:
    """An http(s) URL with a host, holding no credentials (the URL is recorded in the log); one line otherwise."""
    check_line(url, "url", MAX_URL_CHARACTERS)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"url {url!r}: give an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise UserError(f"url {parts.scheme}://...@{parts.hostname}: holds credentials, which the log would keep; "
                        "authenticate deliveries by their signature instead (docs/hooks.md)")
    if parts.fragment:
        raise UserError(f"url {url!r}: a fragment is never sent to a server; drop it")
    return url


def check_events(events: Iterable[str]) -> list[str]:
    """The event names asked for (comma-separated or repeated), in EVENTS order; an unknown one is refused."""
    chosen = sorted({event.strip() for text in events for event in text.split(",") if event.strip()})
    unknown = [event for event in chosen if event not in EVENTS]
    if unknown or not chosen:
        raise UserError(f"--events: {', '.join(unknown) or 'none given'}; choose from {', '.join(EVENTS)} "
                        "(comma-separated or repeated)")
    return [event for event in EVENTS if event in chosen]


def read_secret(path: str | os.PathLike) -> str:
    """The secret in `path`: a regular, owner-only file of at most MAX_SECRET_FILE_BYTES, of at least 32 characters."""
    from registry.formats.documents import DocumentError, read_document

    try:
        info = os.stat(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the webhook secret: {exc.strerror} (create one with "
                        "`registry hook secret FILE`)") from None
    if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077:
        raise UserError(f"{path}: the webhook secret is readable by others (mode {stat.S_IMODE(info.st_mode):04o}); "
                        "make it owner-only (chmod 600)")
    try:
        text = read_document(path, "webhook secret", MAX_SECRET_FILE_BYTES)
    except DocumentError as exc:
        raise UserError(str(exc)) from None
    try:
        secret_id(text)
    except DeliveryRefused as exc:
        raise UserError(f"{path}: {exc} (`registry hook secret FILE` writes one)") from None
    return text.strip()


def create_secret(path: str | os.PathLike) -> str:
    """Write a new secret (32 random bytes, URL-safe base64) to `path`, owner-only, never over an existing file;
    returns its id."""
    from registry.formats.output_files import write_new

    secret = "rwhs_" + secrets.token_urlsafe(32)
    write_new(path, secret + "\n", mode=0o600, what="webhook secret")
    return secret_id(secret)


@text_arguments
def add_hook(registry: Registry, url: str, events: Iterable[str], secret_file: str) -> Hook:
    """Append a `HookAdded`: it is told of every event it wants appended after this one."""
    from registry.events.store import NewEvent
    from registry.events.types import HookAdded

    check_url(url)
    wanted = check_events(events)
    path = str(Path(secret_file).absolute())
    secret = read_secret(path)
    hook_id = secrets.token_hex(8)
    payload = HookAdded(hook_id=hook_id, url=url, events=wanted, secret_file=path, secret_id=secret_id(secret))
    registry.store.append(hook_stream(hook_id), [NewEvent(payload.type, payload)], expected_version=0,
                          actor=registry.actor)
    return read_hook(registry, hook_id)


@text_arguments
def remove_hook(registry: Registry, hook_id: str, reason: str) -> Hook:
    """Append a `HookRemoved`; nothing more is delivered to it, retries included. Refused when already removed."""
    from registry.events.store import NewEvent
    from registry.events.types import HookRemoved

    hook = read_hook(registry, hook_id)
    if hook.removed is not None:
        raise UserError(f"hook {hook_id} was removed at position {hook.removed['position']} by {hook.removed['by']}")
    if not reason.strip():
        raise UserError("--reason: say why the hook is removed (recorded)")
    payload = HookRemoved(hook_id=hook_id, reason=reason.strip())
    registry.store.append(hook_stream(hook_id), [NewEvent(payload.type, payload)], expected_version=hook.version,
                          actor=registry.actor)
    return read_hook(registry, hook_id)


def delivery_id(hook_id: str, event_id: str) -> str:
    """The id of one log event's delivery to one hook: the same on every attempt, unique across hooks and events."""
    return f"{hook_id}-{event_id}"


def delivery_document(hook: Hook, event, name: str) -> dict[str, Any]:
    """The body of one delivery: what happened, to which artifact, where in the log, in a line and in fields."""
    payload = event.payload
    about: dict[str, Any] = {"artifact": payload["artifact"], "payload_sha256": payload.get("payload_sha256")}
    if event.type == "VerdictRendered":
        verdict = payload["verdict"]
        about |= {"workload": payload["workload"], "decision": verdict["decision"], "rule": verdict["rule"],
                  "reasons": verdict["reasons"], "speedup": verdict.get("speedup"),
                  "speedup_ci": verdict.get("speedup_ci"), "contract_version": payload["contract_version"]}
        text = f"{payload['artifact']}: {verdict['decision']} ({verdict['rule']}) in workload {payload['workload']}"
    elif event.type == "HumanDecision":
        about |= {"action": payload["action"], "person": payload["person"], "reason": payload["reason"]}
        text = f"{payload['artifact']}: {payload['action']} by {payload['person']}: {payload['reason']}"
    else:
        about |= {"verdict_event_id": payload["verdict_event_id"], "pairs": payload["pairs"],
                  "below": payload["below"], "threshold": payload["threshold"], "alpha": payload["alpha"]}
        text = (f"{payload['artifact']}: regression detected at pair {payload['pairs']} of its re-measurements "
                f"(threshold {payload['threshold']:.4g}x); resolve and lock skip it")
    return {"format": BODY_FORMAT, "delivery": delivery_id(hook.hook_id, event.event_id), "event": name,
            "hook": hook.hook_id, "text": text, **about,
            "log": {"position": event.position, "event_id": event.event_id, "type": event.type,
                    "stream": event.stream, "recorded_at": event.recorded_at.isoformat(), "actor": event.actor}}


@dataclass(frozen=True)
class Answer:
    """What one POST got: a status, or the error that kept it from getting one."""

    status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST the delivery once and read the status line only: a redirect is not followed (it is an answer other
    than 2xx), and whatever body a receiver sends back is never read (it could be of any size)."""
    import httpx

    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client, \
                client.stream("POST", url, content=body, headers=headers) as response:
            status, reason = response.status_code, response.reason_phrase
    except httpx.HTTPError as exc:
        return Answer(None, first_line(exc) or type(exc).__name__)
    return Answer(status, None if 200 <= status < 300 else f"answered {status} {reason}")


@dataclass(frozen=True)
class Attempted:
    """One attempt made by a pass, as recorded."""

    hook: str
    delivery: str
    event: str
    position: int
    attempt: int
    outcome: str
    status: int | None
    error: str | None
    next_attempt_after: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def deliver(registry: Registry, *, now: Callable[[], float] = time.time, send: Callable[..., Answer] = post,
            retry_delays: tuple[float, ...] = RETRY_DELAYS_S, timeout: float = TIMEOUT_S,
            scanned: dict[str, int] | None = None) -> list[Attempted]:
    """One pass over every hook: each retry now due, then each event it wants that has had no attempt yet.

    `scanned` (a long-running deliverer's memory) holds, per hook, the log
    position its scan has read up to, so a later pass reads only the events
    appended since; without it the scan starts from the hook's last attempt.
    """
    from registry.events.errors import ConcurrencyError

    made: list[Attempted] = []
    for hook in list_hooks(registry):
        try:
            made += _deliver_hook(registry, hook, now, send, retry_delays, timeout, scanned)
        except ConcurrencyError:
            continue  # another deliverer recorded an attempt of this hook first: the next pass reads it again
    return made


def _deliver_hook(registry: Registry, hook: Hook, now, send, retry_delays, timeout,
                  scanned: dict[str, int] | None) -> list[Attempted]:
    made = []
    moment = now()
    due = [a for a in hook.attempts.values() if a["outcome"] == "failed" and a["next_attempt_after"]
           and datetime.fromisoformat(a["next_attempt_after"]).timestamp() <= moment]
    for attempt in sorted(due, key=lambda a: a["position"]):
        event = registry.store.get(attempt["event_id"])
        if event is not None:
            made.append(_attempt(registry, hook, event, attempt["event"], attempt["attempt"] + 1, now, send,
                                 retry_delays, timeout))
    start = max(hook.cursor, (scanned or {}).get(hook.hook_id, 0))
    head = registry.store.head_position()
    for event in registry.store.iter_all(after_position=start, up_to_position=head):
        if event.type not in SUBJECT_TYPES or delivery_id(hook.hook_id, event.event_id) in hook.attempts:
            continue
        name = next((n for n in event_names(event.type, event.payload) if n in hook.events), None)
        if name is not None:
            made.append(_attempt(registry, hook, event, name, 1, now, send, retry_delays, timeout))
    if scanned is not None:
        scanned[hook.hook_id] = head
    return made


def _attempt(registry: Registry, hook: Hook, event, name: str, number: int, now, send, retry_delays,
             timeout) -> Attempted:
    """Sign and POST one delivery, then record the attempt (expecting the hook's stream as read)."""
    from registry.events.store import NewEvent
    from registry.events.types import HookDeliveryAttempted

    identifier = delivery_id(hook.hook_id, event.event_id)
    body = body_bytes(delivery_document(hook, event, name))
    try:
        secret = read_secret(hook.secret_file)
        if secret_id(secret) != hook.secret_id:
            raise UserError(f"{hook.secret_file}: the secret changed since the hook was added (secret id "
                            f"{secret_id(secret)}, added with {hook.secret_id}); add the hook again to sign with it")
    except UserError as exc:
        answer = Answer(None, f"not sent: {first_line(exc)}")
    else:
        answer = send(hook.url, body, signed_headers(secret, identifier, name, body, now()), timeout)
    again = None
    if not answer.delivered and number <= len(retry_delays):
        again = (datetime.fromtimestamp(now(), timezone.utc) + timedelta(seconds=retry_delays[number - 1])).isoformat()
    payload = HookDeliveryAttempted(hook_id=hook.hook_id, delivery=identifier, event_id=event.event_id,
                                    position=event.position, event=name, attempt=number,
                                    outcome="delivered" if answer.delivered else "failed", status=answer.status,
                                    error=None if answer.error is None else answer.error[:500],
                                    next_attempt_after=again)
    registry.store.append(hook_stream(hook.hook_id), [NewEvent(payload.type, payload)],
                          expected_version=hook.version, actor=registry.actor)
    hook.version += 1
    hook.attempts[identifier] = {**payload.model_dump(), "recorded_at": datetime.now(timezone.utc).isoformat()}
    hook.attempt_count += 1
    if not answer.delivered:
        LOG.info("hook %s: delivery %s attempt %d failed: %s", hook.hook_id, identifier, number, answer.error)
    return Attempted(hook.hook_id, identifier, name, event.position, number, payload.outcome, answer.status,
                     payload.error, again)


class Deliverer:
    """A thread that runs `deliver` whenever the log's head moves, and at least every `idle_s` (for retries),
    until `stopping` is set: what `registry serve` runs beside its API. A pass that raises is logged and the
    thread goes on; nothing a receiver does reaches the server's requests."""

    def __init__(self, registry: Registry, stopping: threading.Event, *, poll_s: float = 1.0,
                 idle_s: float = 5.0) -> None:
        self.registry, self.stopping, self.poll_s, self.idle_s = registry, stopping, poll_s, idle_s
        self.scanned: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, name="hook-deliverer", daemon=True)

    def start(self) -> Deliverer:
        self.thread.start()
        return self

    def _run(self) -> None:
        last_head, last_pass = None, 0.0
        while not self.stopping.wait(self.poll_s):
            try:
                head = self.registry.store.head_position()
                if head != last_head or time.monotonic() - last_pass >= self.idle_s:
                    deliver(self.registry, scanned=self.scanned)
                    last_head, last_pass = self.registry.store.head_position(), time.monotonic()
            except Exception:  # noqa: BLE001 - a pass that failed is logged; deliveries go on at the next one
                LOG.exception("hook deliveries: a pass failed; the next one tries again")
