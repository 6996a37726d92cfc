"""The registry a command runs against, passed to every subcommand.

Kept apart from `main` so that command modules never import the module that
registers them: `python -m registry.cli.main` runs `main` as `__main__`, and a
command module importing `.main` would load it a second time, mid-registration.
"""
from __future__ import annotations

import click

from registry.app import Registry, open_registry


class Session:
    """Lazily opened registry for the command being run."""

    def __init__(self, url: str | None, actor: str | None):
        self.url = url
        self.actor = actor

    def open(self, create: bool = False) -> Registry:
        return open_registry(self.url, actor=self.actor, create=create)


pass_session = click.make_pass_decorator(Session)
