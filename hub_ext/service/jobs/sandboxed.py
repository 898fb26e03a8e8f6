"""Jobs in the grading sandbox that a part of the service submits and collects itself: gradings
(hub_ext.service.assignments.grading) and a competition's runs (hub_ext.service.competitions.runs).

Why one base class: both hand a job's one-time inputs to the backend's sandbox
(`JobBackend.prepare_sandbox`), submit it to the job service's store as the teacher who set it up
(same queue, admission and quota as any other job), keep the items whose job has not ended in
memory (read from the store at start), look at them every `interval` seconds and whenever the
job store says one of their jobs changed, and read each result from the end of the job's log.
What differs (the inputs, the result, the sentences) is the subclass's: `_waiting`, `_gone`,
`_log_keep`, `_store_result` and `_finished`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

import hub_ext
from hub_ext.core import jobs as J
from hub_ext.service.jobs.loop import launch_of

__all__ = ["SandboxedJobs", "grader_command"]

_ROLE = "grader"


def grader_command(python: str, sandbox: Mapping[str, str],
                   module: str = "hub_ext.backends.grader") -> tuple[str, ...]:
    """The grading job's command: the grader of the very code tree this service runs (its
    folder first on the path, so an editable install or a second checkout grades with its own
    code), in isolated mode (no user site, no PYTHON* variables). ``module``: another command of
    the same sandbox (a competition's runner, hub_ext.backends.competition_runner)."""
    if sandbox.get("secret"):  # Kubernetes: the grader's code travels in the Secret (grader_bundle)
        from hub_ext.backends.kubernetes.jobs import GRADER_UID, GRADING_INPUTS, GRADING_WORK

        root, python = f"{GRADING_INPUTS}/lib", "python"
        args: tuple[str, ...] = (GRADING_INPUTS, "--drop-to", str(GRADER_UID), "--work", GRADING_WORK)
    else:
        root, args = str(Path(hub_ext.__file__).resolve().parent.parent), (sandbox["folder"],)
    code = (f"import sys; sys.path.insert(0, {root!r}); "
            f"from {module} import main; sys.exit(main())")
    return (python, "-I", "-c", code, *args)


class SandboxedJobs:
    """Submits jobs in the grading sandbox and collects their results (one per service and kind
    of job). ``_pending`` maps an item (a submission's id) to the job that works on it; it is
    only touched in the service's loop."""

    #: the names of this kind's jobs begin with one of these
    prefixes: tuple[str, ...] = ()
    #: the logger of this kind, and its line for a collection that raised (with the item's id)
    logger = logging.getLogger("classhub")
    collect_failed = "collecting %s"

    def __init__(self, sessions: sessionmaker[Session], jobs: Any, storage: Any,
                 python: str = sys.executable, interval: float = 2.0) -> None:
        self.sessions = sessions
        self.jobs = jobs
        self.storage = storage  # () -> the kind's storage (raises when not configured)
        self.python = python
        self.interval = interval
        self._pending: dict[int, str] = {}  # item id -> job id
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ submitting
    def _private(self) -> bool:
        """Whether the jobs run as a grading account (and make themselves non-dumpable): locally
        without --system-users every job is the service's own account, nothing to hide from a
        neighbour, and the job service must read the processes' environment to stop them."""
        return bool(getattr(self.jobs.backend, "system_users", True))

    async def _submit_job(self, files: dict[str, bytes], settings: Mapping[str, Any], course: str,
                          name: str, owner: str, module: str) -> tuple[str, Mapping[str, str]]:
        """Put ``files`` in a sandbox and submit ``module``'s command there as ``owner``'s job
        (``settings``: the job's "fields", "time_limit" and "profiles"); its id and sandbox. A
        job the store refuses leaves no sandbox behind."""
        backend = self.jobs.backend
        sandbox = await backend.prepare_sandbox(files)
        command = grader_command(self.python, sandbox, module)
        fields = {**settings["fields"], "max_runtime": float(settings["time_limit"]) * 2 + 120}
        now = datetime.now(timezone.utc)
        job = J.parse_job({**fields, "name": name}, owner=owner, course=course,
                          submit_time=now.timestamp(),
                          default_max_runtime=self.jobs.settings.default_max_runtime,
                          max_runtime_limit=max(self.jobs.settings.max_runtime_limit, fields["max_runtime"]))
        submission = J.Submission(None, course, name, command, {}, "", fields)
        try:
            record, _ = await asyncio.to_thread(self.jobs.store.submit, owner, course, submission, job,
                                                now, settings.get("profiles") or {}, sandbox)
        except BaseException:
            await backend.drop_sandbox(sandbox)
            raise
        self.jobs.loop.poke()
        return record.job_id, sandbox

    # ------------------------------------------------------------------ collecting
    def job_changed(self, job_id: str) -> None:
        """JobStore listener (any thread): wake the collector, which looks at its own pending
        jobs in its loop (``_pending`` is only touched there)."""
        if self._loop is not None and job_id.startswith(self.prefixes):
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run_forever(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.jobs.store.listen(self.job_changed)
        self._pending.update(await asyncio.to_thread(self._waiting))
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            for item, job_id in list(self._pending.items()):
                try:
                    # a job that follows another one (a competition's scoring job) is pending
                    # under the same item
                    if await self.collect(item, job_id) and self._pending.get(item) == job_id:
                        self._pending.pop(item, None)
                except Exception:
                    self.logger.exception(self.collect_failed, item)

    async def collect(self, item: int, job_id: str) -> bool:
        """Act on a finished job (keep its result, or the sentence of its failure); False while
        it still runs."""
        record = await asyncio.to_thread(self.jobs.store.get, job_id)
        if record is None:
            await asyncio.to_thread(self._gone, item)
            return True
        if record.state not in J.FINAL:
            return False
        launch = launch_of(record)
        text = await self._log_tail(launch, self._log_keep())
        then = await asyncio.to_thread(self._store_result, item, job_id, record.state, record.reason,
                                       text)
        with contextlib.suppress(Exception):
            await self.jobs.backend.drop_sandbox(launch.sandbox)
        await self._finished(item, then)
        return True

    async def _log_tail(self, launch: Any, keep: int) -> str:
        """The last ``keep`` bytes of the job's log, where its result line is."""
        tail, offset = b"", 0
        while True:
            chunk = await self.jobs.backend.logs(launch, _ROLE, 0, offset, 1024 * 1024)
            if not chunk:
                break
            offset += len(chunk)
            tail = (tail + chunk)[-keep:]
        return tail.decode("utf-8", "replace")

    # ------------------------------------------------------------------ the kind's own
    def _waiting(self) -> dict[int, str]:
        """The items whose job has not been collected, as the database says (at start)."""
        raise NotImplementedError

    def _gone(self, item: int) -> None:
        """The item's job is no longer in the job store (in a worker thread)."""
        raise NotImplementedError

    def _log_keep(self) -> int:
        """How much of the end of a job's log holds its result, in bytes."""
        raise NotImplementedError

    def _store_result(self, item: int, job_id: str, state: str, reason: str, text: str) -> Any:
        """Keep what the ended job gave (in a worker thread); what `_finished` is handed."""
        raise NotImplementedError

    async def _finished(self, item: int, then: Any) -> None:
        """After a job's result is kept and its sandbox dropped: nothing, unless the kind has a
        next job to start."""
