"""``FakeCluster``: the fake API server plus scheduler, kubelet and controllers, in one object.

It runs on its own event loop in a background thread, so it serves both sync clients
(``kubernetes``) called straight from a test and async clients (``kubernetes_asyncio``) on the
test's loop, and survives event-loop-per-test fixtures::

    async with FakeCluster(nodes=SAMPLE_NODES) as cluster:      # or: with FakeCluster() as cluster:
        cluster.write_kubeconfig(tmp_path / "kubeconfig")
        cluster.faults.add(503, verbs="list", path="/pods", count=2)
        cluster.pod_ip("default", "jupyter-alice")              # 127.x.y.z, unique per pod

The Python API (get/list/create/delete/add_node/...) is thread-safe: it runs on the cluster loop.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from .admission import admit_create
from .controllers import Controllers
from .events import EventRecorder
from .faults import Faults
from .kubelet import Kubelet
from .latency import Latencies
from .nodes import SAMPLE_NODES, load_nodes
from .objects import deep
from .registry import Registry, ResourceType, default_registry
from .scheduler import Scheduler
from .server import ApiServer
from .store import Store

T = TypeVar("T")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class FakeCluster:
    """A fake Kubernetes cluster served on ``http://127.0.0.1:<port>``."""

    def __init__(
        self,
        nodes: str | Path | list[dict[str, Any]] | dict[str, Any] | None = SAMPLE_NODES,
        *,
        kubelet_mode: str = "standin",
        history_size: int = 1000,
        bookmark_interval: float = 5.0,
        host: str = "127.0.0.1",
        port: int = 0,
        pod_ip_base: str | None = None,
        registry: Registry | None = None,
        latencies: Latencies | str | None = None,
    ) -> None:
        """``nodes``: YAML path/text or parsed list (see nodes.py); ``kubelet_mode``: the default
        way pods run, ``standin`` or ``process`` (per-pod annotation ``kubefake.classhub/run``);
        ``pod_ip_base``: pods get consecutive loopback IPs after it (default: random 127.x.y.1);
        ``history_size``: watch events kept (older resourceVersions get 410 Gone);
        ``bookmark_interval``: seconds between BOOKMARK events on watches that allow them;
        ``latencies``: how long slow steps take (``Latencies``, ``"realistic"``; default: what
        ``KUBEFAKE_LATENCIES`` says, none when unset)."""
        if latencies is None:
            self.latencies = Latencies.from_env()
        else:
            self.latencies = latencies if isinstance(latencies, Latencies) else Latencies.parse(latencies)
        self.node_specs = nodes
        self.kubelet_mode = kubelet_mode
        self.history_size = history_size
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.port = port
        # a random /16 inside 127.0.0.0/8 keeps concurrently running fake clusters apart
        self.pod_ip_base = pod_ip_base or f"127.{random.randint(1, 254)}.{random.randint(0, 200)}.1"
        self.registry = registry or default_registry()
        self.faults = Faults()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.store: Store
        self.scheduler: Scheduler
        self.kubelet: Kubelet
        self.api: ApiServer
        self.kubeconfig_path: Path | None = None

    def export_nfs(self, server: str, path: str, folder: str | Path) -> None:
        """Stand ``folder`` in for the NFS export ``server:path``: process-mode pods with an
        ``nfs`` volume of it get it mounted (read-only where the mount says so), see kubelet.py."""
        self.kubelet.nfs_exports[f"{server}:{path}"] = str(folder)

    # ----- lifecycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL of the API server."""
        return f"http://{self.host}:{self.port}"

    async def _astart(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.store = Store(self.registry, self.history_size)
        recorder = EventRecorder(self.store)
        self.controllers = Controllers(self.store, loop, self.latencies)
        self.scheduler = Scheduler(self.store, recorder, loop)
        self.kubelet = Kubelet(
            self.store, recorder, loop, self.kubelet_mode, self.pod_ip_base, self.latencies
        )
        self.api = ApiServer(
            self.store, self.scheduler, self.kubelet, self.faults, self.bookmark_interval, self.latencies
        )
        ns_type = self.registry.by_name("namespaces")
        sa_type = self.registry.by_name("serviceaccounts")
        for name in SYSTEM_NAMESPACES:  # a running cluster's namespaces have their default account
            self.store.create(ns_type, None, {"metadata": {"name": name}})
            self.store.create(sa_type, name, {"metadata": {"name": "default"}})
        for node in load_nodes(self.node_specs):
            self.store.create(self.registry.by_name("nodes"), None, node)
        self._runner = web.AppRunner(self.api.app(), shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1]
        self.api.address = f"{self.host}:{self.port}"

    async def _astop(self) -> None:
        self.api.drop_watches()
        await self.kubelet.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()

    def start_sync(self) -> str:
        """Start on a background thread; returns the base URL."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._astart())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._astop())
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="kubefake", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]
        return self.url

    def stop_sync(self) -> None:
        """Stop the server, kill pod processes, and join the thread."""
        if self.loop is not None and self._thread is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
        self._thread = None

    async def start(self) -> str:
        """Async form of :meth:`start_sync`."""
        return await asyncio.to_thread(self.start_sync)

    async def stop(self) -> None:
        """Async form of :meth:`stop_sync`."""
        await asyncio.to_thread(self.stop_sync)

    def __enter__(self) -> FakeCluster:
        self.start_sync()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_sync()

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def serve_forever(self, stop: asyncio.Event) -> None:
        """Serve on the current loop until ``stop`` is set (used by ``python -m tests.kubefake``)."""
        await self._astart()
        try:
            await stop.wait()
        finally:
            await self._astop()

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig dict pointing at this server (plain http, dummy bearer token)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubefake", "cluster": {"server": self.url}}],
            "users": [{"name": "kubefake", "user": {"token": "kubefake-token"}}],
            "contexts": [
                {
                    "name": "kubefake",
                    "context": {"cluster": "kubefake", "user": "kubefake", "namespace": namespace},
                }
            ],
            "current-context": "kubefake",
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write :meth:`kubeconfig` to ``path`` and return it.

        Written whole or not at all (a temporary file renamed into place): another process waits
        for the file to appear and reads it at once (bench/storm.py, `python -m tests.kubefake`);
        a plain write let it read a file that existed but was still empty."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_text(yaml.safe_dump(self.kubeconfig(namespace)))
        os.replace(partial, path)
        self.kubeconfig_path = path
        return path

    # ----- thread-safe Python API --------------------------------------------------------------------
    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args)`` on the cluster loop and return its result (re-raising its error)."""
        assert self.loop is not None, "cluster not started"
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return fn(*args, **kwargs)

        async def wrapper() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(30)

    def _type(self, resource: str | ResourceType) -> ResourceType:
        return resource if isinstance(resource, ResourceType) else self.registry.by_name(resource)

    def get(self, resource: str, name: str, namespace: str | None = "default") -> dict[str, Any] | None:
        """A copy of one object or ``None``; ``resource`` is a plural, kind or short name."""
        rtype = self._type(resource)
        return self.call(lambda: deep(self.store.find(rtype, namespace, name)))

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of all objects of a type (optionally in one namespace)."""
        rtype = self._type(resource)
        return self.call(lambda: deep(self.store.list(rtype, namespace)))

    def create(self, resource: str, obj: dict[str, Any], namespace: str | None = "default") -> dict[str, Any]:
        """Create an object as a client would (admission, validation, defaulting, events)."""
        rtype = self._type(resource)

        def create() -> dict[str, Any]:
            body = admit_create(self.store, rtype, namespace, obj)
            return deep(self.store.create(rtype, namespace, body))

        return self.call(create)

    def delete(
        self, resource: str, name: str, namespace: str | None = "default", grace: int | None = None
    ) -> None:
        """Delete an object as a client would."""
        rtype = self._type(resource)
        self.call(lambda: self.store.delete(rtype, namespace, name, grace))

    def mutate(
        self,
        resource: str,
        name: str,
        fn: Callable[[dict[str, Any]], None],
        namespace: str | None = "default",
    ) -> dict[str, Any] | None:
        """Controller-style write: ``fn`` edits a copy in place (no conflict check); e.g. a test
        standing in for an operator updating a PyTorchJob's status."""
        rtype = self._type(resource)
        return self.call(lambda: deep(self.store.mutate(rtype, namespace, name, fn)))

    def add_node(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Add a node described like one entry of the nodes YAML."""
        node = load_nodes([spec])[0]
        return self.create("nodes", node, None)

    def register_crd(
        self, group: str, version: str, kind: str, plural: str, namespaced: bool = True
    ) -> ResourceType:
        """Serve another custom resource (with a ``status`` subresource)."""
        return self.registry.add_crd(group, version, kind, plural, namespaced)

    def drop_watches(self, abrupt: bool = False) -> int:
        """End every open watch connection; returns how many were open."""
        return self.call(self.api.drop_watches, abrupt)

    def open_watches(self) -> list[tuple[str, str | None]]:
        """(plural, namespace) of every watch currently streaming."""
        return self.call(lambda: [(w.rtype.plural, w.namespace) for w in self.api.open_watches])

    def compact(self) -> int:
        """Forget watch history: a watch from any resourceVersion seen so far now gets 410 Gone."""
        self.call(self.store.compact)
        return self.store.compacted_rv

    def pod_ip(self, namespace: str, name: str) -> str | None:
        """The loopback IP given to a running pod (also in its ``status.podIP``)."""
        pod = self.get("pods", name, namespace)
        return ((pod or {}).get("status") or {}).get("podIP")

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path?query) of every request served so far."""
        return list(self.api.requests)
