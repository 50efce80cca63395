"""gpu_fraction: a share of one GPU is charged as its part of it (issue 26)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jhgpu_allocations") as batch:
        batch.add_column(
            sa.Column("gpu_fraction", sa.Float(), nullable=False, server_default="1.0")
        )


def downgrade() -> None:
    with op.batch_alter_table("jhgpu_allocations") as batch:
        batch.drop_column("gpu_fraction")
