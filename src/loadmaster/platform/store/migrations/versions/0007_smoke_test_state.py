"""smoke-test state in the store

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 00:40:00.000000

- jobs.smoke_passed: the job's failure count when its latest one-GPU smoke test (--smoke-test) passed; NULL:
  none passed. A restarted server reads it instead of testing the job again.
- attempts.smoke_test_s: the seconds an attempt runs as its job's smoke test; NULL: not a test. A server
  restarted mid-test (with --smoke-test changed or off) ends the test as it began.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('smoke_passed', sa.Integer(), nullable=True))
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('smoke_test_s', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_column('smoke_test_s')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('smoke_passed')
