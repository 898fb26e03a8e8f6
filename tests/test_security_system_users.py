"""The outside attack run's `--system-users` breaks, replayed as a student's Unix account (issue 28).

A student of a shared machine holds a real Unix account and a home; classhub's service runs as
root. Each test here acts as that account (a process with the student's uid and gid, as their
terminal or job would be) against a real `classhub local --system-users` hub with jobs, and
asserts that nothing happened: no secret read, no file changed owner, no process of someone else
died, no root process ran the student's code. The rules are docs/admins/security.md, "Security model".
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from hub_ext.backends.local import accounts
from tests.hubproc import BUSY_MACHINE, HubSession, LocalHub, api, traits, wait_for
from tests.system_accounts import require_root, system_users_hub

pytestmark = pytest.mark.hub

#: hub users of this module only (other modules' accounts may come and go meanwhile)
MALLORY, VICTIM = "mallory", "victim"
PREFIX = "jupyter-"
PYTHON = "/usr/bin/python3"  # readable by every account, unlike a venv under /root

CONFIG = f"""
c.DemoAuthenticator.accounts = ["admin", {MALLORY!r}, {VICTIM!r}]
"""
JOBS = {"ClasshubJobs": {"interval": 0.5, "grace": 2, "use_nvml": False,
                         "gpu_discovery_command": ["true"]}}


@pytest.fixture(scope="module")
def hub(hub_root):
    data = hub_root / "system-attacks"
    data.mkdir()
    (data / "jupyterhub_config.py").write_text(BUSY_MACHINE + CONFIG + traits(JOBS))
    hub = LocalHub(data_dir=data, extra_args=["--system-users", "--create-system-users"])
    with system_users_hub(hub, [PREFIX + accounts.safe_name(u) for u in (MALLORY, VICTIM)]) as started:
        yield started


class Student:
    """A hub user with their Unix account and private home, made as the hub makes them."""

    def __init__(self, hub, name: str) -> None:
        homes = hub.data_dir / "homes"
        self.name = name
        self.home_path = homes / accounts.safe_name(name)
        self.account = accounts.ensure_system_account(
            PREFIX + accounts.safe_name(name), self.home_path, create=True)
        accounts.prepare_home(homes, accounts.safe_name(name), self.account, private=True)
        self.token = HubSession(hub, name).new_token()

    def run(self, code: str) -> subprocess.CompletedProcess:
        """Run Python `code` as this student's Unix account, in their home (a terminal would)."""
        return subprocess.run(
            [PYTHON, "-c", textwrap.dedent(code)], user=self.account.uid, group=self.account.gid,
            extra_groups=[], cwd=self.home_path, capture_output=True, text=True, timeout=60,
            env={"HOME": str(self.home_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})


@pytest.fixture(scope="module")
def students(hub) -> dict[str, Student]:
    made = {name: Student(hub, name) for name in (MALLORY, VICTIM)}
    admin = HubSession(hub, "admin").new_token()
    add = [{"username": name, "role": "student"} for name in made]
    r = api(hub, "PUT", "courses/demo101/members", admin, json={"add": add})
    assert r.status_code == 200, r.text
    return made


def submit(hub, student: Student, command: list[str], **fields) -> dict:
    r = api(hub, "POST", "jobs", student.token,
            json={"command": command, "resources": {"cpu": "100m"}, **fields})
    assert r.status_code == 201, r.text
    return r.json()


def state(hub, student: Student, job_id: str) -> dict:
    r = api(hub, "GET", f"jobs/{job_id}", student.token)
    assert r.status_code == 200, r.text
    return r.json()


def until_state(hub, student: Student, job_id: str, wanted: set[str], timeout: float = 60) -> dict:
    return wait_for(lambda: (j := state(hub, student, job_id))["state"] in wanted and j, timeout,
                    f"job {job_id} to be {'/'.join(sorted(wanted))}")


def log_of(hub, student: Student, job_id: str) -> str:
    r = api(hub, "GET", f"jobs/{job_id}/logs", student.token)
    assert r.status_code == 200, r.text
    return r.text


def root_only_folder(hub, what: str) -> tuple[Path, Path]:
    """A root-owned 0700 folder with a root-owned 0600 file: what a student must never get."""
    folder = hub.data_dir.parent / f"root-only-{what}-{uuid.uuid4().hex[:6]}"
    folder.mkdir(mode=0o700)
    secret = folder / "secret.txt"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    return folder, secret


def owner_and_mode(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, stat.S_IMODE(info.st_mode)


def test_a_student_reads_no_secret_of_the_data_dir(hub, students):
    victim, mallory = students[VICTIM], students[MALLORY]
    job = submit(hub, victim, ["/bin/sh", "-c", "echo victim-ran"], env={"API_KEY": "victims-api-key"})
    until_state(hub, victim, job["id"], {"succeeded"})
    data = hub.data_dir
    # Every file the hub, the proxy, sqlite and the service keep outside the homes is private.
    for folder, dirs, files in os.walk(data):
        here = Path(folder)
        if here == data:
            # the homes, and the courses' data folders members read (docs/admins/course-data.md)
            dirs[:] = [d for d in dirs if d not in ("homes", "course-data")]
        for name in files:
            _uid, mode = owner_and_mode(here / name)
            assert mode & 0o077 == 0, f"{here / name} is mode {mode:o}"
        for name in dirs:
            assert owner_and_mode(here / name)[1] & 0o077 == 0, f"{here / name} is open to others"
    assert owner_and_mode(data)[1] == 0o711  # passable to the homes, not listable
    secrets = ["jupyterhub.sqlite", "classhub.sqlite", "jupyterhub_cookie_secret", "demo-password",
               "jupyterhub_config.py", f"jobs/{job['id']}/worker-0.log"]
    for name in secrets:
        assert (data / name).exists(), name
    probe = mallory.run(f"""
        import os
        out = []
        try:
            os.listdir({str(data)!r}); out.append("listed")
        except PermissionError:
            out.append("list-denied")
        for name in {secrets!r} + ["classhub.sqlite-wal", "jobs"]:
            try:
                path = os.path.join({str(data)!r}, name)
                data = open(path, "rb").read() if not os.path.isdir(path) else os.listdir(path)
                out.append("READ " + name + " " + str(b"victims-api-key" in bytes(str(data), "utf8")))
            except FileNotFoundError:
                pass
            except PermissionError:
                out.append("denied " + name)
        print("\\n".join(out))
    """)
    assert probe.returncode == 0, probe.stderr
    assert "READ" not in probe.stdout and "list-denied" in probe.stdout, probe.stdout
    assert probe.stdout.count("denied ") >= len(secrets) + 1, probe.stdout


def test_links_planted_in_the_home_are_never_followed_by_the_service(hub, students):
    mallory = students[MALLORY]
    folder, secret = root_only_folder(hub, "classhub")
    before = (owner_and_mode(folder), owner_and_mode(secret), secret.read_text())
    # ~/.classhub is a link to a root-only folder: the old service chowned it to the student.
    planted = mallory.run(f"import os; os.symlink({str(folder)!r}, '.classhub')")
    assert planted.returncode == 0, planted.stderr
    job = submit(hub, mallory, ["/bin/sh", "-c", "echo mallory-ran"], id="plant-1", name="plant")
    # The id is not the one the attack computed in advance (name-sha256(user, client id)).
    guess = "plant-" + hashlib.sha256(f"{MALLORY}\0plant-1".encode()).hexdigest()[:8]
    assert job["id"] != guess
    until_state(hub, mallory, job["id"], {"succeeded"})
    assert (owner_and_mode(folder), owner_and_mode(secret), secret.read_text()) == before

    # A log link in the home, and one the student tries to plant in the service's folder.
    cookie = hub.data_dir / "jupyterhub_cookie_secret"
    kept = hub.data_dir / "jobs" / job["id"]
    planted = mallory.run(f"""
        import os
        os.unlink('.classhub')
        os.makedirs('.classhub/jobs/{job["id"]}')
        os.symlink({str(cookie)!r}, '.classhub/jobs/{job["id"]}/worker-0.log')
        try:
            os.symlink({str(cookie)!r}, {str(kept / "worker-1.log")!r}); print("PLANTED")
        except PermissionError:
            print("denied")
    """)
    assert planted.returncode == 0 and planted.stdout.strip() == "denied", planted
    text = log_of(hub, mallory, job["id"])
    assert "mallory-ran" in text and cookie.read_bytes().hex()[:16] not in text.encode().hex()
    assert cookie.read_bytes().strip().decode(errors="replace")[:16] not in text
    assert owner_and_mode(cookie) == (0, 0o600)


def test_the_workdir_is_entered_with_the_students_rights(hub, students):
    mallory = students[MALLORY]
    folder, _secret = root_only_folder(hub, "workdir")
    assert mallory.run(f"import os; os.symlink({str(folder)!r}, 'peek')").returncode == 0
    job = submit(hub, mallory, ["/bin/sh", "-c", "ls -la; cat secret.txt"], workdir="peek")
    done = until_state(hub, mallory, job["id"], {"succeeded", "failed"})
    text = log_of(hub, mallory, job["id"])
    assert done["state"] == "failed", (done, text)
    assert "Permission denied" in text and "root's secret" not in text and "secret.txt" not in text
    assert owner_and_mode(folder) == (0, 0o700)


def test_a_jobs_environment_never_reaches_a_root_process(hub, students):
    """PYTHONPATH/LD_PRELOAD a student chose load their code only in processes of their own."""
    mallory = students[MALLORY]
    marker = hub.data_dir.parent / f"loaded-{uuid.uuid4().hex[:6]}"
    marker.mkdir(mode=0o777)
    marker.chmod(0o777)  # the student's code may write here: we look at who wrote
    made = mallory.run(f"""
        import os
        os.makedirs('evil', exist_ok=True)
        open('evil/sitecustomize.py', 'w').write(
            "import os\\nopen(os.path.join({str(marker)!r}, str(os.getuid())), 'w').write('x')\\n")
    """)
    assert made.returncode == 0, made.stderr
    env = {"PYTHONPATH": str(mallory.home_path / "evil"), "PYTHONSTARTUP": "/dev/null"}
    job = submit(hub, mallory, ["/bin/sh", "-c", f"{PYTHON} -c 'print(42)'"], env=env)
    done = until_state(hub, mallory, job["id"], {"succeeded", "failed"})
    assert done["state"] == "succeeded", log_of(hub, mallory, job["id"])
    assert sorted(p.name for p in marker.iterdir()) == [str(mallory.account.uid)]


def test_a_pid_the_student_writes_is_never_signalled_and_never_ends_a_job(hub, students):
    mallory = students[MALLORY]
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)  # a root process group
    try:
        job = submit(hub, mallory, ["/bin/sh", "-c", "echo started; exec sleep 300"])
        until_state(hub, mallory, job["id"], {"running"})
        wait_for(lambda: "started" in log_of(hub, mallory, job["id"]), 30, "the job's output")
        kept = hub.data_dir / "jobs" / job["id"]
        planted = mallory.run(f"""
            import os
            folder = '.classhub/jobs/{job["id"]}'
            os.makedirs(folder, exist_ok=True)
            for name in ('worker-0.pid', 'worker-0.exit'):
                open(os.path.join(folder, name), 'w').write('{victim.pid}\\n')
            try:
                open({str(kept / "worker-0.pid")!r}, 'w').write('{victim.pid}\\n'); print("WROTE")
            except PermissionError:
                print("denied")
        """)
        assert planted.returncode == 0 and planted.stdout.strip() == "denied", planted
        # A bogus pid made the old service take the job for ended while it ran on. Not a wait
        # but an observation window: 3 s are 6 admission cycles (ClasshubJobs.interval = 0.5),
        # each of which would have ended the job under the old code; it must stay running.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert state(hub, mallory, job["id"])["state"] == "running"
            time.sleep(0.5)
        r = api(hub, "POST", f"jobs/{job['id']}/cancel", mallory.token)
        assert r.status_code in (200, 202), r.text
        until_state(hub, mallory, job["id"], {"cancelled"})
        assert victim.poll() is None, "the service signalled a process group the student named"
        left = [p for p in psutil.process_iter(["uids", "cmdline"])
                if p.info["uids"] and p.info["uids"].real == mallory.account.uid
                and "sleep" in " ".join(p.info["cmdline"] or [])]
        assert left == [], left
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


def test_a_root_hub_without_system_users_says_it_is_unsafe_for_a_shared_machine(demo_hub):
    """The default mode runs every server as the hub's account; as root it warns."""
    require_root()
    banner = demo_hub.log_path.read_text(errors="replace")
    assert "WARNING: running as root without --system-users" in banner
