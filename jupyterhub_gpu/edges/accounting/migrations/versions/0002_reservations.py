"""reservations: GPUs kept for a group during a window (docs/scheduling.md)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jhgpu_reservations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("charge_group", sa.String(255), nullable=False),
        sa.Column("starts_at", sa.DateTime(), nullable=False),
        sa.Column("ends_at", sa.DateTime(), nullable=False),
        sa.Column("gpu_model", sa.String(255), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Text(), nullable=False),
        sa.Column("gpu_uuids", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_jhgpu_reservations_ends_at", "jhgpu_reservations", ["ends_at"])


def downgrade() -> None:
    op.drop_table("jhgpu_reservations")
