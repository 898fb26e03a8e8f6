"""Browser harness: Debian's Chromium driven by Playwright, logged in through the hub's own form.

The browser tier (tests whose module name has "browser", or that use the ``page`` fixture) runs
against real ``classhub local`` hubs. Chromium is found at ``$CLASSHUB_CHROMIUM`` or
``/usr/bin/chromium`` (``.ci/run`` installs Debian's package); when it is missing a browser test
fails with what to install, never skips.

Journeys count their clicks: ``Clicks`` wraps a page so every ``click()`` a test makes is counted,
and the docs state the number each journey must take (docs/teachers/pages.md, "The classhub pages").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Where screenshots for the docs go (``docs/screenshots``), written by the browser tests.
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"

#: Chromium flags for a closed network and a root user (see docs/contributing/development.md, "Development").
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    """The Chromium binary, or a test failure that says what to install."""
    candidates = [os.environ.get("CLASSHUB_CHROMIUM", ""), "/usr/bin/chromium",
                  shutil.which("chromium") or "", shutil.which("chromium-browser") or ""]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    pytest.fail("Chromium is missing: install Debian's 'chromium' package (.ci/run does) or set "
                "CLASSHUB_CHROMIUM to a Chromium binary")
    raise AssertionError  # unreachable; pytest.fail raises


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """One headless Chromium per module (each test gets its own context). Not per session:
    Playwright's sync API keeps an event loop running in the main thread while it is open, and
    the tests after a browser module run their own loops (``asyncio.run``)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator:
    """A fresh browser context and page (its own cookies), closed after the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    context.close()


def hub_login(page, hub_url: str, username: str, password: str) -> None:
    """Log in through the hub's login form (what a person does), landing on the hub's home page
    (``next=/hub/home``: the default landing would start the user's server on a shared hub)."""
    page.goto(f"{hub_url}/hub/login?next=%2Fhub%2Fhome")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("#login_submit")
    page.wait_for_load_state("domcontentloaded")


class Clicks:
    """Counts the clicks a journey takes and notes what each clicked element said (its text, a
    button's value or its aria-label): use ``clicks.click(selector)`` instead of page.click."""

    def __init__(self, page) -> None:
        self.page = page
        self.count = 0
        self.labels: list[str] = []

    def click(self, selector: str, **kwargs) -> None:
        self.click_locator(self.page.locator(selector).first, **kwargs)

    def click_locator(self, locator, **kwargs) -> None:
        self.labels.append(" ".join(locator.evaluate(
            "e => e.innerText || e.value || e.getAttribute('aria-label') || ''").split()))
        self.count += 1
        locator.click(**kwargs)


def screenshot(page, name: str) -> Path:
    """Save a docs screenshot ``docs/screenshots/<name>.png`` of the current page."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
