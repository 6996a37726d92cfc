"""evidence items by reference: read-model rows no longer hold the items

An artifact's evidence entry now holds the position of its event (and its
id), not the decoded item and its measured time: the questions that show
items read them from the log by position (registry/projections/items.py),
so the fold decodes no evidence payload. Rows written by the earlier fold
hold the items, which a fresh fold no longer writes, so `replay --verify`
would name every artifact with evidence. The read models are derived: this
revision empties every one of them and the checkpoint, and the next read
folds the whole log again. The schema and the events are not touched.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 17:00:00
"""
from alembic import op

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0007', '0006', None, None

# The checkpoint first, then every table it covers (the verdict history and payload index too, since the
# fold from position 0 inserts their rows again).
DERIVED = ("projection_checkpoint", "projection_artifacts", "projection_verdicts", "projection_payloads",
           "projection_workloads", "projection_framesets", "projection_outcomes")


def upgrade() -> None:
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")


def downgrade() -> None:
    # The earlier fold reads items from the row: rows without them must be folded again by it.
    upgrade()
