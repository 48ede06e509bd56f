"""node drains

Revision ID: 0006
Revises: 0003
Create Date: 2026-11-25 19:00:00.000000

- node_drains: the nodes an operator drained (nothing new lands there; what runs there moves off it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'node_drains',
        sa.Column('node', sa.String(length=255), nullable=False),
        sa.Column('drained_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('node'),
    )


def downgrade() -> None:
    op.drop_table('node_drains')
