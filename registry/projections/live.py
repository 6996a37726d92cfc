"""`Projections`, the read side's one entry point: the live read models and every question asked of them.

Each question is answered by its own module, whose class adds that
question's methods to the read models, so a reader finds the code for a
command by the question's name (docs/architecture.md, "Reads: which module
answers which question"):

- keeping the read models current (`catch_up`, `reset`): catchup.py `ReadModels`
- one subject (`artifact` for show, `current_artifact` for appends and
  promote, `workload`, `frameset`): subject.py `SubjectReads`
- what may ship (`workload_artifacts` for resolve and lock): shipping.py `ShippingReads`
- the artifacts sharing a payload (`artifacts_sharing_payload`, promote's
  attempts): attempts.py `AttemptReads`
- the registry as a whole (`state` for report, `artifacts`, `workloads`):
  whole_registry.py `WholeRegistryReads`
- as-of folds and positions: asof.py
"""
from __future__ import annotations

from .attempts import AttemptReads
from .shipping import ShippingReads
from .subject import SubjectReads
from .whole_registry import WholeRegistryReads


class Projections(SubjectReads, ShippingReads, AttemptReads, WholeRegistryReads):
    """The registry's read side: live read models, and as-of answers folded from the log."""
