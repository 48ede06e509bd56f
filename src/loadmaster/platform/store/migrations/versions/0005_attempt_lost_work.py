"""attempts.lost_s: the work a preemption threw away

Revision ID: 0005
Revises: 0003
Create Date: 2026-12-10 09:00:00.000000

- attempts.lost_s: for an attempt a preemption ended, the seconds it ran after the job's last checkpoint (its
  next attempt redoes them); NULL for every other attempt. `loadmaster usage` reads it as the GPU-hours
  lost to preemption.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lost_s', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_column('lost_s')
