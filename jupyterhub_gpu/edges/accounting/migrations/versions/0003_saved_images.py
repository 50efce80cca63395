"""saved images: users' environments saved as images (docs/my-images.md)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jhgpu_saved_images",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("base_slug", sa.String(255), nullable=False),
        sa.Column("base_image", sa.Text(), nullable=False),
        sa.Column("reference", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(128), nullable=False),
        sa.Column("packages", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("shared_with", sa.String(255), nullable=True),
        sa.UniqueConstraint("owner", "name", name="uq_jhgpu_saved_images_owner_name"),
    )


def downgrade() -> None:
    op.drop_table("jhgpu_saved_images")
