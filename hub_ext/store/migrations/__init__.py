"""Alembic migrations of the classhub store (applied by `hub_ext.store.connect`)."""
