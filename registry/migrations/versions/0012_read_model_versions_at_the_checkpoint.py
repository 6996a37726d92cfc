"""read-model versions at the checkpoint: a catch-up refolds by itself when the declarations changed

The checkpoint row now records, beside its position, the version of every
read model's declaration it was folded under
(registry/projections/read_models/). A catch-up that finds other versions
there (or none, as every registry upgraded to this revision has) folds the
whole log again and rewrites every row, in the same transaction that moves
the checkpoint. So from this revision on, a change to what a read model
folds raises that model's version, and no revision empties the read models
by hand: Alembic keeps the tables' shapes, not their contents. The events
are not touched.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 09:00:00
"""
from alembic import op
import sqlalchemy as sa

# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0012', '0011', None, None


def upgrade() -> None:
    with op.batch_alter_table('projection_checkpoint') as batch:
        batch.add_column(sa.Column('versions', sa.Text(), nullable=True))


def downgrade() -> None:
    # Code older than this revision cannot tell which declarations folded the rows, so it gets none: its next
    # read folds the whole log with its own. Every read-model table's name begins projection_.
    for table in sorted(sa.inspect(op.get_bind()).get_table_names()):
        if table.startswith("projection_"):
            op.execute(f"DELETE FROM {table}")
    with op.batch_alter_table('projection_checkpoint') as batch:
        batch.drop_column('versions')
