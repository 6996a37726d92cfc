"""What may ship: a workload and its artifacts, read at one position (`resolve`, `lock`, `rejudge`, `reverify`).

The matching itself (profile against bundle, reason codes, the best match)
is bundles/resolution.py's; this module only reads what it matches against:
live, in the unit of work's snapshot (view.py), so the position it stands at
names exactly the log prefix the answer reflects (resolve and lock report
it); every row is checked (row_checks.py), and their number against the
workload's count, so a deleted row is a refusal, never an artifact left out.
"""
from __future__ import annotations

from sqlalchemy import Connection, bindparam, select

from .read_models import ArtifactState, RegistryState, WorkloadState
from .read_models.artifacts import ARTIFACTS, check_workload_count
from .read_models.workloads import WORKLOADS
from .row_checks import check_absent, checked_states, row_columns

_WORKLOAD = select(*row_columns("workloads")).where(WORKLOADS.c.workload == bindparam("workload"))
_ARTIFACTS = select(*row_columns("artifacts")).where(ARTIFACTS.c.workload == bindparam("workload"))


def workload_rows(conn: Connection, workload: str,
                  checkpoint: int) -> tuple[WorkloadState | None, list[ArtifactState]]:
    """The workload and its artifacts without verdict history, live (an indexed lookup by workload)."""
    declared = conn.execute(_WORKLOAD, {"workload": workload}).first()
    if declared is None:
        check_absent(conn, "workloads", workload, checkpoint)
    rows = sorted(conn.execute(_ARTIFACTS, {"workload": workload}).all(), key=lambda row: row[0])
    contract = None if declared is None else checked_states(conn, "workloads", [declared], checkpoint)[0]
    artifacts = checked_states(conn, "artifacts", rows, checkpoint)
    check_workload_count(conn, workload, len(rows))
    return contract, artifacts


def of_workload(state: RegistryState, workload: str) -> tuple[WorkloadState | None, list[ArtifactState]]:
    """The same from a folded state (as of a position, or a connection that may only read)."""
    chosen = [state.artifacts[key] for key in sorted(state.artifacts) if state.artifacts[key]["workload"] == workload]
    return state.workloads.get(workload), chosen
