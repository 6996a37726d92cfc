"""artifact read model for appends and promotion; verdict history and payload index in their own tables

The artifact row gains what an append and a promotion need without reading
the artifact's stream: `stream_version` (the expected version of the next
append) and `identity`. Its verdict history moves out of the row into
`projection_verdicts`, one bounded row per verdict, so a promote rewrites a
small row instead of every verdict the artifact ever had. The payload index
`projection_payloads` (one row per workload, payload digest and artifact that
registered it) lets a promote count the attempts on its bytes across the
workload by reading only the artifacts that share them.

The read models are derived: this revision empties every read model and the
checkpoint, adds the two columns and the two tables, and the next read
folds the whole log again. The fold now also keeps an identity's history
across re-registrations (`earlier_identities`, `registered_payloads` in the
artifact's state), which rows written by an earlier fold lack: one more
reason to empty them. The events are not touched.

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

READ_MODELS = ("projection_checkpoint", "projection_artifacts", "projection_workloads", "projection_framesets",
               "projection_outcomes")


def _empty_read_models() -> None:
    for table in READ_MODELS:
        op.execute(f"DELETE FROM {table}")


def upgrade() -> None:
    _empty_read_models()
    # recreate: SQLite cannot add a NOT NULL column without a default in place (the table is empty by now)
    with op.batch_alter_table('projection_artifacts', recreate='always') as batch_op:
        batch_op.add_column(sa.Column('stream_version', sa.BigInteger(), nullable=False))
        batch_op.add_column(sa.Column('identity', sa.String(length=64), nullable=False))
    op.create_table('projection_verdicts',
    sa.Column('artifact', sa.String(length=200), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.Column('event_id', sa.String(length=36), nullable=False),
    sa.Column('decision', sa.String(length=32), nullable=False),
    sa.Column('identity', sa.String(length=64), nullable=True),
    sa.Column('entry', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('artifact', 'position')
    )
    op.create_table('projection_payloads',
    sa.Column('workload', sa.String(length=200), nullable=False),
    sa.Column('payload_sha256', sa.String(length=64), nullable=False),
    sa.Column('artifact', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('workload', 'payload_sha256', 'artifact')
    )


def downgrade() -> None:
    # An earlier fold keeps the history inside the artifact row: empty everything, so it rebuilds.
    op.drop_table('projection_payloads')
    op.drop_table('projection_verdicts')
    _empty_read_models()
    with op.batch_alter_table('projection_artifacts', recreate='always') as batch_op:
        batch_op.drop_column('identity')
        batch_op.drop_column('stream_version')
