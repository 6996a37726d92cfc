"""Errors raised by the event store; each message is one line a user can act on."""


class StoreError(Exception):
    """Base class: the store refused an operation and wrote nothing."""


class ConcurrencyError(StoreError):
    """The stream's current version is not the one the writer expected."""


class IdempotencyConflict(StoreError):
    """An idempotency key was reused with different content."""


class UnknownEventType(StoreError):
    """An event type that no payload class declares."""


class PayloadError(StoreError):
    """A payload failed validation against its event type's schema."""


class NotARegistry(StoreError):
    """The database is not a registry, or its schema does not match this code."""
