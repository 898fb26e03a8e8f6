"""Course data with system users (local mode, ``--system-users``): the file system keeps the
promise, not the browser. A course's folder is ``root:<course group>`` 0750 with read-only files;
a member's server process has the course group (the local spawner gives it at spawn) and reads;
an account of another course cannot even list the folder; nobody but the service writes.

The other accounts are played by processes that switch to ``nobody`` with or without the course
group, as the spawner's ``preexec_fn`` does (``setgroups``). Needs root, like every module that
acts as students' Unix accounts (tests/system_accounts.py).
"""

from __future__ import annotations

import grp
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from hub_ext.backends.coursedata import ClasshubCourseData, CourseDataStore, folder_name
from hub_ext.backends.local.accounts import ensure_course_group
from hub_ext.core.coursedata import parse_content_range
from tests.system_accounts import require_root

pytestmark = pytest.mark.unit

NOBODY = 65534


def as_nobody(groups: list[int], code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], user=NOBODY, group=NOBODY, extra_groups=groups,
                          capture_output=True, text=True, timeout=60, cwd="/")


@pytest.fixture
def course_group():
    require_root()
    course = f"t-{uuid.uuid4().hex[:8]}"
    gid = ensure_course_group(course, "chtest-")
    yield course, gid
    subprocess.run(["groupdel", grp.getgrgid(gid).gr_name], check=False, capture_output=True)


def test_members_read_other_accounts_cannot_enter_and_nobody_writes(course_group):
    course, gid = course_group
    assert ensure_course_group(course, "chtest-") == gid  # made once, found after
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o711)  # as the data dir: others pass through, nobody lists it
        store = CourseDataStore(ClasshubCourseData(root_dir=str(Path(top) / "course-data")),
                                group_of=lambda c: gid if c == course else None)
        upload = store.upload(course, "scans/ct-001.bin", parse_content_range(None, None))
        upload.write(b"scan")
        upload.finish()
        folder = store.root / folder_name(course)
        st = folder.stat()
        assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (0, gid, "0o750")
        target = folder / "scans" / "ct-001.bin"

        member = as_nobody([gid], f"print(open({str(target)!r}).read())")
        assert member.returncode == 0 and member.stdout.strip() == "scan", member.stderr
        for code in (f"open({str(target)!r}, 'w')", f"import os; os.unlink({str(target)!r})",
                     f"open({str(folder / 'new.txt')!r}, 'w')"):
            refused = as_nobody([gid], code)
            assert "PermissionError" in refused.stderr, (code, refused.stderr)

        outsider = as_nobody([], f"import os; print(os.listdir({str(folder)!r}))")
        assert "PermissionError" in outsider.stderr, outsider.stderr
        outsider = as_nobody([], f"print(open({str(target)!r}).read())")
        assert "PermissionError" in outsider.stderr, outsider.stderr
        assert target.read_bytes() == b"scan"
