"""Alembic migrations of the classhub store (applied by ``classhub upgrade-db``,
`hub_ext.store.upgrade_database`; a new database is created at head by `hub_ext.store.connect`)."""
