"""A course quota on a MIG slice with media extensions, through a real ``classhub local`` hub.

What an admin would notice if this failed: the course quota `{"nvidia.com/mig-1g.10gb.me": 2}`
(a resource NVIDIA's device plugin advertises for `1g.10gb+me` slices) refused as "unknown
resource", set through the REST API or through the course page's quota editor in Chromium.
"""

from __future__ import annotations

import re
import secrets

import pytest

from tests.browser import hub_login
from tests.hubproc import HubSession, LocalHub, api

pytestmark = pytest.mark.browser

ME = "nvidia.com/mig-1g.10gb.me"


@pytest.fixture(scope="module")
def hub(demo_hub: LocalHub) -> LocalHub:
    return demo_hub


@pytest.fixture(scope="module")
def token(hub) -> str:
    return HubSession(hub, "admin").new_token()


def new_course(hub, token) -> str:
    name = f"migme-{secrets.token_hex(3)}"
    r = api(hub, "POST", "courses", token, json={"name": name, "display_name": name})
    assert r.status_code == 201, r.text
    return name


def test_an_admin_sets_a_media_extension_slice_quota_through_the_api(hub, token):
    course = new_course(hub, token)
    r = api(hub, "PUT", f"courses/{course}/quota", token, json={"resources": {ME: 2}})
    assert r.status_code == 200, r.text
    assert api(hub, "GET", f"courses/{course}/quota", token).json()["resources"] == {ME: "2"}
    for name in ("nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb-me", "amd.com/gpu"):
        r = api(hub, "PUT", f"courses/{course}/quota", token, json={"resources": {name: 1}})
        assert r.status_code == 200, (name, r.text)
    # what is not of the grammar is still a typo with a sentence, and changes nothing
    r = api(hub, "PUT", f"courses/{course}/quota", token, json={"resources": {"nvidia.com/mig-1g.10gbme": 2}})
    assert r.status_code == 400 and "unknown resource 'nvidia.com/mig-1g.10gbme'" in r.json()["message"]
    assert "nvidia.com/mig-1g.10gb.me" in r.json()["message"]  # the sentence names the grammar
    assert api(hub, "GET", f"courses/{course}/quota", token).json()["resources"] == {"amd.com/gpu": "1"}


def test_the_course_pages_quota_editor_takes_a_media_extension_slice(hub, token, browser):
    course = new_course(hub, token)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    hub_login(page, hub.url, "admin", hub.password)
    page.goto(f"{hub.url}/services/classhub/courses/{course}")
    page.wait_for_selector("#course-quota")
    page.fill("#cq-res", f"{ME}=2")
    page.click("#course-quota button[type=submit]")
    page.wait_for_selector("#page-status:has-text('Course quota saved.')")
    assert page.input_value("#cq-res") == f"{ME}=2"  # the reloaded page shows it back
    assert api(hub, "GET", f"courses/{course}/quota", token).json()["resources"] == {ME: "2"}
    # a typo: the API's sentence next to the form, the saved quota kept
    page.fill("#cq-res", f"{ME}=2, nvidia.com/mig-1g.10gb+me=1")
    page.click("#course-quota button[type=submit]")
    page.wait_for_selector("#cq-status:has-text('not a valid resource name')")
    assert re.search(r"nvidia\.com/mig-1g\.10gb\+me", page.inner_text("#cq-status"))
    assert api(hub, "GET", f"courses/{course}/quota", token).json()["resources"] == {ME: "2"}
    context.close()
