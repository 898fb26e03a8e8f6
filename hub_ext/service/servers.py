"""Changing the profile of a user's server: stop, start with the new options, roll back if refused.

The home directory (a folder in the local mode, a PVC on Kubernetes) belongs to the user, not to
the server, so it survives the switch. If the hub refuses the new options (invalid, over quota,
nothing free), the server is started again with the options it had, so a failed switch leaves
the user where they were.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from hub_ext.hubapi import HubAPI, HubAPIError


async def switch_profile(hub: HubAPI, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Restart ``name``'s default server with ``options``; returns the new server model."""
    current = await hub.server(name)
    if current is not None and current.get("pending"):
        raise web.HTTPError(409, f"{name}'s server is busy ({current['pending']}); try again shortly")
    previous = (current or {}).get("user_options") or {}
    if current is not None:
        await hub.stop_server(name)
    try:
        return await hub.start_server(name, options)
    except HubAPIError as e:
        if current is not None:
            await hub.start_server(name, previous)
        if e.status in (400, 403, 409):
            raise web.HTTPError(e.status, e.hub_message or "the hub refused these options") from None
        raise
