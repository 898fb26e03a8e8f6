"""Slow-callback watch for every Python process of a test hub (tests/test_event_loops.py).

Loaded by Python at start (``sitecustomize``) in each process whose ``PYTHONPATH`` starts with
a folder holding a copy of this file and its settings (``loopwatch.json``, see `_settings`): the
hub, the classhub service, the culler and the single-user servers (JupyterHub passes
``PYTHONPATH`` on to all of them).

It turns on asyncio's debug mode with a slow-callback threshold of ``CLASSHUB_LOOPWATCH_SECONDS``
(asyncio then logs "Executing <handle> took N seconds"), and for every such callback writes one
JSON line to ``<dir>/<pid>.jsonl`` with what asyncio cannot say: where the loop's thread was while
the callback ran (its Python stack, sampled every few milliseconds) and how much of the callback's
time was the loop's own (not time spent waiting for a CPU on a loaded machine, read from the
thread's ``schedstat``, nor the interpreter's garbage collections, docs/architecture.md's
``hub_ext/heap.py``). Standard library only: it runs before anything else is importable.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import sys
import threading
import time


def _settings() -> dict:
    """``loopwatch.json`` beside this file (JupyterHub passes ``PYTHONPATH`` on to services and
    servers, but not other variables), else the ``CLASSHUB_LOOPWATCH_*`` variables."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "loopwatch.json")) as f:
            return json.load(f)
    except OSError:
        return {"dir": os.environ.get("CLASSHUB_LOOPWATCH_DIR", ""),
                "seconds": float(os.environ.get("CLASSHUB_LOOPWATCH_SECONDS", "0.05")),
                "code": [p for p in os.environ.get("CLASSHUB_LOOPWATCH_CODE", "").split(os.pathsep) if p]}


_SETTINGS = _settings()
#: Where each process writes its slow callbacks (``<pid>.jsonl``); empty: no watch.
OUT = _SETTINGS["dir"]
THRESHOLD = float(_SETTINGS["seconds"])
#: Folders of classhub's own code (absolute).
CODE = tuple(p.rstrip(os.sep) + os.sep for p in _SETTINGS["code"])
#: Code that calls classhub or that classhub extends: a stall whose innermost owner is one of
#: these (e.g. JupyterHub's own database commit, KubeSpawner's reflector) is not classhub's.
HOSTS = tuple(f"{os.sep}{name}{os.sep}" for name in (
    "jupyterhub", "tornado", "jupyter_server", "jupyterlab", "kubespawner", "asyncio",
    "jupyter_server_terminals", "notebook_shim", "ipykernel", "jupyter_client", "traitlets"))
SAMPLE_EVERY = 0.005


def owner(filename: str) -> str:
    """"classhub", "host" or "" (belongs to its caller). classhub's Jinja templates (a hub page
    JupyterHub renders) are markup, not classhub's code: their frames belong to the renderer."""
    if filename.endswith(".py") and any(filename.startswith(c) for c in CODE):
        return "classhub"
    if filename == __file__ or filename.endswith("sitecustomize.py"):
        return ""
    if any(h in filename for h in HOSTS):
        return "host"
    return ""  # the standard library and libraries (sqlalchemy, json, ...) belong to their caller


def blame(frames: list[tuple[str, int, str]]) -> tuple[str, str]:
    """(owner, "file:line function") of the innermost frame that is classhub's or a host's."""
    for filename, line, function in reversed(frames):
        who = owner(filename)
        if who:
            return who, f"{filename}:{line} {function}"
    return "host", ""


def stack_of(frame) -> list[tuple[str, int, str]]:
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    frames.reverse()
    return frames


def coroutine_stack(handle: asyncio.Handle) -> list[tuple[str, int, str]]:
    """Where a task's coroutine chain stands (the callback of a Task step), outermost first."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


class Watch:
    """The callback one loop thread is running, and what the sampler saw of it."""

    def __init__(self) -> None:
        self.tid = threading.get_ident()
        self.handle = None
        self.started = 0.0
        self.samples: list[tuple[str, str]] = []
        self.gc_seconds = 0.0
        self._gc_at = 0.0
        try:
            self.schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.schedstat = -1
        self.native_id = threading.get_native_id()

    def queued(self) -> float:
        """Seconds this thread has waited for a CPU so far (0 where the kernel does not say)."""
        if self.schedstat < 0:
            return 0.0
        return int(os.pread(self.schedstat, 100, 0).split()[1]) / 1e9

    def others_queued(self) -> dict[int, float]:
        """Seconds each other thread of the process has waited for a CPU so far. A thread that
        holds the interpreter's lock while it waits for a CPU (the sampler, a worker of
        ``asyncio.to_thread``) keeps the loop's thread waiting too, asleep and not queued: that
        wait is the machine's load, not the callback's own time."""
        waits = {}
        for tid, fd in _task_files.items():
            if tid != self.native_id:
                with contextlib.suppress(OSError, IndexError, ValueError):  # the thread ended
                    waits[tid] = int(os.pread(fd, 100, 0).split()[1]) / 1e9
        return waits


#: Open ``schedstat`` files of the process's threads by native id; replaced whole (never changed
#: in place) by `_refresh_task_files`, which the sampler calls about once a second.
_task_files: dict[int, int] = {}
_ended: list[int] = []


def _refresh_task_files() -> None:
    global _task_files
    try:
        now = {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return
    old = _task_files
    fresh = {tid: fd for tid, fd in old.items() if tid in now}
    for tid in now - set(fresh):
        with contextlib.suppress(OSError):
            fresh[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
    _task_files = fresh
    for fd in _ended:  # closed a refresh later: a loop thread may still be reading the old files
        os.close(fd)
    _ended[:] = [fd for tid, fd in old.items() if tid not in fresh]


def _others_wait(before: dict[int, float], after: dict[int, float]) -> float:
    """The longest CPU wait of another thread between two readings (waits overlap: not a sum)."""
    return max((after[t] - before[t] for t in before if t in after), default=0.0)


_local = threading.local()
_watches: dict[int, Watch] = {}
_out = None


def _write(record: dict) -> None:
    global _out
    if _out is None:
        _out = open(os.path.join(OUT, f"{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115
    _out.write(json.dumps(record) + "\n")


def _gc(phase: str, info: dict) -> None:
    watch = _watches.get(threading.get_ident())
    if watch is None or watch.handle is None:
        return
    if phase == "start":
        watch._gc_at = time.monotonic()
    else:
        watch.gc_seconds += time.monotonic() - watch._gc_at


def _sampler() -> None:
    ticks = 0
    while True:
        time.sleep(SAMPLE_EVERY)  # a sampling profiler's period, not a wait for a condition
        ticks += 1
        if ticks % 200 == 0:  # about once a second: new worker threads
            _refresh_task_files()
        frames = sys._current_frames()
        now = time.monotonic()
        for tid, watch in list(_watches.items()):
            handle, samples = watch.handle, watch.samples
            if handle is None or now - watch.started < SAMPLE_EVERY or tid not in frames:
                continue
            samples.append(blame(stack_of(frames[tid])))
        del frames


def install() -> None:
    os.environ["PYTHONASYNCIODEBUG"] = "1"
    base = asyncio.base_events.BaseEventLoop
    original_init = base.__init__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.set_debug(True)
        self.slow_callback_duration = THRESHOLD
        _write({"pid": os.getpid(), "argv": " ".join(sys.argv[:3]), "loop": True})

    base.__init__ = __init__
    original_run = asyncio.events.Handle._run

    def _run(self):
        watch = getattr(_local, "watch", None)
        if watch is None:
            watch = _local.watch = _watches[threading.get_ident()] = Watch()
        if watch.handle is not None:  # a loop run from inside a callback: watch the outer one
            return original_run(self)
        before = coroutine_stack(self)
        watch.samples, watch.gc_seconds = [], 0.0
        queued, cpu, others = watch.queued(), time.thread_time(), watch.others_queued()
        watch.started = started = time.monotonic()
        watch.handle = self
        try:
            return original_run(self)
        finally:
            watch.handle = None
            wall = time.monotonic() - started
            if wall >= THRESHOLD:
                waits = _others_wait(others, watch.others_queued())
                _report(self, watch, wall, time.thread_time() - cpu, watch.queued() - queued, waits,
                        before)

    asyncio.events.Handle._run = _run
    gc.callbacks.append(_gc)
    threading.Thread(target=_sampler, name="loopwatch", daemon=True).start()
    _refresh_task_files()


def _report(handle, watch: Watch, wall: float, cpu: float, queued: float, others: float,
            before) -> None:
    try:
        own = max(0.0, wall - queued - others - watch.gc_seconds)
        samples = watch.samples
        chain = blame(before) if before else ("host", "")
        if samples:
            mine = [where for who, where in samples if who == "classhub"]
            verdict = len(mine) * 2 >= len(samples)
            # the place most samples saw (a sample taken as the callback returns names no one)
            named = [where for _, where in samples if where]
            where = (max(set(mine), key=mine.count) if mine
                     else max(set(named), key=named.count) if named else samples[-1][1])
        else:  # the stall held the interpreter (one C call): the task's own code is the witness
            verdict, where = chain[0] == "classhub", chain[1]
        _write({"pid": os.getpid(), "argv": " ".join(sys.argv[:3]), "handle": repr(handle)[:400],
                "wall": round(wall, 4), "cpu": round(cpu, 4), "queued": round(queued, 4),
                "others_queued": round(others, 4), "gc": round(watch.gc_seconds, 4),
                "own": round(own, 4), "samples": len(samples),
                "classhub": verdict and own >= THRESHOLD, "where": where,
                "places": sorted({w for _, w in samples if w})[:8]})
    except Exception as e:  # the watch must never break the process it watches
        print(f"loopwatch: {e!r}", file=sys.stderr)


if OUT:
    install()
