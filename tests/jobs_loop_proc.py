"""Run classhub's job admission loop alone, as the service runs it (for the SIGKILL tests).

``python -m tests.jobs_loop_proc DB_URL HOMES INVENTORY``: the product's `JobService` with the
local backend; nothing here stands in for product code. `run` is the same in a process forked from
one that has only imported this module (tests/test_jobs_restart.py's forkserver).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping

from hub_ext import store
from hub_ext.service.jobs.settings import ClasshubJobs, JobService


def main(db_url: str, homes: str, inventory: str) -> None:
    settings = ClasshubJobs(homes_dir=homes, gpu_discovery_command=["cat", inventory], use_nvml=False,
                            interval=0.2, grace=1.0)
    sessions = store.connect(db_url)
    service = JobService.make(sessions, settings.local_backend(), settings)
    asyncio.run(service.loop.run_forever())


def run(db_url: str, homes: str, inventory: str, cwd: str, env: Mapping[str, str]) -> None:
    """`main` as ``python -m tests.jobs_loop_proc`` runs it in ``cwd`` with ``env`` added to the
    environment; the process's state besides its imports starts here (the store, the loop)."""
    os.environ.update(env)
    os.chdir(cwd)
    main(db_url, homes, inventory)


if __name__ == "__main__":
    main(*sys.argv[1:4])
