"""The classhub service in the test's own event loop, for tests of its handlers (issue 29).

Why: a test whose subject is a service handler (its body checks, its answers, its authorization,
what it writes to the store) paid for a whole hub: a JupyterHub process, the proxy, a service
process, each start 5-20 s on two busy cores, and every request through two more processes.
Here, as JupyterHub's own tests do with ``MockHub`` and its HubAuth tests with a stand-in hub,
the service's real tornado application (``ClasshubService.make_app``: the real routes, handlers,
``HubOAuth``, authz decisions, pydantic bodies and store) listens on a free port of 127.0.0.1 in
the test's loop, over a fresh sqlite store seeded as ``classhub local`` seeds it
(``hub_ext.demo.seed_course``).

The one piece that is not the product is the hub's user lookup: `StandInHub` answers
``GET /hub/api/user`` as JupyterHub does for the token in the ``Authorization`` header (the user
model, with the scopes the hub would give the token: JupyterHub's own expansion of the roles
``configure()`` sets), and 403 for a token it does not know, which HubOAuth reads as "nobody".
Every other hub API path is a 404, as JupyterHub answers a path it has no handler for: a test
whose handler asks the hub for more (groups, servers, shares) belongs on a real hub
(tests/hubproc.py), not here.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyterhub.roles import get_default_roles
from jupyterhub.scopes import _expand_scope, _expand_self_scope
from jupyterhub.services.auth import HubOAuth
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from traitlets.config import Config

from hub_ext import demo, store
from hub_ext.backends.templates import ClasshubTemplates
from hub_ext.config import SERVICE_NAME, configure
from hub_ext.service import jobs
from hub_ext.service.app import ClasshubService

PREFIX = f"/services/{SERVICE_NAME}/"
#: The demo accounts of ``classhub local`` (hub_ext.demo): the admin, teacher1, ta1, students.
USERS = tuple(demo.DEMO_ACCOUNTS)


def _user_role_scopes(tmp: Path) -> list[str]:
    """The scopes of the hub's 'user' role as ``configure()`` sets them (``self``, the service's
    access, sharing one's own servers)."""
    c = Config()
    configure(c, "local", data_dir=tmp, db_url=f"sqlite:///{tmp / 'roles.sqlite'}", freeze_heap=False)
    return next(r["scopes"] for r in c.JupyterHub.load_roles if r["name"] == "user")


def hub_scopes(name: str, admin: bool, role_scopes: list[str]) -> list[str]:
    """What JupyterHub's ``/hub/api/user`` lists as the scopes of ``name``'s token: the user role's
    scopes (plus the admin role's for an admin), ``self`` and the bare ``!user`` filter resolved
    for its owner, expanded by JupyterHub's own functions."""
    raw = list(role_scopes)
    if admin:
        raw += next(r["scopes"] for r in get_default_roles() if r["name"] == "admin")
    expanded: set[str] = set()
    for scope in raw:
        if scope == "self":
            expanded |= _expand_self_scope(name)
            continue
        if scope.endswith("!user"):
            scope = f"{scope}={name}"
        expanded |= _expand_scope(scope)
    return sorted(expanded)


class _UserHandler(web.RequestHandler):
    """``GET /hub/api/user``: the model of the token's owner, as JupyterHub answers it."""

    def get(self) -> None:
        header = self.request.headers.get("Authorization", "")
        kind, _, token = header.partition(" ")
        model = self.settings["models"].get(token) if kind.lower() in ("token", "bearer") else None
        self.set_header("Content-Type", "application/json")
        if model is None:  # JupyterHub: 403 for a missing or invalid token
            self.set_status(403)
            self.finish(json.dumps({"status": 403, "message": "Missing or invalid credentials."}))
            return
        self.finish(json.dumps(model))


class _NotFound(web.RequestHandler):
    """Every other hub path: JupyterHub's JSON 404 of its API."""

    def prepare(self) -> None:
        self.set_status(404)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": 404, "message": "Not Found"}))


class StandInHub:
    """The hub's user lookup, and nothing else (see the module's docstring), on a thread of its
    own: the hub is another process for the service, so a lookup the service makes while its
    own loop waits (HubOAuth's synchronous one) is answered as a real hub answers it."""

    def __init__(self, models: Mapping[str, dict[str, Any]]) -> None:
        self.models = dict(models)
        self.loop = asyncio.new_event_loop()
        sock, self.port = bind_unused_port()
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            app = web.Application([("/hub/api/user", _UserHandler)], models=self.models,
                                  default_handler_class=_NotFound)
            self.server = HTTPServer(app)
            self.server.add_sockets([sock])
            self.loop.call_soon(started.set)
            self.loop.run_forever()
            self.loop.close()

        self.thread = threading.Thread(target=serve, name="stand-in-hub", daemon=True)
        self.thread.start()
        started.wait(30)
        self.api_url = f"http://127.0.0.1:{self.port}/hub/api"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@dataclass
class InProcessService:
    """The service's app on ``url`` (its prefix included), the stand-in hub, the store."""

    url: str
    hub: StandInHub
    sessions: Any
    data_dir: Path
    tokens: dict[str, str]
    settings: dict[str, Any] = field(default_factory=dict)

    async def request(self, method: str, path: str, who: str | None = None, *,
                      body: bytes | str | None = None, json_body: Any = None,
                      headers: Mapping[str, str] | None = None, timeout: float = 60) -> HTTPResponse:
        """``method`` ``<service>/api/<path>`` (or ``<service>/<path>`` for a path starting with
        ``/``) as ``who`` (a demo account; None: no token); the answer, whatever its status."""
        url = f"{self.url}{path}" if path.startswith("/") else f"{self.url}/api/{path}"
        sent = dict(headers or {})
        if who is not None:
            sent["Authorization"] = f"token {self.tokens[who]}"
        if json_body is not None:
            body = json.dumps(json_body)
            sent.setdefault("Content-Type", "application/json")
        client = AsyncHTTPClient(force_instance=True, max_body_size=1024**3)
        try:
            return await client.fetch(url, method=method, headers=sent, body=body,
                                      allow_nonstandard_methods=True, raise_error=False,
                                      follow_redirects=False, request_timeout=timeout)
        finally:
            client.close()


_MIGRATED: dict[str, Path] = {}


def _store_copy(tmp: Path) -> str:
    """A fresh store at head, seeded with the demo course (one migration per test session,
    copied for each service: every test starts from the same store)."""
    if "template" not in _MIGRATED:
        template = Path(tmp.parent / f"classhub-inproc-{secrets.token_hex(3)}.sqlite")
        sessions = store.connect(f"sqlite:///{template}")
        demo.seed_course(sessions)
        sessions.kw["bind"].dispose()
        _MIGRATED["template"] = template
    path = tmp / "classhub.sqlite"
    shutil.copyfile(_MIGRATED["template"], path)
    return f"sqlite:///{path}"


async def start_service(tmp: Path, sections: Mapping[str, Mapping[str, Any]] | None = None
                        ) -> tuple[InProcessService, HTTPServer]:
    """The service's app (``ClasshubService.make_app``) over a seeded store and `StandInHub`,
    listening in the running loop; ``sections``: traits as in jupyterhub_config.py
    (``{"ClasshubTemplates": {"max_bytes": 1024}}``)."""
    data_dir = tmp / "service"
    data_dir.mkdir(exist_ok=True)
    role_scopes = _user_role_scopes(data_dir)
    tokens = {user: secrets.token_hex(16) for user in USERS}
    models = {tokens[user]: {
        "kind": "user", "name": user, "admin": user == demo.DEMO_ADMIN,
        "groups": [demo.DEMO_COURSE] if user != demo.DEMO_ADMIN else [],
        "scopes": hub_scopes(user, user == demo.DEMO_ADMIN, role_scopes),
        "session_id": None, "server": None,
    } for user in USERS}
    hub = StandInHub(models)
    c = Config()
    c.ClasshubService.db_url = _store_copy(data_dir)
    c.ClasshubService.mode = "local"
    c.ClasshubService.prefix = PREFIX
    c.HubOAuth.api_url = hub.api_url
    c.HubOAuth.api_token = secrets.token_hex(16)
    c.HubOAuth.oauth_client_id = f"service-{SERVICE_NAME}"
    c.HubOAuth.access_scopes = {f"access:services!service={SERVICE_NAME}"}
    c.HubOAuth.hub_prefix = "/hub/"
    c.ClasshubTemplates.storage_dir = str(data_dir / "templates")
    c.ClasshubJobs.homes_dir = str(data_dir / "homes")
    c.ClasshubJobs.use_nvml = False
    c.ClasshubJobs.gpu_discovery_command = ["true"]  # no GPUs: these tests are about handlers
    for section, values in (sections or {}).items():
        for name, value in values.items():
            c[section][name] = value
    service = ClasshubService(config=c)
    service.templates = ClasshubTemplates(parent=service)
    service.job_settings = jobs.ClasshubJobs(parent=service)
    app = service.make_app()
    # The handlers identify callers with the process's HubOAuth singleton (JupyterHub's
    # HubAuthenticated.hub_auth), which a deployed service makes from the JUPYTERHUB_* variables
    # the hub sets; here it is made from the same settings as the app's own.
    HubOAuth.clear_instance()
    HubOAuth.instance(config=c)
    sock, port = bind_unused_port()
    server = HTTPServer(app, max_body_size=1024**3)
    server.add_sockets([sock])
    running = InProcessService(url=f"http://127.0.0.1:{port}{PREFIX.rstrip('/')}", hub=hub,
                               sessions=app.settings["sessions"], data_dir=data_dir, tokens=tokens,
                               settings=app.settings)
    return running, server


@pytest.fixture
def service_sections() -> dict[str, dict[str, Any]]:
    """Traits of the in-process service (override in a module: ``{"ClasshubTemplates": {...}}``)."""
    return {}


@pytest.fixture
async def service(tmp_path: Path, service_sections: dict[str, dict[str, Any]]
                  ) -> AsyncIterator[InProcessService]:
    """The classhub service in this test's event loop (see the module's docstring)."""
    running, server = await start_service(tmp_path, service_sections)
    try:
        yield running
    finally:
        server.stop()
        await server.close_all_connections()
        running.hub.stop()
        running.sessions.kw["bind"].dispose()
        HubOAuth.clear_instance()
