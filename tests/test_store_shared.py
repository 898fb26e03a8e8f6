"""The hub's classhub code opens each classhub database once (issue 13): one engine, one pool.

In the hub process a start reads the user's course roles (``templates_spawn.course_roles``) and
releases or reserves in the ledger (``spawner.quota``), a page render reads the culler's warnings
(``hubside.Announcement``), a refused start records a shortfall (``spawner.pressure``). Each
module used to open its own engine: on PostgreSQL, a pool of connections each, and a migration
check each. They all go through ``store.shared`` now.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from hub_ext import store
from hub_ext.backends import templates_spawn
from hub_ext.hubside import Announcement
from hub_ext.store import engine
from hub_ext.store.culler_models import Shortfall
from spawner import pressure, quota

pytestmark = pytest.mark.unit


def test_the_hubs_classhub_code_opens_each_database_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    opened: list[str] = []
    make_engine = engine.make_engine

    def counted(u, **kwargs):
        opened.append(str(u))
        return make_engine(u, **kwargs)

    monkeypatch.setattr(engine, "make_engine", counted)

    assert templates_spawn.course_roles(url, "ann") == ({}, False)
    quota._release_sync(url, quota.server_key("ann", ""))  # nothing held: nothing released
    announce = Announcement(url, poll=False)
    announce.refresh()
    assert announce(SimpleNamespace(name="ann")) == ""  # no warning for ann
    pressure._record(url, "nvidia.com/gpu", 1, "ann")

    assert opened == [url]
    assert store.shared(url) is store.shared(url)
    with store.readers(store.shared(url))() as session:  # the shortfall went through that engine
        assert [s.username for s in session.scalars(select(Shortfall))] == ["ann"]
