"""rebuild the read models: the fold scopes artifacts by identity

The fold now scopes evidence, failures, verdicts and human decisions by the
artifact's identity, keeps open failures by stage and counts benchmark
attempts (docs/gate.md, "Lifecycle"), so rows folded by an earlier version
hold another shape and other answers. Nothing needs doing here: revision
0006 empties the artifacts' rows (to add columns), and revision 0012 records
the read models' versions at the checkpoint, so every row folded before is
folded again on the next read. The events are not touched.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 20:20:00
"""
from typing import Sequence, Union

revision: str = '0005'
down_revision: Union[str, None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """No change of shape (the docstring says why none is needed)."""


def downgrade() -> None:
    """Revision 0012's downgrade leaves no row an earlier fold could misread."""
