"""Alembic environment of the accounting tables (run through :mod:`..store`)."""

from __future__ import annotations

from alembic import context

from jupyterhub_gpu.edges.accounting.schema import Base
from jupyterhub_gpu.edges.accounting.store import VERSION_TABLE

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run through jupyterhub_gpu.edges.accounting.store.upgrade")
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite can't ALTER most things: batch mode copies tables
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
