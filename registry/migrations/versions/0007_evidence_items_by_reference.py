"""evidence items by reference: read-model rows no longer hold the items

An artifact's evidence entry now holds the position of its event (and its
id), not the decoded item and its measured time: the questions that show
items read them from the log by position (registry/projections/items.py),
so the fold decodes no evidence payload. Rows written by the earlier fold
hold the items, which a fresh fold no longer writes, so `replay --verify`
would name every artifact with evidence. No change of shape: revision 0012
records the read models' versions at the checkpoint, so every row folded
before is folded again on the next read. The schema and the events are not
touched.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 17:00:00
"""
# Alembic reads these four names: this revision, the one before it, no branch label, no dependency.
revision, down_revision, branch_labels, depends_on = '0007', '0006', None, None


def upgrade() -> None:
    """No change of shape (the docstring says why none is needed)."""


def downgrade() -> None:
    """Revision 0012's downgrade leaves no row an earlier fold could misread."""
