"""Wire classhub into any ``jupyterhub_config.py`` with one call.

    from hub_ext.config import configure
    configure(c, mode="kubernetes")

``classhub local`` builds its configuration with the same function (``mode="local"``), so the
local hub and a z2jh hub are configured by one piece of code.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from hub_ext import heap
from hub_ext.core import sharing

log = logging.getLogger(__name__)

SERVICE_NAME = "classhub"
#: Environment variables of the hub passed on to the classhub service (see its traits).
SERVICE_ENV_SETTINGS = ("CLASSHUB_RECONCILE_INTERVAL", "CLASSHUB_RECONCILE_GRACE", "CLASSHUB_METRICS_AUTH",
                        # templates (hub_ext.backends.templates.ClasshubTemplates)
                        "CLASSHUB_TEMPLATES_DIR", "CLASSHUB_TEMPLATE_MAX_BYTES",
                        "CLASSHUB_TEMPLATE_MAX_FILES", "CLASSHUB_TEMPLATE_MAX_DEPTH",
                        "CLASSHUB_TEMPLATES_PVC")
MODES = ("local", "kubernetes")

#: What the classhub service may do in the hub: read users and groups (``/api/me``), stop/start
#: servers (profile switches), keep course groups and their members in sync with the course
#: store. Every request is checked against the caller first (hub_ext.core.authz).
SERVICE_SCOPES = [
    "list:users", "read:users", "list:groups", "read:groups", "servers", "admin:groups", "admin:users",
    # templates (issue 6): where a teacher's server listens, to publish from it with their own token
    "proxy",
    # sharing (issue 7): create, list and revoke shares and share codes for users' servers
    "shares", "read:shares", "users:shares", "groups:shares", "read:users:shares", "read:groups:shares",
    "read:users:name", "read:groups:name", "access:servers",
    # security: which token reports a server's events (the server's own, see ShareAccessHandler)
    "read:tokens",
    *sharing.CUSTOM_SCOPES,
]


#: What a browser's login to classhub may carry of its user's own powers. The hub gives each
#: login the intersection of these with what the user holds, and classhub acts on the hub for
#: a caller only where the caller's own token holds the matching scope (hub_ext.core.authz,
#: "hub scopes"): a student's login carries their own servers and shares, an admin's the admin
#: scopes, and a token narrowed by its owner stays narrow.
SERVICE_OAUTH_SCOPES = [
    "access:servers!user",  # templates: publish from the teacher's own server with their login
    "servers", "shares", "admin:groups", "admin:users", "read:metrics",
]


def configure(
    c: Any,
    mode: str = "local",
    *,
    data_dir: str | Path | None = None,
    service_url: str | None = None,
    system_users: bool = False,
    create_system_users: bool = False,
    db_url: str | None = None,
    ta_server_access: bool = True,
    culler: bool = True,
    culler_config: dict[str, Any] | None = None,
    freeze_heap: bool = True,
) -> None:
    """Add classhub's service, roles and scopes, and spawner to the JupyterHub config ``c``.

    ``mode`` is ``"local"`` (servers are processes on this machine, homes under
    ``data_dir/homes``) or ``"kubernetes"`` (servers are pods, z2jh). Settings a site already
    made are extended, never dropped: existing services and roles are kept.

    ``db_url`` is classhub's own database (courses, quotas, the reservation ledger), shared by the
    spawner (in the hub) and the service: by default ``sqlite:///<data_dir>/classhub.sqlite``
    locally and ``sqlite:////srv/jupyterhub/classhub.sqlite`` (z2jh's hub volume) on Kubernetes;
    use a ``postgresql+psycopg://`` URL in production.

    ``freeze_heap``: once the hub has started, freeze its heap so that Python's full garbage
    collections (pauses of the hub's event loop) skip the objects a hub keeps for its lifetime
    (hub_ext.heap; README, "Development"). Only inside a hub process.
    """
    if mode not in MODES:
        raise ValueError(f"unknown classhub mode {mode!r}: use one of {', '.join(MODES)}")
    if service_url is None:
        service_url = "http://127.0.0.1:10101" if mode == "local" else "http://hub:10101"

    if db_url is None:
        base = Path(data_dir).resolve() if data_dir is not None else Path("/srv/jupyterhub")
        db_url = f"sqlite:///{base / 'classhub.sqlite'}"
    _add_service(c, service_url, bind_all=(mode == "kubernetes"), db_url=db_url)
    _add_template_settings(c, mode, data_dir)
    _add_course_roles(c, ta_server_access)
    c.ClasshubLocalSpawner.classhub_db_url = db_url
    c.ClasshubKubeSpawner.classhub_db_url = db_url
    _add_roles(c)
    if culler:
        _add_culler(c, db_url, culler_config)
    _add_sharing(c, service_url)
    _add_pages(c)
    c.Spawner.default_url = "/lab"
    if mode == "local":
        c.JupyterHub.spawner_class = "classhub-local"
        if data_dir is not None:
            data = Path(data_dir).resolve()
            c.JupyterHub.db_url = f"sqlite:///{data / 'jupyterhub.sqlite'}"
            c.JupyterHub.cookie_secret_file = str(data / "jupyterhub_cookie_secret")
            c.ConfigurableHTTPProxy.pid_file = str(data / "jupyterhub-proxy.pid")
            c.ClasshubLocalSpawner.homes_dir = str(data / "homes")
        c.ClasshubLocalSpawner.system_users = system_users
        c.ClasshubLocalSpawner.create_system_users = create_system_users
    else:
        c.JupyterHub.spawner_class = "classhub-kube"
    if freeze_heap:
        heap.freeze_when_started()


def _configured(c: Any, key: str) -> list:
    """A list already set on ``c.JupyterHub`` (works for traitlets Config and plain objects)."""
    section = c.JupyterHub
    if hasattr(section, "keys"):  # traitlets Config: unset keys would be lazy placeholders
        return list(section[key]) if key in section else []
    return list(getattr(section, key, None) or [])


def _add_service(c: Any, service_url: str, bind_all: bool, db_url: str) -> None:
    services = [s for s in _configured(c, "services") if s.get("name") != SERVICE_NAME]
    environment = {"CLASSHUB_DB_URL": db_url}
    # Service settings given to the hub's environment reach the service (it gets no other env).
    environment.update({k: v for k, v in os.environ.items() if k in SERVICE_ENV_SETTINGS})
    if bind_all:
        environment["CLASSHUB_BIND_IP"] = "0.0.0.0"
    services.append(
        {
            "name": SERVICE_NAME,
            "url": service_url,
            "command": [sys.executable, "-m", "hub_ext.service"],
            "oauth_no_confirm": True,
            "display": True,
            "environment": environment,
        }
    )
    c.JupyterHub.services = services


#: A ``page.html`` extending the hub's own that adds classhub's pages to the hub's nav bar.
HUB_TEMPLATES = Path(__file__).resolve().parent / "service" / "pages" / "hub_templates"


def _add_pages(c: Any) -> None:
    """Link classhub's pages from the hub's nav bar on every hub page (home, spawn, token):
    ``JupyterHub.template_paths`` gets classhub's ``page.html`` after a site's own folders, so
    a site's own ``page.html`` still wins. The classhub service itself skips the hub's
    "Authorize access" page (``oauth_no_confirm`` on its service definition)."""
    paths = [str(p) for p in _configured(c, "template_paths")]
    if str(HUB_TEMPLATES) not in paths:
        paths.append(str(HUB_TEMPLATES))
    c.JupyterHub.template_paths = paths


def _add_template_settings(c: Any, mode: str, data_dir: str | Path | None) -> None:
    """Where templates are stored, for the spawners and the service (see ClasshubTemplates).

    The service's OAuth tokens may also access the user's own servers (``access:servers!user``):
    publishing reads a teacher's folder through their server with the teacher's credentials.
    """
    service = next(s for s in c.JupyterHub.services if s.get("name") == SERVICE_NAME)
    service["environment"]["CLASSHUB_MODE"] = mode
    service["oauth_client_allowed_scopes"] = list(SERVICE_OAUTH_SCOPES)
    prefixes = ("CLASSHUB_TEMPLATE", "CLASSHUB_PUBLISHER")
    passed = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    if mode == "kubernetes":  # the publisher pod is created by the service, with the hub's credentials
        passed.update({k: v for k, v in os.environ.items() if k in (
            "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE")})
    service["environment"].update(passed)
    if mode == "local" and data_dir is not None and not os.environ.get("CLASSHUB_TEMPLATES_DIR"):
        templates = str(Path(data_dir).resolve() / "templates")
        c.ClasshubTemplates.storage_dir = templates
        service["environment"]["CLASSHUB_TEMPLATES_DIR"] = templates


def _add_roles(c: Any) -> None:
    """The service's own role, and every user's right to log in to the service."""
    existing = {r["name"]: r for r in _configured(c, "load_roles")}
    existing["classhub-service"] = {
        "name": "classhub-service",
        "description": "What the classhub service reads from the hub",
        "scopes": SERVICE_SCOPES,
        "services": [SERVICE_NAME],
    }
    user_role = existing.get("user", {"name": "user", "scopes": ["self"]})
    scopes = list(user_role.get("scopes", ["self"]))
    # classhub shares a user's servers through the hub only for a caller whose token may do so
    # (no confused deputy), so users hold the hub's own scope to share their servers; a bare
    # hub share made without classhub counts as read-only on the server (hub_ext.core.sharing)
    for scope in (f"access:services!service={SERVICE_NAME}", "shares!user"):
        if scope not in scopes:
            scopes.append(scope)
    existing["user"] = {**user_role, "scopes": scopes}
    c.JupyterHub.load_roles = list(existing.values())


def _add_course_roles(c: Any, ta_server_access: bool) -> None:
    """Course roles are applied by the hub while it runs, not at its start (hub_ext.hubside).

    The classhub service pushes the teacher/TA roles of every course to the hub's endpoint
    ``/hub/api/classhub/course-roles`` when it starts and right after every membership change, so
    a new TA gets their powers and a removed one loses them at once, without a hub restart.
    ``ta_server_access`` is the hub-wide default of the courses that chose none.
    """
    from hub_ext import hubside

    section = c.JupyterHub
    if hasattr(section, "keys"):  # traitlets Config: unset keys would be lazy placeholders
        handlers = list(section["extra_handlers"]) if "extra_handlers" in section else []
    else:
        handlers = list(getattr(section, "extra_handlers", None) or [])
    ours = {path for path, _handler in hubside.HANDLERS}
    handlers = [h for h in handlers if h[0] not in ours] + list(hubside.HANDLERS)
    c.JupyterHub.extra_handlers = handlers
    service = next(s for s in c.JupyterHub.services if s.get("name") == SERVICE_NAME)
    service["environment"]["CLASSHUB_TA_SERVER_ACCESS"] = "1" if ta_server_access else "0"


#: JupyterHub's default server-token scopes (the 'server' role), plus reading the server's shares
#: and asking classhub (the paths of one-path shares). The hub resolves a bare ``!server``/``!user``
#: filter to the spawned server.
SERVER_TOKEN_SCOPES = [
    "users:activity!user", "access:servers!server", f"access:services!service={SERVICE_NAME}",
    "read:shares!server",  # who this server is shared with, and how (ClasshubAuthorizer)
    # the JupyterLab panel acts for the owner with this token (hub_ext.singleuser.panel): share
    # and revoke the owner's servers, restart theirs from a template (never for a visitor)
    "shares!user", "servers!user",
]


class _ServerScopes(list):
    """Scopes with a bare ``!server`` filter, resolved to each spawned server when called.

    Browser (OAuth) tokens of a server may carry classhub's scopes for that server when a role
    grants them (JupyterHub issues OAuth tokens from roles only: a share's scopes reach the
    server through the hub's share list instead, see ClasshubAuthorizer). The
    hub does not resolve ``!server`` in ``Spawner.oauth_client_allowed_scopes`` itself, and a
    plain callable there breaks JupyterHub 6.1's ``Spawner.get_env`` (it JSON-encodes the
    setting), so the setting is a list that is also callable.
    """

    def __call__(self, spawner: Any) -> list[str]:
        target = f"!server={spawner.user.name}/{spawner.name}"
        return [s[: -len("!server")] + target if s.endswith("!server") else s for s in self]


OAUTH_CLIENT_SCOPES = _ServerScopes(f"{scope}!server" for scope in sharing.CUSTOM_SCOPES)


def _spawner_setting(spawner: Any, key: str) -> Any:
    """A setting a site already made on ``c.Spawner`` (None when unset)."""
    if hasattr(spawner, "keys"):  # traitlets Config: unset keys would be lazy placeholders
        return spawner.get(key, None)
    return getattr(spawner, key, None)


def _add_sharing(c: Any, service_url: str) -> None:
    """classhub's custom scopes (share enforcement in the servers, hub_ext.core.sharing) and
    what spawned servers need to enforce them."""
    section = c.JupyterHub
    if hasattr(section, "keys"):  # traitlets Config: unset keys would be lazy placeholders
        existing = dict(section["custom_scopes"]) if "custom_scopes" in section else {}
    else:
        existing = dict(getattr(section, "custom_scopes", None) or {})
    existing.update(sharing.CUSTOM_SCOPES)
    c.JupyterHub.custom_scopes = existing
    service = next(s for s in c.JupyterHub.services if s.get("name") == SERVICE_NAME)
    if os.environ.get("CLASSHUB_SHARE_INTERVAL"):
        service["environment"]["CLASSHUB_SHARE_INTERVAL"] = os.environ["CLASSHUB_SHARE_INTERVAL"]
    spawner = c.Spawner
    # a site's own lists are extended, not replaced (a callable of the site's is left alone)
    site_token = _spawner_setting(spawner, "server_token_scopes")
    if not callable(site_token):
        c.Spawner.server_token_scopes = list(dict.fromkeys([*(site_token or []), *SERVER_TOKEN_SCOPES]))
    site_oauth = _spawner_setting(spawner, "oauth_client_allowed_scopes")
    if not callable(site_oauth):
        c.Spawner.oauth_client_allowed_scopes = _ServerScopes(
            dict.fromkeys([*(site_oauth or []), *OAUTH_CLIENT_SCOPES]))
    api_url = f"{service_url.rstrip('/')}/services/{SERVICE_NAME}/api"
    # A more specific class's setting wins in traitlets: z2jh always sets KubeSpawner.environment,
    # so the servers' classhub address is added to every spawner section that sets one.
    for name in SPAWNER_SECTIONS:
        section = c[name]
        if name == "Spawner" or ("environment" in section if hasattr(section, "keys") else False):
            env = dict(section["environment"]) if "environment" in section else {}
            env["CLASSHUB_SERVICE_API_URL"] = api_url
            c[name].environment = env


#: Config sections of the spawner classes a classhub hub may use, most general first.
SPAWNER_SECTIONS = ("Spawner", "LocalProcessSpawner", "KubeSpawner", "ClasshubLocalSpawner",
                    "ClasshubKubeSpawner")

CULLER_NAME = "classhub-culler"
#: What the idle culler may do in the hub: list users with their servers and activity, read the
#: spawner state (a pod's name, for GPU utilisation from Prometheus), read the proxy's routes
#: (to reach a server directly), ask servers for their activity report, and stop servers.
CULLER_SCOPES = [
    "list:users", "read:users:name", "read:users:activity", "read:servers", "admin:server_state",
    "delete:servers", "access:servers", "proxy",
]


def _add_culler(c: Any, db_url: str, culler_config: dict[str, Any] | None) -> None:
    """The idle culler service (``python -m culler``, see culler/app.py), its role, and the
    announcement on hub pages that shows a user the culls pending for their servers.

    ``culler_config``: traits of ``ClasshubCuller`` (e.g. ``{"interval": 60, "warn_before": 600}``);
    the hub's ``CLASSHUB_CULLER_CONFIG`` (JSON ``{"ClasshubCuller": {...}}``) is merged under them.
    """
    import json

    from hub_ext.hubside import Announcement

    settings = json.loads(os.environ.get("CLASSHUB_CULLER_CONFIG") or "{}")
    if culler_config:
        settings.setdefault("ClasshubCuller", {}).update(culler_config)
    services = [s for s in _configured(c, "services") if s.get("name") != CULLER_NAME]
    services.append({
        "name": CULLER_NAME,
        "command": [sys.executable, "-m", "culler"],
        "environment": {"CLASSHUB_DB_URL": db_url, "CLASSHUB_CULLER_CONFIG": json.dumps(settings)},
    })
    c.JupyterHub.services = services
    roles_ = {r["name"]: r for r in _configured(c, "load_roles")}
    roles_["classhub-culler"] = {
        "name": "classhub-culler",
        "description": "What the classhub idle culler reads from the hub and stops",
        "scopes": list(CULLER_SCOPES),
        "services": [CULLER_NAME],
    }
    c.JupyterHub.load_roles = list(roles_.values())
    section = c.JupyterHub
    if hasattr(section, "keys"):
        template_vars = dict(section["template_vars"]) if "template_vars" in section else {}
    else:
        template_vars = dict(getattr(section, "template_vars", None) or {})
    template_vars.setdefault("announcement", Announcement(db_url))
    c.JupyterHub.template_vars = template_vars
