"""change numbers, booked and open-attempt indexes

Revision ID: 0003
Revises: 0002_jobs_listing_order
Create Date: 2026-12-01 09:00:00.000000

- counters: monotonic counters bumped inside the transactions they number ("jobs", "tenants");
- jobs.change_seq: the number of the last committed change of the row (the control loop reads only rows
  whose number passed its own), indexed;
- ix_jobs_booked: a partial index over the jobs that book GPUs (allocation IS NOT NULL), and
  ix_attempts_open over attempts not ended: what reconciliation reads, whatever the size of the history.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002_jobs_listing_order'
branch_labels = None
depends_on = None


def upgrade() -> None:
    counters = op.create_table(
        'counters',
        sa.Column('name', sa.String(length=32), nullable=False),
        sa.Column('value', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    op.bulk_insert(counters, [{'name': 'jobs', 'value': 0}, {'name': 'tenants', 'value': 0}])
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('change_seq', sa.BigInteger(), server_default='0', nullable=False))
        batch_op.create_index('ix_jobs_change_seq', ['change_seq'], unique=False)
        batch_op.create_index('ix_jobs_booked', ['id'], unique=False,
                              sqlite_where=sa.text('allocation IS NOT NULL'),
                              postgresql_where=sa.text('allocation IS NOT NULL'))
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.create_index('ix_attempts_open', ['job_id'], unique=False,
                              sqlite_where=sa.text('ended_at IS NULL'),
                              postgresql_where=sa.text('ended_at IS NULL'))


def downgrade() -> None:
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_index('ix_attempts_open')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_booked')
        batch_op.drop_index('ix_jobs_change_seq')
        batch_op.drop_column('change_seq')
    op.drop_table('counters')
