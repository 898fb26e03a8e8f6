"""A 300-student class at 9:00: everybody logs in and starts a server within a minute.

Why: the hardest minute of a teaching hub is the start of a lecture. This runs that minute twice
in one run, against one fake cluster (tests/kubefake in its own process, stand-in containers:
every pod is a tiny HTTP server inside the fake cluster's process that answers the hub's
readiness check, so 300 servers cost no processes):

- ``classhub``: a real ``jupyterhub`` process configured with ``configure(c, mode="kubernetes")``
  (ClasshubKubeSpawner, the classhub service, the culler), one course holding every student
  with a quota large enough never to refuse, and a CPU profile offered to that course, so every
  start goes through the profile check, the capacity snapshot and a ledger reservation;
- ``stock``: the same hub with stock KubeSpawner and no classhub at all.

Both hubs have the same proxy (configurable-http-proxy), authenticator (dummy, a shared
password), database, pod resources and home volumes (a PVC per user), and the same hub group
holding every student (classhub's course is a hub group; a stock teaching hub has one too, and
JupyterHub loads a user's groups, their roles and shares with every user it reads). Each run starts from an
empty namespace (pods, PVCs and events of the previous run are deleted first).

The storm: ``--users`` students arrive at random instants within ``--window`` seconds (the same
instants in both runs, ``--seed``). Each student logs in through the hub's login form (measured),
asks for their server like the spawn page does (``POST /hub/api/users/<name>/server`` with the
login cookie) and, while the hub answers 202 (pending), follows the spawn page's progress stream
until it says ready. The ready time is from the start request to the hub reporting the server
ready (the 201 answer, or the progress stream's ready event). A 429 (the hub's
concurrent_spawn_limit) is retried after its Retry-After, as the spawn page does, and counted.
Meanwhile a sampler sends ``GET /hub/api/users/<random student>`` with an admin service token at a
fixed rate (``--sample-rate``, open loop: a slow hub does not slow the sampler) until every
start has ended: the hub API latency during the storm.

Then, in the classhub run only, ``--readers`` students read ``GET /services/classhub/api/me`` and
``GET /services/classhub/api/usage/me`` with their own tokens through the proxy, closed loop (each
reader sends its next request when the last one is answered), for ``--read-seconds``, while every
server still runs (the ledger holds every reservation). By default after the storm, so that the
storm is the same load for both hubs; ``--readers-during-storm`` runs them during the storm
instead (and then they also load the hub: ``/api/me`` asks the hub for the user each time).

CPU: the seconds each process used during the storm (the hub, its proxy and services, the fake
cluster, PostgreSQL, this client) and what anything else on the machine used. The latencies of
the two runs compare only when that last number is near 0 in both; the hub's CPU ratio, also
printed, depends much less on other load. The stock run goes first (``--order``).

Errors: failed starts (a refusal, a failed progress event, no ready server within the start
timeout) and every 5xx answer of any request, in both runs. The benchmark prints; it never asserts
timing.

    .venv/bin/python bench/storm.py [--users 300] [--window 60] [--readers 20] [--db sqlite|postgresql]
                                    [--repeat 1] [--no-freeze]

``--no-freeze`` runs the classhub hub with ``configure(c, freeze_heap=False)``: Python's garbage
collection as in the stock hub, whose full collections then walk classhub's larger heap too.

The last line is ``storm ratio p95_ready=<x> hub_api_p95=<y> errors=<n>``: the ratios classhub /
stock of the ready-time p95 and of the hub API p95 (goals: <= 1.2 each), and the errors of both
runs together (goal: 0). A p95 of one storm moves by a factor of two from run to run, so
``--repeat N`` runs N rounds (each round after the first swaps which hub goes first), prints each
round's ratios, and the last line then holds the medians of the rounds' ratios and every round's
errors. Everything started is stopped at the end (hubs, proxies, services, the
fake cluster, PostgreSQL), also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import psutil  # noqa: E402

from tests.hubproc import free_port  # noqa: E402
from tests.kubehub import PROXY  # noqa: E402

COURSE = "storm101"
NAMESPACE = "default"
IMAGE = "quay.io/jupyter/base-notebook:2025-01-01"
#: One server's resources in both runs (classhub: the course's profile; stock: KubeSpawner's).
CPU_GUARANTEE, CPU_LIMIT = "100m", "1"
MEM_GUARANTEE, MEM_LIMIT = 256 * 2**20, 2**30
START_TIMEOUT = 180
HUB_START_TIMEOUT = 180
BENCH_SCOPES = ["admin:users", "admin:groups", "admin:servers", "read:servers", "list:users", "read:users",
                "tokens", "access:services"]

COMMON_CONFIG = """\
# Generated by bench/storm.py ({kind})
{variant}
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.hub_connect_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.db_url = {hub_db!r}
c.JupyterHub.cookie_secret_file = "{data}/jupyterhub_cookie_secret"
c.JupyterHub.cleanup_servers = True
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = "{data}/proxy.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"admin"}}

c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = {image!r}
# Never run: the fake kubelet answers on the pod's IP with a stand-in HTTP server.
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.start_timeout = {start_timeout}
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = "10Gi"
c.KubeSpawner.volumes = [{{"name": "home", "persistentVolumeClaim": {{"claimName": "{{pvc_name}}"}}}}]
c.KubeSpawner.volume_mounts = [{{"name": "home", "mountPath": "/home/jovyan"}}]
c.KubeSpawner.cpu_guarantee = {cpu_guarantee}
c.KubeSpawner.cpu_limit = {cpu_limit}
c.KubeSpawner.mem_guarantee = {mem_guarantee}
c.KubeSpawner.mem_limit = {mem_limit}

# The benchmark's own admin client.
c.JupyterHub.services.append({{"name": "storm", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "storm", "scopes": {scopes!r}, "services": ["storm"]}})
"""

CLASSHUB_VARIANT = """\
from hub_ext.config import configure
configure(c, mode="kubernetes", service_url="http://127.0.0.1:{service_port}", db_url={classhub_db!r},
          freeze_heap={freeze_heap!r})
# The storm is measured, not the hub's start: on a busy machine the service's imports alone
# outlasted JupyterHub's 30 s wait for a managed service, and the hub gave up starting.
for _service in c.JupyterHub.services:
    if _service["name"] == "classhub":
        _service["timeout"] = {service_timeout}
c.ClasshubKubeSpawner.profiles = [
    {{"slug": "cpu", "display_name": "CPU", "kind": "cpu", "default": True, "groups": [{course!r}],
      "cpu_guarantee": {cpu_guarantee!r}, "cpu_limit": {cpu_limit!r},
      "mem_guarantee": "{mem_guarantee}", "mem_limit": "{mem_limit}"}},
]"""

STOCK_VARIANT = """\
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.Spawner.default_url = "/lab"  # as configure() sets it"""


# ------------------------------------------------------------------------------ measurements
def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class Tally:
    """What one run measured."""

    kind: str
    ready: list[float] = field(default_factory=list)  # s, start request -> ready
    login: list[float] = field(default_factory=list)  # s, login form GET + POST
    start_request: list[float] = field(default_factory=list)  # s, the POST's answer
    hub_api: list[float] = field(default_factory=list)  # s, sampled GET /hub/api/users/<name>
    readers: dict[str, list[float]] = field(default_factory=dict)  # path -> s
    failed_starts: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)  # "METHOD path: status"
    retries_429: int = 0
    storm_seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds during the storm

    @property
    def errors(self) -> int:
        return len(self.failed_starts) + len(self.server_errors)

    def status(self, method: str, path: str, code: int) -> None:
        if code >= 500:
            self.server_errors.append(f"{method} {path}: {code}")


def ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def report(t: Tally, users: int, window: float) -> None:
    print(f"{t.kind}: {len(t.ready)} of {users} servers ready, arrivals within {window:g} s, "
          f"storm over after {t.storm_seconds:.1f} s")
    print(f"  ready time      p50 {percentile(t.ready, 50):6.2f} s  p95 {percentile(t.ready, 95):6.2f} s"
          f"  max {max(t.ready, default=math.nan):6.2f} s")
    print(f"  login (form)    p50 {ms(percentile(t.login, 50))}  p95 {ms(percentile(t.login, 95))}")
    print(f"  start request   p50 {ms(percentile(t.start_request, 50))}  "
          f"p95 {ms(percentile(t.start_request, 95))} (the POST; the hub answers when ready or after "
          "slow_spawn_timeout)")
    print(f"  hub API         p50 {ms(percentile(t.hub_api, 50))}  p95 {ms(percentile(t.hub_api, 95))}  "
          f"({len(t.hub_api)} GET /hub/api/users/<name> during the storm)")
    for path, values in t.readers.items():
        print(f"  classhub {path:13s} p50 {ms(percentile(values, 50))}  p95 {ms(percentile(values, 95))}"
              f"  ({len(values)} requests)")
    if t.cpu:
        used = ", ".join(f"{role} {seconds:.1f} s" for role, seconds in t.cpu.items())
        print(f"  CPU during the storm: {used} ({psutil.cpu_count()} cores: "
              f"{psutil.cpu_count() * t.storm_seconds:.0f} s available; the latencies compare only when "
              "little else ran)")
    print(f"  429 retries {t.retries_429}; errors {t.errors}: {len(t.failed_starts)} failed starts, "
          f"{len(t.server_errors)} 5xx answers")
    for line in (t.failed_starts + t.server_errors)[:10]:
        print(f"    {line}")
    sys.stdout.flush()


# ------------------------------------------------------------------------------ processes
class Processes:
    """Every process this benchmark starts, stopped in reverse order by ``close`` (idempotent)."""

    def __init__(self) -> None:
        self.stops: list[Callable[[], None]] = []

    def popen(self, cmd: list[str], log: Path, **kwargs: Any) -> subprocess.Popen:
        with open(log, "ab") as out:
            # own session: a Ctrl-C reaches only the benchmark, which stops them in order
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, **kwargs)
        self.stops.append(lambda: terminate(proc))
        return proc

    def close(self) -> None:
        while self.stops:
            stop = self.stops.pop()
            with contextlib.suppress(Exception):
                stop()


def terminate(proc: subprocess.Popen, timeout: float = 60,
              seen: Iterable[psutil.Process] = ()) -> None:
    """SIGTERM, wait, SIGKILL; then kill whatever it started and left behind (proxy, services).

    ``seen``: processes it started that were seen earlier (`Run.watch_children`): a hub that
    exited on its own (a service that did not start in time) left its proxy and services
    running, in sessions of their own, where no later look for its children finds them."""
    children = list(seen)
    if proc.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            children += psutil.Process(proc.pid).children(recursive=True)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                child.kill()


def nodes_yaml(users: int) -> str:
    count = users // 100 + 2
    return "nodes:\n" + "".join(
        f'  - {{name: cpu-{i}, allocatable: {{cpu: "64", memory: 256Gi, pods: "110"}}}}\n'
        for i in range(count))


def start_cluster(procs: Processes, work: Path, users: int) -> tuple[str, Path, subprocess.Popen]:
    """The fake cluster in its own process (stand-in containers); returns its URL and kubeconfig."""
    kubeconfig = work / "kubeconfig"
    (work / "nodes.yaml").write_text(nodes_yaml(users))
    proc = procs.popen([sys.executable, "-m", "tests.kubefake", "--port", "0", "--kubeconfig",
                        str(kubeconfig), "--nodes", str(work / "nodes.yaml"), "--kubelet-mode", "standin"],
                       work / "kubefake.log", cwd=ROOT)
    deadline = time.monotonic() + 60
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (work / "kubefake.log").read_text()[-2000:]
            raise SystemExit(f"the fake cluster did not start:\n{log}")
        time.sleep(0.05)
    server = re.search(r"server:\s*(\S+)", kubeconfig.read_text())
    assert server, "no server in the fake cluster's kubeconfig"
    return server.group(1), kubeconfig, proc


def role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    for needle, name in (("configurable-http-proxy", "proxy"), ("hub_ext.service", "classhub service"),
                         ("-m culler", "culler"), ("tests.kubefake", "fake cluster"),
                         ("jupyterhub", "hub"), ("postgres", "postgresql")):
        if needle in text:
            return name
    return "other"


def cpu_seconds(pids: list[int]) -> dict[int, tuple[str, float]]:
    """pid -> (role, user + system CPU seconds) of this process (the students' and readers'
    client), the given processes and their descendants; pid 0: every process of the machine."""
    me = psutil.Process().cpu_times()
    machine = psutil.cpu_times()
    busy = machine.user + machine.nice + machine.system + getattr(machine, "irq", 0.0) + \
        getattr(machine, "softirq", 0.0) + getattr(machine, "steal", 0.0)
    out: dict[int, tuple[str, float]] = {0: ("machine", busy), os.getpid(): ("benchmark client",
                                                                           me.user + me.system)}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(pid)
            for p in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = p.cpu_times()
                    out[p.pid] = (role(p.cmdline()), times.user + times.system)
    return out


@dataclass
class Hub:
    kind: str
    data: Path
    url: str
    token: str
    password: str
    proc: subprocess.Popen


def write_config(kind: str, data: Path, token: str, password: str, hub_db: str,
                 classhub_db: str, freeze_heap: bool = True) -> int:
    port = free_port()
    values = dict(cpu_guarantee=CPU_GUARANTEE, cpu_limit=CPU_LIMIT, mem_guarantee=MEM_GUARANTEE,
                  mem_limit=MEM_LIMIT)
    if kind == "classhub":
        variant = CLASSHUB_VARIANT.format(service_port=free_port(), classhub_db=classhub_db,
                                          service_timeout=HUB_START_TIMEOUT,
                                          course=COURSE, freeze_heap=freeze_heap, **values)
    else:
        variant = STOCK_VARIANT
    stock_values = dict(values, cpu_guarantee=0.1, cpu_limit=1.0)  # KubeSpawner's traits are floats
    (data / "jupyterhub_config.py").write_text(COMMON_CONFIG.format(
        kind=kind, variant=variant, port=port, hub_port=free_port(), hub_db=hub_db, data=data,
        proxy=str(PROXY), proxy_api_port=free_port(), password=password, namespace=NAMESPACE,
        image=IMAGE, start_timeout=START_TIMEOUT, token=token, scopes=BENCH_SCOPES, **stock_values))
    return port


# ------------------------------------------------------------------------------ HTTP
class Client:
    """aiohttp calls that count 5xx answers into the run's tally."""

    def __init__(self, tally: Tally, connector: aiohttp.BaseConnector) -> None:
        self.tally = tally
        self.connector = connector

    def session(self, **kwargs: Any) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=self.connector, connector_owner=False,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=300), **kwargs)

    async def call(self, session: aiohttp.ClientSession, method: str, url: str, *,
                   token: str | None = None, expect: tuple[int, ...] = (200, 201, 202, 204),
                   reply_headers: dict[str, str] | None = None,
                   **kwargs: Any) -> tuple[int, Any, float]:
        """(status, JSON body, seconds); RuntimeError for a status not in ``expect`` (if given).
        ``reply_headers``: filled with the answer's headers."""
        headers = dict(kwargs.pop("headers", {}))
        if token:
            headers["Authorization"] = f"token {token}"
        started = time.perf_counter()
        async with session.request(method, url, headers=headers, allow_redirects=False, **kwargs) as r:
            body = await r.read()
            if reply_headers is not None:
                reply_headers.update(r.headers)
        seconds = time.perf_counter() - started
        self.tally.status(method, url.split("?")[0], r.status)
        if expect and r.status not in expect:
            raise RuntimeError(f"{method} {url}: {r.status} {body[:300]!r}")
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = body.decode(errors="replace")
        return r.status, data, seconds


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str,
                     interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if await predicate():
                return
        except (aiohttp.ClientError, OSError, RuntimeError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


# ------------------------------------------------------------------------------ one run
class Run:
    """One hub (classhub or stock), its setup, its storm, its readers and its teardown."""

    def __init__(self, kind: str, args: argparse.Namespace, procs: Processes, work: Path,
                 cluster: str, kubeconfig: Path, databases: Callable[[], str]) -> None:
        self.kind = kind
        self.args = args
        self.procs = procs
        self.data = work / kind
        self.data.mkdir(parents=True)
        self.cluster = cluster
        self.cluster_pid = 0
        self.extra_pids: list[int] = []  # PostgreSQL's
        self.kubeconfig = kubeconfig
        self.databases = databases
        self.tally = Tally(kind)
        self.token = secrets.token_hex(16)
        self.password = secrets.token_urlsafe(12)
        self.names = [f"s{i:04d}" for i in range(args.users)]
        self.hub: Hub | None = None
        self.reader_tokens: list[tuple[str, str]] = []
        self.children: dict[int, psutil.Process] = {}  # the hub's, as seen (`watch_children`)

    # ---- the hub process
    def start_hub(self) -> None:
        hub_db = self.databases() or f"sqlite:///{self.data / 'jupyterhub.sqlite'}"
        classhub_db = ""
        if self.kind == "classhub":
            classhub_db = self.databases() or f"sqlite:///{self.data / 'classhub.sqlite'}"
        port = write_config(self.kind, self.data, self.token, self.password, hub_db, classhub_db,
                            freeze_heap=not self.args.no_freeze)
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        env.pop("CLASSHUB_CULLER_CONFIG", None)
        config = str(self.data / "jupyterhub_config.py")
        proc = self.procs.popen([sys.executable, "-m", "jupyterhub", "-f", config], self.data / "hub.log",
                                env=env, cwd=self.data)
        self.hub = Hub(self.kind, self.data, f"http://127.0.0.1:{port}", self.token, self.password, proc)

    def hub_log(self) -> str:
        return (self.data / "hub.log").read_text(errors="replace")[-3000:]

    async def wait_hub(self, client: Client) -> None:
        hub = self.hub
        assert hub is not None

        async def up() -> bool:
            self.watch_children()
            if hub.proc.poll() is not None:
                raise SystemExit(f"the {self.kind} hub exited:\n{self.hub_log()}")
            async with client.session() as s:
                status, _, _ = await client.call(s, "GET", f"{hub.url}/hub/api/", expect=())
                if status != 200:
                    return False
                if self.kind == "classhub":
                    status, _, _ = await client.call(s, "GET", f"{hub.url}/services/classhub/api/health",
                                                     expect=())
                return status == 200

        await wait_until(up, HUB_START_TIMEOUT, f"the {self.kind} hub")

    # ---- users, course, tokens
    async def setup(self, client: Client) -> None:
        hub = self.hub
        assert hub is not None
        api = f"{hub.url}/hub/api"
        async with client.session() as s:
            for i in range(0, len(self.names), 500):
                await client.call(s, "POST", f"{api}/users", token=hub.token,
                                  json={"usernames": self.names[i:i + 500]})
            if self.kind != "classhub":
                # The same course as a hub group (classhub's service makes it below): what
                # JupyterHub pays for a user in a group (its groups, their roles and shares are
                # loaded with every user) is the hub's, in both runs.
                await client.call(s, "POST", f"{api}/groups/{COURSE}", token=hub.token, expect=(201,))
                await client.call(s, "POST", f"{api}/groups/{COURSE}/users", token=hub.token,
                                  json={"users": self.names})
                return
            for name in self.names[:self.args.readers]:  # what a script of the student would use
                _, body, _ = await client.call(
                    s, "POST", f"{api}/users/{name}/tokens", token=hub.token,
                    json={"note": "storm reader", "expires_in": 3600,
                          "scopes": ["access:services!service=classhub"]})
                self.reader_tokens.append((name, body["token"]))
            _, body, _ = await client.call(s, "POST", f"{api}/users/admin/tokens", token=hub.token,
                                           json={"note": "storm admin", "expires_in": 3600})
            admin = body["token"]
            service = f"{hub.url}/services/classhub/api"
            await client.call(s, "POST", f"{service}/courses", token=admin,
                              json={"name": COURSE, "display_name": "A 9:00 lecture"})
            for i in range(0, len(self.names), 100):
                await client.call(s, "PUT", f"{service}/courses/{COURSE}/members", token=admin,
                                  json={"add": [{"username": n, "role": "student"}
                                                for n in self.names[i:i + 100]]})
            users = len(self.names)
            await client.call(s, "PUT", f"{service}/courses/{COURSE}/quota", token=admin, json={
                "resources": {"cpu": str(users), "memory": f"{users * 2}Gi"}, "servers": users * 2})

    # ---- the storm
    async def student(self, client: Client, name: str, at: float, t0: float) -> None:
        hub = self.hub
        assert hub is not None
        tally = self.tally
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        jar = aiohttp.CookieJar(unsafe=True)  # cookies of 127.0.0.1
        async with client.session(cookie_jar=jar) as s:
            try:
                started = time.perf_counter()
                await client.call(s, "GET", f"{hub.url}/hub/login")
                xsrf = _cookie(jar, "_xsrf")
                await client.call(s, "POST", f"{hub.url}/hub/login?next=", expect=(302,),
                                  data={"username": name, "password": hub.password, "_xsrf": xsrf})
                tally.login.append(time.perf_counter() - started)
                headers = {"X-XSRFToken": _cookie(jar, "_xsrf") or xsrf}
                started = time.perf_counter()
                while True:
                    answer: dict[str, str] = {}
                    status, body, seconds = await client.call(
                        s, "POST", f"{hub.url}/hub/api/users/{name}/server", headers=headers, json={},
                        expect=(), reply_headers=answer)
                    if status != 429:
                        break
                    # the spawn page waits as long as the hub says (spawn_throttle_retry_range)
                    tally.retries_429 += 1
                    await asyncio.sleep(float(answer.get("Retry-After") or 2))
                tally.start_request.append(seconds)
                if status == 201:
                    tally.ready.append(time.perf_counter() - started)
                    return
                if status != 202:
                    tally.failed_starts.append(f"{name}: start answered {status} {str(body)[:200]}")
                    return
                outcome = await self.follow_progress(client, s, name, headers)
                if outcome is True:
                    tally.ready.append(time.perf_counter() - started)
                else:
                    tally.failed_starts.append(f"{name}: {outcome}")
            except (aiohttp.ClientError, OSError, RuntimeError, TimeoutError) as exc:
                tally.failed_starts.append(f"{name}: {exc!r}"[:300])

    async def follow_progress(self, client: Client, s: aiohttp.ClientSession, name: str,
                              headers: dict[str, str]) -> bool | str:
        """The spawn page's progress stream until ready (True) or failed (the message); the
        server model, polled, when the stream ends early."""
        hub = self.hub
        assert hub is not None
        url = f"{hub.url}/hub/api/users/{name}/server/progress"
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with s.get(url, headers=headers) as r:
                client.tally.status("GET", url, r.status)
                if r.status == 200:
                    async for raw in r.content:
                        line = raw.decode(errors="replace").strip()
                        if not line.startswith("data:"):
                            continue
                        event = json.loads(line[5:])
                        if event.get("ready"):
                            return True
                        if event.get("failed"):
                            return f"spawn failed: {event.get('message')}"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            _, model, _ = await client.call(s, "GET", f"{hub.url}/hub/api/users/{name}", headers=headers)
            server = (model.get("servers") or {}).get("")
            if server and server.get("ready"):
                return True
            if not server:
                return "the server is gone (spawn failed)"
            await asyncio.sleep(0.5)
        return f"not ready within {START_TIMEOUT} s"

    async def sampler(self, client: Client, stop: asyncio.Event) -> None:
        """Open loop: one GET /hub/api/users/<random student> every 1/rate seconds."""
        hub = self.hub
        assert hub is not None
        rng = random.Random(self.args.seed + 1)
        interval = 1.0 / self.args.sample_rate
        pending: set[asyncio.Task] = set()

        async def one(s: aiohttp.ClientSession, name: str) -> None:
            with contextlib.suppress(aiohttp.ClientError, OSError, RuntimeError, asyncio.TimeoutError):
                _, _, seconds = await client.call(s, "GET", f"{hub.url}/hub/api/users/{name}",
                                                  token=hub.token)
                self.tally.hub_api.append(seconds)

        async with client.session() as s:
            next_at = time.monotonic()
            while not stop.is_set():
                task = asyncio.ensure_future(one(s, rng.choice(self.names)))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_at += interval
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
            if pending:
                await asyncio.wait(pending)

    async def readers(self, client: Client, until: Callable[[], bool]) -> None:
        """Closed loop: each reader asks again as soon as it has its answer."""
        hub = self.hub
        assert hub is not None
        paths = ("api/me", "api/usage/me")
        for path in paths:
            self.tally.readers.setdefault(path, [])

        async def reader(token: str, offset: int) -> None:
            i = offset
            async with client.session() as s:
                while not until():
                    path = paths[i % 2]
                    i += 1
                    try:
                        _, _, seconds = await client.call(s, "GET", f"{hub.url}/services/classhub/{path}",
                                                          token=token)
                        self.tally.readers[path].append(seconds)
                    except (aiohttp.ClientError, OSError, RuntimeError) as exc:
                        self.tally.server_errors.append(f"reader {path}: {exc!r}"[:300])
                        await asyncio.sleep(0.1)

        await asyncio.gather(*(reader(t, i) for i, (_, t) in enumerate(self.reader_tokens)))

    async def storm(self, client: Client, arrivals: list[float]) -> None:
        stop = asyncio.Event()
        t0 = time.monotonic()
        assert self.hub is not None
        pids = [self.hub.proc.pid, self.cluster_pid, *self.extra_pids]
        cpu_before = cpu_seconds(pids)
        sampler = asyncio.ensure_future(self.sampler(client, stop))
        readers = None
        if self.kind == "classhub" and self.args.readers_during_storm and self.reader_tokens:
            readers = asyncio.ensure_future(self.readers(client, stop.is_set))
        await asyncio.gather(*(self.student(client, n, at, t0) for n, at in zip(self.names, arrivals,
                                                                                 strict=True)))
        self.tally.storm_seconds = time.monotonic() - t0
        for pid, (name, seconds) in cpu_seconds(pids).items():
            self.tally.cpu[name] = self.tally.cpu.get(name, 0.0) + seconds - cpu_before.get(pid, ("", 0.0))[1]
        machine = self.tally.cpu.pop("machine")
        self.tally.cpu["anything else on the machine"] = max(0.0, machine - sum(self.tally.cpu.values()))
        stop.set()
        await sampler
        if readers is not None:
            await readers

    async def read_after(self, client: Client) -> None:
        if self.kind != "classhub" or self.args.readers_during_storm or not self.reader_tokens:
            return
        end = time.monotonic() + self.args.read_seconds
        await self.readers(client, lambda: time.monotonic() >= end)

    # ---- teardown
    async def stop_servers(self, client: Client) -> None:
        """Stop every server through the hub, and wait until the hub and the cluster agree."""
        hub = self.hub
        assert hub is not None
        semaphore = asyncio.Semaphore(32)

        async def stop_one(s: aiohttp.ClientSession, name: str) -> None:
            async with semaphore:
                with contextlib.suppress(aiohttp.ClientError, OSError, RuntimeError):
                    await client.call(s, "DELETE", f"{hub.url}/hub/api/users/{name}/server",
                                      token=hub.token, expect=())

        async with client.session() as s:
            await asyncio.gather(*(stop_one(s, n) for n in self.names))

            async def none_active() -> bool:
                _, page, _ = await client.call(
                    s, "GET", f"{hub.url}/hub/api/users?state=active&limit=1", token=hub.token,
                    headers={"Accept": "application/jupyterhub-pagination+json"})
                return not page["items"]

            await wait_until(none_active, 300, "every server to stop", interval=0.5)
            await wait_until(lambda: no_pods(client, s, self.cluster), 120, "every pod to go", interval=0.5)

    def watch_children(self) -> None:
        """Remember the processes the hub has started so far (its proxy and services)."""
        if self.hub is not None and self.hub.proc.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in psutil.Process(self.hub.proc.pid).children(recursive=True):
                    self.children.setdefault(child.pid, child)

    def stop_hub(self) -> None:
        if self.hub is not None:
            terminate(self.hub.proc, seen=self.children.values())


def _cookie(jar: aiohttp.CookieJar, name: str) -> str:
    return next((c.value for c in jar if c.key == name), "")


async def no_pods(client: Client, s: aiohttp.ClientSession, cluster: str) -> bool:
    _, pods, _ = await client.call(s, "GET", f"{cluster}/api/v1/namespaces/{NAMESPACE}/pods")
    return not pods["items"]


async def empty_namespace(client: Client, cluster: str) -> None:
    """Remove what a run left in the namespace (pods, home PVCs, events): each run starts empty."""
    async with client.session() as s:
        for plural in ("pods", "persistentvolumeclaims", "events"):
            await client.call(s, "DELETE", f"{cluster}/api/v1/namespaces/{NAMESPACE}/{plural}",
                              params={"gracePeriodSeconds": "0"})
        await wait_until(lambda: no_pods(client, s, cluster), 120, "the namespace to empty")


# ------------------------------------------------------------------------------ the benchmark
async def run_all(args: argparse.Namespace, procs: Processes, work: Path,
                  databases: Callable[[], str]) -> list[dict[str, Tally]]:
    """``--repeat`` rounds of both runs on one fake cluster; each round after the first swaps
    which hub goes first, so neither always meets a warmer machine."""
    cluster, kubeconfig, cluster_proc = start_cluster(procs, work, args.users)
    rng = random.Random(args.seed)
    arrivals = sorted(rng.uniform(0, args.window) for _ in range(args.users))
    first = [k.strip() for k in args.order.split(",")]
    rounds: list[dict[str, Tally]] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    try:
        for number in range(args.repeat):
            tallies: dict[str, Tally] = {}
            rounds.append(tallies)
            for kind in first if number % 2 == 0 else first[::-1]:
                run = Run(kind, args, procs, work / f"round{number + 1}", cluster, kubeconfig, databases)
                run.cluster_pid = cluster_proc.pid
                run.extra_pids = list(getattr(databases, "pids", []))
                tallies[kind] = run.tally
                client = Client(run.tally, connector)
                await empty_namespace(client, cluster)
                started = time.monotonic()
                run.start_hub()
                try:
                    await run.wait_hub(client)
                    await run.setup(client)
                    print(f"{kind}: hub up and {args.users} users ready in "
                          f"{time.monotonic() - started:.0f} s; storm starts", flush=True)
                    await run.storm(client, arrivals)
                    await run.read_after(client)
                    report(run.tally, args.users, args.window)
                    await run.stop_servers(client)
                finally:
                    run.stop_hub()
            if args.repeat > 1:
                ready, api, cpu = round_ratios(tallies)
                print(f"round {number + 1} of {args.repeat}: p95_ready={ready:.3f} "
                      f"hub_api_p95={api:.3f} hub_cpu={cpu:.3f}", flush=True)
    finally:
        await connector.close()
    return rounds


def round_ratios(tallies: dict[str, Tally]) -> tuple[float, float, float]:
    """classhub / stock of one round: ready-time p95, hub API p95, the hub's CPU seconds."""
    ours, stock = tallies["classhub"], tallies["stock"]
    return (percentile(ours.ready, 95) / percentile(stock.ready, 95),
            percentile(ours.hub_api, 95) / percentile(stock.hub_api, 95),
            ours.cpu.get("hub", math.nan) / stock.cpu.get("hub", math.nan))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=300, help="students (300)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds within which they arrive (60)")
    parser.add_argument("--readers", type=int, default=20, help="concurrent classhub API readers (20)")
    parser.add_argument("--read-seconds", type=float, default=20.0,
                        help="how long the readers read after the storm (20)")
    parser.add_argument("--readers-during-storm", action="store_true",
                        help="read during the storm instead of after it")
    parser.add_argument("--sample-rate", type=float, default=5.0,
                        help="hub API samples per second during the storm (5)")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                        help="database of the hubs and of classhub (sqlite)")
    parser.add_argument("--order", default="stock,classhub", help="which run goes first (stock,classhub)")
    parser.add_argument("--seed", type=int, default=9, help="arrival instants (9)")
    parser.add_argument("--no-freeze", action="store_true",
                        help="classhub's hub without its heap freeze (configure(freeze_heap=False)), "
                        "to measure what the freeze gives")
    parser.add_argument("--keep", action="store_true", help="keep logs and data (else kept on errors only)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of both runs; the ratios printed last are the medians (1)")
    args = parser.parse_args(argv)
    if sorted(k.strip() for k in args.order.split(",")) != ["classhub", "stock"]:
        parser.error("--order names classhub and stock once each")
    if args.repeat < 1:
        parser.error("--repeat is the number of rounds: 1 or more")
    args.readers = min(args.readers, args.users)

    work = Path(tempfile.mkdtemp(prefix="classhub-bench-storm-"))
    procs = Processes()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    keep = args.keep
    wall = time.monotonic()
    rounds: list[dict[str, Tally]] = []
    try:
        databases = _databases(args.db, procs)
        rounds = asyncio.run(run_all(args, procs, work, databases))
    except BaseException:
        keep = True
        raise
    finally:
        procs.close()
        signal.signal(signal.SIGTERM, previous)
        if keep or any(t.errors for tallies in rounds for t in tallies.values()):
            print(f"logs and data kept in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)

    ratios = [round_ratios(tallies) for tallies in rounds]
    ready_ratio, api_ratio, hub_cpu = (statistics.median(column) for column in zip(*ratios, strict=True))
    errors = sum(t.errors for tallies in rounds for t in tallies.values())
    which = "" if len(rounds) == 1 else f", median of {len(rounds)} rounds"
    print(f"hub process CPU during the storm, classhub / stock: {hub_cpu:.2f}{which} (less sensitive "
          "to other load on the machine than the latencies)")
    print(f"{args.users} users within {args.window:g} s on {args.db}: wall time "
          f"{time.monotonic() - wall:.0f} s (goals: ratios <= 1.2, 0 errors){which}")
    line = f"storm ratio p95_ready={ready_ratio:.3f} hub_api_p95={api_ratio:.3f} errors={errors}"
    print(line, flush=True)
    return {"line": line, "rounds": rounds, "tallies": rounds[-1], "p95_ready": ready_ratio,
            "hub_api_p95": api_ratio, "hub_cpu": hub_cpu, "errors": errors}


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _databases(kind: str, procs: Processes) -> Callable[[], str]:
    """A factory of fresh database URLs: '' for sqlite (each hub uses files in its data dir), or
    a new database on a throwaway PostgreSQL server (tests/pg.py), stopped with the rest."""
    if kind == "sqlite":
        return lambda: ""
    from tests.pg import PostgresCluster, find_postgres_bin

    bindir = find_postgres_bin()
    if bindir is None or not (bindir / "pg_ctl").exists():
        raise SystemExit("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's "
                         "`postgresql` package (apt-get install postgresql)")
    server = PostgresCluster(bindir)
    procs.stops.append(server.stop)  # also removes its folder if start fails half-way
    server.start()

    def create() -> str:
        return server.create_database()

    create.pids = [int((server.data / "postmaster.pid").read_text().split()[0])]  # type: ignore[attr-defined]
    return create


if __name__ == "__main__":
    main()
