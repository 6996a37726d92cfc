"""artifact read model for appends and promotion; verdict history in its own table

The artifact row gains what an append and a promotion need without reading
the artifact's stream: `stream_version` (the expected version of the next
append) and `identity`. Its verdict history moves out of the row into
`projection_verdicts`, one bounded row per verdict, so a promote rewrites a
small row instead of every verdict the artifact ever had.

The read models are derived: this revision recreates `projection_artifacts`
empty, adds the history table and empties every other read model and the
checkpoint, so the next read folds the whole log again. The events are not
touched.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:30:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: Union[str, None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

OTHER_READ_MODELS = ("projection_checkpoint", "projection_workloads", "projection_framesets", "projection_outcomes")


def _artifacts_table(*extra: sa.Column) -> None:
    op.create_table('projection_artifacts',
    sa.Column('artifact', sa.String(length=200), nullable=False),
    sa.Column('workload', sa.String(length=200), nullable=False),
    sa.Column('decision', sa.String(length=32), nullable=False),
    sa.Column('tier', sa.String(length=32), nullable=True),
    sa.Column('speedup', sa.Float(), nullable=True),
    sa.Column('last_position', sa.BigInteger(), nullable=False),
    *extra,
    sa.Column('state', sa.Text(), nullable=False),
    sa.Column('row_hash', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('artifact')
    )
    with op.batch_alter_table('projection_artifacts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_projection_artifacts_decision'), ['decision'], unique=False)
        batch_op.create_index(batch_op.f('ix_projection_artifacts_workload'), ['workload'], unique=False)


def _drop_artifacts_table() -> None:
    with op.batch_alter_table('projection_artifacts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_projection_artifacts_workload'))
        batch_op.drop_index(batch_op.f('ix_projection_artifacts_decision'))
    op.drop_table('projection_artifacts')


def upgrade() -> None:
    for table in OTHER_READ_MODELS:
        op.execute(f"DELETE FROM {table}")
    _drop_artifacts_table()
    _artifacts_table(sa.Column('stream_version', sa.BigInteger(), nullable=False),
                     sa.Column('identity', sa.String(length=64), nullable=False))
    op.create_table('projection_verdicts',
    sa.Column('artifact', sa.String(length=200), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.Column('event_id', sa.String(length=36), nullable=False),
    sa.Column('decision', sa.String(length=32), nullable=False),
    sa.Column('identity', sa.String(length=64), nullable=True),
    sa.Column('entry', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('artifact', 'position')
    )


def downgrade() -> None:
    # An earlier fold keeps the history inside the artifact row: empty everything, so it rebuilds.
    op.drop_table('projection_verdicts')
    for table in OTHER_READ_MODELS:
        op.execute(f"DELETE FROM {table}")
    _drop_artifacts_table()
    _artifacts_table()
