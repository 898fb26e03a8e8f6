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
from hub_ext.envtraits import CONFIG_ENV, RETIRED_PREFIX, ConfigError, retired_variables, sections_json

log = logging.getLogger(__name__)

SERVICE_NAME = "classhub"
CULLER_NAME = "classhub-culler"
MODES = ("local", "kubernetes")

#: The config sections each classhub service process loads, whole (its traitlets Application
#: and the configurables it makes; tests/test_service_config.py checks this against them).
#: Everything a deployer sets as ``c.<Section>.<name>`` reaches the process (docs/configuration.md,
#: "Configuration: one channel, traits"); there is no list of single settings to forward.
SERVICE_SECTIONS: dict[str, tuple[str, ...]] = {
    SERVICE_NAME: ("ClasshubService", "ClasshubTemplates", "ClasshubJobs", "ClasshubAssignments",
                   "ClasshubCourseData", "ClasshubPrometheus"),
    CULLER_NAME: ("ClasshubCuller", "ClasshubPrometheus"),
}

#: What a Kubernetes client in the service needs to find the API server: the pod's own
#: environment (in-cluster) or a kubeconfig, not classhub settings.
KUBE_CLIENT_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE")

#: The one ``CLASSHUB_*`` variable classhub still reads as configuration: ``classhub local`` and
#: ``classhub upgrade-db`` take it as the default of ``--db-url``. Why an environment variable:
#: the URL holds the database's password, which reaches the hub pod and its upgrade-db init
#: container from a Kubernetes Secret as a variable (helm-values/base.yaml); as an argument it
#: would show in the pod's spec and in ``ps``. The hub's own ``jupyterhub_config.py`` reads it
#: there to call ``configure(c, db_url=...)``, which hands the services their store.
KEPT_VARIABLES = ("CLASSHUB_DB_URL",)
#: Retired variables that named no single trait: the setting to use instead.
RETIRED_OTHER = {
    "CLASSHUB_CULLER_CONFIG": "ClasshubCuller.<name> (configure(c, culler_config={...}) sets them too)",
}


def retired_settings(environ: Any = None) -> list[str]:
    """A sentence for every retired ``CLASSHUB_*`` variable set in ``environ`` (default: this
    process's): the trait to set instead (docs/configuration.md, "What changed for deployers")."""
    environ = os.environ if environ is None else environ
    if not any(k.startswith(RETIRED_PREFIX) and k not in KEPT_VARIABLES for k in environ):
        return []  # nothing to look up: no import of the service's classes in the hub
    from hub_ext.backends.templates import ClasshubTemplates
    from hub_ext.service.app import ClasshubService
    from hub_ext.service.jobs.settings import ClasshubJobs

    found = retired_variables((ClasshubService, ClasshubJobs, ClasshubTemplates),
                              environ, keep=KEPT_VARIABLES)
    for var, setting in RETIRED_OTHER.items():
        if var in environ:
            found.append(f"{var} is set, but classhub no longer reads it: set c.{setting} in "
                         f"jupyterhub_config.py and unset {var}.")
    return found


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
    # Add and Import say how added people log in, from the authenticator in use (GET /hub/api/info)
    "read:hub",
    # security: which token reports a server's events (the server's own, see ShareAccessHandler)
    "read:tokens",
    # the Cluster page and a user's home say which GPU a local server holds: the device UUIDs
    # the local spawner records in its state (spawner/local.py, gpu_uuids); read, never written
    "admin:server_state",
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
    (hub_ext.heap; docs/contributing/benchmarks.md, "Benchmarks and their history"). Only inside a hub
    process.
    """
    if mode not in MODES:
        raise ValueError(f"unknown classhub mode {mode!r}: use one of {', '.join(MODES)}")
    retired = retired_settings()
    if retired:  # the hub stops at start rather than ignore a setting (docs/configuration.md)
        raise ConfigError(" ".join(retired))
    if service_url is None:
        service_url = "http://127.0.0.1:10101" if mode == "local" else "http://hub:10101"

    if db_url is None:
        base = Path(data_dir).resolve() if data_dir is not None else Path("/srv/jupyterhub")
        db_url = f"sqlite:///{base / 'classhub.sqlite'}"
    _add_service(c, service_url, mode, db_url=db_url, ta_server_access=ta_server_access)
    _add_template_settings(c, mode, data_dir)
    _add_course_roles(c)
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
            # course data folders (docs/admins/course-data.md): the service writes, members read
            if "root_dir" not in c.ClasshubCourseData:
                c.ClasshubCourseData.root_dir = str(data / "course-data")
            if "homes_dir" not in c.ClasshubCourseData:
                c.ClasshubCourseData.homes_dir = str(data / "homes")
        c.ClasshubCourseData.system_groups = system_users
        c.ClasshubLocalSpawner.system_users = system_users
        c.ClasshubLocalSpawner.create_system_users = create_system_users
    else:
        c.JupyterHub.spawner_class = "classhub-kube"
        if "strict_modes" not in c.ClasshubCourseData:  # mounts enforce it (docs/admins/course-data.md)
            c.ClasshubCourseData.strict_modes = False
    hand_over_sections(c, _configured(c, "services"))
    from jupyterhub.app import JupyterHub

    if JupyterHub.initialized():  # inside the hub: what the rest of its configuration sets too
        hand_over_at_start(JupyterHub.instance())
    if freeze_heap:
        heap.freeze_when_started()


def hand_over_sections(config: Any, services: list[dict[str, Any]]) -> None:
    """Give each classhub service in ``services`` its whole `SERVICE_SECTIONS` of ``config``
    (one JSON variable, hub_ext.envtraits.CONFIG_ENV); the process loads them as its traitlets
    config and refuses a value it cannot take with a sentence naming the setting."""
    if not hasattr(config, "keys"):  # a plain object standing in for a Config: nothing to hand
        return
    for spec in services:
        names = SERVICE_SECTIONS.get(spec.get("name", ""))
        if names:
            spec.setdefault("environment", {})[CONFIG_ENV] = sections_json(config, names)


def hand_over_at_start(app: Any) -> None:
    """Hand the services the sections of the hub's whole configuration when ``app`` (a
    JupyterHub) makes its services: settings made after ``configure(c)`` in the same file, in
    later files (``classhub local --config``, z2jh's ``hub.extraConfig``) and on the hub's
    command line count too. Once per app."""
    if getattr(app, "_classhub_hands_over", False):
        return
    app._classhub_hands_over = True
    init_services = app.init_services

    def hand_over_then_init_services(*args: Any, **kwargs: Any) -> Any:
        hand_over_sections(app.config, app.services)
        return init_services(*args, **kwargs)

    app.init_services = hand_over_then_init_services


def _configured(c: Any, key: str) -> list:
    """A list already set on ``c.JupyterHub`` (works for traitlets Config and plain objects)."""
    section = c.JupyterHub
    if hasattr(section, "keys"):  # traitlets Config: unset keys would be lazy placeholders
        return list(section[key]) if key in section else []
    return list(getattr(section, key, None) or [])


def _add_service(c: Any, service_url: str, mode: str, db_url: str, ta_server_access: bool) -> None:
    """The service's definition; its settings are traits of ``c.ClasshubService`` (handed over
    whole by `hand_over_sections`). ``ta_server_access`` is the hub-wide default of the courses
    that chose none."""
    services = [s for s in _configured(c, "services") if s.get("name") != SERVICE_NAME]
    c.ClasshubService.db_url = db_url
    c.ClasshubService.mode = mode
    c.ClasshubService.ta_server_access = ta_server_access
    environment: dict[str, str] = {}
    if mode == "kubernetes":
        if "bind_ip" not in c.ClasshubService:  # reached from pods through the hub's Service
            c.ClasshubService.bind_ip = "0.0.0.0"
        # the publisher pod and the jobs are created by the service, with the hub's credentials
        environment.update({k: v for k, v in os.environ.items() if k in KUBE_CLIENT_ENV})
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
    service["oauth_client_allowed_scopes"] = list(SERVICE_OAUTH_SCOPES)
    if mode == "local" and data_dir is not None and "storage_dir" not in c.ClasshubTemplates:
        c.ClasshubTemplates.storage_dir = str(Path(data_dir).resolve() / "templates")
    if mode == "local" and data_dir is not None and "storage_dir" not in c.ClasshubAssignments:
        c.ClasshubAssignments.storage_dir = str(Path(data_dir).resolve() / "submissions")


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


def _add_course_roles(c: Any) -> None:
    """Course roles are applied by the hub while it runs, not at its start (hub_ext.hubside).

    The classhub service pushes the teacher/TA roles of every course to the hub's endpoint
    ``/hub/api/classhub/course-roles`` when it starts and right after every membership change, so
    a new TA gets their powers and a removed one loses them at once, without a hub restart.
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

    Its settings are ``c.ClasshubCuller.<name>`` (handed over whole by `hand_over_sections`);
    ``culler_config`` (e.g. ``{"interval": 60}``) is a shorthand that sets those traits.
    """
    from hub_ext.hubside import Announcement

    c.ClasshubCuller.db_url = db_url
    for key, value in (culler_config or {}).items():
        c.ClasshubCuller[key] = value
    services = [s for s in _configured(c, "services") if s.get("name") != CULLER_NAME]
    services.append({
        "name": CULLER_NAME,
        "command": [sys.executable, "-m", "culler"],
        "environment": {},
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
