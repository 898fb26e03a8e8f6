"""Store models for shares (issue 7). Tables are created by migration 0003."""

from __future__ import annotations

from hub_ext.store.models import Base  # noqa: F401
