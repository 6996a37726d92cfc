"""What may ship: a workload and its artifacts now, read at one position (`resolve`, `lock`).

The matching itself (profile against bundle, reason codes, the best match)
is bundles/resolution.py's; this module only reads what it matches against,
in one snapshot of the live tables so the position it returns names exactly
the log prefix the answer reflects (resolve and lock report it).
"""
from __future__ import annotations

from sqlalchemy import select

from .asof import fold_log
from .catchup import ReadModels
from .read_models import ArtifactState, WorkloadState
from .row_checks import check_absent, check_workload_count, checked_states, row_columns
from .schema import ARTIFACTS, WORKLOADS
from .snapshot import read_checkpoint, reading


class ShippingReads(ReadModels):
    """What may ship: what resolve and lock match against."""

    def workload_artifacts(self, workload: str) -> tuple[int, WorkloadState | None, list[ArtifactState]]:
        """(position, the workload, its artifacts without verdict history) now, read at one position.

        Read in one snapshot of the live tables (an indexed lookup by
        workload), so the position names exactly the log prefix the answer
        reflects; every row is checked (row_checks.py), and their number
        against the workload's count, so a deleted row is a refusal, never an
        artifact left out. A connection that may not write the read models
        folds the log to its head instead.
        """
        as_of = self.position_to_fold(None)
        if as_of is not None:
            state = fold_log(self.store, as_of)
            chosen = [state.artifacts[key] for key in sorted(state.artifacts)
                      if state.artifacts[key]["workload"] == workload]
            return as_of, state.workloads.get(workload), chosen
        with reading(self.engine) as conn:
            position = read_checkpoint(conn) or 0
            declared = conn.execute(select(*row_columns("workloads")).where(WORKLOADS.c.workload == workload)).first()
            if declared is None:
                check_absent(conn, "workloads", workload, position)
            rows = conn.execute(select(*row_columns("artifacts")).where(ARTIFACTS.c.workload == workload)
                                .order_by(ARTIFACTS.c.artifact)).all()
            contract = None if declared is None else checked_states(conn, "workloads", [declared], position)[0]
            artifacts = checked_states(conn, "artifacts", rows, position)
            check_workload_count(conn, workload, len(rows))
        self.served_position = position
        return position, contract, artifacts
