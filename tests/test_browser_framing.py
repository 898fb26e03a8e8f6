"""Clickjacking, replayed in Chromium (issue 28): a page on the hub's own origin frames the classhub
home of a logged-in user, so that the user's next click lands on a button of classhub's
(the outside attack run made a user TA of a course that way, by an Accept in a hidden frame).

The attacker's page is served on the hub's origin (as a file in a user's server would be) by
Playwright's request routing; the frame it holds loads the real classhub page from the real hub.
The browser must refuse to show classhub inside it (docs/admins/security.md, "Security model", rule 9).
"""

from __future__ import annotations

import pytest

from tests.browser import hub_login

pytestmark = pytest.mark.browser


def test_a_page_on_the_hubs_origin_cannot_frame_classhub(demo_hub, page):
    hub_login(page, demo_hub.url, "student1", demo_hub.password)
    home = f"{demo_hub.url}/services/classhub/"
    page.goto(home)
    page.wait_for_load_state("domcontentloaded")
    shown = page.inner_text("body")
    assert "classhub" in shown.lower(), shown[:300]  # the page itself opens when not framed

    attack = f"{demo_hub.url}/user/mallory/files/win-a-prize.html"
    page.route(attack, lambda route: route.fulfill(
        status=200, content_type="text/html",
        body=f'<h1>Click to win</h1><iframe id="bait" src="{home}" width="900" height="600"></iframe>'))
    page.goto(attack)  # waits for the load event, which waits for the frame's own load
    child = next((f for f in page.frames if f.parent_frame == page.main_frame), None)
    assert child is not None, "the attacker's frame is missing"
    try:
        framed = child.evaluate("() => document.body ? document.body.innerText : ''")
    except Exception as e:  # Chromium's page for a blocked frame cannot be scripted
        framed = f"<not scriptable: {type(e).__name__}>"
    assert "classhub" not in framed.lower(), f"classhub showed inside the frame: {framed[:300]!r}"
    assert not child.url.startswith(home), child.url
