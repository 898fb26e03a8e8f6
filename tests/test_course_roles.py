"""Teacher and TA powers are JupyterHub roles (per-member scopes), enforced by the hub itself."""

from __future__ import annotations

import pytest
import requests

from hub_ext.core import roles
from tests.hubproc import start_server


@pytest.mark.unit
def test_generated_roles():
    generated = roles.hub_roles({"cs101": {"tina": "teacher", "tom": "ta", "sam": "student"},
                                 "Art & Design": {"ada": "teacher"}})
    by_name = {r["name"]: r for r in generated}
    assert by_name["classhub-teacher-cs101"]["users"] == ["tina"]
    # server powers are per member, never a group filter (that would reach every member)
    assert "admin:servers!user=sam" in by_name["classhub-teacher-cs101"]["scopes"]
    assert not any("servers!group" in s for r in generated for s in r["scopes"])
    assert "access:servers!user=sam" in by_name["classhub-ta-cs101"]["scopes"]
    assert "access:servers!user=sam" in by_name["classhub-teacher-cs101"]["scopes"]
    assert "access:servers!user=tom" in by_name["classhub-teacher-cs101"]["scopes"]
    assert not any("admin:servers" in s for s in by_name["classhub-ta-cs101"]["scopes"])
    odd = next(r for r in generated if r["users"] == ["ada"])
    assert odd["name"].startswith("classhub-teacher-art-design-")
    assert "read:users!group=Art & Design" in odd["scopes"]
    no_ta_access = roles.hub_roles({"cs101": {"tom": "ta", "sam": "student"}}, ta_server_access=False)
    assert not any(s.startswith("access:servers") for s in no_ta_access[0]["scopes"])
    # a hub admin in a course (an admin enrolled them) is in no server scope of any role
    with_admin = roles.hub_roles({"cs101": {"tina": "teacher", "root": "student", "sam": "student"}},
                                 hub_admins={"root"})
    assert not any(s.endswith("=root") for r in with_admin for s in r["scopes"])
    assert "access:servers!user=sam" in with_admin[0]["scopes"]


@pytest.mark.hub
def test_teacher_and_ta_reach_their_students_servers_through_the_hub(login, demo_hub):
    student = login("student1")
    student_token = student.new_token()
    start_server(demo_hub, "student1", student_token)
    contents = f"{demo_hub.url}/user/student1/api/contents/"

    def as_user(name):
        return {"Authorization": f"token {login(name).new_token()}"}

    teacher, ta, other = as_user("teacher1"), as_user("ta1"), as_user("student2")
    # Opening the student's server: the teacher and the TA may, another student may not.
    assert requests.get(contents, headers=teacher, timeout=30).status_code == 200
    assert requests.get(contents, headers=ta, timeout=30).status_code == 200
    assert requests.get(contents, headers=other, timeout=30).status_code == 403
    # Stopping it: the TA may not, the teacher may.
    stop = f"{demo_hub.url}/hub/api/users/student1/server"
    assert requests.delete(stop, headers=ta, timeout=30).status_code in (403, 404)
    assert requests.delete(stop, headers=other, timeout=30).status_code in (403, 404)
    assert requests.delete(stop, headers=teacher, timeout=60).status_code in (202, 204)
