"""The ledger records a server's profile (for GPU use by profile) without letting it change
what a reservation is: admission ignores it, and a retried spawn is still one server."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hub_ext import store
from hub_ext.core.resources import ResourceVector

pytestmark = pytest.mark.unit

NOW = datetime(2025, 3, 5, 9, 0, tzinfo=timezone.utc)
ONE_GPU = ResourceVector({"nvidia.com/gpu": 1})


@pytest.fixture
def ledger(tmp_path):
    sessions = store.connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    with sessions.begin() as session:
        course = store.ensure_course(session, "cs101", NOW)
        store.add_member(session, course, "ann", "student")
    yield store.Ledger(sessions)
    sessions.kw["bind"].dispose()


def test_the_profile_is_recorded_and_optional(ledger):
    server = ledger.reserve("ann", "cs101", "server:ann/", ONE_GPU, NOW, profile="h200")
    job = ledger.reserve("ann", "cs101", "job:1", ONE_GPU, NOW, kind="job")
    assert (server.profile, job.profile) == ("h200", None)


def test_a_retry_is_the_same_reservation_unless_it_names_another_profile(ledger):
    first = ledger.reserve("ann", "cs101", "server:ann/", ONE_GPU, NOW, profile="h200")
    assert ledger.reserve("ann", "cs101", "server:ann/", ONE_GPU, NOW, profile="h200").id == first.id
    assert ledger.reserve("ann", "cs101", "server:ann/", ONE_GPU, NOW).id == first.id
    with pytest.raises(ValueError, match="h200"):
        ledger.reserve("ann", "cs101", "server:ann/", ONE_GPU, NOW, profile="a100")
