"""The fold: events in position order -> RegistryState, dispatched to the handlers the read models declare. No I/O.

Each read model declares the event types it folds and their handlers
(read_models/); an event type several models fold runs their handlers in
the order of `DECLARATIONS`. An event the fold cannot place raises
ProjectionError naming its position: an event type no model folds, events
out of order, a payload a handler cannot read (a key missing, a value of
another type). The state is never guessed.

Token events (`TokenIssued`, `TokenRevoked`) are kept by no read model:
`registry serve` reads a token from its one short stream on every request
(registry/app/tokens.py); the fold only checks that each sits in the stream
of the key it names. Webhook events likewise (`HookAdded`, `HookRemoved`,
`HookDeliveryAttempted`: their deliverer reads the hook's own stream,
registry/app/hooks.py).
"""
from __future__ import annotations

from typing import Iterable

from registry.events.store import StoredEvent
from registry.formats.names import HOOK_PREFIX, TOKEN_PREFIX

from .errors import ProjectionError
from .log import LogEvent
from .read_models import DECLARATIONS, RegistryState
from .read_models.declaration import Handler, same_subject


def _token(_state: RegistryState, event: LogEvent) -> None:
    """A token's issue or revocation: it must sit in its key's stream, and changes no read model."""
    same_subject(event, TOKEN_PREFIX + event.payload["key_id"], event.stream)


def _hook(_state: RegistryState, event: LogEvent) -> None:
    """A webhook's addition, delivery attempt or removal: it must sit in its hook's stream, and changes no read
    model (its deliverer reads the hook's own stream, registry/app/hooks.py)."""
    same_subject(event, HOOK_PREFIX + event.payload["hook_id"], event.stream)


def _dispatch() -> dict[str, tuple[Handler, ...]]:
    """Each event type's handlers, in the order of the declarations (the token and hook events' checks beside
    them)."""
    handlers: dict[str, tuple[Handler, ...]] = {
        "TokenIssued": (_token,), "TokenRevoked": (_token,),
        "HookAdded": (_hook,), "HookRemoved": (_hook,), "HookDeliveryAttempted": (_hook,)}
    for model in DECLARATIONS:
        for event_type, handler in model.folds.items():
            handlers[event_type] = (*handlers.get(event_type, ()), handler)
    return handlers


HANDLERS = _dispatch()


def apply(state: RegistryState, event: StoredEvent | LogEvent) -> RegistryState:
    """Fold one event into `state` (updated in place and returned)."""
    return fold(state, (event,))


def fold(state: RegistryState, events: Iterable[StoredEvent | LogEvent]) -> RegistryState:
    """Fold events, in position order, into `state` (updated in place and returned)."""
    handlers = HANDLERS
    for event in events:
        if type(event) is not LogEvent:
            event = LogEvent.from_stored(event)  # type: ignore[arg-type]
        if event.position <= state.position:
            raise ProjectionError(
                f"event at position {event.position} arrives after position {state.position}: "
                "the log must be folded in order"
            )
        found = handlers.get(event.type)
        if found is None:
            raise ProjectionError(f"event at position {event.position}: no projection handles type {event.type!r}")
        try:
            for handler in found:
                handler(state, event)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ProjectionError(
                f"event at position {event.position} ({event.type}) cannot be folded: malformed payload ({exc!r})"
            ) from None
        state.position = event.position
    return state
