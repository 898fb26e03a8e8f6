"""ClasshubLocalSpawner: each user's server is a local jupyter-server process.

It adds to JupyterHub's LocalProcessSpawner what a shared workstation needs: a home per user
under the classhub data dir, optional matching Unix accounts (created on first login when the
admin allows it, like The Littlest JupyterHub), and a stop that takes kernels down with the server.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Bool, Float, Unicode, default

from hub_ext.backends.local import accounts, processes


class ClasshubLocalSpawner(LocalProcessSpawner):
    """Runs each user's jupyter-server as a local process with its own home directory."""

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

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # The hub's own interpreter: the venv that has classhub, jupyterlab and jupyterhub.
        return [sys.executable, "-m", "jupyterhub.singleuser"]

    @default("default_url")
    def _default_url(self) -> str:
        return "/lab"

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
        self._run_as = self._account()
        home = accounts.prepare_home(
            Path(self.homes_dir or "homes").resolve(),
            accounts.safe_name(self.user.name),
            self._run_as,
            private=self.system_users,
        )
        self.notebook_dir = str(home)
        return await super().start()

    def get_args(self) -> list[str]:
        args = super().get_args()
        if os.getuid() == 0 and not self.system_users:
            # The demo default runs servers as the invoking account, which may be root.
            args.append("--ServerApp.allow_root=True")
        return args

    def make_preexec_fn(self, name: str):
        account: accounts.Account = self._run_as
        home = str(self.home_dir)
        switch = self.system_users

        def preexec() -> None:
            if switch:
                os.setgid(account.gid)
                os.setgroups([])
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
        return env

    async def stop(self, now: bool = False) -> None:
        """Stop the server and every process it started (kernels, terminals)."""
        if not self.pid:
            return
        proc = self.proc
        await processes.stop_process_group(
            self.pid, 0 if now else self.stop_grace, reap=proc.poll if proc else lambda: None
        )
        await self.poll()

    async def move_certs(self, paths: dict) -> dict:
        """Internal SSL is not used by the local mode."""
        return paths
