"""payload index counts: how many index rows each (workload, payload digest) has

`promote` counts the benchmark attempts on an artifact's bytes through the
payload index (registry/projections/attempts.py); rows deleted from that
index would silently shrink the count. `projection_payload_counts` keeps
each range's size beside it, and a read of the index compares the two. The
read models are derived: this revision creates the table and empties every
read model and the checkpoint, so the next read folds the whole log again
and fills both. The events are not touched.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01 21:30:00
"""
from alembic import op
import sqlalchemy as sa

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0009', '0008', None, None

# The checkpoint first, then every table it covers.
DERIVED = ("projection_checkpoint", "projection_artifacts", "projection_verdicts", "projection_payloads",
           "projection_workloads", "projection_framesets", "projection_outcomes")


def upgrade() -> None:
    op.create_table(
        'projection_payload_counts',
        sa.Column('workload', sa.String(length=200), nullable=False),
        sa.Column('payload_sha256', sa.String(length=64), nullable=False),
        sa.Column('artifacts', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('workload', 'payload_sha256'),
    )
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")


def downgrade() -> None:
    op.drop_table('projection_payload_counts')
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")
