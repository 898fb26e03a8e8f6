"""A small client for the JupyterHub REST API, authenticated with the service's own token.

The service asks the hub (the source of truth for users and groups) instead of keeping copies.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.web import HTTPError


class HubAPIError(HTTPError):
    """The hub refused or failed a request: the caller gets a 502 saying which one."""

    def __init__(self, status: int, path: str) -> None:
        super().__init__(502, "classhub could not ask the hub (GET %s answered %s)", path, status)
        self.status = status


class HubAPI:
    """Calls ``<api_url>/<path>`` with ``Authorization: token <api_token>``."""

    def __init__(self, api_url: str, api_token: str) -> None:
        self.api_url = api_url.rstrip("/")
        self.api_token = api_token

    async def get(self, path: str) -> Any:
        url = f"{self.api_url}/{path.lstrip('/')}"
        try:
            response = await AsyncHTTPClient().fetch(
                url, headers={"Authorization": f"token {self.api_token}"}
            )
        except HTTPClientError as e:
            raise HubAPIError(e.code, path) from e
        return json.loads(response.body)

    async def user(self, name: str) -> dict[str, Any]:
        return await self.get(f"users/{quote(name, safe='')}")

    async def groups(self) -> list[dict[str, Any]]:
        """All groups with their properties (follows the hub's pagination)."""
        groups: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await self.get(f"groups?offset={offset}&limit=200")
            items = page["items"] if isinstance(page, dict) else page
            groups.extend(items)
            if not isinstance(page, dict) or not page.get("_pagination", {}).get("next"):
                return groups
            offset += len(items)
