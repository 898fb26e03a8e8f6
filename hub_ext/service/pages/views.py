"""The classhub pages: Home, Course, Templates, Sharing, Jobs.

Handlers are thin (docs/architecture.md, rule 3): who asks, the same authorization decision as
the matching API endpoint (hub_ext.core.authz: each page declares its action with ``@needs``, and
what a part of a page offers is the decision of the API action behind it), the same domain
classes for the data (`Courses`, `Shares`, `CullingSettings`, the template store), then a
template. What a page lets a person do is done by its JavaScript through the REST API, never
here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import select
from tornado import web

from hub_ext.core import authz
from hub_ext.core import templates as template_rules
from hub_ext.core.coursedata import human_bytes
from hub_ext.core.jobs import ADMITTED, PREEMPTED, QUEUED, RUNNING
from hub_ext.core.profiles import Catalog, CatalogError
from hub_ext.hubapi import HubAPIError
from hub_ext.service import coursedata
from hub_ext.service.assignments.handlers import course_assignments
from hub_ext.service.assignments.handlers import settings_of as assignment_settings
from hub_ext.service.competitions.handlers import course_competitions
from hub_ext.service.declare import needs
from hub_ext.service.handlers import SecurityHeaders
from hub_ext.service.jobs.records import as_json as job_json
from hub_ext.service.pages.api import job_counts
from hub_ext.service.pages.render import STATIC, PageHandler
from hub_ext.service.pages.sentences import login_sentence
from hub_ext.service.templates.base import hidden_versions, settings_of, visibility
from hub_ext.service.templates.browsing import version_files
from hub_ext.store.models import Course
from hub_ext.store.template_models import Template, find_version, reseed_mode, version_json

#: Jobs that still hold or wait for resources: what Cancel applies to, and what the pages follow.
ACTIVE_JOBS = (QUEUED, ADMITTED, RUNNING, PREEMPTED)
#: Most jobs a table of the Jobs page shows (the API's page size).
JOBS_SHOWN = 200


def _server_of(model: dict[str, Any]) -> dict[str, Any] | None:
    """The default server of a hub user model, when it runs or is starting."""
    server = (model.get("servers") or {}).get("")
    return server or None


def _bars(usage: dict[str, Any], limits: dict[str, Any]) -> list[dict[str, Any]]:
    """Usage against limits as rows a bar can show: what, used, limit (None: not limited)."""
    rows = []
    used_res = usage.get("resources") or {}
    lim_res = limits.get("resources") or {}
    for name in sorted(set(used_res) | set(lim_res)):
        rows.append({"what": name, "used": used_res.get(name, 0), "limit": lim_res.get(name)})
    rows.append({"what": "servers", "used": usage.get("servers", 0), "limit": limits.get("servers")})
    rows.append({"what": "GPU-hours this week", "used": round(float(usage.get("gpu_hours_week") or 0), 2),
                 "limit": limits.get("gpu_hours_per_week")})
    for row in rows:
        row["percent"] = _percent(row["used"], row["limit"])
    return rows


def _number(value: Any) -> float:
    """A usage or limit value as a number (Kubernetes quantities such as ``4Gi`` included)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value or "0")
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * factor
            except ValueError:
                return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0


def _percent(used: Any, limit: Any) -> int | None:
    if limit is None:
        return None
    top = _number(limit)
    if top <= 0:
        return 100
    return max(0, min(100, round(100 * _number(used) / top)))


class _Pages(PageHandler):
    @property
    def shares(self) -> Any:
        return self.settings["shares"]

    async def _offered(self, courses: list[str]) -> dict[str, list[dict[str, Any]]]:
        """What the pickers offer, per course: the profiles of the course (slug, display name,
        the resource names one server of it holds), from the caller's spawner catalog (the hub
        is its one source: docs/architecture.md, rule 4). Empty where the hub has no classhub
        profiles or its catalog cannot be read: the fields then take what is typed."""
        try:
            answer = await self.hub.profile_catalog(self.caller.name)
            catalog = Catalog.from_config(answer.get("profiles") or []) if answer.get("enabled") else None
        except (HubAPIError, CatalogError):
            catalog = None
        if catalog is None:
            return {c: [] for c in courses}
        return {c: [{"slug": p.slug, "display_name": p.display_name,
                     "resources": sorted(p.request)} for p in catalog.for_course(c).profiles]
                for c in courses}

    async def _templates(self, courses: list[str], files: bool = False) -> dict[str, list[dict[str, Any]]]:
        """Each course's templates with their versions (newest last), from the store; ``files``:
        with each version's files (its stored manifest is read: the Templates page only)."""
        stored = settings_of(self.settings)

        def read() -> dict[str, list[dict[str, Any]]]:
            found: dict[str, list[dict[str, Any]]] = {c: [] for c in courses}
            with self.settings["sessions"]() as session:
                for course in courses:
                    hidden, held = visibility(session, self.caller, course)
                    for t in session.scalars(select(Template).join(Course).where(Course.name == course)
                                             .order_by(Template.name)):
                        versions = []
                        for v in t.versions:
                            if v.id in hidden:  # what only an assignment not open yet released
                                continue
                            shown = version_json(course, t.name, v, held)
                            # the files and the folder they land in (docs/templates.md)
                            shown["contents"] = (version_files(stored, v.location, v.manifest_sha256)
                                                 if files else None)
                            versions.append(shown)
                        if t.versions and not versions:
                            continue
                        for before, after in zip([None, *versions], versions, strict=False):
                            after["diff"] = _diff(before, after)
                        found[course].append({"name": t.name, "versions": versions,
                                              "latest": versions[-1] if versions else None})
                    found.setdefault(course, [])
            return found
        return await asyncio.to_thread(read)

    async def _reseed(self, courses: list[str]) -> dict[str, str]:
        def read() -> dict[str, str]:
            with self.settings["sessions"]() as session:
                return {c: reseed_mode(session, c) for c in courses}
        return await asyncio.to_thread(read)


def _diff(before: dict[str, Any] | None, after: dict[str, Any]) -> str:
    """A one-line summary of a version against the previous one (files and bytes)."""
    if before is None:
        return f"first version: {after['files']} files"
    files = after["files"] - before["files"]
    size = after["bytes"] - before["bytes"]
    return f"{files:+d} files, {size:+,d} bytes against v{before['version']}"


class HomePage(_Pages):
    """``GET /``: my courses and role, my server, my usage against my limits, my courses'
    templates, shares with me and by me, cull warnings, invitations; admins: every course and
    a new-course form. The hub's Services menu and nav bar link here."""

    page_title = "classhub"

    @needs(authz.OPEN_PAGES)
    async def get(self) -> None:
        caller = self.caller
        name = caller.name
        model, usage, invitations, culling = await asyncio.gather(
            self.hub.user(name), self.courses.my_usage(name), self.courses.invitations_of(name),
            self.settings["culling"].of_user(name))
        courses = sorted(caller.courses)
        templates = await self._templates(courses)
        mine = await self.shares.mine(name)
        with_me = await self.shares.with_me(name, model.get("groups", []))
        # every course, with the new-course form: for whoever may create courses
        all_courses = await self.courses.list(caller) if authz.decide(caller, authz.CREATE_COURSE) else []
        per_course = []
        for course in courses:
            info = usage["courses"].get(course, {})
            per_course.append({
                "name": course, "role": caller.courses[course],
                "bars": _bars(info.get("usage", {}), info.get("limits", {})),
                "templates": templates.get(course, []),
            })
        server = _server_of(model)
        look = self.settings.get("cluster_source")  # which GPU my local server holds, in words
        uuids = ((server or {}).get("state") or {}).get("gpu_uuids") or []
        devices = await look.device_words(list(uuids)) if look and uuids else []
        self.render_page("home.html", caller, courses=per_course, server=server, server_devices=devices,
                         shares_mine=mine, shares_with_me=with_me, invitations=invitations,
                         warnings=culling.get("warnings", []), all_courses=all_courses,
                         jobs=await job_counts(self.settings, caller))

class CoursePage(_Pages):
    """``GET /courses/<course>``: members, roster, limits, usage, running servers, culling
    settings and the audit log (teachers, TAs, admins); a read-only summary for students."""

    @needs(authz.READ_COURSE, course="course")
    async def get(self, course: str) -> None:
        caller = self.caller
        info = await self.courses.get(course)
        role = caller.role_in(course)
        # staff see members, usage and servers (READ_MEMBERS); teachers get the controls to change
        # members, per-student limits, servers and no-cull windows, all of which authz grants the
        # course's teachers and admins (SET_USER_QUOTA stands for them)
        staff = bool(authz.decide(caller, authz.READ_MEMBERS, course=course))
        teacher = bool(authz.decide(caller, authz.SET_USER_QUOTA, course=course))
        self.page_title = f"classhub: {info['display_name']}"
        quota = await self.courses.course_quota(course)
        ns: dict[str, Any] = {"course": info, "role": role or ("admin" if caller.is_admin else None),
                              "staff": staff, "teacher": teacher, "quota": quota}
        data = coursedata.settings_of(self.settings)  # the Data section (docs/teachers/course-data.md)
        ns.update(data_path=f"~/{data.home_folder}/{coursedata.folder_name(course)}",
                  data_writable=bool(data.root_dir) and bool(
                      authz.decide(caller, authz.WRITE_COURSE_DATA, course=course)),
                  data_admin=bool(data.root_dir) and bool(
                      authz.decide(caller, authz.SET_COURSE_DATA_LIMIT, course=course)),
                  home_limit=(human_bytes(data.home_limit_of(course) or 0)
                              if data.home_limit_of(course) else None))
        windows = await self.settings["culling"].windows(course)
        ns["windows"] = windows["windows"]
        ns["assignments"] = await self._assignments(course, staff)
        ns["competitions"] = await asyncio.to_thread(course_competitions, self.settings["sessions"], course,
                                                     self.caller.name, staff)
        ns["templates"] = (await self._templates([course]))[course] if teacher else []
        # the autograding form's profile picker: the course's profiles, as the teacher may start them
        ns["grading_profiles"] = ((await self._offered([course]))[course]
                                  if teacher and ns["assignments"] else [])
        ns["sharing"] = await self.shares.course_settings(course)
        if teacher:  # how added people log in
            ns["login_sentence"] = await self._login_sentence()
        if caller.is_admin:  # the course quota form's picker (admins set the course quota):
            # the names the course's profiles use, and the cluster's own devices in plain words
            # ("MIG slice 1g.10gb (7 on the cluster)")
            offered = (await self._offered([course]))[course]
            names = sorted({"cpu", "memory"} | {r for p in offered for r in p["resources"]})
            look = self.settings.get("cluster_source")  # made by the service app (app.py)
            ns["resource_names"] = (await look.resource_choices(names) if look
                                    else [{"name": n, "label": n} for n in names])
        if staff:
            members = await self.courses.members(course)
            usage = await self.courses.course_usage(course)
            limits = {m["username"]: await self.courses.user_quota(course, m["username"])
                      for m in members if m["role"] in ("student", "ta")}
            ns.update(members=members, limits=limits,
                      course_bars=_bars(usage.get("usage", {}), usage.get("limits", {})),
                      usage_rows=self._usage_rows(members, usage),
                      invitations=await self.courses.course_invitations(course),
                      servers=await self._running(members))
        else:
            mine = (await self.courses.my_usage(caller.name))["courses"].get(course, {})
            ns["my_bars"] = _bars(mine.get("usage", {}), mine.get("limits", {}))
        self.render_page("course.html", caller, **ns)

    async def _assignments(self, course: str, staff: bool) -> list[dict[str, Any]]:
        """The course's assignments as the assignments API shows them to the caller (students:
        the open ones, with their own submissions; staff: all, with the submissions table)."""
        settings = assignment_settings(self.settings)
        storage = settings.storage() if settings.storage_dir else None
        return await asyncio.to_thread(course_assignments, self.settings["sessions"], storage, course,
                                       self.caller.name, staff)

    async def _login_sentence(self) -> str:
        """How added people log in, from the hub's authenticator (``/hub/api/info`` needs the
        service's scope ``read:hub``; without it, the generic sentence)."""
        try:
            info = await self.hub.get("info")
        except HubAPIError:
            return login_sentence(None)
        return login_sentence(((info or {}).get("authenticator") or {}).get("class"))

    @staticmethod
    def _usage_rows(members: list[dict[str, str]], usage: dict[str, Any]) -> list[dict[str, Any]]:
        users = usage.get("users", {})
        rows = []
        for m in members:
            u = users.get(m["username"], {})
            gpus = sum(_number(v) for k, v in (u.get("resources") or {}).items() if "gpu" in k)
            rows.append({"username": m["username"], "role": m["role"],
                         "gpu_hours": round(float(u.get("gpu_hours_week") or 0), 3),
                         "servers": u.get("servers", 0), "gpus": gpus})
        return rows

    async def _running(self, members: list[dict[str, str]]) -> list[dict[str, Any]]:
        """The members' running default servers, from the hub, with the profile each runs."""
        names = {m["username"] for m in members}
        try:
            active = await self.hub.users("active")
        except HubAPIError:
            return []
        reserved = await asyncio.to_thread(self._reserved_profiles)
        found = []
        for user in active:
            server = _server_of(user)
            if user["name"] in names and server:
                found.append({"user": user["name"], "ready": server.get("ready"),
                              "pending": server.get("pending"), "started": server.get("started"),
                              "last_activity": server.get("last_activity"),
                              "profile": reserved.get(user["name"]) or _option_profile(server)})
        return sorted(found, key=lambda s: s["user"])

    def _reserved_profiles(self) -> dict[str, str]:
        """username -> the profile slug the ledger recorded for their default server's
        reservation: what the spawner actually applied (a start without a ``profile`` option
        gets the catalog's default, which the hub's ``user_options`` do not say)."""
        return self.courses.ledger.default_server_profiles()


def _option_profile(server: dict[str, Any]) -> str:
    """The profile the hub's ``user_options`` name ("" when none: the default was used, and a
    server started before the ledger recorded profiles shows none)."""
    profile = (server.get("user_options") or {}).get("profile")
    return profile if isinstance(profile, str) else ""


class TemplatesPage(_Pages):
    """``GET /templates``: my courses' templates (versions, who, when, size, what changed) with
    Start; teachers publish a folder picked from their server and set the re-seed rule."""

    page_title = "classhub: templates"

    @needs(authz.OPEN_PAGES)
    async def get(self) -> None:
        caller = self.caller
        courses = sorted(c["name"] for c in await self.courses.list(caller))
        templates = await self._templates(courses, files=True)
        reseed = await self._reseed(courses)
        publishable = [c for c in courses if template_rules.may_publish(caller, c)]
        model = await self.hub.user(caller.name)
        server = _server_of(model)
        offered = await self._offered(publishable) if publishable else {}
        self.render_page("templates.html", caller, courses=courses, templates=templates,
                         reseed=reseed, publishable=publishable, server=server,
                         profiles={c: [{"slug": p["slug"], "display_name": p["display_name"]}
                                       for p in found] for c, found in offered.items()})


class TemplateStartPage(_Pages):
    """``GET /templates/<course>/<name>/start``: "Starting <template>". Asks first when my
    server runs (it restarts); then starts it from the template through the API, follows the
    spawn's progress (the hub's event stream, `ProgressHandler`) and opens JupyterLab at the
    folder the template's files land in. The Templates page and the JupyterLab panel link here."""

    @needs(authz.USE_TEMPLATE, course="course")
    async def get(self, course: str, name: str) -> None:
        caller = self.caller
        if template_rules.name_problem(name):  # no such template can exist: the page's 404
            raise web.HTTPError(404, "No template %s in %s; the Templates page lists them.", name, course)
        stored = settings_of(self.settings)

        def read() -> dict[str, Any] | None:
            with self.settings["sessions"]() as session:
                latest = find_version(session, course, name, None, hidden_versions(session, caller, course))
                if latest is None:
                    return None
                shown = version_json(course, name, latest)
                shown["contents"] = version_files(stored, latest.location, latest.manifest_sha256)
                return shown

        version = await asyncio.to_thread(read)
        if version is None:
            raise web.HTTPError(404, "No template %s in %s; the Templates page lists them.", name, course)
        server = _server_of(await self.hub.user(caller.name))
        self.page_title = f"classhub: starting {name}"
        folder = (version.get("contents") or {}).get("folder") or ""
        self.render_page("starting.html", caller, course=course, template=name, version=version,
                         folder=folder, running=bool(server))


class SharingPage(_Pages):
    """``GET /shares``: share my server (a file or folder picked from it, with a person, my
    course or as a link), my shares with expiry, copy-link and revoke, and what is shared
    with me, each opening directly."""

    page_title = "classhub: sharing"

    @needs(authz.OPEN_PAGES)
    async def get(self) -> None:
        caller = self.caller
        model = await self.hub.user(caller.name)
        mine = await self.shares.mine(caller.name)
        with_me = await self.shares.with_me(caller.name, model.get("groups", []))
        people: set[str] = set()
        for course in caller.courses:
            people.update(m["username"] for m in await self.courses.members(course))
        people.discard(caller.name)
        groups = sorted(g for g in model.get("groups", []) if g in caller.courses)
        self.render_page("sharing.html", caller, shares_mine=mine, shares_with_me=with_me,
                         people=sorted(people), groups=groups, server=_server_of(model))


def _job_size(roles: list[dict[str, Any]]) -> str:
    """What a job asks for, e.g. "2 x 1 nvidia.com/gpu, 4 cpu" (each role named when several)."""
    parts = []
    for role in roles:
        resources = ", ".join(f"{v} {k}" for k, v in (role.get("resources") or {}).items())
        if role.get("profile"):
            resources = f"profile {role['profile']}" + (f" ({resources})" if resources else "")
        resources = resources or "defaults"
        label = f"{role.get('name')}: " if len(roles) > 1 else ""
        parts.append(f"{label}{role.get('replicas', 1)} x {resources}")
    return "; ".join(parts)


def _queue_order(job: dict[str, Any]) -> tuple[int, int, str]:
    """A course's queue as the admission loop sees it: admitted and running jobs, then the
    waiting ones by their place in the queue, then by submit time."""
    holding = job["state"] in (ADMITTED, RUNNING)
    position = job.get("queue_position")
    return (0 if holding else 1, position if position is not None else 10**9,
            job.get("submitted_at") or "")


class JobsPage(_Pages):
    """``GET /jobs``: my jobs (state, where each waits and why, Logs, Cancel), a submit form,
    and for teachers and TAs their courses' queues. Which buttons a row shows is the API's own
    decision (hub_ext.core.authz), so the page never offers what the API refuses; the buttons
    call the jobs API."""

    page_title = "classhub: jobs"

    @needs(authz.OPEN_PAGES)
    async def get(self) -> None:
        caller = self.caller
        service = self.settings.get("jobs")
        if service is None:
            self.render_page("jobs.html", caller, enabled=False)
            return
        courses = sorted(c["name"] for c in await self.courses.list(caller))
        submit_to = [c for c in courses if authz.decide(caller, authz.SUBMIT_JOB, course=c)]
        staff_of = [c for c in courses if authz.decide(caller, authz.READ_COURSE_JOBS, course=c)]

        def read() -> tuple[list[Any], dict[str, list[Any]]]:
            mine, _ = service.store.list(owner=caller.name, limit=JOBS_SHOWN)
            queues = {c: service.store.list(courses=[c], states=ACTIVE_JOBS, limit=JOBS_SHOWN)[0]
                      for c in staff_of}
            return mine, queues

        mine, queues = await asyncio.to_thread(read)

        def row(record: Any) -> dict[str, Any]:
            job = job_json(record)
            job["size"] = _job_size(job["roles"])
            job["active"] = job["state"] in ACTIVE_JOBS
            job["may_cancel"] = job["active"] and bool(authz.decide(
                caller, authz.CANCEL_JOB, course=job["course"], user=job["owner"]))
            return job

        self.render_page(
            "jobs.html", caller, enabled=True, mine=[row(r) for r in mine],
            queues={c: sorted((row(r) for r in rows), key=_queue_order) for c, rows in queues.items()},
            submit_to=submit_to, active_states=list(ACTIVE_JOBS),
            max_runtime_limit=service.settings.max_runtime_limit,
            default_max_runtime=service.settings.default_max_runtime)


class NotFoundPage(PageHandler):
    """Any other path under the service: a 404 page with the hub's nav bar and a way back,
    never a bare "404: Not Found"."""

    def prepare(self) -> None:
        self.refuse_after_body(web.HTTPError(404, "There is no classhub page at %s; the classhub "
                                                  "home lists your courses, templates and shares.",
                                             self.request.path))

    async def get(self) -> None:
        """Never runs: the 404 kept by `prepare` is raised once the body was read."""

    post = put = patch = delete = get


class StaticHandler(SecurityHeaders, web.StaticFileHandler):
    """``GET /static/<file>``: the pages' own CSS and JavaScript (with the service's security
    headers, like every classhub response)."""

    def initialize(self, path: str = str(STATIC), default_filename: str | None = None) -> None:
        super().initialize(path, default_filename)
