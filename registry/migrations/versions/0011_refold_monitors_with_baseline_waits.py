"""fold the monitors again: each keeps its baseline-wait term and its left-out and contended counts

A monitor in an artifact's state now holds `baseline_wait_share` (fixed when
it starts) and counts the pairs the harness's baseline waits left out and
the batches contended (docs/monitor.md, "Leaving out preempted pairs"); a
row folded by an earlier version holds monitors without them, which every
read of the monitor (`show`, `monitor status`, `report`) and the next
re-measured batch's fold would fail on, and which `replay --verify` finds
different. No change of shape: revision 0012 records the read models'
versions at the checkpoint, so every row folded before is folded again on
the next read (a batch recorded before the waits folds as one declaring
none: the same statistic and alarm pairs). The events are not touched.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 07:00:00
"""
# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0011', '0010', None, None


def upgrade() -> None:
    """No change of shape (the docstring says why none is needed)."""


def downgrade() -> None:
    """Revision 0012's downgrade leaves no row an earlier fold could misread."""
