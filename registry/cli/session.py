"""The registry a command runs against, passed to every subcommand, and closed when the command ends.

Kept apart from `main` so that command modules never import the module that
registers them: `python -m registry.cli.main` runs `main` as `__main__`, and a
command module importing `.main` would load it a second time, mid-registration.

Every registry a command opens is closed when the command's context closes
(click's `call_on_close` on the root context, whatever the command's
outcome): its connections are given back and its engine disposed, so on
SQLite the write-ahead log is checkpointed into the database file then,
never later by a garbage collector.
"""
from __future__ import annotations

from typing import Callable

import click

from registry.app import Registry, open_registry


class Session:
    """Lazily opened registry for the command being run."""

    def __init__(self, url: str | None, actor: str | None):
        self.url = url
        self.actor = actor

    def open(self, create: bool = False, *, upgrading: bool = False, read_only: bool = False) -> Registry:
        registry = open_registry(self.url, actor=self.actor, create=create, upgrading=upgrading, read_only=read_only)
        closes_with_the_command(registry.close)
        return registry


def closes_with_the_command(close: Callable[[], None]) -> None:
    """Run `close` when the command line's outermost context closes (at once when no command is running)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        close()
        return
    ctx.find_root().call_on_close(close)


pass_session = click.make_pass_decorator(Session)
