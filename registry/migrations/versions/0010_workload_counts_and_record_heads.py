"""workload counts and speed-record heads: what a listing of a workload and a speed record are checked against

`resolve`, `lock` and `rejudge` list a workload's artifact rows, and
`promote` reads a payload's speed record; a deleted row would otherwise read
as an artifact that is not there or a record with fewer pairs.
`projection_workload_counts` keeps how many artifact rows each workload has
and `projection_record_heads` where each speed record stands (its
last_position), and each read compares the two (registry/projections/
row_checks.py). The read models are derived: this revision creates both
tables and empties every read model and the checkpoint (the speed records
and bench streams included), so the next read folds the whole log again and
fills them all. The events are not touched.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 16:00:00
"""
from alembic import op
import sqlalchemy as sa

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0010', '0009', None, None

# The checkpoint first, then every table it covers.
DERIVED = ("projection_checkpoint", "projection_artifacts", "projection_verdicts", "projection_payloads",
           "projection_payload_counts", "projection_workloads", "projection_framesets", "projection_outcomes",
           "projection_bench_streams", "projection_speed_records")


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
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")


def downgrade() -> None:
    op.drop_index('ix_projection_record_heads_workload', table_name='projection_record_heads')
    op.drop_table('projection_record_heads')
    op.drop_table('projection_workload_counts')
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")
