"""Store models for course templates (issue 6). Tables are created by migration 0002."""

from __future__ import annotations

from hub_ext.store.models import Base  # noqa: F401
