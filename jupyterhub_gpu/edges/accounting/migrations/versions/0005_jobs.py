"""jobs: batch jobs kept across hub restarts, and allocations of kind job (issue 32)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jhgpu_allocations") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="server"))
        batch.add_column(sa.Column("exit_code", sa.Integer(), nullable=True))
    op.create_table(
        "jhgpu_jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hub", sa.String(255), nullable=False),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("array_id", sa.String(32), nullable=False),
        sa.Column("array_index", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("gpu_uuids", sa.Text(), nullable=False),
        sa.Column("share", sa.String(16), nullable=False),
        sa.Column("allocation", sa.String(64), nullable=False),
        sa.Column("container", sa.String(128), nullable=False),
        sa.Column("stopping", sa.String(16), nullable=True),
        sa.Column("stop_since", sa.DateTime(), nullable=True),
        sa.Column("term_sent_at", sa.DateTime(), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_jhgpu_jobs_hub_state", "jhgpu_jobs", ["hub", "state"])
    op.create_index("ix_jhgpu_jobs_user", "jhgpu_jobs", ["user"])


def downgrade() -> None:
    op.drop_index("ix_jhgpu_jobs_user", "jhgpu_jobs")
    op.drop_index("ix_jhgpu_jobs_hub_state", "jhgpu_jobs")
    op.drop_table("jhgpu_jobs")
    with op.batch_alter_table("jhgpu_allocations") as batch:
        batch.drop_column("exit_code")
        batch.drop_column("kind")
