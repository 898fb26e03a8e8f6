"""One sandbox job at a time per grading account, and nothing of it left behind (issue 34).

Why: in local mode with system users every grading and competition job runs as one Unix account
(``c.ClasshubJobs.grader_user``). Two processes of one account are not isolated from each other:
``/proc/<pid>/cmdline`` names the other job's sandbox folder and its kernel's connection file,
and a process of the same account may read them, signal it or look into a dumpable one. So
(docs/teachers/autograding.md, "Isolation"):

- **one job at a time**: the wrapper of a sandbox job (hub_ext.backends.local.jobwrap) holds an
  exclusive ``flock`` on ``<grading root>/lock`` for the job's whole life; the service starts the
  next sandbox job only when the lock is free (`hold` without waiting, in
  hub_ext.backends.local.jobs.LocalJobs.hold_back), so waiting happens in the job queue
  ("admitted", with an event) and never eats the job's own time limit;
- **nothing outlives the job**: before the job starts and after it ends (success, failure, time
  limit, cancel), every process of the grading account that started after the last job began is
  killed (`sweep`). The lock file holds that start time, so a sweep that a killed wrapper missed
  is done by the next job's wrapper (or the service's stop) before any other code runs.

The account must be dedicated to classhub: a sweep kills whatever that account started meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from pathlib import Path

import psutil

__all__ = ["LOCK_NAME", "hold", "recorded_start", "sweep"]

LOCK_NAME = "lock"


def _open(path: Path) -> int:
    """The lock file (the service's, 0600, never through a link)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def hold(path: Path, uid: int, *, wait: bool = True, begin: bool = True) -> int | None:
    """Take the lock (the fd to keep open for the job's life; None when `wait` is False and it is
    held), sweep what the last job of `uid` left, and record when this job begins (not when
    `begin` is False: a sweep only)."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    sweep(uid, _since(fd))
    if not begin:
        return fd
    begins = psutil.Process().create_time()  # the clock other processes' start times are in
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{begins!r}\n".encode(), 0)
    return fd


def _since(fd: int) -> float | None:
    try:
        return float(os.pread(fd, 64, 0).decode().strip())
    except (ValueError, UnicodeDecodeError):
        return None


def recorded_start(fd: int) -> float | None:
    """When the job that holds (or last held) the lock began."""
    return _since(fd)


def sweep(uid: int, since: float | None) -> int:
    """Kill every process of `uid` started at or after `since` (nothing when None), until none is
    left (a process may fork while the sweep runs); how many were killed."""
    if since is None:
        return 0
    killed = 0
    for _ in range(200):
        found = []
        for proc in psutil.process_iter(["uids", "create_time", "status"]):
            uids, started = proc.info["uids"], proc.info["create_time"]
            if (uids is None or started is None or uid not in tuple(uids) or started < since
                    or proc.info["status"] == psutil.STATUS_ZOMBIE):
                continue
            found.append(proc.pid)
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)
    return killed
