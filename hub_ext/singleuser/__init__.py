"""classhub's jupyter-server extension, loaded by every single-user server (local mode and images).

Three parts, each in its own module with a ``setup(serverapp)`` called here:
`activity` (what the culler asks: are kernels busy, is the GPU busy), `authorizer`
(read-only and path-scoped shares, enforced by the server) and `panel` (what the JupyterLab
panel asks, for the person looking).

It also turns off JupyterLab's build check (`_no_build_check`).
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
    _no_build_check(serverapp)


def _no_build_check(serverapp: Any) -> None:
    """No JupyterLab build check in a classhub server (``buildCheck``/``buildAvailable`` false in
    the page config, as ``page_config.json`` would set them).

    Why: with the check on, every JupyterLab page load asks the server whether the application
    needs a rebuild, and the server answers by starting Node.js and the package manager, 5 to 8
    processes and 3 to 5 s of CPU per page load, on every student's server at the start of a
    class. A student cannot rebuild the image's JupyterLab anyway: classhub's extensions and
    those a student installs with pip are prebuilt, so a "Build recommended" dialog is noise.
    An update, not a default: JupyterLab may have set its defaults before this extension loads."""
    page_config = serverapp.web_app.settings.setdefault("page_config_data", {})
    page_config.update(buildCheck=False, buildAvailable=False)
