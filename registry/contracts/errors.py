"""The one error a workload manifest raises."""
from __future__ import annotations

from registry.formats.errors import UserError


class ContractError(UserError):
    """A manifest that cannot be built: the message names the field path and the problem.

    A contract is either valid or it does not exist; callers never receive a
    half-checked contract with a silently filled-in default.
    """
