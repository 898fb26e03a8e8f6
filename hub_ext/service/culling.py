"""The classhub service's culling API.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().
"""

from __future__ import annotations

from typing import Any

ROUTES: list[tuple[str, type]] = []
OPENAPI_PATHS: dict[str, Any] = {}
