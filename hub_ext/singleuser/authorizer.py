"""Placeholder: filled in by its issue."""

from __future__ import annotations

from typing import Any


def setup(serverapp: Any) -> None:
    """Register this part's handlers with the server."""
