"""The classhub hub-managed service: a tornado app behind the hub's proxy at ``/services/classhub/``.

JupyterHub starts it (``python -m hub_ext.service``) and passes its URL, prefix and token in
``JUPYTERHUB_*`` environment variables, exactly like any managed service.
"""

from __future__ import annotations

import asyncio
import os
import signal
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web
from traitlets import Integer, Unicode, default
from traitlets.config import Application

from hub_ext import __version__
from hub_ext.service import handlers
from hub_ext.service.hubapi import HubAPI


class ClasshubService(Application):
    """Serves the classhub REST API (and, later, metrics) for one hub."""

    name = "classhub-service"
    version = __version__
    description = "classhub REST API service (started by JupyterHub)"

    service_url = Unicode(
        config=True, help="URL the service listens on (default: $JUPYTERHUB_SERVICE_URL)."
    )
    prefix = Unicode(
        config=True,
        help="URL prefix of the service behind the proxy (default: $JUPYTERHUB_SERVICE_PREFIX).",
    )
    bind_ip = Unicode(
        "",
        config=True,
        help="Interface to listen on; empty means the host of service_url ($CLASSHUB_BIND_IP).",
    )
    port = Integer(0, config=True, help="Port to listen on; 0 means the port of service_url.")

    @default("service_url")
    def _service_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("prefix")
    def _prefix(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/classhub/")

    @default("bind_ip")
    def _bind_ip(self) -> str:
        return os.environ.get("CLASSHUB_BIND_IP", "")

    def make_app(self) -> web.Application:
        hub_auth = HubOAuth(parent=self, cache_max_age=60)
        api = url_path_join(self.prefix, "api")
        routes = [
            (url_path_join(api, "health"), handlers.HealthHandler),
            (url_path_join(api, "me"), handlers.MeHandler),
            (url_path_join(api, r"users/([^/]+)/server/profile"), handlers.ServerProfileHandler),
            (url_path_join(self.prefix, "oauth_callback"), HubOAuthCallbackHandler),
            (url_path_join(api, ".*"), handlers.NotFoundHandler),
        ]
        return web.Application(
            routes,
            hub_auth=hub_auth,
            hub_api=HubAPI(hub_auth.api_url, hub_auth.api_token),
            cookie_secret=os.urandom(32),
            xsrf_cookies=False,
        )

    async def serve(self) -> None:
        url = urlparse(self.service_url)
        app = self.make_app()
        server = app.listen(self.port or url.port or 10101, self.bind_ip or url.hostname)
        self.log.info("classhub service %s listening on %s", __version__, self.service_url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.stop()

    def start(self) -> None:
        asyncio.run(self.serve())


def main(argv: list[str] | None = None) -> None:
    app = ClasshubService.instance()
    app.initialize(argv)
    app.start()
