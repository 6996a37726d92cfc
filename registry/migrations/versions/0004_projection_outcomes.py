"""projection of imported workload outcomes

A derived, rebuildable table like the other read models: one row per workload
holding the outcome records imported from another system about the workload
as a whole (support runs, fidelity verdicts; docs/import.md). Existing
registries gain the empty table; the next read folds any such events in.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 20:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: Union[str, None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('projection_outcomes',
    sa.Column('workload', sa.String(length=200), nullable=False),
    sa.Column('last_position', sa.BigInteger(), nullable=False),
    sa.Column('state', sa.Text(), nullable=False),
    sa.Column('row_hash', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('workload')
    )


def downgrade() -> None:
    op.drop_table('projection_outcomes')
