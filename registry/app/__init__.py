"""The application layer: the registry's use cases over the event store.

Each use case validates its input completely before it appends anything, so a
refusal leaves the log unchanged. The CLI is a thin shell over these.
"""
from .context import Registry, open_registry

__all__ = ["Registry", "open_registry"]
