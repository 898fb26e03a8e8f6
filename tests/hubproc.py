"""Test harness: a real ``classhub local`` hub process, a login through its form, REST calls.

Nothing here fakes JupyterHub: the hub, the proxy, the classhub service and the user servers
are the real processes that ``make run`` starts.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests

from tests.kubefake.waiting import wait_for as _wait_for
from tests.ports import free_port

#: The console script that ``make run`` ends in (installed into the venv by ``pip install -e``).
CLASSHUB = [str(Path(sys.prefix) / "bin" / "classhub")]
#: How long a hub (with its services) may take to answer after its start: 10-20 s alone, and
#: past 60 s seen on a machine at load 12 (several suites at once); a deadline, not a measurement.
START_TIMEOUT = 120


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` on timeout."""
    return _wait_for(predicate, timeout=timeout, interval=interval, what=what)


class HubProcess:
    """Starting a hub process and waiting until the hub and the classhub service answer.

    Shared by LocalHub (``classhub local``) and tests/kubehub.py's KubeHub (``jupyterhub`` in
    kubernetes mode); subclasses have ``port``, ``proc`` and ``log_path`` attributes.
    """

    port: int
    proc: subprocess.Popen | None
    log_path: Path | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _launch(self, cmd: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None,
                timeout: float = START_TIMEOUT) -> None:
        self.log_path = log_path
        log = open(log_path, "ab")  # noqa: SIM115 - the hub process keeps writing to it
        # a crash (SIGSEGV, SIGABRT, ...) prints each thread's Python stack into the log
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**env, "PYTHONFAULTHANDLER": "1"},
                                     cwd=cwd)
        try:
            wait_for(self._ready, timeout, f"the hub on port {self.port}")
        except AssertionError as e:
            log = self._log_with_stacks()
            self.stop()
            raise AssertionError(f"{e}\n--- the hub's log ends with:\n{log}\n--- the hub on port "
                                 f"{self.port} (pid {self.proc.pid}) did not answer within "
                                 f"{timeout} s") from None
        except BaseException:
            self.stop()
            raise

    def _log_with_stacks(self) -> str:
        """The log of a hub that did not answer, ending with where each of its threads was: it
        gets SIGABRT, on which faulthandler (``PYTHONFAULTHANDLER``) prints the stacks and the
        process ends. Its children (proxy, services, servers) are killed, since a dead hub cannot
        stop them."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return self.log()
        self.proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        return self.log()

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            # what ended it last, after the log: a report's tail (CI's) shows the log's end and this
            raise RuntimeError(f"the hub exited with {self.proc.returncode}:\n{self.log()}\n--- the "
                               f"hub on port {self.port} (pid {self.proc.pid}) {_ended(self.proc)}")
        try:
            hub = requests.get(f"{self.url}/hub/api/", timeout=2)
            service = requests.get(f"{self.url}/services/classhub/api/health", timeout=2)
        except requests.RequestException:
            return False
        return hub.status_code == 200 and service.status_code == 200

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-8000:] if self.log_path else ""

    def stop(self, timeout: float = 15):
        raise NotImplementedError


@dataclass
class LocalHub(HubProcess):
    """A ``classhub local`` process on a free port with its own data dir."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def password(self) -> str:
        return (self.data_dir / "demo-password").read_text().strip()

    def start(self) -> LocalHub:
        cmd = [*CLASSHUB, "local", "--port", str(self.port), "--data-dir", str(self.data_dir),
               *self.extra_args]
        self._launch(cmd, self.data_dir.parent / f"hub-{self.port}.log", {**os.environ, **self.env})
        return self

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self, timeout: float = 15, keep_servers: bool = False) -> Shutdown:
        """SIGTERM the hub like an admin would; report how long it took and what survived.

        ``keep_servers``: user servers are expected to outlive the hub (cleanup_servers=False).
        """
        if self.proc is None or self.proc.poll() is not None:
            return Shutdown(0.0, [])
        try:
            procs = self.descendants()
        except psutil.NoSuchProcess:
            procs = []
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        elapsed = time.monotonic() - start
        survivors = [p for p in procs if _alive(p) and not (keep_servers and _is_server(p))]
        report = Shutdown(elapsed, [" ".join(p.cmdline()) for p in survivors])
        for p in survivors:  # never leave a process behind for the next test
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        return report


@dataclass
class Shutdown:
    """How a hub stop went: seconds from SIGTERM to exit, and command lines left running."""

    seconds: float
    survivors: list[str]


def _ended(proc: subprocess.Popen) -> str:
    """How a process ended, in words: its exit status, or the signal that killed it."""
    code = proc.returncode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _is_server(p: psutil.Process) -> bool:
    try:
        return "jupyterhub.singleuser" in " ".join(p.cmdline())
    except psutil.NoSuchProcess:
        return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class HubSession:
    """A browser-like session of one user: cookies from the hub's login form."""

    def __init__(self, hub: LocalHub, username: str, password: str | None = None) -> None:
        self.hub = hub
        self.username = username
        self.http = requests.Session()
        self.login(password if password is not None else hub.password)

    def login(self, password: str) -> requests.Response:
        page = self.http.get(f"{self.hub.url}/hub/login", timeout=10)
        page.raise_for_status()
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', page.text)
        data = {"username": self.username, "password": password}
        if xsrf:
            data["_xsrf"] = xsrf.group(1)
        r = self.http.post(f"{self.hub.url}/hub/login?next=", data=data, timeout=30,
                           allow_redirects=False)
        if r.status_code != 302:
            raise AssertionError(f"login of {self.username} failed: {r.status_code}")
        return r

    @property
    def xsrf(self) -> str:
        return self.http.cookies.get("_xsrf", path="/hub/") or self.http.cookies.get("_xsrf", "")

    def hub_api(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"X-XSRFToken": self.xsrf, **kwargs.pop("headers", {})}
        return self.http.request(method, f"{self.hub.url}/hub/api/{path.lstrip('/')}",
                                 headers=headers, timeout=30, **kwargs)

    def new_token(self, scopes: list[str] | None = None) -> str:
        body: dict[str, Any] = {"note": "classhub test", "expires_in": 3600}
        if scopes is not None:
            body["scopes"] = scopes
        r = self.hub_api("POST", f"users/{self.username}/tokens", json=body)
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def get(self, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.http.get(f"{self.hub.url}{path}", **kwargs)


def traits(sections: dict[str, dict[str, Any]]) -> str:
    """``jupyterhub_config.py`` lines setting ``{"ClasshubJobs": {"interval": 0.5}}`` as traits,
    the one way to configure classhub (docs/configuration.md)."""
    return "".join(f"c.{section}.{name} = {value!r}\n"
                   for section, values in sections.items() for name, value in values.items())


#: A test hub gives a server the time a loaded machine needs: a jupyter-server answered after 24-30 s
#: beside the other test workers on two busy cores (one kept busy: ``make test-busy``), and
#: JupyterHub gives a spawn up after its default ``http_timeout`` of 30 s ("never showed up").
BUSY_MACHINE = "c.Spawner.http_timeout = 120\nc.Spawner.start_timeout = 180\n"


#: A stand-in single-user server, for tests where a server only has to run in the hub's view (the
#: hub's lists, the reservation, the culler's facts), never to serve a notebook: like
#: jupyterhub-singleuser it first waits until the hub's API answers, then answers every GET. It
#: imports no jupyter-server, JupyterLab or extension: a fraction of the real server's CPU.
STANDIN_SERVER = """
import http.server, os, time, urllib.parse, urllib.request
while True:
    try:
        urllib.request.urlopen(os.environ["JUPYTERHUB_API_URL"], timeout=2)
        break
    except OSError:
        time.sleep(0.1)
url = urllib.parse.urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((url.hostname, url.port), Handler).serve_forever()
"""
#: ``jupyterhub_config.py`` lines making every server of a local hub a `STANDIN_SERVER`.
STANDIN_SERVERS = f"c.ClasshubLocalSpawner.cmd = [{sys.executable!r}, '-c', {STANDIN_SERVER!r}]\n"


def hub_with_config(root: Path, name: str, config: str, **kwargs: Any) -> LocalHub:
    """A started ``classhub local`` hub in ``root/name`` whose data-dir ``jupyterhub_config.py``
    (loaded last) is `config`: extra accounts, admins, services, hub settings (after
    `BUSY_MACHINE`, which they may change)."""
    data = root / name
    data.mkdir()
    (data / "jupyterhub_config.py").write_text(BUSY_MACHINE + config)
    return LocalHub(data_dir=data, **kwargs).start()


def api(hub: LocalHub, method: str, path: str, token: str | None = None,
        **kwargs) -> requests.Response:
    """Call the classhub REST API, as a script would: with a token or anonymously."""
    headers = kwargs.pop("headers", {})
    if token:
        headers["Authorization"] = f"token {token}"
    kwargs.setdefault("timeout", 30)
    return requests.request(method, f"{hub.url}/services/classhub/api/{path.lstrip('/')}",
                            headers=headers, allow_redirects=False, **kwargs)


def tokens_with_an_outsider(hub: LocalHub, names: tuple[str, ...], outsider: str,
                            role: str) -> dict[str, str]:
    """API tokens of the demo logins `names`, and of `outsider`, a `role` of another course
    (other101, made here; not a demo login: the admin makes their token): the member of another
    course every attack test asks as."""
    found = {name: HubSession(hub, name).new_token() for name in ("admin", *names)}
    admin = found["admin"]
    assert api(hub, "POST", "courses", admin, json={"name": "other101"}).status_code == 201
    r = api(hub, "PUT", "courses/other101/members", admin,
            json={"add": [{"username": outsider, "role": role}]})
    assert r.status_code == 200, r.text
    r = requests.post(f"{hub.url}/hub/api/users/{outsider}/tokens", json={"expires_in": 3600},
                      headers={"Authorization": f"token {admin}"}, timeout=30)
    assert r.status_code == 201, r.text
    found[outsider] = r.json()["token"]
    return found


def start_server(hub: LocalHub, username: str, token: str, timeout: float = 60) -> dict:
    """Start ``username``'s default server through the hub API and wait until it is ready (a
    server already running, e.g. left by another test on a shared hub, is fine as it is)."""
    headers = {"Authorization": f"token {token}"}

    def asked():  # a stop still pending (another test's) ends first; then the hub takes the start
        r = requests.post(f"{hub.url}/hub/api/users/{username}/server", headers=headers, timeout=30)
        # (a list: a Response is falsy for 4xx, and "already running" is a 400)
        return None if r.status_code == 400 and "pending stop" in r.text else [r]

    try:
        [r] = wait_for(asked, timeout, f"{username}'s pending stop to end", interval=0.25)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- the hub's log ends with:\n{hub.log()}") from None
    running = r.status_code == 400 and "is already running" in r.text
    assert r.status_code in (201, 202) or running, r.text

    def ready():
        model = requests.get(f"{hub.url}/hub/api/users/{username}", headers=headers,
                             timeout=10).json()
        server = model.get("servers", {}).get("")
        return server if server and server.get("ready") else None

    return wait_for(ready, timeout, f"{username}'s server to be ready", interval=0.25)


def start_servers(hub: LocalHub, tokens: dict[str, str], timeout: float = 60) -> dict[str, dict]:
    """``start_server`` for each user of ``{username: token}`` at once: each start mostly waits
    for its server process to answer, so a fixture that needs several waits for them together."""
    with concurrent.futures.ThreadPoolExecutor(max(1, len(tokens))) as pool:
        futures = {user: pool.submit(start_server, hub, user, token, timeout)
                   for user, token in tokens.items()}
        return {user: future.result() for user, future in futures.items()}


def proxy_available() -> bool:
    """Whether configurable-http-proxy and Node.js can be found the way ``classhub`` looks."""
    local = Path(sys.prefix) / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
    return shutil.which("node") is not None and (
        local.exists() or shutil.which("configurable-http-proxy") is not None
        or bool(os.environ.get("CLASSHUB_PROXY_CMD"))
    )
