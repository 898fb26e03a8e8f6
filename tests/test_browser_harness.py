"""The browser tier's harness works: Chromium logs in through the hub's form and lands on the hub."""

import pytest

from tests.browser import Clicks, hub_login

pytestmark = pytest.mark.browser


def test_a_student_logs_in_through_the_form_in_chromium(page, demo_hub):
    hub_login(page, demo_hub.url, "student1", demo_hub.password)
    clicks = Clicks(page)
    assert "/hub/" in page.url
    assert page.locator("#login_submit").count() == 0, page.content()[:2000]
    assert clicks.count == 0
