"""ClasshubLocalSpawner: each user's server is a local jupyter-server process.

It adds to JupyterHub's LocalProcessSpawner what a shared workstation needs: a home per user
under the classhub data dir, optional matching Unix accounts (created on first login when the
admin allows it, like The Littlest JupyterHub), and a stop that takes kernels down with the server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from tornado import web
from traitlets import Bool, Float, Instance, Int, List, Unicode, Union, default

from hub_ext import store
from hub_ext.backends import coursedata, templates_spawn
from hub_ext.backends.local import accounts, processes
from hub_ext.backends.local.gpu_pool import GPUPool
from hub_ext.backends.seeding import HomeError
from hub_ext.backends.templates import ClasshubTemplates
from hub_ext.core.devices import AssignmentError, DevicesUnavailable, cuda_visible_devices
from hub_ext.core.profiles import Profile, Room, Selection, propose_profiles, room_on_machine
from hub_ext.core.resources import format_quantity
from hub_ext.core.seeding import TemplateRefused
from hub_ext.ports import free_port
from spawner.pressure import reclaim_notice
from spawner.profiles import ProfilesMixin


class ClasshubLocalSpawner(ProfilesMixin, LocalProcessSpawner):
    """Runs each user's jupyter-server as a local process with its own home directory."""

    gpu_discovery_command = List(
        Unicode(),
        ["nvidia-smi", "-L"],
        config=True,
        help="""Command listing this machine's GPUs and MIG devices when NVML is not available.

        Its output is parsed like ``nvidia-smi -L``. A missing command means: no GPUs, CPU
        profiles only.
        """,
    )

    use_nvml = Bool(
        True, config=True, help="Ask NVML (nvidia-ml-py) for the GPUs first, before the command."
    )

    shared_gpus = List(
        Union([Unicode(), Int()]),
        config=True,
        help="""GPUs (UUID or index) offered as ``nvidia.com/gpu.shared`` time-sliced shares.""",
    )

    shared_replicas = Int(
        4, config=True, help="How many servers may share one GPU listed in ``shared_gpus``."
    )

    gpu_uuids = List(Unicode(), help="Device UUIDs this server holds (kept in the spawner state).")

    homes_dir = Unicode(
        "",
        config=True,
        help="""Folder that holds one home directory per user (``<homes_dir>/<safe name>``).

        ``classhub local`` sets it to ``<data-dir>/homes``. Empty means ``./homes``.
        """,
    )

    system_users = Bool(
        False,
        config=True,
        help="""Run each user's server as a matching Unix account with a private (0700) home.

        Requires the hub to run as root. When False (the demo default) every server runs as the
        account that started the hub and users can read each other's files.
        """,
    )

    create_system_users = Bool(
        False,
        config=True,
        help="""Create the Unix account of a user on their first spawn (needs ``system_users``).""",
    )

    system_user_prefix = Unicode(
        "jupyter-",
        config=True,
        help="""Prefix of the Unix account names of hub users (hub user ``ann`` -> ``jupyter-ann``).

        The prefix keeps hub names from ever matching existing accounts such as ``root``.
        """,
    )

    stop_grace = Float(
        4.0,
        config=True,
        help="""Seconds a server (and its kernels) get to exit after SIGTERM before SIGKILL.""",
    )

    records_dir = Unicode(
        "",
        config=True,
        help="""Folder where each server process records itself (pid, start time) as it starts.

        The hub stores a server's pid only once the process was launched; a hub killed in
        between would leave a server nobody knows. With the record, the restarted hub stops
        such a server when it finds the spawn interrupted. Empty: ``<homes_dir>/../run``.
        """,
    )

    @property
    def record_path(self) -> Path:
        """This server's process record (see ``records_dir``)."""
        base = Path(self.records_dir or Path(self.homes_dir or "homes").resolve().parent / "run")
        return base / f"{accounts.safe_name(self.user.name)}-{self.name or '-'}.pid"

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # The hub's own interpreter: the venv that has classhub, jupyterlab and jupyterhub.
        return [sys.executable, "-m", "jupyterhub.singleuser"]

    @default("default_url")
    def _default_url(self) -> str:
        return "/lab"

    @default("show_images")
    def _show_images(self) -> bool:
        return False  # local servers run in the hub's environment: there is no image to pick

    # ---- GPUs ------------------------------------------------------------------------------------

    @property
    def gpu_pool(self) -> GPUPool:
        return GPUPool.shared(
            self.gpu_discovery_command, self.shared_gpus, self.shared_replicas, self.use_nvml
        )

    @property
    def owner_key(self) -> str:
        return f"{self.user.name}/{self.name}"

    def proposed_profiles(self) -> list[dict]:
        return propose_profiles(self.gpu_pool.offered())

    async def capacity_view(self) -> GPUPool:
        return await self.gpu_pool.look(self.hub.api_url)

    def free_count(self, profile: Profile, view: GPUPool) -> int | None:
        if not profile.gpu_resource:
            return None
        product = profile.gpu_product if profile.kind == "gpu" else None
        return view.free(profile.gpu_resource, product) // profile.gpu_count

    def room_when_empty(self, profile: Profile, view: GPUPool) -> Room | None:
        """The devices of the profile's kind (and model) this machine has, whoever holds them."""
        return room_on_machine(profile, view.inventory)

    async def apply_selection(self, selection: Selection) -> None:
        self.mem_limit = int(selection.memory.limit)
        self.mem_guarantee = int(selection.memory.guarantee)
        self.cpu_limit = float(selection.cpu.limit)
        self.cpu_guarantee = float(selection.cpu.guarantee)

    async def _take_gpus(self) -> None:
        """Hand this server its devices exclusively (or its share) before the process starts.

        A spawn that lost the race for the last device (the form said one was free) is refused
        like one that found none: the culler is asked to reclaim one and the user is told so."""
        profile = self.selection.profile if self.selection else None
        if profile is None or not profile.gpu_resource:
            self.gpu_uuids = []
            return
        pool = await self.gpu_pool.look(self.hub.api_url)
        try:  # no await between the look and the assignment: decided in one step of the loop
            self.gpu_uuids = pool.assign(self.owner_key, profile.gpu_resource, profile.gpu_count)
        except AssignmentError as e:
            notice = ""
            if isinstance(e, DevicesUnavailable) and e.capacity >= e.requested:
                notice = await reclaim_notice(self.classhub_db_url, self.user.name, profile)
            raise web.HTTPError(409, f"Cannot start {profile.display_name}: {e}.{notice}") from None

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.gpu_uuids = list(state.get("gpu_uuids", []))
        if self.gpu_uuids and self.pid:
            # The hub restarted while this server kept running: it still holds its devices.
            self.gpu_pool.adopt(self.owner_key, self.gpu_uuids)

    def get_state(self) -> dict:
        state = super().get_state()
        if self.gpu_uuids:
            state["gpu_uuids"] = list(self.gpu_uuids)
        return state

    def clear_state(self) -> None:
        """The server is gone (stopped, failed, or found dead after a restart): free its GPUs."""
        super().clear_state()
        self.gpu_pool.release(self.owner_key)
        self.gpu_uuids = []

    @property
    def home_dir(self) -> Path:
        """This user's home: ``<homes_dir>/<safe user name>``."""
        base = Path(self.homes_dir or "homes").resolve()
        return base / accounts.safe_name(self.user.name)

    def _account(self) -> accounts.Account:
        if not self.system_users:
            return accounts.current_account()
        name = accounts.system_account_name(self.user.name, self.system_user_prefix)
        return accounts.ensure_system_account(name, self.home_dir, self.create_system_users)

    async def start(self) -> tuple[str, int]:
        try:
            return await self._start_local()
        except accounts.AccountError as e:
            # A setup problem the admin must fix: show the sentence, not "Internal Server Error".
            raise web.HTTPError(500, f"Cannot start the server: {e}") from None

    async def _start_local(self) -> tuple[str, int]:
        if self.system_users:
            if os.getuid() != 0:
                raise accounts.AccountError(
                    "system_users needs the hub to run as root; start it with sudo or drop "
                    "--system-users"
                )
            if not accounts.executable_by_others(sys.executable):
                raise accounts.AccountError(
                    f"user accounts cannot run {os.path.realpath(sys.executable)} (a parent "
                    "folder is private); install classhub in a venv made from a system Python, "
                    "e.g. 'make PYTHON=/usr/bin/python3'"
                )
        # account, home and records are file work (useradd, mkdir, chown): a worker thread's,
        # not the hub's event loop's (docs/architecture.md, rule 7)
        self._run_as = await asyncio.to_thread(self._account)
        await self._take_gpus()
        home, record = await asyncio.to_thread(self._home_and_record)
        self.notebook_dir = str(home)
        await self._seed_home(home)
        await self._show_course_data(home)
        # A process of an earlier start that a hub crash orphaned must not outlive this start.
        await processes.stop_recorded(str(record), 0)
        if self.port == 0:  # upstream would take the kernel's choice, which a kernel can take too
            self.port = free_port()
        return await super().start()

    def _home_and_record(self) -> tuple[Path, Path]:
        """The user's home, made theirs, and this server's process record, its folder made."""
        home = accounts.prepare_home(
            Path(self.homes_dir or "homes").resolve(),
            accounts.safe_name(self.user.name),
            self._run_as,
            private=self.system_users,
        )
        record = self.record_path
        record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return home, record

    templates = Instance(ClasshubTemplates, help="Template settings (c.ClasshubTemplates.*).")

    @default("templates")
    def _default_templates(self) -> ClasshubTemplates:
        return ClasshubTemplates(parent=self)

    def template_seeded_from(self) -> tuple[str, str] | None:
        return templates_spawn.marker_of(self.home_dir) if self.home_dir.is_dir() else None

    async def _seed_home(self, home: Path) -> None:
        """Seed the home from the template this start names (or re-seeds) before the server runs."""
        job = self.template_job
        if job is None:
            return
        owner = (self._run_as.uid, self._run_as.gid) if self.system_users else (None, None)
        try:
            result = await asyncio.to_thread(
                templates_spawn.seed_local, job, self.templates.storage(), home, self.templates.limits,
                uid=owner[0], gid=owner[1])
        except (TemplateRefused, HomeError, OSError, RuntimeError) as e:
            raise web.HTTPError(
                500, f"Cannot copy template {job.key} v{job.version} into your home: {e}") from None
        if result is not None:
            self.log.info("Seeded %s's home from %s v%s: %s", self.user.name, job.key, job.version,
                          result.plan.summary())
            await store.in_thread(templates_spawn.record_seeded, self.classhub_db_url, self.user.name, job,
                                    result.plan.summary())

    course_data = Instance(coursedata.ClasshubCourseData,
                           help="Course data folders (c.ClasshubCourseData.*).")

    @default("course_data")
    def _default_course_data(self) -> coursedata.ClasshubCourseData:
        return coursedata.ClasshubCourseData(parent=self)

    #: The Unix groups of the user's courses, which the server process gets (system users).
    _course_gids: list[int] = []

    async def _show_course_data(self, home: Path) -> None:
        """Link each of the user's courses' data folders at ``~/data/<course>`` before the server
        runs (docs/teachers/course-data.md); with system users, the server also gets each course's
        Unix group, which alone may enter the folder. File work and ``groupadd`` run in a worker
        thread (docs/architecture.md, rule 7)."""
        settings = self.course_data
        if not settings.root_dir:
            return
        courses = self.course_roles
        if courses is None and self.classhub_db_url:
            courses, _ = await store.in_thread(templates_spawn.course_roles, self.classhub_db_url,
                                               self.user.name)
        courses = courses or {}
        system = self.system_users and settings.system_groups

        def link() -> tuple[list[int], list[str]]:
            group_of = ((lambda c: accounts.ensure_course_group(c, settings.group_prefix))
                        if system else None)
            folders = coursedata.CourseDataStore(settings, group_of)
            gids = []
            for course in courses:
                folders.ensure(course)
                if group_of is not None:
                    gids.append(group_of(course))
            owner = (self._run_as.uid, self._run_as.gid) if self.system_users else (None, None)
            return gids, coursedata.link_into_home(home, settings, courses, uid=owner[0], gid=owner[1])

        try:
            self._course_gids, skipped = await asyncio.to_thread(link)
        except (OSError, accounts.AccountError, coursedata.DataPathError) as e:
            raise web.HTTPError(500, f"Cannot show your courses' data folders in your server: {e}") from None
        for path in skipped:
            self.log.info("Left %s's own %s alone: the course data is not linked there", self.user.name, path)

    def get_args(self) -> list[str]:
        args = super().get_args()
        # classhub's server extension (share enforcement, activity for the culler), from the
        # same environment as the hub; images enable it with a jupyter_server_config.d file.
        args.append("--ServerApp.jpserver_extensions=hub_ext.singleuser=True")
        if os.getuid() == 0 and not self.system_users:
            # The demo default runs servers as the invoking account, which may be root.
            args.append("--ServerApp.allow_root=True")
        return args

    def make_preexec_fn(self, name: str):
        account: accounts.Account = self._run_as
        home = str(self.home_dir)
        switch = self.system_users
        record = str(self.record_path)
        groups = list(self._course_gids)

        def preexec() -> None:
            processes.write_record(record)  # before anything else: see records_dir
            if switch:
                os.setgid(account.gid)
                os.setgroups(groups)  # the course groups: their data folders (_show_course_data)
                os.setuid(account.uid)
            os.umask(0o077 if switch else 0o022)
            os.chdir(home)

        return preexec

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        account = getattr(self, "_run_as", None) or accounts.current_account()
        env["USER"] = account.name
        env["HOME"] = str(self.home_dir)
        env["SHELL"] = shutil.which("bash") or "/bin/sh"
        # Terminals in the server should find the same python, jupyter and pip as the server.
        venv_bin = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join([venv_bin, "/usr/local/bin", "/usr/bin", "/bin"])
        # An empty CUDA_VISIBLE_DEVICES hides every GPU from a CPU-only server.
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(self.gpu_uuids)
        if self.course_data.root_dir:  # the server refuses changes there (hub_ext.singleuser)
            env["CLASSHUB_COURSE_DATA_DIR"] = str(Path(self.course_data.root_dir).resolve())
        if self.selection is not None:
            env["CLASSHUB_PROFILE"] = self.selection.profile.slug
            env["MEM_LIMIT"] = str(int(self.selection.memory.limit))
            env["CPU_LIMIT"] = format_quantity(self.selection.cpu.limit)
        return env

    async def poll(self) -> int | None:
        """None while the server runs, else its exit status (0 when unknown).

        A server without a pid whose process record names a live process is one whose spawn a
        hub crash interrupted after the process started: it is stopped, so the hub drops the
        server and releases its reservation, and the student's next start begins afresh."""
        if not self.pid and await processes.stop_recorded(str(self.record_path), 0):
            self.log.warning("Stopped %s's server process, orphaned by a hub crash during its spawn",
                             self._log_name)
        return await super().poll()

    async def _signal(self, sig: int) -> bool:
        """Whether the server's process still exists, after sending it ``sig`` (JupyterHub's poll
        sends 0 for a server it did not start, as after a hub restart). A zombie has exited:
        it holds no GPU, and its reaper (not this hub) may take seconds to collect it."""
        if processes.exited(self.pid):
            return False
        return await super()._signal(sig)

    async def stop(self, now: bool = False) -> None:
        """Stop the server and every process it started (kernels, terminals)."""
        if not self.pid:
            return
        proc = self.proc
        await processes.stop_process_group(
            self.pid, 0 if now else self.stop_grace, reap=proc.poll if proc else lambda: None
        )
        await self.poll()
        await processes.stop_recorded(str(self.record_path), 0)  # gone by now: drops the record
        await self.release_reservation()

    async def move_certs(self, paths: dict) -> dict:
        """Internal SSL is not used by the local mode."""
        return paths
