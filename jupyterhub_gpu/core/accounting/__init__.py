"""Allocation records, usage aggregates and reports (pure): what the ledger announces,
what the store keeps, and the GPU-hours a report shows."""
