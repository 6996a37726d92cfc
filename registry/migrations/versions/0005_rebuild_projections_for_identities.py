"""rebuild the read models: the fold scopes artifacts by identity

The fold now scopes evidence, failures, verdicts and human decisions by the
artifact's identity, keeps open failures by stage and counts benchmark
attempts (docs/gate.md, "Lifecycle"), so rows folded by an earlier version
hold another shape and other answers. The read models are derived: this
revision empties them and their checkpoint, and the next read folds the
whole log again. The events are not touched.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 20:20:00
"""
from typing import Sequence, Union

from alembic import op

revision: str = '0005'
down_revision: Union[str, None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

READ_MODELS = ("projection_checkpoint", "projection_artifacts", "projection_workloads", "projection_framesets",
               "projection_outcomes")


def upgrade() -> None:
    for table in READ_MODELS:
        op.execute(f"DELETE FROM {table}")


def downgrade() -> None:
    # An earlier fold cannot read rows this one wrote: empty them again, so it rebuilds too.
    upgrade()
