"""GPU accounting (issue 11): allocation records, their database, usage and reports.

- :mod:`.records`: the allocation record and the ledger's events (pure);
- :mod:`.usage`: utilisation samples folded into per-allocation aggregates (pure);
- :mod:`.report`: GPU-hours allocated and used, grouped and bucketed (pure);
- :mod:`.store`: the SQL database (SQLAlchemy, Alembic migrations) (edge);
- :mod:`.recorder`: writes the ledger's events and usage into the store (edge);
- :mod:`.metrics`: the hub's Prometheus series;
- :mod:`.cli`: ``jupyterhub-gpu report``.
"""
