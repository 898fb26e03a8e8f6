"""Rendering classhub pages inside the hub's own look.

Why: classhub should feel like part of the hub, not a site beside it. Every page is a Jinja
template that extends JupyterHub's own ``page.html`` (loaded from JupyterHub's installed template
folder under the name ``templates/page.html``, the same prefix JupyterHub itself offers to
custom templates), so the hub's nav bar, login widget, bootstrap styling and static assets (served
by the hub at ``/hub/static/``) appear on every classhub page.

Pages only read; every action on a page is small JavaScript calling the REST API under
``/services/classhub/api/`` with the XSRF token, so pages and scripts share one code path and
one authorization (hub_ext.core.authz).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader, select_autoescape
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.services.auth import UserNotAllowed
from jupyterhub.utils import url_path_join
from markupsafe import Markup
from tornado import web

from hub_ext.core import authz
from hub_ext.service.handlers import APIHandler

HERE = Path(__file__).resolve().parent
#: classhub's own page templates and the hub-side nav template (see hub_templates/page.html)
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
HUB_TEMPLATES = HERE / "hub_templates"


def hub_template_dir() -> str:
    """JupyterHub's installed templates (``share/jupyterhub/templates``)."""
    return os.path.join(DATA_FILES_PATH, "templates")


@functools.cache
def environment() -> Environment:
    """One Jinja environment: classhub's templates, and the hub's under ``templates/``."""
    loader = ChoiceLoader([
        FileSystemLoader([str(TEMPLATES), str(HUB_TEMPLATES)]),
        PrefixLoader({"templates": FileSystemLoader(hub_template_dir())}, "/"),
    ])
    env = Environment(loader=loader, autoescape=select_autoescape(default=True))
    env.filters["tojson_attr"] = lambda v: json.dumps(v)
    env.filters["gpu_hours"] = lambda v: f"{float(v or 0):.2f}"
    return env


class _PageUser:
    """What the hub's page.html reads of ``user``: the name, JSON-escaped for its script."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.json_escaped_name = Markup(json.dumps(name)[1:-1].replace("<", "\\u003c"))


class PageHandler(APIHandler):
    """A classhub page: who asks (``@needs``: a browser without a login is sent to the hub's
    login, a service is refused: `authz.OPEN_PAGES`), then a template.

    Errors of a page are pages too (with the hub's nav bar and a way back), unless the client
    asked for JSON.
    """

    page_title = "classhub"

    @property
    def prefix(self) -> str:
        return self.settings.get("prefix", "/services/classhub/")

    @property
    def hub_base(self) -> str:
        """The hub's base URL (``/hub/``), where its pages and static files are served."""
        return self.hub_auth.hub_prefix if "hub_auth" in self.settings else "/hub/"

    def _wants_html(self) -> bool:
        """A page is HTML for every client that does not ask for JSON: without a login it
        sends the client to the hub's login page (a token-less script gets the redirect too)."""
        return "application/json" not in self.request.headers.get("Accept", "") and not (
            self.request.headers.get("Authorization"))

    def static_url(self, path: str, include_version: bool = True, **kwargs: Any) -> str:
        """The hub's static files (``/hub/static/...``): page.html asks for its CSS and JS."""
        return url_path_join(self.hub_base, "static", path)

    def classhub_static(self, path: str) -> str:
        return url_path_join(self.prefix, "static", path)

    def namespace(self, caller: authz.Caller | None) -> dict[str, Any]:
        xsrf = self.xsrf_token
        xsrf = xsrf.decode() if isinstance(xsrf, bytes) else xsrf
        return {
            "base_url": self.hub_base,
            "prefix": "/",
            "classhub": self.prefix,
            "user": _PageUser(caller.name) if caller else None,
            "caller": caller,
            "is_admin": bool(caller and caller.is_admin),
            "admin_access": bool(caller and caller.is_admin),
            "no_spawner_check": True,
            "login_url": url_path_join(self.hub_base, "login"),
            "logout_url": url_path_join(self.hub_base, "logout"),
            "logo_url": url_path_join(self.hub_base, "home"),
            "static_url": self.static_url,
            "classhub_static": self.classhub_static,
            "version_hash": "",
            "services": [{"name": "classhub", "href": self.prefix}],
            "parsed_scopes": {"admin-ui"} if caller and caller.is_admin else set(),
            "xsrf_token": xsrf,
            "page_title": self.page_title,
            # the Jobs links (nav bar, tabs) only where the job service runs
            "classhub_jobs": self.settings.get("jobs") is not None,
        }

    def render_page(self, name: str, caller: authz.Caller | None, **values: Any) -> None:
        ns = self.namespace(caller)
        ns.update(values)
        html = environment().get_template(name).render(**ns)
        self.set_header("Content-Type", "text/html; charset=utf-8")  # no-store: APIHandler's default
        self.finish(html)

    def _json_client(self) -> bool:
        accept = self.request.headers.get("Accept", "")
        token = bool(self.request.headers.get("Authorization"))
        return "application/json" in accept or (token and "text/html" not in accept)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if self._json_client():
            return super().write_error(status_code, **kwargs)
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            try:
                message = exc.log_message % exc.args if exc.args else exc.log_message
            except (TypeError, ValueError):
                message = exc.log_message
        elif status_code >= 500:
            message = "classhub failed to answer this request; the service log has the details."
        caller = None
        model = self._hub_model if self._identified else None
        if model and model.get("kind", "user") == "user":
            try:
                allowed = self.check_hub_user(model)
            except UserNotAllowed:
                allowed = None
            if allowed:
                caller = authz.Caller(name=model["name"], admin=bool(model.get("admin")))
        ns = self.namespace(caller)
        ns.update(status=status_code, message=message)
        html = environment().get_template("error.html").render(**ns)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(html)
