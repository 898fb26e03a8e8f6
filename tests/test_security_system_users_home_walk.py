"""Root walking a student's home for its size, attacked as the student's Unix account.

A `classhub local --system-users` hub's service runs as root and sizes homes for the JupyterLab
panel (``GET /api/storage/me``, any user, for their own home) and the course's storage page (the
staff). The home is the student's: while root walks it, the student may swap a folder for a link,
or make the tree deeper than any real one. Each test acts as that account (a process with the
student's uid, as their terminal would) against a real hub and asserts that root opened nothing
the student named and answered with a size, never a 5xx. The rule is docs/admins/security.md,
"Security model", rule 7.
"""

from __future__ import annotations

import errno
import os
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from hub_ext.backends.local import accounts
from tests.hubproc import BUSY_MACHINE, LocalHub, api
from tests.system_accounts import system_users_hub
from tests.test_security_system_users import PREFIX, PYTHON, Student

pytestmark = pytest.mark.hub

#: hub users of this module only (other modules' accounts may come and go meanwhile)
SWAPPER, DIGGER = "swapper", "digger"

CONFIG = f"""
c.DemoAuthenticator.accounts = ["admin", {SWAPPER!r}, {DIGGER!r}]
# every request walks the home again: each attempt below is a fresh walk
c.ClasshubCourseData.size_cache_seconds = 0
"""

#: Run as the student: wait until root reads ``big/`` (inotify, IN_ACCESS on the student's own
#: folder), wait until it has read all of it, then swap ``big/sub`` for a link to TARGET. Root is
#: then stat-ing the 20,000 files of ``big/``; the walk opens ``sub`` next.
SWAP = r"""
import ctypes, os, select, sys
home, target = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
assert fd >= 0 and libc.inotify_add_watch(fd, os.path.join(home, "big").encode(), 0x1) >= 0
print("ready", flush=True)
os.read(fd, 4096)
while select.select([fd], [], [], 0.005)[0]:
    os.read(fd, 4096)
os.rename(os.path.join(home, "big", "sub"), os.path.join(home, "sub.real"))
os.symlink(target, os.path.join(home, "big", "sub"))
print("swapped", flush=True)
"""


@pytest.fixture(scope="module")
def hub(hub_root):
    data = hub_root / "system-review"
    data.mkdir()
    (data / "jupyterhub_config.py").write_text(BUSY_MACHINE + CONFIG)
    hub = LocalHub(data_dir=data, extra_args=["--system-users", "--create-system-users"])
    with system_users_hub(hub, [PREFIX + accounts.safe_name(u) for u in (SWAPPER, DIGGER)]) as started:
        yield started


@pytest.fixture(scope="module")
def students(hub) -> dict[str, Student]:
    return {name: Student(hub, name) for name in (SWAPPER, DIGGER)}


def as_student(student: Student, code: str) -> subprocess.Popen:
    """Start Python ``code`` as the student's Unix account (argv: the home), lines on stdout."""
    return subprocess.Popen(
        [PYTHON, "-c", textwrap.dedent(code), str(student.home_path)], user=student.account.uid,
        group=student.account.gid, extra_groups=[], cwd=student.home_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={"HOME": str(student.home_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})


def fifo_in_a_root_only_folder(hub) -> Path:
    """A FIFO in a root-owned 0700 folder: the student can neither open nor reach it."""
    folder = hub.data_dir.parent / f"root-only-fifo-{uuid.uuid4().hex[:6]}"
    folder.mkdir(mode=0o700)
    fifo = folder / "pipe"
    os.mkfifo(fifo, 0o600)
    return fifo


def has_reader(fifo: Path) -> bool:
    """Whether some process holds ``fifo`` open for reading (a non-blocking writer's open fails
    with ENXIO when none does); opening it for writing also frees a reader blocked in open()."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as e:
        assert e.errno == errno.ENXIO, e
        return False
    return True


def ask_size(hub, student: Student, answer: dict) -> None:
    """The student's own home size (the JupyterLab panel's question), kept in ``answer``."""
    answer["r"] = api(hub, "GET", "storage/me", student.token, timeout=120)


def test_the_home_size_walk_never_opens_a_link_swapped_in_for_a_folder(hub, students):
    """The old walk (os.fwalk) checked a folder with lstat, then opened it by name without
    O_NOFOLLOW: a link swapped in between was followed, so root opened whatever the student named
    (here a FIFO in a root-only folder; a FIFO nobody writes to holds the service's thread in
    open() for good, a device is opened with root's rights)."""
    student = students[SWAPPER]
    fifo = fifo_in_a_root_only_folder(hub)
    made = student.run("""
        import os
        os.makedirs('big/sub')
        for i in range(20000):  # root stats these after reading big/: the window of the swap
            open(f'big/f{i:05d}', 'w').close()
    """)
    assert made.returncode == 0, made.stderr
    for attempt in range(3):  # the old code is caught at the first; three fresh walks here
        reset = student.run("""
            import os
            if os.path.islink('big/sub'):
                os.unlink('big/sub')
                os.rename('sub.real', 'big/sub')
        """)
        assert reset.returncode == 0, reset.stderr
        swapper = as_student(student, SWAP.replace("sys.argv[2]", repr(str(fifo))))
        try:
            assert swapper.stdout.readline().strip() == "ready", swapper.stderr.read()
            answer: dict = {}
            asking = threading.Thread(target=ask_size, args=(hub, student, answer))
            asking.start()
            opened = False
            while asking.is_alive() and not opened:
                opened = has_reader(fifo)  # frees the service's thread if it is stuck there
                asking.join(0.01)
            asking.join(120)
            assert not opened, f"attempt {attempt + 1}: root opened the FIFO the student's link named"
            r = answer["r"]
            assert r.status_code == 200 and isinstance(r.json()["bytes"], int), r.text
        finally:
            swapper.kill()
            swapper.wait()
            swapper.stdout.close()
            swapper.stderr.close()
    assert fifo.parent.stat().st_mode & 0o777 == 0o700


def test_a_home_deeper_than_any_real_one_still_has_a_size(hub, students):
    """The old walk recursed once per folder level: 1,100 nested folders raised RecursionError,
    a 500 for the student's panel and for the course's whole storage page."""
    student = students[DIGGER]
    made = student.run("""
        import os
        fd = os.open('.', os.O_RDONLY)
        os.mkdir('deep', dir_fd=fd)
        for _ in range(1100):
            sub = os.open('deep' if _ == 0 else 'd', os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = sub
            os.mkdir('d', dir_fd=fd)
        open(os.open('at-the-top.txt', os.O_WRONLY | os.O_CREAT, 0o600), 'w').write('x' * 1000)
    """)
    assert made.returncode == 0, made.stderr
    r = api(hub, "GET", "storage/me", student.token)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["bytes"], int) and r.json()["bytes"] >= 1000, r.text
