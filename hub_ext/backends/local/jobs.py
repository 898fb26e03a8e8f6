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
  account; logs and bookkeeping live in ``<home>/.classhub/jobs/<job id>/``.
- **Nothing is left behind**: every replica runs in its own session under a small wrapper
  (hub_ext.backends.local.jobwrap) that claims it (no duplicate after a crash) and records its
  exit status; a stop sends SIGTERM to the process groups, SIGKILL after the grace period, then
  kills any process that still carries the job's CLASSHUB_JOB_ID (one that left its group).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import psutil

from hub_ext.backends.jobs import ENDED, PENDING, RUNNING, Launch, ReplicaLaunch, ReplicaStatus, replica_name
from hub_ext.backends.local import accounts
from hub_ext.core.admission import NodeState
from hub_ext.core.devices import Inventory, cuda_visible_devices, matches_product, product_label
from hub_ext.core.resources import PODS, ResourceVector

__all__ = ["LocalJobs", "job_devices", "job_processes", "notebook_devices", "torch_env"]

JOB_ENV = "CLASSHUB_JOB_ID"
_WRAPPER = "hub_ext.backends.local.jobwrap"


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


def job_processes(job_id: str | None = None) -> list[psutil.Process]:
    """Live processes that carry a job's CLASSHUB_JOB_ID (any job's when `job_id` is None)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            value = proc.environ().get(JOB_ENV)
        except (psutil.Error, OSError):
            continue
        if value is not None and (job_id is None or value == job_id):
            found.append(proc)
    return found


def job_devices() -> set[str]:
    """GPU UUIDs that job replicas hold now (their CUDA_VISIBLE_DEVICES): what a local GPU pool
    must not hand to a notebook while a job runs."""
    held: set[str] = set()
    for proc in job_processes():
        try:
            value = proc.environ().get("CUDA_VISIBLE_DEVICES", "")
        except (psutil.Error, OSError):
            continue
        held.update(u for u in value.split(",") if u.strip())
    return held


def notebook_devices() -> set[str]:
    """GPU UUIDs that servers (and their kernels) hold: the CUDA_VISIBLE_DEVICES of every process
    the hub started for a user (JUPYTERHUB_USER set) that is not a job replica."""
    held: set[str] = set()
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if "JUPYTERHUB_USER" in env and JOB_ENV not in env:
            held.update(u for u in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if u.strip())
    return held


class LocalJobs:
    """Runs jobs as process groups on this machine (see the module docstring)."""

    def __init__(self, homes_dir: Path, inventory: Inventory, *, system_users: bool = False,
                 user_prefix: str = "jupyter-", node: str = "localhost",
                 python: str = sys.executable) -> None:
        self.homes_dir = Path(homes_dir)
        self.inventory = inventory
        self.system_users = system_users
        self.user_prefix = user_prefix
        self.node = node
        self.python = python
        self._children: dict[int, subprocess.Popen] = {}

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
        notebooks = await asyncio.to_thread(notebook_devices)
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
        busy = taken | notebook_devices()
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
        return self.home(launch.owner) / ".classhub" / "jobs" / launch.job_id

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
        account = self._account(launch.owner)
        home = self.home(launch.owner)
        folder = self.job_dir(launch)
        owner_ids = (account.uid, account.gid) if self.system_users else None
        self._make_dirs(home, folder, owner_ids)
        workdir = (home / launch.workdir).resolve() if launch.workdir else home
        if not workdir.is_relative_to(home) or not workdir.is_dir():
            raise RuntimeError(f"workdir {launch.workdir!r} is not a folder in your home")
        for replica in launch.replicas:
            name = replica_name(replica.role, replica.index)
            if (folder / f"{name}.pid").exists():
                continue  # claimed before (by this or an earlier service): never a second copy
            env = self._env(launch, replica, account, home)
            log_path = folder / f"{name}.log"
            with open(log_path, "ab") as log:
                if owner_ids:
                    os.chown(log_path, *owner_ids)
                child = subprocess.Popen(
                    [self.python, "-m", _WRAPPER, str(folder), name, "--", *launch.command],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                    cwd=str(workdir), start_new_session=True,
                    preexec_fn=_switch_user(account) if self.system_users else None,
                )
            self._children[child.pid] = child

    @staticmethod
    def _make_dirs(home: Path, folder: Path, owner_ids: tuple[int, int] | None) -> None:
        home.mkdir(parents=True, exist_ok=True)
        for path in (home / ".classhub", home / ".classhub" / "jobs", folder):
            path.mkdir(exist_ok=True, mode=0o700 if owner_ids else 0o755)
            if owner_ids:
                os.chown(path, *owner_ids)

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
        return env

    async def restart(self, launch: Launch, role: str, index: int) -> None:
        """Start an ended replica again: its claim and exit status are kept as
        ``<replica>.pid.<n>``/``.exit.<n>``, then the launch starts what has no claim."""
        await asyncio.to_thread(self._set_aside, launch, replica_name(role, index))
        await self.launch(launch)

    def _set_aside(self, launch: Launch, name: str) -> None:
        folder = self.job_dir(launch)
        if not (folder / f"{name}.exit").exists() and _alive_wrapper(
                _read_int(folder / f"{name}.pid") or 0):
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
            pid = _read_int(folder / f"{name}.pid")
            code = _read_int(folder / f"{name}.exit")
            if code is not None:
                out[(replica.role, replica.index)] = ReplicaStatus(ENDED, code, self.node)
            elif pid is None:
                out[(replica.role, replica.index)] = ReplicaStatus(PENDING, None, self.node)
            elif _alive_wrapper(pid):
                out[(replica.role, replica.index)] = ReplicaStatus(RUNNING, None, self.node)
            else:
                code = _read_int(folder / f"{name}.exit")  # it may have ended just now
                out[(replica.role, replica.index)] = ReplicaStatus(ENDED, code, self.node)
        return out

    async def stop(self, launch: Launch, grace: float) -> None:
        folder = self.job_dir(launch)
        groups = [pid for r in launch.replicas
                  if (pid := _read_int(folder / f"{replica_name(r.role, r.index)}.pid")) is not None]
        _signal_groups(groups, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and await asyncio.to_thread(self._anything_left, launch, groups):
            await asyncio.sleep(0.1)
        _signal_groups(groups, signal.SIGKILL)
        for _ in range(100):  # processes that left their group: found by the job's id
            left = await asyncio.to_thread(job_processes, launch.job_id)
            if not left:
                break
            for proc in left:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            await asyncio.sleep(0.05)
        await asyncio.to_thread(self._status, launch)  # reap

    def _anything_left(self, launch: Launch, groups: Iterable[int]) -> bool:
        self._status(launch)
        return any(_alive_wrapper(pid) for pid in groups) or bool(job_processes(launch.job_id))

    async def logs(self, launch: Launch, role: str, index: int, offset: int, limit: int) -> bytes:
        path = self.job_dir(launch) / f"{replica_name(role, index)}.log"
        return await asyncio.to_thread(_read_from, path, offset, limit)


def _read_from(path: Path, offset: int, limit: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive_wrapper(pid: int) -> bool:
    """Whether `pid` is a live job wrapper (not a zombie, not a recycled pid)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and _WRAPPER in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def _signal_groups(groups: Iterable[int], sig: int) -> None:
    for pgid in groups:
        if _alive_wrapper(pgid) or sig == signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)


def _switch_user(account: accounts.Account):
    def preexec() -> None:
        os.setgid(account.gid)
        os.setgroups([])
        os.setuid(account.uid)
        os.umask(0o077)

    return preexec
