"""workload counts and speed-record heads: what a listing of a workload and a speed record are checked against

`resolve`, `lock` and `rejudge` list a workload's artifact rows, and
`promote` reads a payload's speed record; a deleted row would otherwise read
as an artifact that is not there or a record with fewer pairs.
`projection_workload_counts` keeps how many artifact rows each workload has
and `projection_record_heads` where each speed record stands (its
last_position), and each read compares the two (registry/projections/
row_checks.py). This revision creates both tables; revision 0012 records
the read models' versions at the checkpoint, so the next read folds the
whole log again and fills them all. The events are not touched.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 16:00:00
"""
from alembic import op
import sqlalchemy as sa

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0010', '0009', None, None


def upgrade() -> None:
    op.create_table(
        'projection_workload_counts',
        sa.Column('workload', sa.String(length=200), nullable=False),
        sa.Column('artifacts', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('workload'),
    )
    op.create_table(
        'projection_record_heads',
        sa.Column('record', sa.String(length=300), nullable=False),
        sa.Column('workload', sa.String(length=200), nullable=False),
        sa.Column('last_position', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('record'),
    )
    op.create_index('ix_projection_record_heads_workload', 'projection_record_heads', ['workload'])


def downgrade() -> None:
    op.drop_index('ix_projection_record_heads_workload', table_name='projection_record_heads')
    op.drop_table('projection_record_heads')
    op.drop_table('projection_workload_counts')
