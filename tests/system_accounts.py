"""A `classhub local --system-users` hub for a test module, and the Unix accounts it makes.

Why one helper: the modules that act as students' Unix accounts need root, must fail (never
skip) in CI without it, and must remove only the accounts they created, since modules on other
workers may use other accounts at the same time.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pytest

from tests.hubproc import LocalHub


def require_root() -> None:
    """Fail in CI, skip elsewhere, when this process cannot switch accounts."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must run the suite as root: --system-users needs it")
        pytest.skip("--system-users needs root (CI runs this as root)")


def account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextmanager
def system_users_hub(hub: LocalHub, accounts: Iterable[str]) -> Iterator[LocalHub]:
    """Start `hub` (its extra args name --system-users), yield it, stop it, then delete those of
    `accounts` that did not exist before."""
    require_root()
    accounts = list(accounts)
    existed = {name for name in accounts if account_exists(name)}
    started = hub.start()
    try:
        yield started
    finally:
        started.stop()
        for name in accounts:
            if name not in existed and account_exists(name):
                subprocess.run(["userdel", name], check=False)
