"""What the idle culler asks a running server: are its kernels or its GPU busy?

Why the server answers itself: the hub only knows ``last_activity`` (browser traffic and kernel
messages reported by jupyterhub-singleuser), and a kernel busy with ``time.sleep`` or a long
training step sends nothing for minutes, so a culler that trusts the hub alone kills training
runs nobody watches (jupyterhub-idle-culler issue 55, JupyterHub issue 1498). This handler reads
the kernel manager's execution states and, where NVML is installed, how busy the GPUs used by
this server's processes are.

``GET <base_url>api/classhub/activity`` (authenticated like every server API: the owner, or a token
with ``access:servers`` for this server, which the culler service has) answers::

    {"kernels": {"total": 2, "busy": 1}, "busy": true,
     "last_kernel_activity": "2026-11-30T21:00:00+00:00",
     "gpu": {"status": "ok", "utilization": 87.0, "devices": 1, "processes": 1}}

``gpu.status`` is ``ok``, ``none`` (NVML sees no process of this server) or ``unknown`` (no NVML,
no driver, or an NVML error; ``gpu.reason`` says which). It never fails because of NVML. Asking
does not count as activity: the culler's own request must not keep the server alive.

The server also *tells* the hub: every `ClasshubActivity.busy_check_interval` seconds, while a
kernel is busy or the GPU of one of its processes is at least `ClasshubActivity.gpu_busy_percent`
busy, it sets the web app setting
``classhub_busy_last_activity`` (jupyter-server counts every ``*_last_activity`` setting as
activity), so the activity that jupyterhub-singleuser reports to the hub anyway (every
``JUPYTERHUB_ACTIVITY_INTERVAL`` seconds) includes busy kernels and GPUs at no extra request. Any
culler that reads the hub's ``last_activity`` then spares a busy server.

Both are traits of the server's own configuration (``c.ClasshubActivity.*`` in a
``jupyter_server_config.py`` of the image, or ``--ClasshubActivity.busy_check_interval=10`` in the
spawner's ``args``): the server is a process of its own, configured as jupyter-server is.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timezone
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Float
from traitlets.config import LoggingConfigurable

ROUTE = "api/classhub/activity"
BUSY_SETTING = "classhub_busy_last_activity"
#: The environment variables that set these before they were traits (a warning names the trait).
OLD_VARIABLES = {"CLASSHUB_BUSY_CHECK_INTERVAL": "busy_check_interval",
                 "CLASSHUB_GPU_BUSY_PERCENT": "gpu_busy_percent"}


class ClasshubActivity(LoggingConfigurable):
    """How a single-user server decides it is busy (see the module docstring)."""

    busy_check_interval = Float(
        30.0, config=True,
        help="Seconds between the server's checks for busy kernels and a busy GPU; each busy check "
        "counts as activity the hub hears of at jupyterhub-singleuser's next report. 0: no checks "
        "(the culler still asks the activity endpoint). The culler's `ClasshubCuller.activity_lag` "
        "assumes at most 30.",
    )
    gpu_busy_percent = Float(
        5.0, config=True,
        help="NVML utilisation (percent) at or above which a GPU this server's processes use counts "
        "as busy: a training run is busy, a model only loaded in memory is not.",
    )


def _iso(value: Any) -> str | None:
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()


def kernel_activity(kernel_manager: Any) -> dict[str, Any]:
    """Counts of all and busy kernels, and the latest kernel activity (from the kernel manager)."""
    total = busy = 0
    latest: datetime | None = None
    for kernel_id in list(kernel_manager.list_kernel_ids()):
        try:
            kernel = kernel_manager.get_kernel(kernel_id)
        except KeyError:  # stopped while we looked
            continue
        total += 1
        if getattr(kernel, "execution_state", None) == "busy":
            busy += 1
        seen = getattr(kernel, "last_activity", None)
        if isinstance(seen, datetime):
            seen = seen if seen.tzinfo else seen.replace(tzinfo=timezone.utc)
            latest = seen if latest is None or seen > latest else latest
    return {"kernels": {"total": total, "busy": busy}, "last_kernel_activity": _iso(latest)}


def server_pids(root: int | None = None) -> set[int]:
    """This server's process and all its descendants (its kernels and what they started)."""
    import psutil

    root_pid = os.getpid() if root is None else root
    try:
        proc = psutil.Process(root_pid)
        return {root_pid} | {p.pid for p in proc.children(recursive=True)}
    except psutil.Error:
        return {root_pid}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_activity(pids: set[int], nvml: Any = None) -> dict[str, Any]:
    """Utilisation of the GPUs on which any of ``pids`` runs, from NVML (``pynvml``).

    Devices (and MIG devices, whose own utilisation NVML does not report: then the parent GPU's
    is used) count when NVML lists one of ``pids`` among their compute or graphics processes.
    The answer is the highest utilisation among them. Any problem is ``status: unknown``.
    """
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return {"status": "unknown", "reason": "NVML is not installed (pip install nvidia-ml-py)"}
    try:
        nvml.nvmlInit()
    except Exception as e:  # no driver, no device, a container without the library
        return {"status": "unknown", "reason": f"NVML is not available: {_text(e)}"}
    try:
        utilizations: list[float] = []
        processes = 0
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mine = 0
            for lister in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                fn = getattr(nvml, lister, None)
                if fn is None:
                    continue
                try:
                    mine += sum(1 for p in fn(handle) if getattr(p, "pid", None) in pids)
                except Exception:  # not supported on this device: nothing to count
                    continue
            if mine:
                processes += mine
                utilizations.append(float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        if not processes:
            return {"status": "none", "utilization": 0.0, "devices": 0, "processes": 0}
        return {"status": "ok", "utilization": max(utilizations), "devices": len(utilizations),
                "processes": processes}
    except Exception as e:  # an NVML error half way: say so, never fail the request
        return {"status": "unknown", "reason": f"NVML error: {_text(e)}"}
    finally:
        with contextlib.suppress(Exception):  # a half-initialised NVML: nothing left to do
            nvml.nvmlShutdown()


def _settings(app: Any) -> ClasshubActivity:
    return app.settings.get("classhub_activity") or ClasshubActivity()


class ActivityHandler(APIHandler):
    """``GET api/classhub/activity``: kernel states and GPU use of this server, for the culler."""

    # The culler's own request must not look like the user's activity.
    _track_activity = False

    @web.authenticated
    async def get(self) -> None:
        out = report(self.kernel_manager, _settings(self).gpu_busy_percent)
        if out["busy"]:
            self.settings[BUSY_SETTING] = datetime.now(timezone.utc)
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(out))


def report(kernel_manager: Any, gpu_busy_percent: float = 5.0) -> dict[str, Any]:
    """The full answer of the activity endpoint."""
    out = kernel_activity(kernel_manager)
    out["gpu"] = gpu_activity(server_pids())
    gpu_busy = out["gpu"].get("status") == "ok" and out["gpu"]["utilization"] >= gpu_busy_percent
    out["busy"] = out["kernels"]["busy"] > 0 or gpu_busy
    return out


def mark_busy(web_app: Any) -> bool:
    """Count a busy kernel or GPU as activity now (see the module doc); True when busy."""
    busy = report(web_app.settings["kernel_manager"], _settings(web_app).gpu_busy_percent)["busy"]
    if busy:
        web_app.settings[BUSY_SETTING] = datetime.now(timezone.utc)
    return busy


def setup(serverapp: Any) -> None:
    """Register the activity handler and the busy-marking loop with the server."""
    from tornado.ioloop import PeriodicCallback

    settings = ClasshubActivity(parent=serverapp)
    for variable, trait in OLD_VARIABLES.items():
        if variable in os.environ:
            serverapp.log.warning("classhub: %s is set, but classhub no longer reads it: set "
                                  "c.ClasshubActivity.%s in the server's configuration instead",
                                  variable, trait)
    serverapp.web_app.settings["classhub_activity"] = settings
    base_url = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base_url, ROUTE), ActivityHandler)])
    if settings.busy_check_interval > 0:
        def tick() -> None:
            try:
                mark_busy(serverapp.web_app)
            except Exception:  # never let the reporter take the server down
                serverapp.log.exception("classhub: checking for busy kernels failed")

        callback = PeriodicCallback(tick, settings.busy_check_interval * 1000)
        serverapp.web_app.settings["classhub_busy_callback"] = callback
        callback.start()
    serverapp.log.info("classhub activity extension loaded (%s)", url_path_join(base_url, ROUTE))
