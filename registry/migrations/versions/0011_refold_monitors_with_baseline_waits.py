"""fold the monitors again: each keeps its baseline-wait term and its left-out and contended counts

A monitor in an artifact's state now holds `baseline_wait_share` (fixed when
it starts) and counts the pairs the harness's baseline waits left out and
the batches contended (docs/monitor.md, "Leaving out preempted pairs"); a
row folded by an earlier version holds monitors without them, which every
read of the monitor (`show`, `monitor status`, `report`) and the next
re-measured batch's fold would fail on, and which `replay --verify` finds
different. The read models are derived: this revision empties every one
and the checkpoint, and the next read folds the whole log again (a batch
recorded before the waits folds as one declaring none: the same statistic
and alarm pairs). The events are not touched.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 07:00:00
"""
from alembic import op

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0011', '0010', None, None

# The checkpoint first, then every table it covers.
DERIVED = ("projection_checkpoint", "projection_artifacts", "projection_verdicts", "projection_payloads",
           "projection_payload_counts", "projection_workloads", "projection_framesets", "projection_outcomes",
           "projection_bench_streams", "projection_speed_records", "projection_workload_counts",
           "projection_record_heads")


def upgrade() -> None:
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")


def downgrade() -> None:
    # An earlier fold cannot read the monitors this one wrote: empty them again, so it folds them too.
    upgrade()
