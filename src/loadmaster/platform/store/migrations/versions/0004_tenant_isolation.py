"""tenant isolation: roots, OS users, named users' tokens with expiry, jobs' users, the audit log

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 09:00:00.000000

- tenants.roots (JSON), os_user, os_uid, os_gid: where a tenant's jobs may read and write beside their own
  area, and the OS user they run as (platform/tenancy.py);
- tokens.user (a tenant's named user, 'default' for tokens made before), tokens.expires_at;
- jobs.user: who submitted;
- audit: the admin actions.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('roots', sa.JSON(none_as_null=True), nullable=True))
        batch_op.add_column(sa.Column('os_user', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('os_uid', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('os_gid', sa.Integer(), nullable=True))
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('user', sa.String(length=64), server_default='default', nullable=False))
        batch_op.add_column(sa.Column('expires_at', sa.Float(), nullable=True))
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('user', sa.String(length=64), server_default='', nullable=False))
    op.create_table(
        'audit',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('at', sa.Float(), nullable=False),
        sa.Column('actor', sa.String(length=160), nullable=False),
        sa.Column('action', sa.String(length=32), nullable=False),
        sa.Column('tenant', sa.String(length=64), nullable=False),
        sa.Column('detail', sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_audit_at', 'audit', ['at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_audit_at', table_name='audit')
    op.drop_table('audit')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('user')
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.drop_column('expires_at')
        batch_op.drop_column('user')
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_column('os_gid')
        batch_op.drop_column('os_uid')
        batch_op.drop_column('os_user')
        batch_op.drop_column('roots')
