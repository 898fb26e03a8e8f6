"""Demo login for the local mode: five fixed accounts sharing one generated password.

People a teacher adds to a course (on the course page, by roster or through the API) log in
with the same password, so the whole teacher journey can be tried on ``make run``: the course
store is asked at each login, so a student added a minute ago can log in now.

This is a demo login, not an authentication system. Real sites configure another
authenticator (docs/admins/local-hub.md, "The local hub"); the demo one then no longer applies.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path

from jupyterhub.auth import Authenticator
from traitlets import List, Unicode, default

from hub_ext import store

DEMO_COURSE = "demo101"
DEMO_ADMIN = "admin"
DEMO_TEACHER = "teacher1"
DEMO_TA = "ta1"
DEMO_STUDENTS = ["student1", "student2"]
DEMO_ACCOUNTS = [DEMO_ADMIN, DEMO_TEACHER, DEMO_TA, *DEMO_STUDENTS]
PASSWORD_FILE = "demo-password"


def demo_password(data_dir: Path) -> str:
    """The demo password, generated on first start and kept (mode 0600) in the data dir."""
    path = data_dir / PASSWORD_FILE
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_urlsafe(12)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return password


def demo_groups() -> dict:
    """``load_groups`` for the demo course: teacher1 teaches, ta1 assists, two students."""
    # Roles live in the classhub store (seed_course); the hub group only lists the members.
    return {DEMO_COURSE: {"users": sorted(DEMO_ACCOUNTS[1:])}}


def seed_course(sessions) -> None:
    """The demo course in the classhub store, with its roles (idempotent: kept across starts)."""
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        course = store.ensure_course(session, DEMO_COURSE, now, "Demo course 101")
        if not store.courses_of(session, DEMO_TEACHER):
            store.add_member(session, course, DEMO_TEACHER, "teacher")
            store.add_member(session, course, DEMO_TA, "ta")
            for student in DEMO_STUDENTS:
                store.add_member(session, course, student, "student")


class DemoAuthenticator(Authenticator):
    """Lets the demo accounts log in with the shared demo password; nobody else."""

    accounts = List(
        Unicode(), config=True, help="User names that may log in with the demo password."
    )
    password_file = Unicode(config=True, help="File holding the demo password.")
    db_url = Unicode(
        config=True,
        help="The classhub store: members of any course there may log in too. Defaults to "
        "the store configure() gives the local spawner (ClasshubLocalSpawner.classhub_db_url).",
    )
    _password = Unicode()

    @default("db_url")
    def _db_url(self) -> str:
        spawner = self.config.get("ClasshubLocalSpawner", {})
        return str(spawner.get("classhub_db_url", "") or "")

    @default("allow_all")
    def _allow_all(self) -> bool:
        # Only the listed accounts can authenticate at all (see authenticate).
        return True

    @default("_password")
    def _read_password(self) -> str:
        return Path(self.password_file).read_text().strip()

    async def authenticate(self, handler, data: dict) -> str | None:
        name = self.normalize_username(data.get("username", ""))
        if not hmac.compare_digest(data.get("password", "").encode(), self._password.encode()):
            return None
        if name not in self.accounts and not await asyncio.to_thread(self._in_a_course, name):
            return None
        return name

    def _in_a_course(self, name: str) -> bool:
        """Whether `name` is a member of a course in the classhub store (a worker thread)."""
        if not self.db_url or not name:
            return False
        try:
            with store.readers(store.shared(self.db_url))() as session:
                return bool(store.courses_of(session, name))
        except Exception:  # the store unreadable: the fixed demo accounts still log in
            self.log.exception("classhub demo login: could not read the course store")
            return False
