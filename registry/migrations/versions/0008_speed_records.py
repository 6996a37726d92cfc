"""speed records: one read-model row per payload within a workload, and one per benchmark-session stream

The speed record of a payload (docs/gate.md, "The speed record") is fed by
every benchmark session and every complete benchmark document of those bytes,
under any artifact id or claim: `projection_speed_records` keeps it, keyed by
workload and payload, and `projection_bench_streams` keeps each identity's
`bench:` stream (the record it feeds, its version, its batch keys). A
workload's row now lists each contract version's speed block, which the
loosening rule reads, so rows written by the earlier fold differ from a fresh
one: revision 0012 records the read models' versions at the checkpoint, so
they are folded again on the next read. The events are not touched.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 21:30:00
"""
import sqlalchemy as sa
from alembic import op

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0008', '0007', None, None


def upgrade() -> None:
    op.create_table('projection_bench_streams',
                    sa.Column('identity', sa.String(length=200), nullable=False),
                    sa.Column('last_position', sa.BigInteger(), nullable=False),
                    sa.Column('state', sa.Text(), nullable=False),
                    sa.Column('row_hash', sa.String(length=64), nullable=False),
                    sa.PrimaryKeyConstraint('identity'))
    op.create_table('projection_speed_records',
                    sa.Column('record', sa.String(length=300), nullable=False),
                    sa.Column('workload', sa.String(length=200), nullable=False),
                    sa.Column('payload_sha256', sa.String(length=64), nullable=False),
                    sa.Column('last_position', sa.BigInteger(), nullable=False),
                    sa.Column('state', sa.Text(), nullable=False),
                    sa.Column('row_hash', sa.String(length=64), nullable=False),
                    sa.PrimaryKeyConstraint('record'))
    op.create_index('ix_projection_speed_records_workload', 'projection_speed_records', ['workload'])


def downgrade() -> None:
    op.drop_index('ix_projection_speed_records_workload', table_name='projection_speed_records')
    op.drop_table('projection_speed_records')
    op.drop_table('projection_bench_streams')
