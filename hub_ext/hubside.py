"""Code that runs inside the hub process: course roles applied while the hub runs, and the
culler's warning on hub pages (`Announcement`).

Why: a course role is power over other people's servers (docs/admins/security.md, "Security model").
JupyterHub reads ``load_roles`` only when it starts and has no REST API for roles, so roles made from the
configuration would apply to a new TA only after a hub restart and, worse, a removed TA would
keep opening students' servers until then. This endpoint lets the classhub service replace the
generated course roles in the hub's own database right after every membership change: the hub
computes every request's scopes from its database, so a grant or a withdrawal applies to the
next request.

``PUT /hub/api/classhub/course-roles`` with ``{"courses": {"<course>": {"members": {"<user>":
"student" | "ta" | "teacher"}, "ta_server_access": true}}}``: the complete desired state (the
call is idempotent). Only the classhub service's own token may call it. Hub admins are read
from the hub's database here, at the moment of the change, and left out of every server scope
(hub_ext.core.roles.hub_roles), so no course role ever reaches a hub admin's server.

``GET /hub/api/classhub/profiles/<user>`` (`ProfilesHandler`) gives the service the profile
catalog of the user's spawner, so jobs by profile are checked like notebooks.
``GET /hub/api/classhub/home/<user>`` (`HomeHandler`) gives it the home volume the user's
notebook pod mounts, so a job's replicas on Kubernetes mount it too.

They are registered with ``JupyterHub.extra_handlers`` by ``configure()``; JupyterHub 3.1+ logs
that setting as deprecated, but it is the only way for an extension to change roles at run time
in JupyterHub 5 and 6.
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

from jupyterhub import orm
from jupyterhub import roles as hub_roles_api
from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from hub_ext import store
from hub_ext.core import roles
from hub_ext.core.culling import format_duration
from hub_ext.store import culler_models as cm

SERVICE_NAME = "classhub"
PATH = r"/api/classhub/course-roles"


def _desired(body: Any) -> tuple[dict[str, dict[str, str]], dict[str, bool]]:
    """Members and TA access per course from the request body; 400 for any other shape."""
    courses = body.get("courses") if isinstance(body, dict) else None
    if not isinstance(courses, dict):
        raise web.HTTPError(400, 'Send {"courses": {"<course>": {"members": {...}}}}.')
    members: dict[str, dict[str, str]] = {}
    ta_access: dict[str, bool] = {}
    for course, spec in courses.items():
        people = spec.get("members") if isinstance(spec, dict) else None
        if not isinstance(people, dict) or not all(
                isinstance(u, str) and r in (roles.STUDENT, roles.TA, roles.TEACHER)
                for u, r in people.items()):
            raise web.HTTPError(400, f"courses[{course!r}].members must map user names to roles.")
        members[course] = dict(people)
        ta_access[course] = bool(spec.get("ta_server_access", True))
    return members, ta_access


class ServiceOnlyHandler(APIHandler):
    """A hub endpoint that only the classhub service's own token may call."""

    def require_classhub(self, what: str) -> None:
        """403 "Only the classhub service <what>." for every other caller."""
        caller = self.current_user
        if not (isinstance(caller, orm.Service) and caller.name == SERVICE_NAME):
            raise web.HTTPError(403, f"Only the classhub service {what}.")


class CourseRolesHandler(ServiceOnlyHandler):
    """Replace the hub roles generated for classhub courses (see the module docstring)."""

    def put(self) -> None:
        self.require_classhub("sets course roles")
        members, ta_access = _desired(self.get_json_body())
        admins = {u.name for u in self.db.query(orm.User).filter(orm.User.admin.is_(True))}
        wanted = roles.hub_roles(members, ta_access, hub_admins=admins)
        names = {r["name"] for r in wanted}
        for role in list(self.db.query(orm.Role)):
            if role.name.startswith(roles.ROLE_PREFIXES) and role.name not in names:
                self.db.delete(role)
        for spec in wanted:
            role = hub_roles_api.create_role(
                self.db, {k: spec[k] for k in ("name", "description", "scopes")}, commit=False)
            users = [orm.User.find(self.db, name) for name in spec["users"]]
            role.users = [u for u in users if u is not None]
        self.db.commit()
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"roles": sorted(names), "hub_admins_left_out": sorted(
            admins & {u for people in members.values() for u in people})}))


#: The spawner's profile catalog, for the classhub service (jobs by profile).
PROFILES_PATH = r"/api/classhub/profiles/([^/]+)"


class ProfilesHandler(ServiceOnlyHandler):
    """``GET /hub/api/classhub/profiles/<user>``: the profile catalog the user's spawner offers
    (configured, or proposed from the hardware), as catalog entries: ``{"enabled": true,
    "profiles": [...]}``. The service resolves a job's ``profile`` with the same code a
    notebook's goes through (hub_ext.core.profiles); only the catalog lives in the hub's
    configuration. ``enabled`` is false when the spawner has no classhub profiles (a plain
    spawner, or KubeSpawner's own ``profile_list``). Only the classhub service may call it."""

    def get(self, name: str) -> None:
        self.require_classhub("reads the profile catalog")
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, f"No user {name}.")
        spawner = user.spawner
        entries = getattr(spawner, "catalog_entries", None)
        enabled = entries is not None and spawner.classhub_profiles_enabled()
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"enabled": enabled, "profiles": entries() if enabled else []},
                               default=str))


#: The user's home volume as their notebook pod mounts it, for the classhub service (jobs).
HOME_PATH = r"/api/classhub/home/([^/]+)"


class HomeHandler(ServiceOnlyHandler):
    """``GET /hub/api/classhub/home/<user>``: ``{"home": ...}``, what the user's spawner mounts at
    their home (``ClasshubKubeSpawner.home_volume``: namespace, volume, mount, uid, gid, fs_gid,
    supplemental_gids, expanded by KubeSpawner itself), so a job's replicas see the notebook's
    files; null for a spawner without one. Only the classhub service may call it."""

    async def get(self, name: str) -> None:
        self.require_classhub("reads users' home volumes")
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, f"No user {name}.")
        home_volume = getattr(user.spawner, "home_volume", None)
        home = await home_volume() if home_volume is not None else None
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"home": home}, default=str))


HANDLERS = [(PATH, CourseRolesHandler), (PROFILES_PATH, ProfilesHandler), (HOME_PATH, HomeHandler)]


class Announcement:
    """``template_vars`` callable: the hub page's announcement for a user with pending culls.

    JupyterHub calls it with the current user on every page render (home, spawn, token pages),
    synchronously, on the hub's event loop, and renders the result as HTML in its announcement
    bar; the message is escaped here. A render reads no database (docs/architecture.md, rule 7):
    a thread of its own reads every pending warning (a few rows: servers about to be culled)
    every ``every`` seconds, through the store's readers, and a render looks the user up in what
    it read last. A warning comes minutes before its cull; showing it a second or two late
    changes nothing a user could act on.
    """

    def __init__(self, db_url: str, every: float = 2.0, poll: bool = True) -> None:
        self.db_url = db_url
        self.every = every
        self.poll = poll  # False: only `refresh()` reads (tests)
        self._warnings: dict[str, list[tuple[str, datetime, str]]] = {}
        self._reader: threading.Thread | None = None
        self._failing = False

    def __deepcopy__(self, memo: dict) -> Announcement:
        """A copy that reads on its own (JupyterHub copies its configuration, threads cannot
        be copied)."""
        return Announcement(self.db_url, self.every, self.poll)

    def __call__(self, user: Any) -> str:
        if user is None or not self.db_url:
            return ""
        if self.poll and self._reader is None:
            self._start()
        now = datetime.now(timezone.utc)
        parts = []
        for server_name, cull_at, message in self._warnings.get(user.name, ()):
            which = f"Your server {server_name!r}" if server_name else "Your server"
            left = format_duration(max(0.0, (cull_at - now).total_seconds()))
            why = ("because it reached its maximum running time. Save your work."
                   if "maximum age" in message else
                   "because it is idle. Use it (open it, run a cell) to keep it.")
            parts.append(
                f'<span class="classhub-cull-warning">{html.escape(which)} will be stopped in about '
                f"{html.escape(left)} {why}</span>"
            )
        return "<br>".join(parts)

    def refresh(self) -> None:
        """Read every pending warning (in the calling thread); a failure keeps what was read
        before and is logged once until a read works again."""
        try:
            with store.readers(store.shared(self.db_url))() as session:
                found: dict[str, list[tuple[str, datetime, str]]] = {}
                for w in cm.warnings_of(session):
                    found.setdefault(w.username, []).append((w.server_name, w.cull_at, w.message))
        except Exception:  # a database hiccup must never break the hub's pages
            if not self._failing:
                logging.getLogger("JupyterHub").warning(
                    "classhub: the culler's warnings could not be read", exc_info=True)
            self._failing = True
            return
        self._failing = False
        self._warnings = found  # one assignment: a render sees the old or the new read, whole

    def _start(self) -> None:
        # only the hub's event loop renders pages: no other thread starts a reader meanwhile
        self._reader = threading.Thread(target=self._read_forever, daemon=True,
                                        name="classhub-announcement")
        self._reader.start()

    def _read_forever(self) -> None:
        while True:
            self.refresh()
            time.sleep(self.every)
