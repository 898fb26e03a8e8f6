"""Local mode's job runner: every replica of a distributed job is a process on this machine.

Why it looks like this:
- **The environment torchrun and the Kubeflow training operator give** (MASTER_ADDR,
  MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK and the PET_* variables torchrun reads),
  so a training script written for a PyTorchJob runs unchanged. Each replica is one "node" of
  one process; rank 0 is the first replica of the first role (the master).
- **GPUs come from the same devices as notebooks**: CUDA_VISIBLE_DEVICES names the UUIDs the
  admission loop picked among those no notebook and no other job holds. Which devices notebooks
  hold is read from the process table (each server and its kernels carry their
  CUDA_VISIBLE_DEVICES): the running processes are the truth (docs/architecture.md, rule 4).
- **As the user, in the user's home**: with system users each replica runs as the user's Unix
  account, working in the home (or the job's workdir in it).
- **Nothing the user controls steers the service** (docs/admins/security.md, "Security model"): the
  job's logs and bookkeeping (claims, exit statuses, the command's environment) live in
  ``<state_dir>/<job id>/``, a 0700 folder of the service's account; the service never creates,
  opens or changes a path in the home. Processes are found by what the service started (a claim
  holds the wrapper's pid and start time), never by a pid a user could write.
- **Nothing is left behind**: every replica runs in its own session under a small wrapper
  (hub_ext.backends.local.jobwrap) that claims it (no duplicate after a crash) and records its
  exit status; a stop sends SIGTERM to the process groups, SIGKILL after the grace period, then
  kills any process of the owner's account that still carries the job's CLASSHUB_JOB_ID (one
  that left its group).
- **One hub's processes**: every replica carries the hub it belongs to (CLASSHUB_HUB_API_URL, the
  hub's API URL as JupyterHub gives it to servers and services in JUPYTERHUB_API_URL), so the
  devices a backend counts as held are those of its own hub's notebooks and jobs, not those of
  another hub on the same machine (a second hub for a test, a staging hub).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import psutil

from hub_ext.backends.jobs import ENDED, PENDING, RUNNING, Launch, ReplicaLaunch, ReplicaStatus, replica_name
from hub_ext.backends.local import accounts, processes, sandbox
from hub_ext.core.admission import NodeState
from hub_ext.core.devices import Inventory, cuda_visible_devices, matches_product, product_label
from hub_ext.core.resources import PODS, ResourceVector

__all__ = ["LocalJobs", "job_devices", "job_processes", "notebook_devices", "torch_env"]

JOB_ENV = "CLASSHUB_JOB_ID"
#: The hub a job replica belongs to (its API URL); servers carry JupyterHub's JUPYTERHUB_API_URL.
JOB_HUB_ENV = "CLASSHUB_HUB_API_URL"
SERVER_HUB_ENV = "JUPYTERHUB_API_URL"
_WRAPPER = "hub_ext.backends.local.jobwrap"
log = logging.getLogger(__name__)


def torch_env(launch: Launch, replica: ReplicaLaunch, master_addr: str = "127.0.0.1") -> dict[str, str]:
    """The variables torchrun (and the training operator, as PET_*) give one replica."""
    world, rank = str(launch.world_size), str(replica.rank)
    return {
        "MASTER_ADDR": master_addr, "MASTER_PORT": str(launch.master_port),
        "WORLD_SIZE": world, "RANK": rank, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": rank,
        "PET_MASTER_ADDR": master_addr, "PET_MASTER_PORT": str(launch.master_port),
        "PET_NNODES": world, "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": rank,
        JOB_ENV: launch.job_id, "CLASSHUB_JOB_ROLE": replica.role,
        "CLASSHUB_REPLICA_INDEX": str(replica.index),
    }


def job_processes(job_id: str | None = None, uid: int | None = None) -> list[psutil.Process]:
    """Live processes that carry a job's CLASSHUB_JOB_ID (any job's when `job_id` is None), of
    the account `uid` only when given (anyone can put a job's id in their own environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE or (uid is not None and proc.uids().real != uid):
                continue
            value = proc.environ().get(JOB_ENV)
        except (psutil.Error, OSError):
            continue
        if value is not None and (job_id is None or value == job_id):
            found.append(proc)
    return found


def job_devices(hub: str | None = None) -> set[str]:
    """GPU UUIDs that job replicas hold now (their CUDA_VISIBLE_DEVICES): what a local GPU pool
    must not hand to a notebook while a job runs. Only the replicas of hub `hub` (its API URL)
    when given."""
    held: set[str] = set()
    for proc in job_processes():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if hub is None or env.get(JOB_HUB_ENV) == hub:
            held.update(u for u in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if u.strip())
    return held


def notebook_devices(hub: str | None = None) -> set[str]:
    """GPU UUIDs that servers (and their kernels) hold: the CUDA_VISIBLE_DEVICES of every process
    a hub started for a user (JUPYTERHUB_USER set) that is not a job replica; only those of hub
    `hub` (its API URL, the servers' JUPYTERHUB_API_URL) when given."""
    held: set[str] = set()
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if "JUPYTERHUB_USER" in env and JOB_ENV not in env and (
                hub is None or env.get(SERVER_HUB_ENV) == hub):
            held.update(u for u in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if u.strip())
    return held


class LocalJobs:
    """Runs jobs as process groups on this machine (see the module docstring)."""

    def __init__(self, homes_dir: Path, inventory: Inventory, *, system_users: bool = False,
                 user_prefix: str = "jupyter-", node: str = "localhost",
                 python: str = sys.executable, state_dir: Path | None = None,
                 hub_api_url: str | None = None, grader_user: str = "nobody") -> None:
        self.homes_dir = Path(homes_dir)
        #: with system users, the account grading jobs run under (neither a student's nor ours)
        self.grader_user = grader_user
        #: the jobs' logs and bookkeeping (default: ``jobs`` beside the homes, in the data dir)
        self.state_dir = Path(state_dir) if state_dir else self.homes_dir.resolve().parent / "jobs"
        self.inventory = inventory
        self.system_users = system_users
        self.user_prefix = user_prefix
        self.node = node
        self.python = python
        #: the hub this backend's jobs belong to (None: every hub's servers count as holders)
        self.hub_api_url = hub_api_url
        self._children: dict[int, subprocess.Popen] = {}
        #: sandbox jobs this service launched whose wrapper may not hold the lock yet
        self._sandboxes: dict[str, Launch] = {}
        if system_users and grader_user == "nobody":
            log.warning("classhub: grading jobs run as 'nobody', an account other daemons may use: "
                        "create a dedicated account (e.g. classhub-grader) and set "
                        "c.ClasshubJobs.grader_user; a job's sweep kills what that account started "
                        "while the job ran (docs/teachers/autograding.md, \"Isolation\")")
        if system_users and (tools := accounts.may_schedule(grader_user)):
            log.warning("classhub: the grading account %r may schedule commands with %s: a student's "
                        "notebook could leave one that runs between jobs; add it to /etc/cron.deny "
                        "and /etc/at.deny (docs/teachers/autograding.md, \"Isolation\")",
                        grader_user, " and ".join(tools))

    # -- capacity -------------------------------------------------------------------------------
    def allocatable(self) -> ResourceVector:
        """Whole devices per resource (shared GPUs are for notebooks), the CPUs and memory."""
        amounts: dict[str, int | Fraction] = {
            r: len(self.inventory.devices_for(r)) for r in self.inventory.resources()
            if not r.endswith(".shared")}
        amounts["cpu"] = os.cpu_count() or 1
        amounts["memory"] = psutil.virtual_memory().total
        amounts[PODS] = 1024
        return ResourceVector(amounts)

    async def nodes(self, held: Mapping[str, Sequence[str]], other: ResourceVector | None = None,
                    running: Sequence[Launch] = ()) -> tuple[NodeState, ...]:
        """This machine as one node: free = allocatable - notebooks' devices - jobs' devices -
        `other` (the CPU and memory running jobs asked for)."""
        notebooks = await asyncio.to_thread(notebook_devices, self.hub_api_url)
        taken = notebooks | {u for uuids in held.values() for u in uuids}
        allocatable = self.allocatable()
        used: dict[str, Fraction] = {}
        for uuid in taken:
            device = self.inventory.device(uuid)
            if device is not None and device.resource_name in allocatable:
                used[device.resource_name] = used.get(device.resource_name, Fraction(0)) + 1
        free = (allocatable - ResourceVector(used) - (other or ResourceVector())).clamp()
        products = {product_label(p) for r in self.inventory.resources()
                    for p in self.inventory.products_of(r)}
        return (NodeState(self.node, allocatable, free,
                          gpu_product=next(iter(products)) if len(products) == 1 else None),)

    def devices_for(self, node: str, resource: str, count: int, taken: set[str],
                    product: str | None = None) -> list[str]:
        """`count` free devices of `resource`, avoiding `taken` and what notebooks hold now; of
        GPU model `product` when given (a whole-GPU-by-model profile), matched as the hub's GPU
        pool matches a notebook's profile (`matches_product`)."""
        busy = taken | notebook_devices(self.hub_api_url)
        free = [d.uuid for d in self.inventory.devices_for(resource)
                if d.uuid not in busy and matches_product(d.product, product)]
        if len(free) < count:
            model = f" {product}" if product else ""
            raise RuntimeError(f"only {len(free)}{model} {resource} free on {node}, {count} needed")
        return free[:count]

    # -- where things live ----------------------------------------------------------------------
    def home(self, owner: str) -> Path:
        return self.homes_dir.resolve() / accounts.safe_name(owner)

    def job_dir(self, launch: Launch) -> Path:
        """The job's logs and bookkeeping: in the service's own folder, never in the home."""
        if not _JOB_ID.fullmatch(launch.job_id):
            raise RuntimeError(f"job id {launch.job_id!r} is not a DNS-1123 name")
        return self.state_dir / launch.job_id

    def sandbox_root(self) -> Path:
        """Where grading jobs' private folders are: ``grading`` beside the jobs' state folder,
        of the service's account, mode 0711 (a grader enters its own folder, whose random name
        it is told, but lists nothing)."""
        return self.state_dir.parent / "grading"

    def sandbox_lock(self) -> Path:
        """The lock a sandbox job's wrapper holds for its whole life (one at a time)."""
        return self.sandbox_root() / sandbox.LOCK_NAME

    async def hold_back(self, launch: Launch) -> str | None:
        """Why an admitted job must not start yet (None: start it). With system users, sandbox
        jobs share one Unix account, so only one runs at a time (hub_ext.backends.local.sandbox):
        the next waits here, admitted, and its time limit starts only when it runs."""
        if not (self.system_users and launch.sandbox):
            return None
        return await asyncio.to_thread(self._hold_back, launch)

    def _hold_back(self, launch: Launch) -> str | None:
        folder = self.job_dir(launch)
        if any((folder / f"{replica_name(r.role, r.index)}.pid").exists() for r in launch.replicas):
            return None  # launched already (before a restart of the service): it holds the lock
        for job_id, other in list(self._sandboxes.items()):
            if job_id != launch.job_id and not self._sandbox_over(other):
                return self._waiting_sentence()
            if job_id != launch.job_id:
                del self._sandboxes[job_id]
        if launch.job_id not in self._sandboxes:
            # free (else one started before a restart of the service holds it): sweep what the
            # last job left now, so no process of it sees this job's wrapper start
            fd = sandbox.hold(self.sandbox_lock(), self._grader().uid, wait=False, begin=False)
            if fd is None:
                return self._waiting_sentence()
            os.close(fd)
        self._sandboxes[launch.job_id] = launch
        return None

    def _waiting_sentence(self) -> str:
        return (f"waiting for another grading or competition job to end: jobs of the grading "
                f"account {self.grader_user} run one at a time")

    def _sandbox_over(self, launch: Launch) -> bool:
        """True once every replica of a launched sandbox job has ended (its wrapper, which
        swept what the job left, is gone) or it was stopped."""
        folder = self.job_dir(launch)
        for replica in launch.replicas:
            name = replica_name(replica.role, replica.index)
            if not (folder / f"{name}.pid").exists() or _live_wrapper(folder / f"{name}.pid"):
                return False
        return True

    def _grader(self) -> accounts.Account:
        if not self.system_users:
            return accounts.current_account()
        try:
            entry = pwd.getpwnam(self.grader_user)
        except KeyError:
            raise RuntimeError(f"the grading account {self.grader_user} does not exist; create it "
                               "or set c.ClasshubJobs.grader_user") from None
        return accounts.Account(self.grader_user, entry.pw_uid, entry.pw_gid)

    def _account_of(self, launch: Launch) -> accounts.Account:
        return self._grader() if launch.sandbox else self._account(launch.owner)

    async def prepare_sandbox(self, files: Mapping[str, bytes]) -> dict[str, str]:
        return await asyncio.to_thread(self._prepare_sandbox, files)

    def _prepare_sandbox(self, files: Mapping[str, bytes]) -> dict[str, str]:
        root = self.sandbox_root()
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o711, parents=True)
        info = os.lstat(root)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise RuntimeError(f"{root} is not a folder of the classhub service's account; remove it")
        os.chmod(root, 0o711)
        folder = root / secrets.token_hex(16)
        folder.mkdir(mode=0o700)
        grader = self._grader()
        for relative, data in files.items():
            target = folder / relative
            if ".." in Path(relative).parts or Path(relative).is_absolute():
                raise RuntimeError(f"{relative!r} is not a relative path")
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_private(target, data)
        if self.system_users:  # the grader deletes its inputs before running student code
            # deepest first, the folder last: until the folder is the grader's, no process of
            # that account can reach inside it to swap a folder for a link under this walk
            for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                os.chown(path, grader.uid, grader.gid, follow_symlinks=False)
            os.chown(folder, grader.uid, grader.gid, follow_symlinks=False)
        return {"folder": str(folder)}

    async def drop_sandbox(self, sandbox: Mapping[str, str]) -> None:
        folder = sandbox.get("folder")
        if folder and Path(folder).parent == self.sandbox_root():
            await asyncio.to_thread(shutil.rmtree, folder, True)

    def _account(self, owner: str) -> accounts.Account:
        if not self.system_users:
            return accounts.current_account()
        name = accounts.system_account_name(owner, self.user_prefix)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise RuntimeError(f"the Unix account {name} does not exist; start your server once "
                               "so the hub creates it") from None
        return accounts.Account(name, entry.pw_uid, entry.pw_gid)

    # -- running --------------------------------------------------------------------------------
    async def launch(self, launch: Launch) -> None:
        await asyncio.to_thread(self._launch, launch)

    def _launch(self, launch: Launch) -> None:
        account = self._account_of(launch)
        if launch.sandbox:  # a grading job: in its private folder, never in a home
            home = Path(launch.sandbox["folder"])
            workdir = str(home)
        else:
            home = self.home(launch.owner)
            if not self.system_users:  # the hub's own account: its homes are its folders
                home.mkdir(parents=True, exist_ok=True)
            # The owner enters it after switching accounts (jobwrap): the kernel, not a check
            # made here as root, decides whether the owner may work there.
            workdir = os.path.join(home, launch.workdir) if launch.workdir else str(home)
        folder = self._private_dir(self.job_dir(launch))
        switch = ["--uid", str(account.uid), "--gid", str(account.gid)] if self.system_users else []
        if self.system_users and launch.sandbox:
            switch += ["--lock", str(self.sandbox_lock())]
        for replica in launch.replicas:
            name = replica_name(replica.role, replica.index)
            if (folder / f"{name}.pid").exists():
                continue  # claimed before (by this or an earlier service): never a second copy
            _write_private(folder / f"{name}.env",
                           json.dumps(self._env(launch, replica, account, home)).encode())
            log = os.open(folder / f"{name}.log", _PRIVATE_APPEND, 0o600)
            try:
                child = subprocess.Popen(
                    [self.python, "-I", "-m", _WRAPPER, str(folder), name, *switch,
                     "--cwd", workdir, "--", *launch.command],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=_wrapper_env(), cwd=str(folder), start_new_session=True,
                )
            finally:
                os.close(log)
            self._children[child.pid] = child

    def _private_dir(self, folder: Path) -> Path:
        """``folder`` and the state dir above it: real folders (not links) of this process's
        account, mode 0700, so no user can plant or read anything in them."""
        for path in (self.state_dir, folder):
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=0o700, parents=path is self.state_dir)
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                raise RuntimeError(f"{path} is not a folder of the classhub service's account; "
                                   "remove it so the service can make its own")
            if info.st_mode & 0o077:
                os.chmod(path, 0o700)
        return folder

    def _env(self, launch: Launch, replica: ReplicaLaunch, account: accounts.Account,
             home: Path) -> dict[str, str]:
        """A clean environment: never the service's own (it holds the service's hub token)."""
        venv_bin = os.path.dirname(self.python)
        env = {
            "PATH": os.pathsep.join([venv_bin, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home), "USER": account.name, "LOGNAME": account.name,
            "SHELL": shutil.which("bash") or "/bin/sh", "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
        }
        env.update(launch.env)
        env.update(torch_env(launch, replica))
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(replica.gpu_uuids)
        if self.hub_api_url:
            env[JOB_HUB_ENV] = self.hub_api_url
        return env

    async def restart(self, launch: Launch, role: str, index: int) -> None:
        """Start an ended replica again: its claim and exit status are kept as
        ``<replica>.pid.<n>``/``.exit.<n>``, then the launch starts what has no claim."""
        await asyncio.to_thread(self._set_aside, launch, replica_name(role, index))
        await self.launch(launch)

    def _set_aside(self, launch: Launch, name: str) -> None:
        folder = self.job_dir(launch)
        if not (folder / f"{name}.exit").exists() and _live_wrapper(folder / f"{name}.pid"):
            return  # still running: nothing to restart
        n = 1
        while (folder / f"{name}.pid.{n}").exists():
            n += 1
        for suffix in ("exit", "pid"):  # the claim last: a crash in between leaves it ended
            with contextlib.suppress(FileNotFoundError):
                os.replace(folder / f"{name}.{suffix}", folder / f"{name}.{suffix}.{n}")

    async def status(self, launch: Launch) -> dict[tuple[str, int], ReplicaStatus]:
        return await asyncio.to_thread(self._status, launch)

    def _status(self, launch: Launch) -> dict[tuple[str, int], ReplicaStatus]:
        for pid, child in list(self._children.items()):
            if child.poll() is not None:  # reap: a dead wrapper must not stay a zombie
                del self._children[pid]
        folder = self.job_dir(launch)
        out = {}
        for replica in launch.replicas:
            name = replica_name(replica.role, replica.index)
            claim = folder / f"{name}.pid"
            code = _read_int(folder / f"{name}.exit")
            if code is not None:
                out[(replica.role, replica.index)] = ReplicaStatus(ENDED, code, self.node)
            elif not claim.exists():
                out[(replica.role, replica.index)] = ReplicaStatus(PENDING, None, self.node)
            elif _live_wrapper(claim):
                out[(replica.role, replica.index)] = ReplicaStatus(RUNNING, None, self.node)
            else:
                code = _read_int(folder / f"{name}.exit")  # it may have ended just now
                out[(replica.role, replica.index)] = ReplicaStatus(ENDED, code, self.node)
        return out

    def _wrappers(self, launch: Launch) -> list[psutil.Process]:
        """The live wrappers this service started for the job, from its own claims."""
        folder = self.job_dir(launch)
        claims = (folder / f"{replica_name(r.role, r.index)}.pid" for r in launch.replicas)
        return [p for claim in claims if (p := _live_wrapper(claim)) is not None]

    def _owner_uid(self, launch: Launch) -> int | None:
        """Whose processes a job's sweep may kill: the owner's account (None: one account)."""
        return self._account_of(launch).uid if self.system_users else None

    async def stop(self, launch: Launch, grace: float) -> None:
        wrappers = await asyncio.to_thread(self._wrappers, launch)
        _signal_groups(wrappers, signal.SIGTERM)
        uid = self._owner_uid(launch)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and await asyncio.to_thread(
                self._anything_left, launch, wrappers, uid):
            await asyncio.sleep(0.1)
        _signal_groups(wrappers, signal.SIGKILL)
        for _ in range(100):  # processes that left their group: found by the job's id
            left = await asyncio.to_thread(job_processes, launch.job_id, uid)
            if not left:
                break
            for proc in left:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            await asyncio.sleep(0.05)
        await asyncio.to_thread(self._status, launch)  # reap
        if self.system_users and launch.sandbox:
            await asyncio.to_thread(self._sweep_sandbox, launch)
        await asyncio.to_thread(self._set_aside_all, launch)

    def _sweep_sandbox(self, launch: Launch) -> None:
        """After a stop: what the sandbox job left (its wrapper may have been killed before its
        own sweep). Only while no other sandbox job holds the lock; else that job's wrapper swept
        before it started."""
        self._sandboxes.pop(launch.job_id, None)
        fd = sandbox.hold(self.sandbox_lock(), self._grader().uid, wait=False,
                          begin=False)
        if fd is not None:
            os.close(fd)

    def _set_aside_all(self, launch: Launch) -> None:
        """After a stop, every replica's claim and exit status are set aside (kept as ``.n``, as
        for a restart): a job preempted and admitted again starts anew, instead of finding its
        stopped run's claims and ending at once with that run's exit status."""
        for replica in launch.replicas:
            self._set_aside(launch, replica_name(replica.role, replica.index))

    def _anything_left(self, launch: Launch, wrappers: Iterable[psutil.Process],
                       uid: int | None) -> bool:
        self._status(launch)
        return any(_still(p) for p in wrappers) or bool(job_processes(launch.job_id, uid))

    async def logs(self, launch: Launch, role: str, index: int, offset: int, limit: int) -> bytes:
        path = self.job_dir(launch) / f"{replica_name(role, index)}.log"
        return await asyncio.to_thread(_read_from, path, offset, limit)


_JOB_ID = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_PRIVATE_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


def _wrapper_env() -> dict[str, str]:
    """The wrapper's own environment: the service's PATH and locale, nothing a user chose."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8")}


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` (0600, never through a link) whole: a temporary file renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _read_from(path: Path, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of a log from ``offset``; nothing past its end (any offset)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        if offset < 0 or offset >= os.fstat(fd).st_size:
            return b""
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _live_wrapper(claim: Path) -> psutil.Process | None:
    """The live job wrapper a claim names: same pid *and* start time (a recycled pid is not
    it), still running the wrapper, and not a zombie."""
    proc = processes.recorded_process(str(claim))
    try:
        if proc is not None and _WRAPPER in " ".join(proc.cmdline()):
            return proc
    except psutil.Error:
        pass
    return None


def _still(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_groups(wrappers: Iterable[psutil.Process], sig: int) -> None:
    """Signal the process group of each wrapper that still runs (``is_running`` compares the
    start time too): a group is signalled only while its leader is the wrapper we started."""
    for proc in wrappers:
        if _still(proc):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)


