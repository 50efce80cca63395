"""The accounting database: SQLAlchemy tables (:mod:`.schema`), the store (:mod:`.store`)
and its Alembic migrations (``migrations/``)."""
