"""The ``classhub`` command. ``classhub local`` runs the single-machine hub; ``classhub upgrade-db``
upgrades classhub's database schema (``classhub local`` does it for you).

Every check that can fail (flags, data dir, port, Node.js, the proxy) runs before anything is
started, so a mistake ends with one line saying what to change and nothing left running.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from traitlets.config import Config

from hub_ext import __version__, demo, heap, store
from hub_ext.config import configure, hand_over_at_start, retired_settings
from hub_ext.ports import free_port

PROXY_ENV = "CLASSHUB_PROXY_CMD"
MIN_NODE = 18


class CLIError(Exception):
    """A problem the person running the command must fix; printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="classhub", description="classhub: a GPU teaching platform on JupyterHub")
    parser.add_argument("--version", action="version", version=f"classhub {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    local = sub.add_parser("local", help="run the single-machine hub (JupyterHub + classhub)")
    local.add_argument("--ip", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    local.add_argument("--port", type=int, default=8000, help="public port (8000)")
    local.add_argument("--data-dir", default="./var", help="database, secrets and homes (./var)")
    local.add_argument(
        "--system-users",
        action="store_true",
        help="run each user's server as a matching Unix account with a private home (root only)",
    )
    local.add_argument(
        "--create-system-users",
        action="store_true",
        help="with --system-users: create missing Unix accounts on first login",
    )
    local.add_argument(
        "--no-demo", action="store_true", help="do not create the demo accounts and course"
    )
    local.add_argument(
        "--db-url",
        default=None,
        help="classhub's database (default $CLASSHUB_DB_URL, else sqlite:///<data-dir>/classhub.sqlite; "
        "postgresql+psycopg://... for PostgreSQL)",
    )
    local.add_argument(
        "--config",
        default=None,
        help="extra jupyterhub_config.py loaded last (default: <data-dir>/jupyterhub_config.py)",
    )
    upgrade_db = sub.add_parser(
        "upgrade-db",
        help="upgrade classhub's database schema (a sqlite file is backed up first)",
        description="Upgrade classhub's database to the schema this classhub needs, as "
        "'jupyterhub upgrade-db' does for the hub's. A sqlite file that is behind is first copied "
        "to <file>.<timestamp>.bak beside it; back up PostgreSQL yourself. The hub, the service "
        "and the culler refuse to start on a schema that is behind.",
    )
    upgrade_db.add_argument(
        "--db-url",
        default=None,
        help="classhub's database (default $CLASSHUB_DB_URL, else "
        "sqlite:///<data-dir>/classhub.sqlite)",
    )
    upgrade_db.add_argument("--data-dir", default="./var", help="where classhub local keeps it (./var)")
    propose = sub.add_parser(
        "propose-profiles",
        help="print a profile catalog (JSON) built from the GPUs this machine or a cluster offers",
    )
    where = propose.add_mutually_exclusive_group()
    where.add_argument(
        "--nvidia-smi", default="nvidia-smi -L", help="command listing local GPUs ('nvidia-smi -L')"
    )
    where.add_argument("--kubeconfig", help="read the nodes of this cluster instead")
    from hub_ext.jobcli import add_job_parser

    add_job_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "local":
            run_local(args)
        elif args.command == "upgrade-db":
            print(upgrade_db(args), flush=True)
        elif args.command == "propose-profiles":
            print(json.dumps(propose(args), indent=2))
        elif args.command == "job":
            from hub_ext.jobcli import run_job

            sys.exit(run_job(args))
    except CLIError as e:
        sys.exit(f"classhub: {e}")


def run_local(args: argparse.Namespace) -> None:
    """Check everything, then run JupyterHub in this process until SIGTERM/SIGINT."""
    if not 0 < args.port < 65536:
        raise CLIError(f"--port {args.port} is not a TCP port; use 1-65535")
    if args.create_system_users and not args.system_users:
        raise CLIError("--create-system-users needs --system-users")
    if args.system_users and os.geteuid() != 0:
        raise CLIError("--system-users needs root (the hub switches to each user's account)")
    retired = retired_settings()
    if retired:  # settings come from jupyterhub_config.py only (docs/configuration.md)
        raise CLIError(" ".join(retired).replace("jupyterhub_config.py",
                                                 "the data dir's jupyterhub_config.py"))
    data_dir = prepare_data_dir(Path(args.data_dir))
    if args.config and not Path(args.config).is_file():
        raise CLIError(f"--config {args.config}: no such file")
    if not stale_proxy(data_dir):
        # A proxy left by a hub that was killed holds the port; JupyterHub stops it on start.
        require_port_free(args.ip, args.port)
    proxy_cmd = find_proxy()
    db_url = args.db_url or os.environ.get("CLASSHUB_DB_URL") or f"sqlite:///{data_dir / 'classhub.sqlite'}"
    # `classhub upgrade-db` for you (a sqlite file is backed up first), before anything starts
    upgraded = open_database(db_url, store.upgrade_database)
    if upgraded.upgraded:
        print(upgraded.sentence(), flush=True)
    sessions = open_database(db_url, store.connect)
    if not args.no_demo:
        demo.seed_course(sessions)  # before configure(), which makes the course roles from it

    c = Config()
    configure(
        c,
        "local",
        data_dir=data_dir,
        service_url=f"http://127.0.0.1:{free_port()}",
        system_users=args.system_users,
        create_system_users=args.create_system_users,
        db_url=db_url,
    )
    # the service's jobs run where the servers run: the same homes, the same accounts
    c.ClasshubJobs.homes_dir = str(data_dir / "homes")
    c.ClasshubJobs.system_users = args.system_users
    c.JupyterHub.ip = args.ip
    c.JupyterHub.port = args.port
    c.JupyterHub.hub_ip = "127.0.0.1"
    c.JupyterHub.hub_port = free_port()
    c.ConfigurableHTTPProxy.command = proxy_cmd
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{free_port()}"
    c.JupyterHub.cleanup_servers = True
    c.JupyterHub.cleanup_proxy = True
    password = None
    if not args.no_demo:
        password = demo.demo_password(data_dir)
        c.JupyterHub.authenticator_class = "hub_ext.demo.DemoAuthenticator"
        c.DemoAuthenticator.accounts = demo.DEMO_ACCOUNTS
        c.DemoAuthenticator.password_file = str(data_dir / demo.PASSWORD_FILE)
        c.DemoAuthenticator.admin_users = {demo.DEMO_ADMIN}
        c.JupyterHub.load_groups = demo.demo_groups()

    print_banner(args, data_dir, password)
    from jupyterhub.app import JupyterHub

    # configure() ran before this process held a hub: the freeze is hooked here (hub_ext.heap)
    hub = JupyterHub.instance(config=c)
    heap.freeze_after_start(hub)
    # the services get the sections of the whole configuration, <data-dir>/jupyterhub_config.py too
    hand_over_at_start(hub)
    config_file = args.config or extra_config_file(data_dir)
    JupyterHub.launch_instance([f"--JupyterHub.config_file={config_file}"])


def upgrade_db(args: argparse.Namespace) -> str:
    """``classhub upgrade-db``: the schema at head; returns the line saying what was done."""
    db_url = args.db_url or os.environ.get("CLASSHUB_DB_URL")
    if not db_url:
        data_dir = Path(args.data_dir).expanduser().resolve()
        if not data_dir.is_dir():
            raise CLIError(f"no data dir {data_dir}: pass --data-dir (where 'classhub local' keeps "
                           "classhub.sqlite) or --db-url")
        db_url = f"sqlite:///{data_dir / 'classhub.sqlite'}"
    os.umask(0o077)  # a database or backup this creates is private, as in the data dir
    return open_database(db_url, store.upgrade_database).sentence()


T = TypeVar("T")


def open_database(db_url: str, step: Callable[[str], T]) -> T:
    """``step(db_url)``, its failures as one line: a schema it refuses (`store.SchemaError`, the
    sentence says what to run), or a database it cannot open."""
    try:
        return step(db_url)
    except store.SchemaError as e:
        raise CLIError(str(e)) from None
    except Exception as e:  # a wrong URL, an unreachable server, a missing driver
        reason = " ".join(str(getattr(e, "orig", None) or e).split())  # psycopg: several lines
        raise CLIError(f"cannot open the classhub database {store.shown_url(db_url)} "
                       f"({type(e).__name__}: {reason}); check --db-url") from None


def propose(args: argparse.Namespace) -> list[dict]:
    """Profiles an admin can paste into ``c.ClasshubLocalSpawner.profiles`` (or the kube one)."""
    from hub_ext.core.profiles import offered_by_nodes, propose_profiles

    if args.kubeconfig:
        if not Path(args.kubeconfig).is_file():
            raise CLIError(f"--kubeconfig {args.kubeconfig}: no such file")
        os.environ["KUBECONFIG"] = args.kubeconfig
        from hub_ext.backends.kubernetes.capacity import KubernetesBackend

        async def snapshot():
            return await KubernetesBackend().capacity_snapshot()

        try:
            nodes = asyncio.run(snapshot()).nodes
        except Exception as e:  # any client or connection error: say it in one line
            raise CLIError(f"cannot read the cluster's nodes ({type(e).__name__}: {e})") from None
        return propose_profiles(offered_by_nodes(nodes))
    from hub_ext.backends.local.gpu_pool import GPUPool

    return propose_profiles(GPUPool.shared(args.nvidia_smi.split()).offered())


#: The one entry of the data dir that other accounts reach: the folder of their homes.
SHARED_ENTRIES = frozenset({"homes", "course-data"})


def prepare_data_dir(path: Path) -> Path:
    """Create the data dir and prove it is writable; then keep its secrets (docs/admins/security.md, "Security
    model"): see `secure_data_dir`."""
    path = path.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".classhub-write-test"
        probe.write_text("ok")
        probe.unlink()
        secure_data_dir(path)
    except OSError as e:
        raise CLIError(
            f"cannot write to the data dir {path} ({e.strerror}); pass --data-dir with a folder "
            "you can write"
        ) from None
    return path


def secure_data_dir(path: Path) -> None:
    """No other account reads what the data dir keeps: the databases, the cookie secret, the
    demo password, the extra config, the jobs' logs and environments, the templates.

    The folder itself is 0711: other accounts may pass through it to their homes (``homes/``)
    but not list it; every other entry is made private (files 0600, folders 0700), and this
    process's umask becomes 0077 so what the hub, the proxy, sqlite and the service create
    later is private too. Links are left alone (never followed)."""
    os.umask(0o077)
    if path.stat().st_uid == os.geteuid():
        os.chmod(path, 0o711)
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name in SHARED_ENTRIES or entry.is_symlink():
                continue
            info = entry.stat(follow_symlinks=False)
            if info.st_uid == os.geteuid() and info.st_mode & 0o077:
                os.chmod(entry.path, info.st_mode & 0o700)


EXTRA_CONFIG_TEMPLATE = """\
# Extra JupyterHub configuration for `classhub local`, loaded after classhub's own.
# Example, a real login instead of the demo accounts (then start with --no-demo):
#   c.JupyterHub.authenticator_class = "native"   # pip install jupyterhub-nativeauthenticator
#   c.Authenticator.admin_users = {"alice"}
"""


def extra_config_file(data_dir: Path) -> str:
    """``<data-dir>/jupyterhub_config.py``, created with an explanatory comment when missing."""
    path = data_dir / "jupyterhub_config.py"
    if not path.exists():
        path.write_text(EXTRA_CONFIG_TEMPLATE)
    return str(path)


def stale_proxy(data_dir: Path) -> bool:
    """Whether the proxy of an earlier run from this data dir is still running."""
    import psutil

    pid_file = data_dir / "jupyterhub-proxy.pid"
    try:
        pid = int(pid_file.read_text().strip())
        return "configurable-http-proxy" in " ".join(psutil.Process(pid).cmdline())
    except (OSError, ValueError, psutil.Error):
        return False


def require_port_free(ip: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
        # Like the proxy itself: a port whose old connections linger in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise CLIError(
                    f"port {port} on {ip} is in use; stop what uses it or pick another with --port"
                ) from None
            raise CLIError(f"cannot listen on {ip}:{port} ({e.strerror}); check --ip") from None


def find_proxy() -> list[str]:
    """configurable-http-proxy: $CLASSHUB_PROXY_CMD, the venv-local npm install, or PATH."""
    if os.environ.get(PROXY_ENV):
        return os.environ[PROXY_ENV].split()
    node = shutil.which("node")
    if node is None:
        raise CLIError(
            f"Node.js is not installed; install Node {MIN_NODE}+ (e.g. 'apt-get install nodejs "
            "npm') and run 'make run' again"
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    major = int(version.strip().lstrip("v").split(".")[0] or 0)
    if major < MIN_NODE:
        raise CLIError(f"Node.js {version.strip()} is too old; install Node {MIN_NODE}+")
    local = Path(sys.prefix) / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.exists():
        return [str(local)]
    on_path = shutil.which("configurable-http-proxy")
    if on_path:
        return [on_path]
    raise CLIError(
        "configurable-http-proxy is not installed; run 'make run' (it installs it into .venv/chp) "
        f"or 'npm install --prefix {Path(sys.prefix) / 'chp'} configurable-http-proxy'"
    )


def print_banner(args: argparse.Namespace, data_dir: Path, password: str | None) -> None:
    host = "127.0.0.1" if args.ip in ("", "0.0.0.0") else args.ip
    lines = [
        "",
        f"classhub {__version__} (local mode) starting on http://{host}:{args.port}",
        f"  data dir: {data_dir}",
    ]
    if password:
        lines += [
            f"  demo accounts: {', '.join(demo.DEMO_ACCOUNTS)} (course {demo.DEMO_COURSE})",
            f"  demo password: {password}   (a demo login; a real one: docs/admins/local-hub.md)",
        ]
    if not args.system_users:
        lines.append("  note: all servers run as this account; users can read each other's files")
        if os.geteuid() == 0:
            lines.append(
                "  WARNING: running as root without --system-users: every user's server, terminal "
                "and job runs as root. On a machine shared by several people start with "
                "--system-users (docs/admins/security.md, 'Security model')")
    print("\n".join(lines) + "\n", flush=True)
