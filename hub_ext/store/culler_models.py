"""Store models for the idle culler (issue 8). Tables are created by migration 0004."""

from __future__ import annotations

from hub_ext.store.models import Base  # noqa: F401
