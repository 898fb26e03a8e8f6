"""Alembic environment: runs on the connection that `hub_ext.store.engine` passes in (under its
schema lock: `upgrade_database`, `ensure_schema`, `upgrade`).

For the command line (`alembic -x url=sqlite:///classhub.sqlite revision --autogenerate -m ...`
with `-c` pointing to a minimal ini that names this folder), a URL given with `-x url=...`
is opened with classhub's engine settings instead.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection

from hub_ext.store.engine import VERSION_TABLE, make_engine
from hub_ext.store.models import Base


def only_classhub_tables(name: str | None, type_: str, parent_names: Any) -> bool:
    """Autogenerate looks at classhub's tables only: the database may be JupyterHub's too."""
    return type_ != "table" or bool(name and name.startswith("classhub_"))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",  # sqlite cannot ALTER most things
        compare_type=True,
        include_name=only_classhub_tables,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    if context.is_offline_mode():
        raise SystemExit("classhub migrations run online only (classhub upgrade-db)")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("pass the database with -x url=<sqlalchemy url>")
    engine = make_engine(url)
    with engine.begin() as connection:
        _run(connection)
    engine.dispose()


main()
