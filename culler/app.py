"""The classhub idle culler: a hub-managed service (``python -m culler``) wired by configure().

One cycle, with as few hub requests as the job allows:
1. one paginated ``GET /hub/api/users?state=active`` (every user with a running server, with its
   ``last_activity``, ``started`` and, with ``admin:server_state``, the spawner state);
2. the store (one read): quota reservations (which devices a server holds and for which course),
   persistent marks, course policies, no-cull windows, pending warnings, capacity shortfalls;
3. optionally one Prometheus query (GPU utilisation per pod, Kubernetes with a DCGM exporter);
4. `decide` on those facts; of the servers it would warn, cull or reclaim, those whose hub
   ``last_activity`` cannot settle the question (see ``ask_servers``) are asked for their own
   activity report (busy kernels, GPU use; hub_ext.singleuser.activity) through the proxy's
   routing table (one ``GET /hub/api/proxy``), and decided again with the answers. Each ask costs
   the server one hub token check, which is why the hub's own activity (kept fresh by classhub's
   server extension while kernels or GPUs are busy) is trusted where it is precise enough;
5. culls are ``DELETE /hub/api/users/<u>/server[s/<name>]``, each written to the audit log
   (action ``server_culled``) with its reason; warnings are stored for the hub page and the API.

Configuration: traits of `ClasshubCuller`, set as ``c.ClasshubCuller.<name>`` in
``jupyterhub_config.py`` (z2jh: ``hub.config.ClasshubCuller``); ``configure()`` hands the section to
this process (hub_ext.envtraits), which refuses a value it cannot take with a sentence at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import Bool, Dict, Enum, Float, Int, Unicode, default, validate
from traitlets.config import Application

from culler import facts as F
from hub_ext import __version__, store
from hub_ext.backends.gpu_use import ClasshubPrometheus
from hub_ext.core.culling import (
    CULL,
    DEFAULT_POLICY,
    RECLAIM_FOR_PRESSURE,
    TOO_OLD,
    WARN,
    CullPolicy,
    Decision,
    ServerFacts,
    Window,
    decide,
)
from hub_ext.envtraits import ConfigError, check_sections, handed_config
from hub_ext.hubapi import HubAPI, HubAPIError
from hub_ext.logs import route_module_logs
from hub_ext.store import culler_models as cm

ACTION = cm.CULLED_ACTION
ACTOR = "classhub-culler"
DEFAULT_TIMEOUTS = {"gpu": 1800.0, "mig": 3600.0, "shared": 3600.0, "cpu": 7200.0}


@dataclass
class CycleReport:
    """What one cycle did (logged; returned for tests and the benchmark)."""

    servers: int = 0
    asked: int = 0
    hub_requests: int = 0
    culled: list[Decision] = field(default_factory=list)
    warned: list[Decision] = field(default_factory=list)
    pressure: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class ClasshubCuller(Application):
    """Stops idle servers by classhub's policies (hub_ext.core.culling), warning users first."""

    name = "classhub-culler"
    version = __version__
    description = "classhub idle culler (a JupyterHub-managed service)"
    #: The configurables whose sections the hub hands this process (``configure()``).
    classes = [ClasshubPrometheus]

    interval = Float(
        300.0, config=True, help="Seconds between two cycles (the first runs at start).",
    )
    idle_timeouts = Dict(
        value_trait=Float(),
        default_value=dict(DEFAULT_TIMEOUTS),
        config=True,
        help="Seconds a server may stay idle, per profile kind: gpu (whole GPUs), mig (MIG slices), "
        "shared (time-sliced/MPS shares), cpu (no device). Missing kinds keep the defaults "
        "(gpu 30 min, mig 1 h, shared 1 h, cpu 2 h). Courses override them through the API.",
    )
    max_age = Float(
        0.0, config=True, help="Seconds a server may run at all, busy or not once quiet; 0: no limit.",
    )
    warn_before = Float(
        300.0, config=True,
        help="Seconds between the warning a user sees (hub page, /api/culling/me) and the cull; "
        "0: cull without warning.",
    )
    reclaim_after = Float(
        300.0, config=True,
        help="Under capacity pressure (a spawn refused for lack of a device), servers holding that "
        "device and idle at least this many seconds may be culled, longest idle first.",
    )
    pressure_check_interval = Float(
        10.0, config=True,
        help="Seconds between checks for refused spawns (shortfalls) between cycles; one found "
        "starts a cycle at once, so a waiting user gets a device within about this time. 0: only "
        "at the regular cycles.",
    )
    shortfall_ttl = Float(
        900.0, config=True,
        help="Seconds a refused spawn keeps asking for reclaim; older shortfalls are dropped.",
    )
    gpu_busy_utilization = Float(
        5.0, config=True, help="GPU utilisation (percent) at or above which a server's GPU is busy.",
    )
    ask_servers = Enum(
        ["auto", "candidates", "never"], "auto", config=True,
        help="Which servers are asked for their activity report (busy kernels, GPU use; one hub "
        "token check each) before they are warned or culled. 'candidates': all of them. 'never': "
        "none; trust the hub's last_activity, which classhub's server extension keeps fresh while "
        "a kernel or the GPU is busy (at most `activity_lag` late). 'auto' (default): only where "
        "the hub's last_activity cannot tell: an idle timeout shorter than `activity_lag`, a "
        "server over its maximum age (busy or just used?) and pressure reclaims.",
    )
    activity_lag = Float(
        330.0, config=True,
        help="How late the hub's last_activity may be for a server that runs classhub's extension: "
        "JupyterHub's activity interval (JUPYTERHUB_ACTIVITY_INTERVAL, 300 s, +10% jitter) plus "
        "the extension's busy check (ClasshubActivity.busy_check_interval, 30 s). Used by "
        "ask_servers='auto'.",
    )
    server_timeout = Float(5.0, config=True, help="Seconds to wait for a server's activity report.")
    concurrency = Int(20, config=True, help="Servers asked, or stopped, at the same time.")
    page_size = Int(200, config=True, help="Users per page of the hub's user list.")
    db_url = Unicode(config=True, help="The classhub store; configure(c, db_url=...) sets it.")
    hub_api_url = Unicode(config=True, help="The hub's API URL (default: $JUPYTERHUB_API_URL).")
    api_token = Unicode(config=True, help="The culler's hub token (default: $JUPYTERHUB_API_TOKEN).")
    dry_run = Bool(False, config=True, help="Decide and log, but stop nothing and warn nobody.")
    clock_file = Unicode(
        "", config=True,
        help="A file holding a number of seconds the culler's clock runs ahead of the wall clock, "
        "read at every cycle (missing, empty or not a number: 0). For drills and tests: moving "
        "the culler's time forward shows what it does after an hour of idleness without waiting "
        "an hour. Everything the culler decides and stores (warnings, cull times, shortfall ages) "
        "is in its shifted time; the hub's activity times stay real, so a server idle since the "
        "shift is idle for the offset plus the real seconds since. Each cycle's log line names "
        "the offset it decided with ('cycle (clock +600s): ...').",
    )

    @default("db_url")
    def _db_url(self) -> str:
        url = os.environ.get("CLASSHUB_DB_URL")  # older hubs passed the store this way
        if not url:
            raise ConfigError("ClasshubCuller.db_url is not set: start the culler through "
                              "configure(c) in jupyterhub_config.py, which sets it.")
        return url

    @default("hub_api_url")
    def _hub_api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")

    @default("api_token")
    def _api_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @validate("idle_timeouts")
    def _check_timeouts(self, proposal: Any) -> dict[str, float]:
        value = dict(proposal["value"])
        unknown = set(value) - set(F.KINDS)
        if unknown:
            raise ValueError(f"idle_timeouts: unknown kinds {sorted(unknown)}; use {', '.join(F.KINDS)}")
        return {**DEFAULT_TIMEOUTS, **value}

    # ---- setup -------------------------------------------------------------------------------

    def initialize(self, argv: list[str] | None = None) -> None:
        super().initialize(argv)
        handed = handed_config()  # the hub's c.ClasshubCuller, from configure()
        check_sections(handed, [type(self), *self.classes])
        self.update_config(handed)
        self.update_config(self.cli_config)  # the command line wins
        check_sections(self.config, [type(self), *self.classes])
        self.sessions = store.connect(self.db_url)
        self.ledger = store.Ledger(self.sessions)
        self.client = AsyncHTTPClient()  # servers' activity reports
        self.prometheus = ClasshubPrometheus(parent=self)  # GPU use per pod (Kubernetes)
        self.api = HubAPI(self.hub_api_url, self.api_token)

    def site_policies(self) -> dict[str, CullPolicy]:
        return {
            kind: CullPolicy(
                idle_timeout=self.idle_timeouts[kind],
                max_age=self.max_age or None,
                pressure_min_idle=self.reclaim_after,
                gpu_busy_utilization=self.gpu_busy_utilization,
                warn_before=self.warn_before,
            )
            for kind in F.KINDS
        }

    # ---- HTTP --------------------------------------------------------------------------------

    async def hub(self, method: str, path: str) -> Any:
        return await self.api.request(method, path)

    async def users(self) -> list[dict[str, Any]]:
        """Every user with an active server (every page of the hub's list)."""
        return [u async for items in self.api.pages("users?state=active", self.page_size) for u in items]

    async def routes(self, wanted: set[str]) -> dict[str, str]:
        """Proxy targets (how to reach a server directly) of the route specs ``wanted``.

        The hub's ``GET /proxy`` is paginated (at most 200 routes a page) in route order, so the
        pages are read in order until every wanted route was seen or passed.
        """
        found: dict[str, str] = {}
        if not wanted:
            return found
        async for table in self.api.pages("proxy"):
            for spec, route in (table or {}).items():
                if spec in wanted:
                    found[spec] = (route or {}).get("target", "")
            last = max(table or {}, default="")
            if set(found) >= wanted or all(w <= last for w in wanted - set(found)):
                break
        return found

    async def ask(self, target: str, url: str) -> dict[str, Any] | None:
        """The server's activity report; None when it does not answer (then hub facts decide)."""
        address = f"{target.rstrip('/')}{url.rstrip('/')}/api/classhub/activity"
        try:
            response = await self.client.fetch(HTTPRequest(
                address, headers={"Authorization": f"token {self.api_token}"},
                request_timeout=self.server_timeout, connect_timeout=self.server_timeout,
            ))
            return json.loads(response.body)
        except Exception as e:  # an old image without the extension, a stuck server
            self.log.info("no activity report from %s (%s)", address, e)
            return None

    async def gpu_by_pod(self) -> dict[str, float]:
        """GPU utilisation per pod name from Prometheus (c.ClasshubPrometheus; empty when not
        configured or failing: the GPU is then unknown and other signals decide)."""
        found = await self.prometheus.gpu_by_pod()
        if found is None:
            self.log.warning("Prometheus at %s did not answer; GPU utilisation unknown this cycle",
                             self.prometheus.url)
            return {}
        return {pod: float(value) for pod, value in found.items()}

    async def stop(self, user: str, server_name: str) -> bool:
        path = f"users/{quote(user, safe='')}/server"
        if server_name:
            path = f"users/{quote(user, safe='')}/servers/{quote(server_name, safe='')}"
        try:
            await self.hub("DELETE", path)
            return True
        except HubAPIError as e:
            if e.status == 404:  # already gone
                return True
            self.log.error("could not stop %s/%s: %s", user, server_name, e)
            return False

    # ---- one cycle ---------------------------------------------------------------------------

    def read_store(self, now: datetime) -> dict[str, Any]:
        # What each server holds, keyed as `cycle` looks it up (store.Ledger.server_key).
        reservations = {h.key: (h.resources, h.course) for h in self.ledger.holdings()}
        with self.sessions() as session:
            return {
                "reservations": reservations,
                "persistent": cm.persistent_keys(session),
                "policies": F.policies(self.site_policies(), cm.course_policies(session)),
                "windows": [Window(w.course, w.starts_at, w.ends_at, w.note)
                            for w in cm.windows(session, now)],
                "warnings": {(w.username, w.server_name): w for w in cm.warnings_of(session)},
                "pressure": cm.open_shortfalls(session, now - timedelta(seconds=self.shortfall_ttl)),
            }

    async def cycle(self) -> CycleReport:
        started = time.monotonic()
        before = self.api.sent
        now = self.now()
        report = CycleReport()
        users = await self.users()
        servers = F.running_servers(users)
        report.servers = len(servers)
        known = await asyncio.to_thread(self.read_store, now)  # docs/architecture.md, rule 7
        report.pressure = dict(known["pressure"])
        util = await self.gpu_by_pod() if servers else {}
        facts: dict[tuple[str, str], ServerFacts] = {}
        urls: dict[tuple[str, str], str] = {}
        for user, name, server in servers:
            key = (user["name"], name)
            warning = known["warnings"].get(key)
            if warning is not None and warning.warned_at < F.parse_time(server["started"]):
                warning = None  # a warning of an earlier run of this server
            state = server.get("state")
            pod = state.get("pod_name") if isinstance(state, dict) else None
            facts[key] = F.server_facts(
                user, name, server,
                reservation=known["reservations"].get(store.Ledger.server_key(user["name"], name)),
                persistent=key in known["persistent"],
                warned_at=warning.warned_at if warning else None,
                gpu_utilization=util.get(pod) if pod else None,
            )
            urls[key] = server.get("url") or ""

        def run() -> list[Decision]:
            return decide(facts.values(), known["policies"], now, known["pressure"], known["windows"])

        decisions = run()
        asked: set[tuple[str, str]] = set()
        targets: dict[str, str] = {}
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(key: tuple[str, str]) -> tuple[tuple[str, str], dict | None]:
            target = targets.get(urls[key])
            if not target:
                return key, None
            async with semaphore:
                return key, await self.ask(target, urls[key])

        while self.ask_servers != "never":
            todo = [(d.user, d.server_name) for d in decisions
                    if d.action in (CULL, WARN) and (d.user, d.server_name) not in asked
                    and self.needs_asking(d, facts[(d.user, d.server_name)], known["policies"], now)]
            if not todo:
                break
            targets.update(await self.routes({urls[k] for k in todo} - set(targets)))

            for key, answer in await asyncio.gather(*(one(k) for k in todo)):
                facts[key] = F.with_report(facts[key], answer)
            asked.update(todo)
            report.asked += len(todo)
            decisions = run()

        await self.act(decisions, facts, now, report)
        report.hub_requests = self.api.sent - before
        report.seconds = time.monotonic() - started
        self.log.info(
            "cycle%s: %d servers, %d asked, %d warned, %d culled, pressure %s, %d hub requests, %.2fs",
            f" (clock {self._decided_offset:+g}s)" if self._decided_offset else "",
            report.servers, report.asked, len(report.warned), len(report.culled), report.pressure or "none",
            report.hub_requests, report.seconds,
        )
        return report

    _decided_offset = 0.0  # the clock offset of the latest `now`

    def now(self) -> datetime:
        """The time a cycle decides at: the wall clock plus `clock_file`'s offset
        (bench/culler.py shifts it for both cullers alike)."""
        self._decided_offset = self.clock_offset()
        return datetime.now(timezone.utc) + timedelta(seconds=self._decided_offset)

    def clock_offset(self) -> float:
        """Seconds the culler's clock runs ahead (see `clock_file`)."""
        if not self.clock_file:
            return 0.0
        try:
            with open(self.clock_file) as f:
                return float(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    def needs_asking(self, d: Decision, f: ServerFacts, policies: Mapping, now: datetime) -> bool:
        """Whether the server must be asked before ``d`` is carried out (see ask_servers)."""
        if self.ask_servers == "candidates":
            return True
        policy = policies.get(d.policy_key) or DEFAULT_POLICY
        if d.reason in (TOO_OLD, RECLAIM_FOR_PRESSURE) or policy.idle_timeout < self.activity_lag:
            return True
        return policy.max_age is not None and (now - f.started_at).total_seconds() >= policy.max_age

    async def act(self, decisions: list[Decision], facts: Mapping[tuple[str, str], ServerFacts],
                  now: datetime, report: CycleReport) -> None:
        culls = [d for d in decisions if d.cull]
        warns = [d for d in decisions if d.action == WARN]
        for d in culls:
            self.log.info("culling %s/%s: %s", d.user, d.server_name, d.message)
        for d in warns:
            self.log.info("warning %s/%s: %s", d.user, d.server_name, d.message)
        if self.dry_run:
            report.culled, report.warned = culls, warns
            return
        semaphore = asyncio.Semaphore(self.concurrency)

        async def cull(d: Decision) -> tuple[Decision, bool]:
            async with semaphore:
                return d, await self.stop(d.user, d.server_name)

        stopped = [d for d, ok in await asyncio.gather(*(cull(d) for d in culls)) if ok]
        report.culled, report.warned = stopped, warns
        # a write may wait for sqlite's one writer (up to its busy timeout): never on the loop
        # (docs/architecture.md, rule 7)
        await asyncio.to_thread(self.record_cycle, culls, warns, stopped, facts, now, report)

    def record_cycle(self, culls: list[Decision], warns: list[Decision], stopped: list[Decision],
                     facts: Mapping[tuple[str, str], ServerFacts], now: datetime,
                     report: CycleReport) -> None:
        """Store a cycle's outcome in one transaction: warnings kept, added or dropped; each
        cull in the audit log; shortfalls closed."""
        with self.sessions.begin() as session:
            current = {(w.username, w.server_name): w for w in cm.warnings_of(session)}
            failed = {(d.user, d.server_name) for d in culls} - {(d.user, d.server_name) for d in stopped}
            # a cull the hub refused stays warned: the next cycle tries again without a new warning
            keep_warned = {(d.user, d.server_name) for d in warns} | failed
            for key, row in current.items():
                if key not in keep_warned:
                    session.delete(row)  # culled, used again, stopped, or now exempt
            for d in warns:
                row = current.get((d.user, d.server_name))
                if row is None:
                    session.add(cm.CullWarning(username=d.user, server_name=d.server_name, warned_at=now,
                                               cull_at=d.cull_at, message=d.message[:1000]))
                else:
                    row.cull_at, row.message = d.cull_at, d.message[:1000]
            for d in stopped:
                f = facts[(d.user, d.server_name)]
                gpus = sum(units for name, units in f.resources)
                store.record(
                    session, ACTOR, ACTION, now, user=d.user, server=d.server_name, reason=d.reason,
                    resource=d.resource or _main_resource(f), kind=f.profile, course=f.course,
                    resources=dict(f.resources), idle_seconds=round(d.idle_seconds, 1),
                    gpu_hours=round(gpus * d.idle_seconds / 3600, 6), message=d.message,
                )
            if report.pressure:
                cm.close_shortfalls(session, now)

    async def run_forever(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.log.info("classhub culler %s: every %ss, timeouts %s, warn %ss",
                      __version__, self.interval, self.idle_timeouts, self.warn_before)
        while not stop.is_set():
            try:
                await self.cycle()
            except Exception:  # the hub restarting, the database busy: try again next cycle
                self.log.exception("culler cycle failed")
            await self.wait_for_next(stop)

    async def wait_for_next(self, stop: asyncio.Event) -> None:
        """Sleep until the next cycle: ``interval`` seconds, or earlier when a spawn was refused
        for lack of capacity (an open shortfall in the store)."""
        deadline = time.monotonic() + self.interval
        step = self.pressure_check_interval or self.interval
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=min(step, left))
            if self.pressure_check_interval and not stop.is_set():
                try:
                    if await asyncio.to_thread(self.pressure_now):
                        return
                except Exception:  # a database hiccup: the regular cycle still comes
                    self.log.exception("checking for shortfalls failed")

    def pressure_now(self) -> dict[str, int]:
        since = self.now() - timedelta(seconds=self.shortfall_ttl)
        with self.sessions() as session:
            return cm.open_shortfalls(session, since)

    def start(self) -> None:
        asyncio.run(self.run_forever())


def _main_resource(f: ServerFacts) -> str:
    """The resource label of a cull: the first device it held, or "cpu"."""
    return f.resources[0][0] if f.resources else "cpu"


def main(argv: list[str] | None = None) -> None:
    app = ClasshubCuller.instance()
    try:
        app.initialize(argv)
    except (store.SchemaError, ConfigError) as e:  # a schema behind: one line naming `classhub upgrade-db`
        sys.exit(f"classhub culler: {e}")
    route_module_logs(app)
    app.start()
