"""The read side's refusals: an event the fold cannot place, and a read-model row that does not match its log."""
from __future__ import annotations

from registry.formats.errors import UserError

REPLAY = "`registry replay` rebuilds the read models from the log"


class ProjectionError(UserError):
    """The log holds something the fold cannot place, or the read models cannot be trusted."""


class DamagedReadModel(ProjectionError):
    """A read-model row that does not match its hash or its log: refused, never decided on."""
