"""classhub's jupyter-server extension, loaded by every single-user server (local mode and images).

Three parts, each in its own module with a ``setup(serverapp)`` called here:
`activity` (what the culler asks: are kernels busy, is the GPU busy), `authorizer`
(read-only and path-scoped shares, enforced by the server) and `panel` (what the JupyterLab
panel asks, for the person looking).
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "hub_ext.singleuser"}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    # Runs before jupyter-server creates its Authorizer: install classhub's (share enforcement).
    from hub_ext.singleuser import authorizer

    authorizer.link(serverapp)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from hub_ext.singleuser import activity, authorizer, panel

    for part in (activity, authorizer, panel):
        part.setup(serverapp)
