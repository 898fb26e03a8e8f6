"""A fake kubelet for every fake node: runs bound pods locally.

Each pod gets its own loopback address (127.x.y.2, 127.x.y.3, ..., a block per cluster) as
``status.podIP``; the whole 127.0.0.0/8 is loopback on Linux, so a client reaches container port P of a pod at
``http://<podIP>:<P>`` exactly as in a cluster (KubeSpawner's ``pod IP + self.port`` works).

A container runs in one of two ways, chosen per pod by the annotation
``kubefake.classhub/run: process|standin`` (default: the cluster's ``kubelet_mode``):

* ``standin``: a tiny HTTP server on ``podIP:port`` for every declared TCP port and every port
  a probe checks (a real container may listen on ports it does not declare, and its probes
  reach them), answering 200 with a JSON description; for a JupyterHub single-user container
  (``JUPYTERHUB_SERVICE_PREFIX`` or ``JUPYTERHUB_API_TOKEN`` in its env) pages answer as
  jupyterhub-singleuser does without a token: the base URL 302 to ``<prefix>lab``, pages
  under the prefix 302 to the hub's OAuth authorize URL (``<prefix>api`` stays 200); it runs
  until the pod is deleted, or exits after ``kubefake.classhub/exit-after`` seconds with
  ``kubefake.classhub/exit-code`` (default 0).
* ``process``: ``command + args`` as a local subprocess (own session), with the container's
  env (value, fieldRef, secretKeyRef, configMapKeyRef, envFrom; ``$(VAR)`` expansion) plus
  ``POD_IP``/``POD_NAME``/``POD_NAMESPACE`` unless set, stdout+stderr captured for logs.

Exit codes drive ``containerStatuses`` and the phase according to ``restartPolicy``; deletion
sends SIGTERM, waits up to the grace period, then SIGKILL, then removes the pod. With
latencies (latency.py), an image not yet on the node is pulled first (``Pulling``/``Pulled``
events), a container takes a while to start, and a stand-in takes a while to exit on SIGTERM.
``exec_context`` gives ``pods/exec`` (podexec.py) a running container's environment.

Volumes (``process`` mode): an ``nfs`` volume whose export the test registered
(``FakeCluster.export_nfs``), a Secret or ConfigMap volume (its keys as files, in kubelet's
``..data`` layout, always read-only) and an ``emptyDir`` at a path this machine lacks are mounted
as a kubelet mounts them. A mount at a path whose top folder this machine lacks (``/grading/in``)
is made at that very path: the container gets a root of its own (a tmpfs with the machine's
top-level entries bound in) and runs chrooted there; the other mounts follow the scheme below.
``volume_stats`` tells the stats summary (nodeproxy.py) which folder holds each volume's files.
Otherwise the pod's file system root is its work directory (``mountPath``
``/home/jovyan/data/x`` is ``<workdir>/home/jovyan/data/x``, and a ``workingDir`` is taken there
too), the container runs in its own mount namespace (``unshare --mount``) where each
``volumeMount`` is a bind mount of the export or volume folder (its ``subPath``
made when missing, as kubelet does), ``readOnly: true`` a read-only bind mount, the export's
own folder is covered by an empty read-only tmpfs, and ``CAP_SYS_ADMIN`` is dropped from the
bounding set before the command runs: a process in the pod gets ``EROFS`` for a write and
cannot remount, as in a pod without privileges. Not isolated as a container is: the rest of
the host's file system is visible (even in a root of its own, which binds it in), and
``/proc/<pid>/root`` of a process outside reaches the export (no PID namespace).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from .events import EventRecorder
from .latency import Latencies
from .logs import LogBuffer
from .objects import now_iso, set_condition
from .store import Event, Store

RUN_ANNOTATION = "kubefake.classhub/run"
EXIT_AFTER_ANNOTATION = "kubefake.classhub/exit-after"
EXIT_CODE_ANNOTATION = "kubefake.classhub/exit-code"
KUBELET = "kubelet"
_VAR_RE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (``$$`` escapes; unknown references stay as written)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_RE.sub(sub, text)


@dataclass
class Container:
    """One running (or finished) container instance."""

    name: str
    log: LogBuffer = field(default_factory=LogBuffer)
    previous: LogBuffer | None = None
    process: asyncio.subprocess.Process | None = None
    servers: list[asyncio.AbstractServer] = field(default_factory=list)
    done: asyncio.Future | None = None
    restarts: int = 0
    #: the container has a root of its own (a mount at a path absent on this machine), and its
    #: working directory inside that root (``pods/exec`` enters both)
    rooted: bool = False
    pod_cwd: str = ""


@dataclass
class PodRuntime:
    """Kubelet-side state of one pod."""

    uid: str
    namespace: str
    name: str
    ip: str
    workdir: str
    containers: dict[str, Container] = field(default_factory=dict)
    task: asyncio.Task | None = None
    stopping: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    #: volume name -> the local folder holding its files, as the containers see them (stats)
    volume_paths: dict[str, str] = field(default_factory=dict)
    started_at: str = ""


class Kubelet:
    """Runs pods bound to any node that exists in the store."""

    def __init__(
        self,
        store: Store,
        recorder: EventRecorder,
        loop: asyncio.AbstractEventLoop,
        mode: str = "standin",
        ip_base: str = "127.1.0.1",
        latencies: Latencies | None = None,
    ) -> None:
        self.store = store
        self.recorder = recorder
        self.loop = loop
        self.mode = mode
        self.pods_type = store.registry.lookup("", "v1", "pods")
        self.nodes_type = store.registry.lookup("", "v1", "nodes")
        self.runtimes: dict[str, PodRuntime] = {}
        self.latencies = latencies or Latencies()
        self._images: dict[str, set[str]] = {}  # node -> images already pulled there
        self._next_ip = int(ipaddress.IPv4Address(ip_base))
        self._workdir = tempfile.mkdtemp(prefix="kubefake-kubelet-")
        #: ``"<server>:<path>"`` of an nfs volume -> the local folder that stands for the export
        self.nfs_exports: dict[str, str] = {}
        #: what the images' ``ENV`` lines set for every container (the container's env wins),
        #: e.g. ``PATH`` with the Python a test's image would have
        self.image_env: dict[str, str] = {}
        store.listeners.append(self._on_event)

    # ----- reacting to the API ------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if event.rtype.key == ("", "nodes") and event.type == "ADDED":
            assert self.pods_type is not None
            for pod in self.store.list(self.pods_type):
                self._reconcile(pod, exists=True)
        if event.rtype.key != ("", "pods"):
            return
        self._reconcile(event.obj, exists=event.type != "DELETED")

    def _reconcile(self, pod: dict[str, Any], exists: bool) -> None:
        uid = pod["metadata"]["uid"]
        runtime = self.runtimes.get(uid)
        if not exists:
            if runtime and not runtime.stopping:
                runtime.stopping = True
                self.loop.create_task(self._kill(runtime, 0))
            return
        node = pod["spec"].get("nodeName")
        if runtime is None and node and not pod["metadata"].get("deletionTimestamp"):
            assert self.nodes_type is not None
            if self.store.find(self.nodes_type, None, node) is None:
                return
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            runtime = PodRuntime(
                uid,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                self._allocate_ip(),
                tempfile.mkdtemp(prefix=pod["metadata"]["name"] + "-", dir=self._workdir),
            )
            self.runtimes[uid] = runtime
            runtime.task = self.loop.create_task(self._run_pod(runtime))
        elif runtime and pod["metadata"].get("deletionTimestamp") and not runtime.stopping:
            runtime.stopping = True
            grace = int(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            self.loop.create_task(self._terminate(runtime, grace))
        elif node and pod["metadata"].get("deletionTimestamp") and runtime is None:
            self.loop.call_soon(
                self._finalize_delete, pod["metadata"]["namespace"], pod["metadata"]["name"], uid
            )

    def _allocate_ip(self) -> str:
        self._next_ip += 1
        if self._next_ip % 256 in (0, 255):
            self._next_ip += 2
        return str(ipaddress.IPv4Address(self._next_ip))

    def _pod(self, rt: PodRuntime) -> dict[str, Any] | None:
        assert self.pods_type is not None
        pod = self.store.find(self.pods_type, rt.namespace, rt.name)
        return pod if pod is not None and pod["metadata"]["uid"] == rt.uid else None

    def _update(self, rt: PodRuntime, fn: Any) -> dict[str, Any] | None:
        if self._pod(rt) is None:
            return None
        return self.store.mutate(self.pods_type, rt.namespace, rt.name, fn)  # type: ignore[arg-type]

    # ----- running ------------------------------------------------------------------------------
    async def _run_pod(self, rt: PodRuntime) -> None:
        pod = self._pod(rt)
        if pod is None:
            return
        spec = pod["spec"]
        node = spec["nodeName"]

        def started(p: dict[str, Any]) -> None:
            st = p.setdefault("status", {})
            st.update(
                hostIP="127.0.0.1",
                hostIPs=[{"ip": "127.0.0.1"}],
                podIP=rt.ip,
                podIPs=[{"ip": rt.ip}],
                startTime=now_iso(),
            )
            set_condition(st, "PodReadyToStartContainers", "True")
            set_condition(st, "Initialized", "True")
            set_condition(
                st,
                "Ready",
                "False",
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(c['name'] for c in spec['containers'])}]",
            )
            set_condition(
                st,
                "ContainersReady",
                "False",
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(c['name'] for c in spec['containers'])}]",
            )
            st["containerStatuses"] = [
                self._status(c, {"waiting": {"reason": "ContainerCreating"}}, False, 0)
                for c in spec["containers"]
            ]

        pod = self._update(rt, started)
        if pod is None:
            return
        for init in spec.get("initContainers") or []:
            while True:
                code = await self._run_to_end(rt, pod, init, node)
                if code == 0 or rt.stopping:
                    break
                if spec.get("restartPolicy") == "Never":
                    self._set_phase(rt, "Failed", reason="Init:Error")
                    return
                await asyncio.sleep(0.5)
            if rt.stopping:
                return
        await asyncio.gather(*(self._container_loop(rt, pod, c, node) for c in spec["containers"]))

    async def _run_to_end(
        self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any], node: str
    ) -> int:
        cont = rt.containers.setdefault(container["name"], Container(container["name"]))
        if self._pod_mode(pod) != "process" or not container.get("command"):
            cont.log.close()
            return 0
        await self._start(rt, pod, container, cont, node)
        assert cont.done is not None
        return await cont.done

    def _pod_mode(self, pod: dict[str, Any]) -> str:
        return (pod["metadata"].get("annotations") or {}).get(RUN_ANNOTATION, self.mode)

    async def _container_loop(
        self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any], node: str
    ) -> None:
        name = container["name"]
        cont = rt.containers.setdefault(name, Container(name))
        policy = pod["spec"].get("restartPolicy", "Always")
        while not rt.stopping:
            try:
                await self._start(rt, pod, container, cont, node)
            except OSError as exc:
                cont.log.write(f"kubefake: failed to start container {name}: {exc}")
                cont.done = self.loop.create_future()
                cont.done.set_result(128)
            self._container_state(rt, name, {"running": {"startedAt": now_iso()}}, None)
            self.loop.create_task(self._probe_ready(rt, container, cont))
            assert cont.done is not None
            code = await cont.done
            cont.log.close()
            if rt.stopping:
                return
            terminated = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": now_iso(),
                "finishedAt": now_iso(),
            }
            restart = policy == "Always" or (policy == "OnFailure" and code != 0)
            if not restart:
                self._container_state(rt, name, {"terminated": terminated}, None)
                return
            cont.restarts += 1
            self.recorder.record(
                self._pod(rt) or pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {name} in pod {rt.name}_{rt.namespace}({rt.uid})",
                KUBELET,
                node,
                f"spec.containers{{{name}}}",
            )
            self._container_state(
                rt,
                name,
                {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off restarting failed container={name}",
                    }
                },
                {"terminated": terminated},
            )
            await asyncio.sleep(min(0.2 * 2**cont.restarts, 10.0))
            cont.previous, cont.log = cont.log, LogBuffer()

    async def _start(
        self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any], cont: Container, node: str
    ) -> None:
        name = container["name"]
        field_path = f"spec.containers{{{name}}}"
        await self._pull(pod, container, node, field_path)
        self.recorder.record(pod, "Normal", "Created", f"Created container {name}", KUBELET, node, field_path)
        if self.latencies.container_start > 0:
            await asyncio.sleep(self.latencies.container_start)
        cont.done = self.loop.create_future()
        if self._pod_mode(pod) == "process" and (container.get("command") or container.get("args")):
            await self._start_process(rt, pod, container, cont)
        else:
            await self._start_standin(rt, pod, container, cont)
        self.recorder.record(pod, "Normal", "Started", f"Started container {name}", KUBELET, node, field_path)

    async def _pull(self, pod: dict[str, Any], container: dict[str, Any], node: str, field_path: str) -> None:
        image = container.get("image")
        pulled = self._images.setdefault(node, set())
        delay = self.latencies.image_pull
        if delay <= 0 or (image in pulled and container.get("imagePullPolicy") != "Always"):
            message = f'Container image "{image}" already present on machine'
            self.recorder.record(pod, "Normal", "Pulled", message, KUBELET, node, field_path)
            return
        self.recorder.record(pod, "Normal", "Pulling", f'Pulling image "{image}"', KUBELET, node, field_path)
        await asyncio.sleep(delay)
        pulled.add(str(image))
        message = (
            f'Successfully pulled image "{image}" in {delay:.3g}s ({delay:.3g}s including waiting). '
            "Image size: 0 bytes."
        )
        self.recorder.record(pod, "Normal", "Pulled", message, KUBELET, node, field_path)

    async def _start_process(
        self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any], cont: Container
    ) -> None:
        env = self._env(rt, pod, container)
        argv = [expand(str(a), env) for a in (container.get("command") or []) + (container.get("args") or [])]
        binds = self._binds(rt, pod, container)
        cwd = self._cwd(rt, container, rooted=bool(binds))
        self._note_volumes(rt, pod, container, binds)
        if binds:
            root = None
            cont.rooted = any(b.absolute for b in binds)
            if cont.rooted:
                root = os.path.join(rt.workdir, ".kubefake-root")
                os.makedirs(root, exist_ok=True)
                cont.pod_cwd = pod_working_dir(container, rt.workdir)
            argv = mount_namespace_argv(binds, argv, root, cont.pod_cwd)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        cont.process = proc
        done = cont.done
        assert done is not None and proc.stdout is not None

        async def pump(log: LogBuffer) -> None:
            assert proc.stdout is not None
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                log.write(line.decode(errors="replace"))
            code = await proc.wait()
            if not done.done():
                done.set_result(code if code >= 0 else 128 - code)

        self.loop.create_task(pump(cont.log))

    async def _start_standin(
        self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any], cont: Container
    ) -> None:
        info = {
            "kubefake": "standin",
            "pod": rt.name,
            "namespace": rt.namespace,
            "container": container["name"],
        }

        env = {v["name"]: str(v["value"]) for v in container.get("env") or [] if "value" in v}
        singleuser = any(k in env for k in ("JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_API_TOKEN"))
        prefix = env.get("JUPYTERHUB_SERVICE_PREFIX") or "/"

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            path = request.path
            if singleuser and path in ("/", prefix):  # jupyter-server: base URL -> default URL
                raise web.HTTPFound(prefix + "lab")
            if singleuser and path.startswith(prefix) and not path.startswith(prefix + "api"):
                raise web.HTTPFound(singleuser_login(env, request.path_qs))
            return web.json_response({**info, "method": request.method, "path": request.path_qs})

        for port in standin_ports(container):
            server = await self.loop.create_server(web.Server(handle), rt.ip, port)
            cont.servers.append(server)
            cont.log.write(
                f"kubefake stand-in for {rt.namespace}/{rt.name} container {container['name']} "
                f"listening on http://{rt.ip}:{port}"
            )
        if not cont.servers:
            cont.log.write(
                f"kubefake stand-in for {rt.namespace}/{rt.name} container {container['name']} running"
            )
        annotations = pod["metadata"].get("annotations") or {}
        if EXIT_AFTER_ANNOTATION in annotations:
            done = cont.done
            code = int(annotations.get(EXIT_CODE_ANNOTATION, "0"))

            def finish() -> None:
                for server in cont.servers:
                    server.close()
                cont.servers.clear()
                if done is not None and not done.done():
                    done.set_result(code)

            self.loop.call_later(float(annotations[EXIT_AFTER_ANNOTATION]), finish)

    def _env(self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        md = pod["metadata"]
        own: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if source.get("configMapRef"):
                data = self._lookup("configmaps", md["namespace"], source["configMapRef"]["name"])
                own.update({prefix + k: v for k, v in ((data or {}).get("data") or {}).items()})
            if source.get("secretRef"):
                data = self._lookup("secrets", md["namespace"], source["secretRef"]["name"])
                own.update(
                    {
                        prefix + k: base64.b64decode(v).decode(errors="replace")
                        for k, v in ((data or {}).get("data") or {}).items()
                    }
                )
        for var in container.get("env") or []:
            if "value" in var:
                own[var["name"]] = expand(str(var["value"]), {**env, **own})
            elif var.get("valueFrom"):
                value = self._value_from(rt, pod, var["valueFrom"])
                if value is not None:
                    own[var["name"]] = value
        for key, value in (
            ("POD_IP", rt.ip),
            ("POD_NAME", md["name"]),
            ("POD_NAMESPACE", md["namespace"]),
            ("HOSTNAME", md["name"]),
            ("KUBEFAKE_POD_IP", rt.ip),
        ):
            own.setdefault(key, value)
        env.update(self.image_env)
        env.update(own)
        return env

    def _lookup(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        rtype = self.store.registry.lookup("", "v1", plural)
        return self.store.find(rtype, namespace, name) if rtype else None

    def _value_from(self, rt: PodRuntime, pod: dict[str, Any], source: dict[str, Any]) -> str | None:
        md = pod["metadata"]
        if source.get("fieldRef"):
            path = source["fieldRef"].get("fieldPath", "")
            simple = {
                "metadata.name": md["name"],
                "metadata.namespace": md["namespace"],
                "metadata.uid": md["uid"],
                "spec.nodeName": pod["spec"].get("nodeName"),
                "status.podIP": rt.ip,
                "status.hostIP": "127.0.0.1",
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
            }
            if path in simple:
                return simple[path]
            m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", path)
            if m:
                return (md.get(m.group(1)) or {}).get(m.group(2))
            return None
        for ref_key, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
            ref = source.get(ref_key)
            if ref:
                obj = self._lookup(plural, md["namespace"], ref["name"]) or {}
                value = (obj.get("data") or {}).get(ref["key"])
                if value is not None and plural == "secrets":
                    value = base64.b64decode(value).decode(errors="replace")
                return value
        if source.get("resourceFieldRef"):
            res = source["resourceFieldRef"].get("resource", "")
            kind, _, name = res.partition(".")
            for c in pod["spec"]["containers"]:
                value = ((c.get("resources") or {}).get(kind) or {}).get(name)
                if value is not None:
                    return str(value)
        return None

    async def _probe_ready(self, rt: PodRuntime, container: dict[str, Any], cont: Container) -> None:
        probe = container.get("readinessProbe") or {}
        ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        instance = cont.done
        while probe and not rt.stopping and instance is cont.done and not (instance and instance.done()):
            if await self._probe(rt.ip, probe, ports):
                break
            await asyncio.sleep(0.1)
        if rt.stopping or instance is not cont.done or (instance and instance.done()):
            return
        self._container_ready(rt, container["name"])

    @staticmethod
    async def _probe(ip: str, probe: dict[str, Any], ports: dict[str, Any]) -> bool:
        spec = probe.get("httpGet") or probe.get("tcpSocket")
        if not spec:
            return True
        port = spec.get("port")
        port = int(ports.get(port, port)) if not isinstance(port, int) else port
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 1.0)
        except (asyncio.TimeoutError, OSError):
            return False
        try:
            if "httpGet" not in probe:
                return True
            writer.write(f"GET {spec.get('path', '/')} HTTP/1.0\r\nHost: {ip}\r\n\r\n".encode())
            line = await asyncio.wait_for(reader.readline(), 1.0)
            parts = line.split()
            return len(parts) > 1 and 200 <= int(parts[1]) < 400
        except (asyncio.TimeoutError, OSError, ValueError):
            return False
        finally:
            writer.close()

    # ----- status -------------------------------------------------------------------------------
    @staticmethod
    def _status(
        container: dict[str, Any], state: dict[str, Any], ready: bool, restarts: int
    ) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container.get("image"),
            "imageID": "",
            "containerID": "",
            "state": state,
            "lastState": {},
            "ready": ready,
            "restartCount": restarts,
            "started": "running" in state,
        }

    def _container_state(
        self, rt: PodRuntime, name: str, state: dict[str, Any], last: dict[str, Any] | None
    ) -> None:
        cont = rt.containers[name]

        def apply(p: dict[str, Any]) -> None:
            st = p.setdefault("status", {})
            for cs in st.get("containerStatuses") or []:
                if cs["name"] == name:
                    cs["state"] = state
                    cs["ready"] = False
                    cs["started"] = "running" in state
                    cs["restartCount"] = cont.restarts
                    cs["containerID"] = f"kubefake://{rt.uid[:8]}-{name}-{cont.restarts}"
                    if last is not None:
                        cs["lastState"] = last
            self._derive(p)

        self._update(rt, apply)

    def _container_ready(self, rt: PodRuntime, name: str) -> None:
        def apply(p: dict[str, Any]) -> None:
            for cs in (p.get("status") or {}).get("containerStatuses") or []:
                if cs["name"] == name and "running" in cs["state"]:
                    cs["ready"] = True
            self._derive(p)

        self._update(rt, apply)

    @staticmethod
    def _derive(p: dict[str, Any]) -> None:
        """Phase and Ready/ContainersReady from container states, as the kubelet computes them."""
        st = p["status"]
        statuses = st.get("containerStatuses") or []
        policy = p["spec"].get("restartPolicy", "Always")
        terminated = [cs["state"]["terminated"] for cs in statuses if "terminated" in cs["state"]]
        running = [cs for cs in statuses if "running" in cs["state"]]
        waiting = [cs for cs in statuses if "waiting" in cs["state"]]
        if len(terminated) == len(statuses) and statuses and policy != "Always":
            failed = any(t["exitCode"] != 0 for t in terminated)
            st["phase"] = (
                "Failed" if failed and policy == "Never" else ("Succeeded" if not failed else st["phase"])
            )
        elif running or (terminated and not waiting) or any(cs["restartCount"] for cs in statuses):
            st["phase"] = "Running"
        unready = [cs["name"] for cs in statuses if not cs["ready"]]
        if unready:
            msg = f"containers with unready status: [{' '.join(unready)}]"
            reason = "PodCompleted" if st["phase"] in ("Succeeded", "Failed") else "ContainersNotReady"
            set_condition(st, "ContainersReady", "False", reason, msg if reason != "PodCompleted" else "")
            set_condition(st, "Ready", "False", reason, msg if reason != "PodCompleted" else "")
        else:
            set_condition(st, "ContainersReady", "True")
            set_condition(st, "Ready", "True")

    def _set_phase(self, rt: PodRuntime, phase: str, reason: str = "") -> None:
        def apply(p: dict[str, Any]) -> None:
            p["status"]["phase"] = phase
            if reason:
                p["status"]["reason"] = reason

        self._update(rt, apply)

    # ----- stopping -----------------------------------------------------------------------------
    async def _stop_containers(self, rt: PodRuntime, grace: float) -> None:
        procs = []
        for cont in rt.containers.values():
            for server in cont.servers:
                server.close()
            cont.servers.clear()
            if cont.done is not None and not cont.done.done() and cont.process is None:
                if grace > 0 and self.latencies.container_stop > 0:  # a stand-in handling SIGTERM
                    await asyncio.sleep(min(self.latencies.container_stop, grace))
                if not cont.done.done():
                    cont.done.set_result(137 if grace == 0 else 0)
            if cont.process is not None and cont.process.returncode is None:
                procs.append(cont.process)
                _signal(cont.process, signal.SIGKILL if grace == 0 else signal.SIGTERM)
        if procs and grace > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), grace)
        for proc in procs:
            if proc.returncode is None:
                _signal(proc, signal.SIGKILL)
        for proc in procs:
            await proc.wait()
        for cont in rt.containers.values():
            cont.log.close()
        if rt.task is not None and not rt.task.done():
            rt.task.cancel()
        rt.stopped.set()

    async def _terminate(self, rt: PodRuntime, grace: int) -> None:
        pod = self._pod(rt)
        if pod is not None:
            for c in pod["spec"]["containers"]:
                self.recorder.record(
                    pod,
                    "Normal",
                    "Killing",
                    f"Stopping container {c['name']}",
                    KUBELET,
                    pod["spec"].get("nodeName"),
                    f"spec.containers{{{c['name']}}}",
                )
        await self._stop_containers(rt, grace)
        self._finalize_delete(rt.namespace, rt.name, rt.uid)

    def _finalize_delete(self, namespace: str, name: str, uid: str) -> None:
        assert self.pods_type is not None
        pod = self.store.find(self.pods_type, namespace, name)
        if pod is not None and pod["metadata"]["uid"] == uid and pod["metadata"].get("deletionTimestamp"):
            self.store.delete(self.pods_type, namespace, name, grace=0, preconditions={"uid": uid})

    async def _kill(self, rt: PodRuntime, grace: int) -> None:
        await self._stop_containers(rt, grace)

    async def shutdown(self) -> None:
        """Stop every container (used when the cluster stops)."""
        await asyncio.gather(
            *(self._stop_containers(rt, 0) for rt in list(self.runtimes.values()) if not rt.stopped.is_set()),
            return_exceptions=True,
        )

    def logs(self, uid: str, container: str, previous: bool = False) -> LogBuffer | None:
        """The log buffer of a container instance (``previous``: the one before the last restart)."""
        rt = self.runtimes.get(uid)
        cont = rt.containers.get(container) if rt else None
        if cont is None:
            return None
        return cont.previous if previous else cont.log

    def exec_context(self, uid: str, container: str) -> tuple[dict[str, str], str] | None:
        """(environment, working directory) for a command run in a running container, else None."""
        rt = self.runtimes.get(uid)
        cont = rt.containers.get(container) if rt else None
        if rt is None or rt.stopping or cont is None or cont.done is None or cont.done.done():
            return None
        pod = self._pod(rt)
        spec = next(
            (c for c in (pod or {}).get("spec", {}).get("containers") or [] if c["name"] == container), None
        )
        if pod is None or spec is None:
            return None
        return self._env(rt, pod, spec), self._cwd(rt, spec, rooted=bool(self._binds(rt, pod, spec)))

    def exec_prefix(self, uid: str, container: str, cwd: str) -> list[str]:
        """What runs a ``pods/exec`` command inside the container's mount namespace (its volume
        mounts, read-only ones included, and no right to remount), empty when it has none."""
        rt = self.runtimes.get(uid)
        cont = rt.containers.get(container) if rt else None
        proc = cont.process if cont else None
        pid = getattr(proc, "pid", None)
        if rt is None or pid is None or not os.path.exists(f"/proc/{pid}/ns/mnt"):
            return []
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
                return []  # the container has no mounts of its own
        assert cont is not None
        if cont.rooted:  # its own root: enter it too, and its working directory there
            cwd = cont.pod_cwd
        enter = ["nsenter", f"--target={pid}", "--mount", *(["--root"] if cont.rooted else []),
                 f"--wdns={cwd}"]  # setns resets the cwd
        if os.geteuid() != 0:
            enter[2:2] = ["--user", "--preserve-credentials"]
        return [*enter, "--", "setpriv", "--bounding-set", "-sys_admin", "--"]

    def _cwd(self, rt: PodRuntime, container: dict[str, Any], rooted: bool) -> str:
        """The container's working directory: ``workingDir`` under the pod's root where the pod
        has mounts (a path of its own), else the host folder if it exists, else the work dir."""
        workdir = container.get("workingDir")
        if workdir and rooted:
            inside = os.path.join(rt.workdir, workdir.lstrip("/"))
            os.makedirs(inside, exist_ok=True)
            return inside
        return workdir if workdir and os.path.isdir(workdir) else rt.workdir

    def _binds(self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any]) -> list[Bind]:
        """The container's mounts this kubelet can make: nfs volumes of registered exports, Secret
        and ConfigMap volumes (their keys as files, always read-only, as kubelet mounts them), and
        emptyDir volumes at a path absent on this machine (elsewhere the pod's own folder at the
        path stands for its emptyDir, as before). A mount at a path whose top folder this machine
        does not have (``/grading/in``) is made at that very path in a root of the pod's own."""
        volumes = {v.get("name"): v for v in pod["spec"].get("volumes") or []}
        binds: list[Bind] = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name")) or {}
            mount_path = str(mount["mountPath"])
            absolute = not on_this_machine(mount_path)
            made = self._volume_source(rt, pod, volume, absolute)
            if made is None:
                continue
            source, export, forced_ro = made
            sub = str(mount.get("subPath") or "")
            if sub:
                path = os.path.realpath(os.path.join(source, sub))
                if os.path.isabs(sub) or ".." in sub.split("/") or not path.startswith(source + os.sep):
                    raise OSError(f"subPath {sub!r} leaves the volume")
                os.makedirs(path, 0o755, exist_ok=True)  # kubelet makes a missing subPath
            else:
                path = source
            if absolute:
                target = os.path.normpath(mount_path)
            else:
                target = os.path.join(rt.workdir, mount_path.lstrip("/"))
                os.makedirs(target, exist_ok=True)
            read_only = bool(mount.get("readOnly")) or forced_ro
            binds.append(Bind(path, target, read_only, export, absolute, source))
        return sorted(binds, key=lambda b: (b.absolute, b.target.count("/")))

    def _volume_source(
        self, rt: PodRuntime, pod: dict[str, Any], volume: dict[str, Any], absolute: bool
    ) -> tuple[str, str | None, bool] | None:
        """(the local folder of a volume, the export to hide from the pod or None, always
        read-only) for a volume this kubelet mounts, else None (left as the pod's own folder)."""
        nfs = volume.get("nfs")
        if isinstance(nfs, dict):
            export = self.nfs_exports.get(f"{nfs.get('server')}:{nfs.get('path')}")
            if export is None:
                return None
            source = os.path.realpath(export)
            return source, source, bool(nfs.get("readOnly"))
        name = str(volume.get("name"))
        folder = os.path.join(rt.workdir, ".kubefake-volumes", name)
        if isinstance(volume.get("secret"), dict) or isinstance(volume.get("configMap"), dict):
            if not os.path.isdir(folder):
                project(folder, self._volume_files(pod, volume))
            return folder, None, True
        if isinstance(volume.get("emptyDir"), dict) and absolute:
            os.makedirs(folder, 0o777, exist_ok=True)
            os.chmod(folder, 0o777)  # kubelet makes emptyDir folders 0777
            return folder, None, False
        return None

    def _volume_files(self, pod: dict[str, Any], volume: dict[str, Any]) -> dict[str, tuple[bytes, int]]:
        """path -> (bytes, mode) of a Secret or ConfigMap volume, as kubelet projects them:
        every key (or the ``items`` named, at their ``path``), ``mode`` or ``defaultMode``
        (0644). A missing object or key fails the mount, unless the volume is ``optional``."""
        secret = volume.get("secret")
        source = secret if isinstance(secret, dict) else volume["configMap"]
        kind, ref = ("secret", source.get("secretName")) if secret else ("configmap", source.get("name"))
        plural = "secrets" if secret else "configmaps"
        obj = self._lookup(plural, pod["metadata"]["namespace"], str(ref))
        where = f'MountVolume.SetUp failed for volume "{volume.get("name")}" : '
        if obj is None:
            if source.get("optional"):
                return {}
            raise OSError(f'{where}{kind} "{ref}" not found')
        data: dict[str, bytes] = {}
        if secret:
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        default = int(source.get("defaultMode", 0o644))
        items = source.get("items")
        if not items:
            return {key: (value, default) for key, value in data.items()}
        out = {}
        for item in items:
            if item.get("key") not in data:
                if source.get("optional"):
                    continue
                raise OSError(f'{where}{kind} references non-existent {kind} key: {item.get("key")}')
            out[str(item["path"])] = (data[item["key"]], int(item.get("mode", default)))
        return out

    def _note_volumes(
        self, rt: PodRuntime, pod: dict[str, Any], container: dict[str, Any], binds: list[Bind]
    ) -> None:
        """Remember which local folder holds each volume's files as this container sees them
        (the first container mounting a volume decides): what the stats summary measures."""
        volumes = {v.get("name"): v for v in pod["spec"].get("volumes") or []}
        rooted = bool(binds)
        for mount in container.get("volumeMounts") or []:
            name = mount.get("name")
            volume = volumes.get(name) or {}
            if name in rt.volume_paths or not volume:
                continue
            made = next((b for b in binds if b.mount_path(rt.workdir) == str(mount["mountPath"])), None)
            if made is not None:
                rt.volume_paths[name] = made.volume or made.source
            elif rooted:
                rt.volume_paths[name] = os.path.join(rt.workdir, str(mount["mountPath"]).lstrip("/"))
            else:
                rt.volume_paths[name] = str(mount["mountPath"])

    def volume_stats(self, node: str) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
        """The pods running on ``node`` (podRef, startTime, containers) and, for each volume whose
        files this kubelet knows, (pod index, name, pvcRef, local folder) to measure: the stats
        summary's ``pods`` (the folders are measured off the loop by the API server)."""
        pods: list[dict[str, Any]] = []
        todo: list[tuple[int, str]] = []
        for rt in list(self.runtimes.values()):
            pod = self._pod(rt)
            if pod is None or rt.stopping or pod["spec"].get("nodeName") != node:
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            volumes = {v.get("name"): v for v in pod["spec"].get("volumes") or []}
            entry: dict[str, Any] = {
                "podRef": {"name": rt.name, "namespace": rt.namespace, "uid": rt.uid},
                "startTime": (pod.get("status") or {}).get("startTime"),
                "containers": [{"name": c["name"], "startTime": (pod.get("status") or {}).get("startTime")}
                               for c in pod["spec"]["containers"]],
                "volume": [],
            }
            for name, path in rt.volume_paths.items():
                claim = (volumes.get(name) or {}).get("persistentVolumeClaim")
                stat = {"name": name, "path": path}
                if isinstance(claim, dict):
                    stat["pvcRef"] = {"name": claim.get("claimName"), "namespace": rt.namespace}
                entry["volume"].append(stat)
            todo.extend((len(pods), v["name"]) for v in entry["volume"])
            pods.append(entry)
        return pods, todo

    def pod_ip(self, uid: str) -> str | None:
        """The loopback address given to a pod."""
        rt = self.runtimes.get(uid)
        return rt.ip if rt else None


@dataclass(frozen=True)
class Bind:
    """One volume mount of a container: ``source`` bound at ``target`` (``export``: the nfs
    volume's own folder, hidden from the pod; ``absolute``: ``target`` is the mount path in a
    root of the pod's own, else a folder under the pod's work directory)."""

    source: str
    target: str
    read_only: bool
    export: str | None = None
    absolute: bool = False
    volume: str = ""  # the volume's own folder (``source`` is its subPath where one is given)

    def mount_path(self, workdir: str) -> str:
        """The mount path the pod spec gave."""
        return self.target if self.absolute else "/" + os.path.relpath(self.target, workdir)


def on_this_machine(path: str) -> bool:
    """True when the top folder of an absolute pod path exists here (``/home/...``, ``/tmp/...``):
    such mounts keep the pod-root-is-work-folder scheme; others get a root of the pod's own."""
    top = os.path.normpath(path).lstrip("/").split("/", 1)[0]
    return not top or os.path.lexists("/" + top)


def pod_working_dir(container: dict[str, Any], workdir: str) -> str:
    """The working directory inside a pod that has a root of its own: ``workingDir`` where its
    top folder is the pod's own, else that path under the pod's work folder (as without a root)."""
    wanted = str(container.get("workingDir") or "")
    if not wanted:
        return workdir
    if on_this_machine(wanted):
        inside = os.path.join(workdir, wanted.lstrip("/"))
        os.makedirs(inside, exist_ok=True)
        return inside
    return os.path.normpath(wanted)


def project(folder: str, files: dict[str, tuple[bytes, int]]) -> None:
    """Write a Secret's or ConfigMap's files as kubelet's atomic writer lays them out: the files
    in a timestamped folder, ``..data`` a link to it, and each top-level name a link through
    ``..data`` (what a container lists; an update swaps ``..data`` in one rename)."""
    os.makedirs(folder, 0o755, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    data = os.path.join(folder, stamp)
    os.makedirs(data, 0o755)
    for path, (content, mode) in files.items():
        clean = os.path.normpath(path)
        if os.path.isabs(clean) or clean.split("/")[0] in ("..", ".") or clean.startswith(".."):
            raise OSError(f"invalid item path {path!r}")
        target = os.path.join(data, clean)
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, content)
            os.fchmod(fd, mode & 0o7777)
        finally:
            os.close(fd)
    os.symlink(stamp, os.path.join(folder, "..data"))
    for top in sorted({os.path.normpath(p).split("/")[0] for p in files}):
        os.symlink(os.path.join("..data", top), os.path.join(folder, top))


def folder_usage(path: str) -> dict[str, int]:
    """What kubelet's ``du``/``statfs`` metrics say of a volume folder: bytes of the blocks its
    files use (each inode once, not crossing into other file systems), inodes used, and the file
    system's capacity and free space."""
    used, inodes, seen = 0, 0, set()
    try:
        top = os.lstat(path)
    except OSError:
        return {}
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != top.st_dev or (st.st_ino in seen):
                continue
            seen.add(st.st_ino)
            used += st.st_blocks * 512
            inodes += 1
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    used += top.st_blocks * 512
    fs = os.statvfs(path)
    return {"availableBytes": fs.f_bavail * fs.f_frsize, "capacityBytes": fs.f_blocks * fs.f_frsize,
            "usedBytes": used, "inodesFree": fs.f_favail, "inodes": fs.f_files, "inodesUsed": inodes + 1}


def mount_namespace_argv(
    binds: list[Bind], argv: list[str], root: str | None = None, cwd: str = ""
) -> list[str]:
    """``argv`` run in a new mount namespace with ``binds`` mounted (read-only ones remounted
    ``ro``), the exports covered, and ``CAP_SYS_ADMIN`` dropped so the pod cannot undo them.
    As root: a plain mount namespace; otherwise a user namespace maps the caller to root.
    With ``root`` (a folder): the pod gets a root of its own there, a tmpfs holding every top-level
    entry of this machine's ``/`` (recursive binds, links as links) and the absolute binds at their
    mount paths; the command runs chrooted there, in ``cwd``."""
    steps = []
    for bind in [b for b in binds if not b.absolute]:
        source, target = shlex.quote(bind.source), shlex.quote(bind.target)
        steps.append(f"mount --bind {source} {target}")
        if bind.read_only:
            steps.append(f"mount -o remount,bind,ro {target}")
    for export in sorted({b.export for b in binds if b.export}):
        steps.append(f"mount -t tmpfs -o ro,size=4k,mode=0 kubefake-hidden {shlex.quote(export)}")
    run = 'exec setpriv --bounding-set -sys_admin -- "$@"'
    if root is not None:
        r = root.rstrip("/")
        steps.append(f"mount -t tmpfs -o mode=0755 kubefake-root {shlex.quote(r)}")
        for entry in sorted(os.listdir("/")):
            here, there = "/" + entry, shlex.quote(f"{r}/{entry}")
            if os.path.islink(here):
                steps.append(f"ln -s {shlex.quote(os.readlink(here))} {there}")
            elif os.path.isdir(here):
                steps.append(f"mkdir {there} && mount --rbind {shlex.quote(here)} {there}")
            elif os.path.isfile(here):
                steps.append(f"touch {there} && mount --bind {shlex.quote(here)} {there}")
        for bind in [b for b in binds if b.absolute]:
            source, target = shlex.quote(bind.source), shlex.quote(r + bind.target)
            steps.append(f"mkdir -p {target} && mount --bind {source} {target}")
            if bind.read_only:
                steps.append(f"mount -o remount,bind,ro {target}")
        steps.append(f"cd {shlex.quote(r)}")
        run = (f'exec chroot . /bin/sh -c \'cd "$0" && exec setpriv --bounding-set -sys_admin -- "$@"\' '
               f'{shlex.quote(cwd or "/")} "$@"')
    script = " && ".join([*steps, run])
    unshare = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    return [*unshare, "--", "/bin/sh", "-c", script, "kubefake-mounts", *argv]


def singleuser_login(env: dict[str, str], path: str) -> str:
    """Where jupyterhub-singleuser sends a request without a token: the hub's OAuth authorize URL
    (a stand-in for a JupyterHub single-user container answers its pages with this 302)."""
    query = urlencode(
        {
            "client_id": env.get("JUPYTERHUB_CLIENT_ID", ""),
            "redirect_uri": env.get("JUPYTERHUB_OAUTH_CALLBACK_URL", ""),
            "response_type": "code",
            "state": path,
        }
    )
    return f"{env.get('JUPYTERHUB_BASE_URL', '/').rstrip('/')}/hub/api/oauth2/authorize?{query}"


def standin_ports(container: dict[str, Any]) -> list[int]:
    """Declared TCP container ports plus the ports its probes check (by number or port name)."""
    named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or [] if p.get("name")}
    ports = [
        int(p["containerPort"]) for p in container.get("ports") or [] if p.get("protocol", "TCP") == "TCP"
    ]
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(kind) or {}
        target = (probe.get("httpGet") or probe.get("tcpSocket") or {}).get("port")
        target = named.get(target, target)
        numeric = isinstance(target, int) or (isinstance(target, str) and target.isdigit())
        if numeric and int(target) not in ports:
            ports.append(int(target))
    return ports


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


__all__ = ["EXIT_AFTER_ANNOTATION", "EXIT_CODE_ANNOTATION", "RUN_ANNOTATION", "Kubelet", "json"]
