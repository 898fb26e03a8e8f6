"""One cull cycle over a hub with 2,000 users: classhub's culler vs jupyterhub-idle-culler 2.x.

Why: the culler runs against the hub every few minutes; its cost is hub API requests (each one
holds the hub's single process) and the time a cycle takes. Both cullers run here, in one process,
against the same real JupyterHub process, in alternating rounds, with the same idle timeout
(30 min), the same token and the same servers.

How the hub is made cheap and still honest:
- 2,000 users, each with a running default server: a no-op spawner whose servers are one shared
  stand-in HTTP server (`StandIn`) that answers the hub's readiness check and classhub's
  activity endpoint. Like jupyterhub-singleuser, the stand-in checks each caller's token with the
  hub once per server (HubAuth's cache), so asking a server costs the hub what a real one would.
- The proxy is an in-memory JupyterHub Proxy (no configurable-http-proxy): neither culler uses it
  except classhub's one ``GET /hub/api/proxy`` when it asks servers.
- Every hub API request either culler (or a server it asks) makes goes through a counting proxy
  (`Counter`); the count of a round is what the hub served for it.
- Idle and active servers: the hub only accepts activity up to 59 min in the future and never
  older than a server's start, so both cullers decide at a clock 58 min ahead (classhub:
  `ClasshubCuller.now`; idle-culler: its module's ``utcnow``). Servers whose activity is posted
  as "57 min from now" are active (1 min idle at the shifted clock); the others (``--idle``,
  default 5 %) have been idle since they started, 58 min, and are culled by both. Culled servers
  are started again between rounds, so each round sees the same hub.
- classhub's culler runs with its defaults except ``warn_before = 0`` (idle-culler has no
  warning; a warned cull is the same requests spread over two cycles) and the 30 min timeout for
  every profile kind. Its default ``ask_servers = "auto"`` asks no server here: with a 30 min
  timeout the hub's last_activity (kept fresh by classhub's server extension while kernels are
  busy) settles every case. ``ask_servers = "candidates"`` (every culled server asked first) is
  measured too and printed, not in the ratio.

    .venv/bin/python bench/culler.py [--users 2000] [--idle 0.05] [--rounds 2]

The last line prints the ratios classhub / idle-culler of hub API requests and of wall time per
cycle (medians over the rounds); target <= 1.0 for both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter as Tally
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jupyterhub  # noqa: E402
import jupyterhub_idle_culler  # noqa: E402
from tornado import web  # noqa: E402
from tornado.httpclient import AsyncHTTPClient, HTTPRequest  # noqa: E402
from traitlets.config import Config  # noqa: E402

from culler.app import ClasshubCuller  # noqa: E402
from hub_ext import store  # noqa: E402
from hub_ext.ports import free_port  # noqa: E402

SHIFT = timedelta(minutes=58)
TIMEOUT = 1800.0
SCOPES = ["list:users", "read:users", "read:users:activity", "read:servers", "delete:servers",
          "admin:server_state", "access:servers", "proxy", "admin:users", "servers", "users:activity"]

HUB_CONFIG = """
from jupyterhub.proxy import Proxy
from jupyterhub.spawner import Spawner


class MemoryProxy(Proxy):
    \"\"\"Routes in memory: the bench reaches the hub directly, never through a proxy.\"\"\"
    should_start = False
    _routes = {{}}

    async def add_route(self, routespec, target, data):
        self._routes[routespec] = {{"routespec": routespec, "target": target, "data": data}}

    async def delete_route(self, routespec):
        self._routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self._routes)


class StandInSpawner(Spawner):
    \"\"\"A server is the shared stand-in: starting and stopping cost the hub nothing else.\"\"\"
    running = False

    async def start(self):
        self.running = True
        return ("127.0.0.1", {standin_port})

    async def poll(self):
        return None if self.running else 0

    async def stop(self, now=False):
        self.running = False


c.JupyterHub.spawner_class = StandInSpawner
c.JupyterHub.proxy_class = MemoryProxy
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {public_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///{data}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{data}/cookie_secret"
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.last_activity_interval = 3600
c.JupyterHub.cleanup_servers = True
c.JupyterHub.log_level = "WARN"
c.JupyterHub.services = [{{"name": "bench", "api_token": "{token}"}}]
c.JupyterHub.load_roles = [{{"name": "bench", "scopes": {scopes!r}, "services": ["bench"]}}]
"""


class Counter:
    """A reverse proxy in front of the hub's API that counts what it forwards."""

    def __init__(self, hub: str) -> None:
        self.hub = hub
        self.tally: Tally[str] = Tally()
        outer = self

        class Forward(web.RequestHandler):
            SUPPORTED_METHODS = ("GET", "POST", "DELETE", "PATCH", "PUT")

            async def _any(self) -> None:
                path = self.request.path.split("/")
                outer.tally[f"{self.request.method} /{'/'.join(path[1:4])}"] += 1
                headers = {k: v for k, v in self.request.headers.items()
                           if k.lower() not in ("host", "content-length", "transfer-encoding")}
                response = await AsyncHTTPClient().fetch(HTTPRequest(
                    outer.hub + self.request.uri, method=self.request.method, headers=headers,
                    body=self.request.body if self.request.method in ("POST", "PATCH", "PUT") else None,
                    allow_nonstandard_methods=True, request_timeout=120,
                ), raise_error=False)
                self.set_status(response.code)
                for k in ("Content-Type",):
                    if k in response.headers:
                        self.set_header(k, response.headers[k])
                self.finish(None if response.code in (204, 304) else response.body or b"")

            get = post = delete = patch = put = _any

        self.port = free_port()
        web.Application([(r".*", Forward)]).listen(self.port, "127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"

    def total(self) -> int:
        return sum(self.tally.values())


class StandIn:
    """Every user's server: 200 for the hub's readiness check; classhub's activity endpoint with
    jupyterhub-singleuser's cost (one hub token check per server and token, then cached)."""

    def __init__(self, counter: Counter) -> None:
        self.checked: set[tuple[str, str]] = set()
        outer = self

        class Server(web.RequestHandler):
            async def get(self, user: str, rest: str) -> None:
                self.set_header("X-JupyterHub-Version", jupyterhub.__version__)  # as singleuser does
                if rest.rstrip("/") != "api/classhub/activity":
                    self.finish("ok")
                    return
                token = self.request.headers.get("Authorization", "")
                if (user, token) not in outer.checked:
                    r = await AsyncHTTPClient().fetch(HTTPRequest(
                        f"{counter.url}/hub/api/user", headers={"Authorization": token}), raise_error=False)
                    if r.code != 200:
                        raise web.HTTPError(403)
                    outer.checked.add((user, token))
                self.finish({"kernels": {"total": 0, "busy": 0}, "busy": False,
                             "last_kernel_activity": None, "gpu": {"status": "unknown"}})

        self.port = free_port()
        web.Application([(r"/user/([^/]+)/?(.*)", Server)]).listen(self.port, "127.0.0.1")

    def restarted(self, users: list[str]) -> None:
        """A restarted server forgets the tokens it had checked."""
        self.checked = {(u, t) for u, t in self.checked if u not in set(users)}


class ShiftedCuller(ClasshubCuller):
    def now(self) -> datetime:
        return datetime.now(timezone.utc) + SHIFT


async def call(method: str, url: str, token: str, body: Any = None) -> Any:
    r = await AsyncHTTPClient().fetch(HTTPRequest(
        url, method=method, headers={"Authorization": f"token {token}",
                                     "Accept": "application/jupyterhub-pagination+json"},
        body=None if body is None else json.dumps(body), allow_nonstandard_methods=True,
        request_timeout=300), raise_error=False)
    if r.code >= 400:
        raise RuntimeError(f"{method} {url}: {r.code} {r.body[:300]!r}")
    return json.loads(r.body) if r.body else None


async def gather_limited(coros, limit: int = 48) -> list:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro):
        async with semaphore:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def running(api: str, token: str) -> set[str]:
    out: set[str] = set()
    offset = 0
    while True:
        page = await call("GET", f"{api}/users?state=ready&offset={offset}&limit=200", token)
        out.update(u["name"] for u in page["items"])
        if not page["_pagination"].get("next"):
            return out
        offset = page["_pagination"]["next"]["offset"]


async def start_servers(api: str, token: str, users: list[str]) -> None:
    await gather_limited(call("POST", f"{api}/users/{u}/server", token, {}) for u in users)


async def main_async(args: argparse.Namespace) -> None:
    # The cullers, the counting proxy and the stand-in share this process's client: room for all.
    AsyncHTTPClient.configure(None, max_clients=1000)
    data = Path(tempfile.mkdtemp(prefix="classhub-bench-culler-"))
    token = secrets.token_hex(16)
    hub_port = free_port()
    direct = f"http://127.0.0.1:{hub_port}"
    counter = Counter(direct)
    standin = StandIn(counter)
    (data / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
        standin_port=standin.port, public_port=free_port(), hub_port=hub_port, data=data, token=token,
        scopes=SCOPES))
    log = open(data / "hub.log", "wb")  # noqa: SIM115 - the hub writes to it until the end
    hub = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(data / "jupyterhub_config.py")],
                           cwd=data, stdout=log, stderr=subprocess.STDOUT)
    api = f"{direct}/hub/api"
    try:
        for _ in range(300):
            if hub.poll() is not None:
                raise SystemExit(f"the hub exited: {(data / 'hub.log').read_text()[-2000:]}")
            try:
                await call("GET", f"{api}/", token)
                break
            except Exception:
                await asyncio.sleep(0.2)
        names = [f"u{i:05d}" for i in range(args.users)]
        t = time.monotonic()
        for i in range(0, len(names), 500):
            await call("POST", f"{api}/users", token, {"usernames": names[i:i + 500]})
        await start_servers(api, token, names)
        print(f"users and servers started in {time.monotonic() - t:.0f}s", flush=True)
        n_idle = round(args.users * args.idle)
        idle = names[:: max(1, args.users // max(1, n_idle))][:n_idle]
        active = sorted(set(names) - set(idle))
        future = (datetime.now(timezone.utc) + timedelta(minutes=57)).isoformat()
        await gather_limited(call("POST", f"{api}/users/{u}/activity", token,
                                  {"last_activity": future, "servers": {"": {"last_activity": future}}})
                             for u in active)
        print(f"hub with {args.users} users and running servers ({len(idle)} idle) in "
              f"{time.monotonic() - t:.0f}s", flush=True)

        sessions = store.connect(f"sqlite:///{data / 'classhub.sqlite'}")
        del sessions

        def ours(ask: str) -> ClasshubCuller:
            config = Config({"ClasshubCuller": {
                "db_url": f"sqlite:///{data / 'classhub.sqlite'}", "hub_api_url": f"{counter.url}/hub/api",
                "api_token": token, "warn_before": 0.0, "ask_servers": ask,
                "idle_timeouts": dict.fromkeys(("gpu", "mig", "shared", "cpu"), TIMEOUT),
            }})
            app = ShiftedCuller(config=config)
            app.initialize([])
            app.log.setLevel(logging.WARNING)
            return app

        # A long-running service: built and connected to its store once, before any round.
        cullers = {ask: ours(ask) for ask in ("auto", "candidates")}

        async def classhub(ask: str) -> int:
            report = await cullers[ask].cycle()
            if report.asked != (len(idle) if ask == "candidates" else 0):
                raise SystemExit(f"classhub ({ask}) asked {report.asked} servers")
            return len(report.culled)

        async def baseline() -> int:
            before = await running(api, token)
            await jupyterhub_idle_culler.cull_idle(
                url=f"{counter.url}/hub/api", api_token=token, inactive_limit=int(TIMEOUT),
                logger=logging.getLogger("idle-culler"), concurrency=10,
            )
            return len(before - await running(api, token))

        jupyterhub_idle_culler.utcnow = lambda: datetime.now(timezone.utc) + SHIFT
        logging.getLogger("idle-culler").setLevel(logging.WARNING)
        runs: dict[str, list[tuple[int, float]]] = {"classhub": [], "idle-culler": [], "classhub-ask": []}
        plan = []
        for r in range(args.rounds):
            pair = [("classhub", lambda: classhub("auto")), ("idle-culler", baseline)]
            plan += pair if r % 2 == 0 else pair[::-1]
        plan.append(("classhub-ask", lambda: classhub("candidates")))
        for name, run in plan:
            assert await running(api, token) == set(names), "not every server runs before a round"
            counter.tally.clear()
            t = time.monotonic()
            culled = await run()
            seconds = time.monotonic() - t
            requests_ = counter.total()
            runs[name].append((requests_, seconds))
            print(f"{name:13s} culled {culled:4d} of {args.users}: {requests_:5d} hub API requests, "
                  f"{seconds:6.2f}s  {dict(counter.tally)}", flush=True)
            if culled != len(idle):
                raise SystemExit(f"{name} culled {culled}, expected {len(idle)}")
            gone = sorted(set(names) - await running(api, token))
            for _ in range(100):  # a stop may still be pending
                if not gone:
                    break
                try:
                    await start_servers(api, token, gone)
                except RuntimeError:
                    await asyncio.sleep(0.2)
                gone = sorted(set(names) - await running(api, token))
            standin.restarted(list(idle))

        def med(name: str, i: int) -> float:
            return statistics.median(x[i] for x in runs[name])

        req_ratio = med("classhub", 0) / med("idle-culler", 0)
        time_ratio = med("classhub", 1) / med("idle-culler", 1)
        ask_ratio = med("classhub-ask", 0) / med("idle-culler", 0)
        print(f"classhub with ask_servers='candidates': {ask_ratio:.3f} x idle-culler's requests "
              "(one hub token check per asked server)")
        print(f"culler cycle, {args.users} users, {len(idle)} culled: hub API requests ratio "
              f"{req_ratio:.3f}, wall time ratio {time_ratio:.3f} (classhub / jupyterhub-idle-culler "
              f"{jupyterhub_idle_culler.__version__}; target <= 1.0)")
    finally:
        hub.terminate()
        try:
            hub.wait(30)
        except subprocess.TimeoutExpired:
            hub.kill()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--idle", type=float, default=0.05, help="share of servers idle past the timeout")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each culler (alternating)")
    args = parser.parse_args()
    os.environ.pop("CLASSHUB_CULLER_CONFIG", None)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
