"""allocations: one row per allocation, with its end and usage aggregates

Revision ID: 0001
Revises:
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jhgpu_allocations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("hub", sa.String(255), nullable=False),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("server", sa.String(255), nullable=False),
        sa.Column("charge_group", sa.String(255), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("gpu_uuids", sa.Text(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(255), nullable=False),
        sa.Column("image", sa.String(255), nullable=False),
        sa.Column("cuda", sa.String(32), nullable=False),
        sa.Column("cpus", sa.Float(), nullable=True),
        sa.Column("mem_gib", sa.Float(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("running_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("end_reason", sa.String(32), nullable=True),
        sa.Column("sampled_s", sa.Float(), nullable=False),
        sa.Column("util_pct_seconds", sa.Float(), nullable=False),
        sa.Column("peak_util_pct", sa.Float(), nullable=False),
        sa.Column("peak_memory_mib", sa.Integer(), nullable=False),
        sa.Column("busy_s", sa.Float(), nullable=False),
        sa.Column("last_sample_at", sa.DateTime(), nullable=True),
        sa.Column("last_busy_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_jhgpu_allocations_started_at", "jhgpu_allocations", ["started_at"])
    op.create_index("ix_jhgpu_allocations_ended_at", "jhgpu_allocations", ["ended_at"])
    op.create_index("ix_jhgpu_allocations_user", "jhgpu_allocations", ["user"])
    op.create_index("ix_jhgpu_allocations_hub_ended_at", "jhgpu_allocations", ["hub", "ended_at"])


def downgrade() -> None:
    op.drop_table("jhgpu_allocations")
