"""Test helpers for helm-values/: the Zero to JupyterHub chart as the hub pod sees it.

- ``chart_values`` merges the chart's default values with values files the way Helm does, and
  ``schema_errors`` checks the result against the chart's own ``values.schema.yaml`` (both
  copied unchanged into tests/data/z2jh, see its SOURCE file).
- ``ChartHub`` runs the real ``jupyterhub`` command with the chart's own
  ``jupyterhub_config.py`` and ``z2jh.py``, laid out as the chart mounts them: the hub's
  ConfigMap (the two files and the resource names) under ``config/``, the hub's Secret (the
  merged values as ``values.yaml``, generated tokens) under ``secret/``, the environment the
  chart's Deployment gives the hub, and configurable-http-proxy as a process of its own, like
  the proxy pod. The one change to the chart's files is where they are mounted: the absolute
  path ``/usr/local/etc/jupyterhub`` is replaced by a temporary folder (``mount_shim``).
- ``operator_nodes`` turns the GPU Operator values beside an overlay into the nodes they make:
  which extended resources and labels the device plugin, MIG manager and GPU feature discovery
  give a node with a given number of GPUs of a given model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import psutil
import requests
import yaml

from tests.hubproc import HubProcess, HubSession, free_port, wait_for

REPO = Path(__file__).resolve().parent.parent
HELM_VALUES = REPO / "helm-values"
Z2JH = REPO / "tests" / "data" / "z2jh"
GPU_OPERATOR_DEFAULTS = REPO / "tests" / "data" / "gpu-operator" / "values.yaml"
PROXY = Path(sys.prefix) / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"

#: What the chart's Secret adds to the values (templates/hub/secret.yaml) for chart 4.4.0.
CHART = {"Name": "jupyterhub", "Version": "4.4.0", "AppVersion": "5.5.0"}
#: Where the chart mounts its ConfigMap and Secret in the hub pod.
MOUNT = "/usr/local/etc/jupyterhub"
#: Resource names of the chart's ConfigMap for a release without fullnameOverride/nameOverride
#: (templates/_helpers-names.tpl renders them without a prefix then).
NAMES = ("hub", "proxy-api", "proxy-public", "proxy-http", "user-scheduler", "priority",
         "image-pull-secret", "singleuser")
#: What JupyterHub logs once its start (managed services included) is over.
RUNNING = "JupyterHub is now running"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def overlays() -> list[str]:
    """Names of the overlays (``overlays/<name>.yaml``), without the GPU Operator files."""
    return sorted(p.name[: -len(".yaml")] for p in (HELM_VALUES / "overlays").glob("*.yaml")
                  if not p.name.endswith(".gpu-operator.yaml"))


def coalesce(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of a values file over defaults: maps merge key by key, anything else
    (lists included) replaces, and ``null`` removes a default key."""
    merged = dict(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = value
    return merged


def chart_values(*layers: Path | Mapping[str, Any]) -> dict[str, Any]:
    """The chart's default values with each layer (a file or a dict) merged over it, in order."""
    values = read_yaml(Z2JH / "values.yaml")
    for layer in layers:
        values = coalesce(values, read_yaml(layer) if isinstance(layer, Path) else layer)
    return values


def schema_errors(values: Mapping[str, Any]) -> list[str]:
    """What ``helm install`` would refuse: violations of the chart's values.schema, one line each."""
    validator = jsonschema.Draft7Validator(read_yaml(Z2JH / "values.schema.yaml"))
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                  for e in validator.iter_errors(values))


# ---------------------------------------------------------------------------- GPU Operator
def unknown_operator_keys(values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None,
                          path: str = "") -> list[str]:
    """Keys of GPU Operator values that the chart's defaults do not have (a misspelt key is
    silently ignored by the chart, so this is its only check). Below a key whose default is an
    empty map (``data: {}``) anything goes."""
    if defaults is None:
        defaults = read_yaml(GPU_OPERATOR_DEFAULTS)
    unknown = []
    for key, value in values.items():
        where = f"{path}{key}"
        if key not in defaults:
            unknown.append(where)
        elif isinstance(value, Mapping) and isinstance(defaults[key], Mapping) and defaults[key]:
            unknown += unknown_operator_keys(value, defaults[key], where + ".")
    return unknown


def operator_node(operator: Mapping[str, Any], name: str, product: str, gpus: int,
                  cpu: str = "64", memory: str = "512Gi") -> dict[str, Any]:
    """A GPU node (kubefake node format) as the GPU Operator with these values leaves it.

    The MIG manager applies ``migManager.config.default`` (a mig-parted config) to every GPU;
    the device plugin advertises MIG slices per ``mig.strategy`` (mixed: one resource per slice
    size; single: ``nvidia.com/gpu`` with the product label ``<product>-MIG-<slice>``) or, with
    ``devicePlugin.config.default`` naming a sharing config, each GPU ``replicas`` times
    (``nvidia.com/gpu.shared`` with ``renameByDefault``). The GPU taint is the admin's step.
    """
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
    resources: dict[str, int] = {}
    strategy = operator.get("mig", {}).get("strategy", "single")
    mig = operator.get("migManager", {}).get("config", {})
    mig_default = mig.get("default", "all-disabled")
    plugin = operator.get("devicePlugin", {}).get("config", {})
    if mig_default != "all-disabled":
        config = yaml.safe_load(mig["data"]["config.yaml"])["mig-configs"][mig_default]
        slices: Counter[str] = Counter()
        for entry in config:
            assert entry["devices"] == "all", "these settings cut every GPU of a node alike"
            if entry.get("mig-enabled"):
                for size, count in entry["mig-devices"].items():
                    slices[size] += count * gpus
        labels["nvidia.com/mig.config"] = mig_default
        labels["nvidia.com/mig.strategy"] = strategy
        if strategy == "mixed":
            resources.update({f"nvidia.com/mig-{size}": n for size, n in slices.items()})
        elif strategy == "single":
            assert len(slices) == 1, f"mig strategy single needs one slice size, not {dict(slices)}"
            [(size, count)] = slices.items()
            resources["nvidia.com/gpu"] = count
            labels["nvidia.com/gpu.product"] = f"{product}-MIG-{size}"
        else:
            raise AssertionError(f"MIG config {mig_default} with mig.strategy {strategy!r} exposes no slice")
    elif plugin.get("default"):
        sharing = yaml.safe_load(plugin["data"][plugin["default"]]).get("sharing", {})
        for kind, label in (("timeSlicing", "time-slicing"), ("mps", "mps")):
            if kind in sharing:
                rename = sharing[kind].get("renameByDefault", False)
                for res in sharing[kind]["resources"]:
                    assert res["name"] == "nvidia.com/gpu"
                    shared = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
                    resources[shared] = gpus * int(res["replicas"])
                labels["nvidia.com/gpu.sharing-strategy"] = label
                if not rename:
                    labels["nvidia.com/gpu.product"] = f"{product}-SHARED"
    else:
        resources["nvidia.com/gpu"] = gpus
    return {"name": name, "labels": labels, "taints": [GPU_TAINT],
            "allocatable": {"cpu": cpu, "memory": memory, **{k: str(v) for k, v in resources.items()}}}


def operator_nodes(overlay: str, hardware: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """A CPU node plus, for each ``(name, product, gpus)``, the GPU node that the GPU Operator
    values beside ``overlay`` make of it (no GPU nodes when the overlay has none)."""
    nodes = [{"name": "cpu-0", "allocatable": {"cpu": "32", "memory": "128Gi"}}]
    path = HELM_VALUES / "overlays" / f"{overlay}.gpu-operator.yaml"
    if path.exists():
        operator = read_yaml(path)
        nodes += [operator_node(operator, name, product, gpus) for name, product, gpus in hardware]
    return nodes


# ---------------------------------------------------------------------------- dashboards
DASHBOARDS = HELM_VALUES / "dashboards"
#: Metric names a dashboard may use, by who exports them.
METRIC_NAME = re.compile(r"\b(?:classhub|jupyterhub|DCGM)_[A-Za-z0-9_]+\b")
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "summary": ("_sum", "_count", "_created"), "gauge": (), "untyped": (), "info": ("_info",)}


def dashboard_queries() -> dict[str, list[str]]:
    """Every PromQL expression of every Grafana dashboard, by dashboard file name."""
    queries: dict[str, list[str]] = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        queries[path.name] = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return queries


def dashboard_metrics() -> dict[str, set[str]]:
    """Metric names the dashboards query (classhub_*, jupyterhub_*, DCGM_*), with the dashboards."""
    names: dict[str, set[str]] = {}
    for board, exprs in dashboard_queries().items():
        for expr in exprs:
            for name in METRIC_NAME.findall(expr):
                names.setdefault(name, set()).add(board)
    return names


def exported_names(exposition: str) -> set[str]:
    """The sample names a Prometheus text exposition can carry, from its ``# TYPE`` lines (so a
    labelled family without samples yet still counts as exported)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            names.update(name + suffix for suffix in _SUFFIXES.get(kind, ()))
            if kind == "counter" and name.endswith("_total"):
                names.add(name)
    return names


def dcgm_default_metrics() -> set[str]:
    """The metrics NVIDIA's DCGM exporter exports by default (its default-counters.csv)."""
    csv = (REPO / "tests" / "data" / "dcgm-exporter" / "default-counters.csv").read_text()
    return {line.split(",")[0].strip() for line in csv.splitlines()
            if line.strip() and not line.startswith("#")}


# ---------------------------------------------------------------------------- the hub pod
def mount_shim(text: str, mount: Path) -> str:
    """The chart's file with its mount path moved to ``mount`` (nothing else changes)."""
    return text.replace(MOUNT, str(mount))


@dataclass
class ChartHub(HubProcess):
    """``jupyterhub --config <mount>/jupyterhub_config.py`` with the chart's files and values.

    ``values`` are the merged values (chart defaults included, see ``chart_values``);
    ``secret_refs`` answers ``hub.extraEnv`` entries that read a Kubernetes Secret
    (``{(secret name, key): value}``), as the kubelet would.
    """

    root: Path
    values: dict[str, Any]
    kubeconfig: Path
    secret_refs: dict[tuple[str, str], str] = field(default_factory=dict)
    namespace: str = "default"
    port: int = field(default_factory=free_port)
    hub_port: int = field(default_factory=free_port)
    proxy_api_port: int = field(default_factory=free_port)
    service_port: int = field(default_factory=free_port)  # classhub's service on the hub pod
    password: str = ""  # the demo login's password, when the values use the demo authenticator
    proc: subprocess.Popen | None = None
    proxy: subprocess.Popen | None = None
    log_path: Path | None = None
    init_outputs: list[str] = field(default_factory=list)  # what the last start's init containers said
    _log_start: int = 0

    @property
    def mount(self) -> Path:
        return self.root / MOUNT.lstrip("/")

    def secret(self, key: str) -> str:
        """A key of the chart's hub Secret (generated tokens, the Prometheus service's token)."""
        return (self.mount / "secret" / key).read_text()

    def write_mounts(self) -> None:
        config, secret = self.mount / "config", self.mount / "secret"
        config.mkdir(parents=True, exist_ok=True)
        secret.mkdir(parents=True, exist_ok=True)
        for name in ("jupyterhub_config.py", "z2jh.py"):  # subPath mounts and the ConfigMap
            text = mount_shim((Z2JH / name).read_text(), self.mount)
            (self.mount / name).write_text(text)
            (config / name).write_text(text)
        for name in NAMES:
            (config / name).write_text(name)
        # templates/hub/secret.yaml renders ``merge dict .Values``: sprig's merge (mergo) skips
        # the top-level keys whose value is empty (null, "", false, 0, [] or {}), so e.g. the
        # default ``nameOverride: null`` is absent and the chart's config falls back to Chart.Name.
        values = {k: v for k, v in self.values.items() if v not in (None, "", False, 0, [], {})}
        values.update({"Chart": CHART,
                       "Release": {"Name": "classhub", "Namespace": self.namespace, "Service": "Helm"}})
        (secret / "values.yaml").write_text(yaml.safe_dump(values))
        generated = ["hub.config.ConfigurableHTTPProxy.auth_token", "hub.config.JupyterHub.cookie_secret",
                     "hub.config.CryptKeeper.keys"]
        generated += [f"hub.services.{key}.apiToken" for key in self.values["hub"].get("services") or {}]
        for key in generated:
            if not (secret / key).exists():
                (secret / key).write_text(secrets.token_hex(32))
        if self.values["hub"]["db"].get("password"):
            (secret / "hub.db.password").write_text(self.values["hub"]["db"]["password"])

    def environment(self) -> dict[str, str]:
        """What the chart's hub Deployment and Kubernetes give the hub container."""
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "HELM_RELEASE_NAME": "classhub",
            "POD_NAMESPACE": self.namespace,
            "CONFIGPROXY_AUTH_TOKEN": self.secret("hub.config.ConfigurableHTTPProxy.auth_token"),
            # Service links (*_SERVICE_HOST/PORT) for the chart's get_name_env
            "HUB_SERVICE_HOST": "127.0.0.1", "HUB_SERVICE_PORT": str(self.hub_port),
            "PROXY_API_SERVICE_HOST": "127.0.0.1", "PROXY_API_SERVICE_PORT": str(self.proxy_api_port),
            # in a pod, the service account's credentials; here the fake cluster's kubeconfig
            "KUBECONFIG": str(self.kubeconfig),
        }
        env.update(self.env_values(self.values["hub"].get("extraEnv") or {}))
        return env

    def env_values(self, extra: Mapping[str, Any] | list[Mapping[str, Any]]) -> dict[str, str]:
        """A container's env as the kubelet resolves it: a map (z2jh's extraEnv) or a list of
        ``{name, value}`` / ``{name, valueFrom: {secretKeyRef}}`` (``secret_refs`` answers those)."""
        env = {}
        items = extra.items() if isinstance(extra, Mapping) else ((e["name"], e) for e in extra)
        for name, spec in items:
            if isinstance(spec, Mapping) and "valueFrom" in spec:
                ref = spec["valueFrom"]["secretKeyRef"]
                env[name] = self.secret_refs[(ref["name"], ref["key"])]
            else:
                env[name] = str(spec["value"] if isinstance(spec, Mapping) else spec)
        return env

    def run_init_containers(self) -> list[str]:
        """``hub.initContainers`` in order, as the kubelet runs them before the hub's container:
        each its command and args with its own env (the hub image's commands are this Python's
        scripts); one that fails stops the start. Returns each one's output."""
        outputs = []
        scripts = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        for spec in self.values["hub"].get("initContainers") or []:
            env = {**os.environ, "PATH": scripts, **self.env_values(spec.get("env") or [])}
            out = subprocess.run([*spec.get("command", []), *spec.get("args", [])], env=env,
                                 cwd=self.root, capture_output=True, text=True, timeout=120)
            output = out.stdout + out.stderr
            (self.root / f"init-{spec['name']}.log").write_text(output)
            if out.returncode != 0:
                raise RuntimeError(f"init container {spec['name']} exited {out.returncode}: {output[-2000:]}")
            outputs.append(output)
        return outputs

    def command(self) -> list[str]:
        """The container's args as the chart's Deployment renders them."""
        args = [sys.executable, "-m", "jupyterhub", "--config", str(self.mount / "jupyterhub_config.py")]
        upgrade = self.values["hub"]["db"].get("upgrade")
        if upgrade is True or (upgrade is None and self.values["hub"]["db"]["type"] == "sqlite-pvc"):
            args.append("--upgrade-db")
        return args

    def start(self) -> ChartHub:
        self.write_mounts()
        workdir = self.root / "srv" / "jupyterhub"  # the hub image's working directory
        workdir.mkdir(parents=True, exist_ok=True)
        env = self.environment()
        self.init_outputs = self.run_init_containers()  # the pod's init containers, then the hub
        if self.proxy is None or self.proxy.poll() is not None:  # the proxy pod outlives hub restarts
            log = open(self.root / "proxy.log", "ab")  # noqa: SIM115 - the proxy keeps writing to it
            self.proxy = subprocess.Popen(
                [str(PROXY), "--ip", "127.0.0.1", "--port", str(self.port), "--api-ip", "127.0.0.1",
                 "--api-port", str(self.proxy_api_port),
                 "--default-target", f"http://127.0.0.1:{self.hub_port}",
                 "--error-target", f"http://127.0.0.1:{self.hub_port}/hub/error"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": env["CONFIGPROXY_AUTH_TOKEN"]})
        log = self.root / "hub.log"
        self._log_start = log.stat().st_size if log.exists() else 0  # this start's part of the log
        self._launch(self.command(), log, env, cwd=workdir, timeout=90)
        return self

    def _ready(self) -> bool:
        """Ready once this start's log says the hub runs, then as any hub (its API and the
        classhub service answer through the proxy). The hub answers before it has started its
        managed services (and a kept proxy still routes to them), and a SIGTERM is not handled as
        a shutdown until it runs; reading the log also keeps the hub free of readiness requests
        while the service starts."""
        if self.proc.poll() is None:
            with open(self.root / "hub.log", "rb") as log:
                log.seek(self._log_start)
                if RUNNING.encode() not in log.read():
                    return False
        return super()._ready()

    def stop(self, timeout: float = 20) -> None:
        self._stop_hub(timeout)
        if self.proxy is not None and self.proxy.poll() is None:
            self.proxy.send_signal(signal.SIGTERM)
            try:
                self.proxy.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait()

    def pod_processes(self) -> list[psutil.Process]:
        """The processes of the hub container: the hub's managed services (each in a session of
        its own, and left behind if the hub dies) are found by the hub API URL in their
        environment."""
        marker = f":{self.hub_port}/"
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and marker in proc.environ().get("JUPYTERHUB_API_URL", ""):
                    found.append(proc)
        return found

    def _stop_hub(self, timeout: float) -> None:
        """The hub container ends: SIGTERM to the hub (which stops its managed services), then,
        as the container runtime does, SIGKILL to whatever of the container is left."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        left = self.pod_processes()
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=timeout)

    def restart(self, values: dict[str, Any] | None = None, timeout: float = 20) -> ChartHub:
        """The hub pod restarted (``kubectl delete pod``, or ``helm upgrade`` with new ``values``):
        its container ends (``_stop_hub``); the proxy pod keeps running. The new pod runs its init
        containers and the hub again, with the same Secret (generated tokens kept)."""
        self._stop_hub(timeout)
        if values is not None:
            self.values = values
        return self.start()

    def login(self, username: str, password: str) -> HubSession:
        return HubSession(self, username, password)  # type: ignore[arg-type] - same url surface

    def get(self, path: str, token: str, url: str | None = None) -> requests.Response:
        return requests.get(f"{url or self.url}{path}", headers={"Authorization": f"token {token}"},
                            timeout=30)

    def service_address(self, target: str) -> str:
        """Where a scrape target of the chart's hub Service (``hub.<ns>.svc:<port>``) is here."""
        host, port = target.rsplit(":", 1)
        assert host.split(".")[0] == "hub", target
        ports = {"8081": self.hub_port, "10101": self.service_port}
        return f"http://127.0.0.1:{ports[port]}"


__all__ = ["ChartHub", "chart_values", "coalesce", "mount_shim", "operator_nodes", "overlays",
           "read_yaml", "schema_errors", "unknown_operator_keys", "wait_for"]
