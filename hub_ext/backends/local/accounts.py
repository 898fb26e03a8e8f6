"""Unix accounts and private home directories for the local mode.

Hub user names are free text (``Anna.Muller@uni.example``); Unix account and folder names are not.
Every name goes through :func:`safe_name` before it reaches the filesystem or ``useradd``, so no
user name can produce ``..``, a slash or another user's folder.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import escapism

_SAFE_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789")
_UNIX_NAME = re.compile(r"^[a-z_][a-z0-9_-]*$")
_UNIX_NAME_MAX = 32


class AccountError(RuntimeError):
    """A problem with a Unix account or home directory, phrased for the admin who must fix it."""


def safe_name(name: str, max_length: int = 64) -> str:
    """A lowercase, filesystem- and Unix-safe encoding of a hub user name.

    Distinct names map to distinct results: unsafe characters are escaped as ``-xx`` hex codes
    (like KubeSpawner's "escape" slugs), and names that would be too long keep a hash suffix.
    """
    escaped = escapism.escape(name, safe=_SAFE_CHARS, escape_char="-").lower()
    if not escaped:
        raise AccountError("an empty user name cannot have a home directory")
    if len(escaped) > max_length:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        escaped = f"{escaped[: max_length - 9]}-{digest}"
    return escaped


#: (tool, its command, its allow file, its deny file, whether it lets every user when neither
#: file exists): crontab(1) lets everyone then on Debian, at(1) only root.
_SCHEDULERS = (("cron", "crontab", "cron.allow", "cron.deny", True),
               ("at", "at", "at.allow", "at.deny", False))


def may_schedule(account: str, etc: Path = Path("/etc"),
                 which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The installed schedulers (cron, at) that would run commands for ``account`` later.

    Why: the grading account runs students' notebooks, and a job's sweep kills only what the
    account started while that job ran; a crontab or at job a notebook left behind would run
    between jobs, beside the next one's folder. The admin denies them (docs/teachers/
    autograding.md, "Isolation"); the service says at start when that was not done."""
    found = []
    for tool, command, allow, deny, open_by_default in _SCHEDULERS:
        if which(command) is None:
            continue
        listed = {name: _names(etc / name) for name in (allow, deny)}
        if listed[allow] is not None:
            allowed = account in listed[allow]
        elif listed[deny] is not None:
            allowed = account not in listed[deny]
        else:
            allowed = open_by_default
        if allowed:
            found.append(tool)
    return found


def _names(path: Path) -> set[str] | None:
    """The account names a cron/at allow or deny file lists (one per line), None if absent."""
    try:
        return {line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()}
    except FileNotFoundError:
        return None


def system_account_name(hub_name: str, prefix: str) -> str:
    """The Unix account that runs ``hub_name``'s server: ``prefix`` + the safe name."""
    name = prefix + safe_name(hub_name, max_length=_UNIX_NAME_MAX - len(prefix))
    if not _UNIX_NAME.match(name):
        name = "u" + name[1:] if name[0].isdigit() else name
    if not _UNIX_NAME.match(name):
        raise AccountError(f"cannot derive a valid Unix account name from {hub_name!r}")
    return name


@dataclass(frozen=True)
class Account:
    """The identity a user's server runs as."""

    name: str
    uid: int
    gid: int


def current_account() -> Account:
    """The account running the hub (used when servers are not given their own accounts)."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Account(name=name, uid=uid, gid=os.getgid())


def ensure_system_account(name: str, home: Path, create: bool) -> Account:
    """Return the Unix account ``name``, creating it (no login shell needed) when allowed.

    Accounts below UID 1000 are refused: a hub user must never run as ``root`` or a daemon.
    """
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if not create:
            raise AccountError(
                f"the Unix account {name!r} does not exist; create it, or start classhub with "
                "--create-system-users to let the hub create accounts on first login"
            ) from None
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        result = subprocess.run(
            [useradd, "--home-dir", str(home), "--no-create-home", "--shell", "/bin/bash",
             "--user-group", name],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise AccountError(
                f"could not create the Unix account {name!r}: {result.stderr.strip()} "
                "(the hub must run as root to create accounts)"
            ) from None
        entry = pwd.getpwnam(name)
    if entry.pw_uid < 1000:
        raise AccountError(
            f"the Unix account {name!r} is a system account (uid {entry.pw_uid}); "
            "classhub only runs servers as regular accounts (uid >= 1000)"
        )
    return Account(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid)


def ensure_course_group(course: str, prefix: str) -> int:
    """The gid of the Unix group of ``course`` (``prefix`` + its safe name), made when missing.

    Why a group per course: with system users, a course's data folder is ``root:<group>`` 0750,
    and members' server processes get the group as a supplementary group at spawn (the local
    spawner): members read the folder, other accounts cannot even enter it
    (docs/admins/course-data.md)."""
    name = prefix + safe_name(course, max_length=_UNIX_NAME_MAX - len(prefix))
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        pass
    groupadd = shutil.which("groupadd") or "/usr/sbin/groupadd"
    result = subprocess.run([groupadd, name], capture_output=True, text=True)
    if result.returncode not in (0, 9):  # 9: made meanwhile by another process
        raise AccountError(f"could not create the Unix group {name!r} of course {course!r}: "
                           f"{result.stderr.strip()} (the hub must run as root to create groups)")
    return grp.getgrnam(name).gr_gid


def prepare_home(homes_dir: Path, folder: str, owner: Account, private: bool) -> Path:
    """Create (if needed) and return ``homes_dir/folder``, owned by ``owner``.

    ``private`` homes are mode 0700 inside a 0711 ``homes_dir``: other accounts can neither list
    the homes nor read one. The home must not be a symlink, so it cannot point elsewhere.
    """
    if "/" in folder or folder in ("", ".", ".."):
        raise AccountError(f"{folder!r} is not a valid home folder name")
    homes_dir.mkdir(parents=True, exist_ok=True)
    home = homes_dir / folder
    if home.is_symlink():
        raise AccountError(f"{home} is a symlink; remove it so the home cannot point elsewhere")
    home.mkdir(mode=0o700 if private else 0o755, exist_ok=True)
    if private:
        os.chmod(homes_dir, 0o711)
        os.chmod(home, 0o700)
        _require_traversable(homes_dir, owner)
    if os.getuid() == 0 and (home.stat().st_uid, home.stat().st_gid) != (owner.uid, owner.gid):
        os.chown(home, owner.uid, owner.gid)
    return home


def _require_traversable(path: Path, owner: Account) -> None:
    """Fail clearly when ``owner`` could not even reach ``path`` (a 0700 parent folder)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH and parent.stat().st_uid != owner.uid:
            raise AccountError(
                f"the account {owner.name!r} cannot reach its home: {parent} is not world-"
                f"traversable; run 'chmod o+x {parent}' or choose another --data-dir"
            )


def executable_by_others(path: str) -> bool:
    """Whether accounts other than the owner can run the program at ``path`` (all parents o+x)."""
    real = Path(os.path.realpath(path))
    if not os.stat(real).st_mode & stat.S_IXOTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
