"""payload index counts: how many index rows each (workload, payload digest) has

`promote` counts the benchmark attempts on an artifact's bytes through the
payload index (registry/projections/attempts.py); rows deleted from that
index would silently shrink the count. `projection_payload_counts` keeps
each range's size beside it, and a read of the index compares the two. This
revision creates the table; revision 0012 records the read models' versions
at the checkpoint, so the next read folds the whole log again and fills it.
The events are not touched.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01 21:30:00
"""
from alembic import op
import sqlalchemy as sa

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0009', '0008', None, None


def upgrade() -> None:
    op.create_table(
        'projection_payload_counts',
        sa.Column('workload', sa.String(length=200), nullable=False),
        sa.Column('payload_sha256', sa.String(length=64), nullable=False),
        sa.Column('artifacts', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('workload', 'payload_sha256'),
    )


def downgrade() -> None:
    op.drop_table('projection_payload_counts')
