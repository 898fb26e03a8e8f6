"""The classhub hub-managed service: a tornado app behind the hub's proxy at ``/services/classhub/``.

JupyterHub starts it (``python -m hub_ext.service``) and passes its URL, prefix and token in
``JUPYTERHUB_*`` environment variables, exactly like any managed service; ``configure()`` hands
it the hub's ``c.ClasshubService``, ``c.ClasshubJobs`` and ``c.ClasshubTemplates`` sections
(hub_ext.envtraits), including ``ClasshubService.db_url``, the store shared with the spawner.

Routes live in `ROUTES` (relative to the prefix) so the OpenAPI test can compare them with the
document; `make_app` mounts them under the prefix.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web
from traitlets import Bool, Enum, Float, Integer, TraitError, Unicode, validate
from traitlets.config import Application

from hub_ext import __version__, store
from hub_ext.backends.coursedata import ClasshubCourseData
from hub_ext.backends.gpu_use import ClasshubPrometheus
from hub_ext.backends.submissions import ClasshubAssignments
from hub_ext.backends.templates import ClasshubTemplates
from hub_ext.core import competitions as rules
from hub_ext.envtraits import ConfigError, apply_env, check_sections, handed_config
from hub_ext.hubapi import HubAPI
from hub_ext.logs import route_module_logs
from hub_ext.service import (
    cluster,
    coursedata,
    culling,
    handlers,
    jobs,
    metrics,
    openapi,
    pages,
    reconcile,
    routes,
    sharing,
)
from hub_ext.service.assignments.grading import Grading
from hub_ext.service.assignments.metrics import GradingCollector, SubmissionCollector
from hub_ext.service.competitions.handlers import storage_of
from hub_ext.service.competitions.metrics import CompetitionCollector
from hub_ext.service.competitions.runs import CompetitionRuns
from hub_ext.service.courses import Courses

#: (path under the prefix, handler): the OpenAPI document's own route, then every other one.
ROUTES: list[tuple[str, type]] = [openapi.OPENAPI_ROUTE, *routes.ROUTES]


class OAuthCallbackHandler(handlers.SecurityHeaders, handlers.ServiceHubAuth, HubOAuthCallbackHandler):
    """JupyterHub's OAuth callback of the service, with the headers of every classhub response."""


class ClasshubService(Application):
    """Serves the classhub REST API (and, later, metrics) for one hub."""

    name = "classhub-service"
    version = __version__
    description = "classhub REST API service (started by JupyterHub)"

    config_file = Unicode(
        "", config=True,
        help="A Python config file to load (``c.ClasshubService.reconcile_interval = 30``); settings "
        "in it win over the sections the hub hands the service (set them in jupyterhub_config.py "
        "instead where you can).",
    ).tag(env="CLASSHUB_SERVICE_CONFIG")
    service_url = Unicode(
        "http://127.0.0.1:10101", config=True,
        help="URL the service listens on; JupyterHub passes it ($JUPYTERHUB_SERVICE_URL).",
    ).tag(env="JUPYTERHUB_SERVICE_URL")
    prefix = Unicode(
        "/services/classhub/", config=True,
        help="URL prefix of the service behind the proxy ($JUPYTERHUB_SERVICE_PREFIX).",
    ).tag(env="JUPYTERHUB_SERVICE_PREFIX")
    bind_ip = Unicode(
        "", config=True,
        help="Interface to listen on; empty means the host of service_url (configure() sets "
        "0.0.0.0 on Kubernetes).",
    ).tag(env="CLASSHUB_BIND_IP")
    port = Integer(0, config=True, help="Port to listen on; 0 means the port of service_url.")
    db_url = Unicode(
        "", config=True,
        help="The classhub store (courses, quotas, ledger), shared with the spawner; "
        "configure(c, db_url=...) sets it.",
    ).tag(env="CLASSHUB_DB_URL")
    mode = Enum(
        ["local", "kubernetes"], "local", config=True,
        help="Where servers run: processes on this machine or pods; configure(c, mode) sets it.",
    ).tag(env="CLASSHUB_MODE")
    authenticate_metrics = Bool(
        True, config=True,
        help="Require a token with the scope read:metrics for /metrics, like JupyterHub's own "
        "authenticate_prometheus; false for a Prometheus that scrapes the service directly on a "
        "private network.",
    ).tag(env="CLASSHUB_METRICS_AUTH")
    ta_server_access = Bool(
        True, config=True,
        help="Whether TAs open their students' servers without a share in courses that chose "
        "nothing; configure(c, ta_server_access=...) sets it.",
    ).tag(env="CLASSHUB_TA_SERVER_ACCESS")
    reconcile_interval = Float(
        60.0, config=True,
        help="Seconds between checks that every quota reservation belongs to a server the hub "
        "runs, and between re-applications of the course roles.",
    ).tag(env="CLASSHUB_RECONCILE_INTERVAL")
    reconcile_grace = Float(
        120.0, config=True,
        help="Age in seconds below which a reservation without a server is left alone: its "
        "spawn may still be registering.",
    ).tag(env="CLASSHUB_RECONCILE_GRACE")
    share_interval = Float(
        5.0, config=True,
        help="Seconds between checks for expired shares (broadcasts, links); expired shares are "
        "also ended when the service starts.",
    ).tag(env="CLASSHUB_SHARE_INTERVAL")

    grafana_url = Unicode(
        "", config=True,
        help="A Grafana dashboard of this cluster (e.g. the one in helm-values/), linked from the "
        "Cluster page; empty: no link.",
    )

    @validate("reconcile_interval", "reconcile_grace", "share_interval")
    def _positive(self, proposal: Any) -> float:
        if not proposal.value > 0:
            raise TraitError(f"{proposal.trait.name} must be a number of seconds > 0")
        return proposal.value

    #: The configurables whose sections the hub hands this process (``configure()``).
    classes = [ClasshubTemplates, jobs.ClasshubJobs, ClasshubAssignments, ClasshubCourseData,
               ClasshubPrometheus]

    def initialize(self, argv: list[str] | None = None) -> None:
        """The hub's sections, then the config file, then the command line (which wins); refuse
        what cannot work with a sentence naming the setting (docs/configuration.md, "Configuration: one
        channel, traits")."""
        super().initialize(argv)
        handed = handed_config()
        check_sections(handed, [type(self), *self.classes])
        self.update_config(handed)
        self.update_config(self.cli_config)
        apply_env(self, {k: v for k, v in os.environ.items() if k == "CLASSHUB_SERVICE_CONFIG"})
        if self.config_file:
            try:
                self.load_config_file(self.config_file)
            except TraitError as e:
                raise ConfigError(f"{self.config_file}: {e}. Change that setting in the file.") from None
        check_sections(self.config, [type(self), *self.classes])
        apply_env(self)  # older CLASSHUB_* variables, where nothing above set the trait
        if not self.db_url:
            raise ConfigError("ClasshubService.db_url is not set: start the service through "
                              "configure(c) in jupyterhub_config.py, which sets it.")
        self.templates = ClasshubTemplates(parent=self)  # its settings, checked now
        self.job_settings = jobs.ClasshubJobs(parent=self)
        self.assignment_settings = ClasshubAssignments(parent=self)
        self.course_data = ClasshubCourseData(parent=self)

    def make_app(self) -> web.Application:
        hub_auth = HubOAuth(parent=self, cache_max_age=60)
        hub_api = HubAPI(hub_auth.api_url, hub_auth.api_token)
        sessions = store.connect(self.db_url)
        registry = metrics.registry_for(sessions)
        registry.register(jobs.JobCollector(sessions))
        registry.register(SubmissionCollector(sessions))
        course_data = getattr(self, "course_data", None) or ClasshubCourseData(parent=self)
        data_settings: dict[str, Any] = {"course_data": course_data}
        # the store reads each course's own limit (set by hub admins) through the sessions
        data_store = (coursedata.store_of({**data_settings, "sessions": sessions})
                      if course_data.root_dir else None)
        if data_store is not None:
            data_settings["course_data_store"] = data_store
        registry.register(metrics.CourseDataCollector(sessions, data_store.size if data_store else None))
        registry.register(CompetitionCollector(sessions))
        job_settings = getattr(self, "job_settings", None) or jobs.ClasshubJobs(parent=self)
        job_backend = (job_settings.local_backend() if self.mode == "local"
                       else job_settings.kubernetes_backend(home_of=hub_api.home_volume))
        job_service = jobs.JobService.make(sessions, job_backend, job_settings)
        assignment_settings = (getattr(self, "assignment_settings", None)
                               or ClasshubAssignments(parent=self))
        templates = getattr(self, "templates", None) or ClasshubTemplates(parent=self)
        grading = Grading(sessions, job_service, assignment_settings.storage)
        grading.templates = templates
        competition_runs = CompetitionRuns(
            sessions, job_service, lambda: storage_of({"classhub_assignments": assignment_settings}),
            lambda: (rules.Limits(max_bytes=assignment_settings.competition_max_bytes,
                            max_rows=assignment_settings.competition_max_rows),
                     assignment_settings.competition_notebook_max_bytes))
        registry.register(GradingCollector(sessions))
        routes = [(url_path_join(self.prefix, path), handler) for path, handler in ROUTES]
        routes += [
            (url_path_join(self.prefix, "oauth_callback"), OAuthCallbackHandler),
            (url_path_join(self.prefix, pages.STATIC_ROUTE[0]), pages.STATIC_ROUTE[1]),
            (url_path_join(self.prefix, "api", ".*"), handlers.NotFoundHandler),
            (url_path_join(self.prefix, pages.NOT_FOUND_ROUTE[0]), pages.NOT_FOUND_ROUTE[1]),
        ]
        app = web.Application(
            routes,
            hub_auth=hub_auth,
            hub_api=hub_api,
            sessions=sessions,
            courses=Courses(sessions, hub_api, ta_server_access=self.ta_server_access),
            shares=sharing.Shares(sessions, hub_api, url_path_join(self.prefix, "")),
            culling=culling.CullingSettings(sessions),
            metrics_registry=registry,
            jobs=job_service,
            authenticate_metrics=self.authenticate_metrics,
            mode=self.mode,
            grafana_url=self.grafana_url,
            prometheus=ClasshubPrometheus(parent=self),
            classhub_templates=templates,
            classhub_assignments=assignment_settings,
            grading=grading,
            competition_runs=competition_runs,
            **data_settings,
            prefix=self.prefix,
            cookie_secret=os.urandom(32),
            xsrf_cookies=False,
            # a path outside the prefix (e.g. the prefix without its "/") gets the 404 page too,
            # with the security headers, rather than tornado's bare one
            default_handler_class=pages.NOT_FOUND_ROUTE[1],
        )
        # the one look at the cluster: the Cluster page and the quota pickers share it
        cluster.source(app.settings)
        return app

    async def serve(self, app: web.Application | None = None) -> None:
        url = urlparse(self.service_url)
        app = app or self.make_app()
        await self._reconcile(app.settings["courses"])
        share_task = asyncio.create_task(self._shares(app.settings["shares"]))
        ledger_task = asyncio.create_task(reconcile.reconcile_forever(
            app.settings["hub_api"], store.Ledger(app.settings["sessions"]),
            self.reconcile_interval, self.reconcile_grace,
        ))
        roles_task = asyncio.create_task(self._roles(app.settings["courses"]))
        jobs_task = (asyncio.create_task(app.settings["jobs"].loop.run_forever())
                     if app.settings["jobs"] else None)
        grading_task = (asyncio.create_task(app.settings["grading"].run_forever())
                        if app.settings.get("grading") else None)
        runs_task = (asyncio.create_task(app.settings["competition_runs"].run_forever())
                     if app.settings.get("competition_runs") else None)
        server = app.listen(self.port or url.port or 10101, self.bind_ip or url.hostname)
        self.log.info("classhub service %s listening on %s", __version__, self.service_url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        ledger_task.cancel()
        share_task.cancel()
        roles_task.cancel()
        if jobs_task is not None:
            jobs_task.cancel()
        if grading_task is not None:
            grading_task.cancel()
        if runs_task is not None:
            runs_task.cancel()
        server.stop()

    async def _reconcile(self, courses: Courses, attempts: int = 20) -> None:
        """Make the hub's course groups match the store before serving (docs/architecture.md, rule 4).

        The hub may still be starting when it starts its services, so this retries for a while;
        if the hub stays unreachable the service serves anyway and the groups are fixed by the
        next change of each course.
        """
        for attempt in range(attempts):
            try:
                await courses.reconcile()
                return
            except Exception as e:  # the hub not answering yet, or refusing: log and retry
                self.log.warning("reconciling course groups with the hub failed (%s); retrying", e)
                await asyncio.sleep(min(0.25 * 2**attempt, 2))
        self.log.error("course groups were not reconciled with the hub; serving anyway")

    async def _roles(self, courses: Courses) -> None:
        """Re-apply the course roles every `reconcile_interval`: someone made a hub admin since
        the last membership change leaves every course role at the latest here (docs/admins/security.md,
        "Security model", rule 1), and a push that failed is retried."""
        while True:
            await asyncio.sleep(self.reconcile_interval)
            try:
                await courses.push_roles()
            except Exception as e:  # the hub restarting: the next round retries
                self.log.warning("applying course roles in the hub failed (%s); retrying", e)

    async def _shares(self, shares: sharing.Shares) -> None:
        """Make the hub's shares match the records, then end shares when their time is up."""
        try:
            await shares.reconcile_all()
        except Exception as e:  # the hub not answering yet: the expiry loop retries
            self.log.warning("reconciling shares with the hub failed (%s)", e)
        await sharing.expire_forever(shares, self.share_interval)

    def start(self) -> None:
        # the app is made before the loop runs: its schema check, the job backend's imports and
        # GPU discovery (a command) would be the loop's first, slow callback (docs/architecture.md,
        # rule 7)
        app = self.make_app()
        asyncio.run(self.serve(app))


def main(argv: list[str] | None = None) -> None:
    app = ClasshubService.instance()
    try:
        app.initialize(argv)
    except ConfigError as e:
        sys.exit(f"classhub service: {e}")
    route_module_logs(app)
    try:
        app.start()
    except store.SchemaError as e:  # a schema behind: one line naming `classhub upgrade-db`
        sys.exit(f"classhub service: {e}")
