"""jobs listing order: indexes for the newest-first listing and its keyset pages

Revision ID: 0002_jobs_listing_order
Revises: 0001
Create Date: 2026-11-25 16:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0002_jobs_listing_order"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # GET /api/v1/jobs lists newest first, (submitted_at, id) descending, and pages by keyset on that pair: with
    # these indexes a page costs its own rows, whatever the number of jobs (all of them, or one tenant's).
    op.create_index("ix_jobs_submitted", "jobs", ["submitted_at", "id"])
    op.create_index("ix_jobs_tenant_submitted", "jobs", ["tenant_id", "submitted_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_tenant_submitted", table_name="jobs")
    op.drop_index("ix_jobs_submitted", table_name="jobs")
