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
from typing import Any

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


class _Chromium:
    """The test process's headless Chromium, kept open from one browser module to the next.

    Why: starting Playwright's driver and Chromium costs about 3 s of CPU, once per module before;
    consecutive browser modules of a worker now share one. It is closed before a test that does
    not drive it (`pytest_runtest_teardown` below): Playwright's sync API keeps an event loop
    marked running in the main thread while it is open, and other tests run their own loops
    (``asyncio.run``)."""

    def __init__(self) -> None:
        self._playwright: Any = None
        self._browser: Any = None

    def get(self) -> Any:
        """The open Chromium, launched first when there is none (or it went away)."""
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        self.close()
        from playwright.sync_api import sync_playwright

        executable = chromium_path()
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=executable, headless=True,
                                                         args=CHROMIUM_ARGS)
        return self._browser

    def close(self) -> None:
        browser, playwright, self._browser, self._playwright = self._browser, self._playwright, None, None
        try:
            if browser is not None and browser.is_connected():
                browser.close()
        finally:
            if playwright is not None:
                playwright.stop()


CHROMIUM = _Chromium()
_DRIVES_CHROMIUM = frozenset({"browser", "page"})


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """The headless Chromium (each test gets its own context): one per run of consecutive
    browser modules of a worker (`_Chromium`), not one per module."""
    yield CHROMIUM.get()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator:
    """After a module's last test (its fixtures torn down): close Chromium unless the next
    module's first test drives it too. Within a module it stays open, as a module's own
    Chromium did. (Registered by tests/conftest.py, which imports it.)"""
    yield
    if nextitem is None or (getattr(nextitem, "module", None) is not getattr(item, "module", None)
                            and not _DRIVES_CHROMIUM & set(getattr(nextitem, "fixturenames", ()))):
        CHROMIUM.close()


@pytest.fixture(scope="session", autouse=True)
def _chromium_closed_at_the_end() -> Iterator[None]:
    """Close Chromium when the session ends another way (``-x``, an interrupt)."""
    yield
    CHROMIUM.close()


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
    # from the top: a sticky bar (a course page's section links) would otherwise be drawn over
    # the middle of the full page, where the window stood
    page.evaluate("() => window.scrollTo(0, 0)")
    # a notification still sliding in would be drawn cut off at the window's edge: finite
    # animations are run to their end for the picture (Playwright's "disabled")
    page.screenshot(path=str(path), full_page=True, animations="disabled")
    return path


#: Each run of letters and digits in the text under a selector whose glyphs lie on more than one
#: line: what a reader sees as a word cut in two ("Cours|e", "nvidia.com/gp|u").
_CUT_WORDS = """(selector) => {
  const cut = [];
  for (const root of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[A-Za-z0-9]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) cut.push(m[0]);
      }
    }
  }
  return cut;
}"""


def words_cut_in_two(page, selector: str) -> list[str]:
    """The words under ``selector`` that the page's layout breaks across two lines."""
    return page.evaluate(_CUT_WORDS, selector)


_FORM_LAYOUT = """(form) => {
  const shown = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
  const problems = [];
  for (const label of form.querySelectorAll('label[for]')) {
    const control = document.getElementById(label.htmlFor);
    if (!shown(label) || !control || !shown(control)) continue;
    const l = label.getBoundingClientRect(), c = control.getBoundingClientRect();
    const middle = (l.top + l.bottom) / 2;
    if (middle < c.top || middle > c.bottom || l.right > c.left + 1)
      problems.push(`${label.textContent.trim()}: not left of its control, on its line`);
  }
  for (const item of form.children) {
    // a control's wrapper (JupyterLab's select styling adds one) shown with nothing in it
    if (shown(item) && item.querySelector('select, input') &&
        ![...item.querySelectorAll('select, input')].some(shown))
      problems.push(`a ${item.className || item.tagName} shown without its control`);
  }
  return problems;
}"""


def form_layout_problems(form) -> list[str]:
    """What a reader of the form (a Locator) sees out of place: a label not on its control's line
    and left of it, or the frame of a hidden control still drawn."""
    return form.evaluate(_FORM_LAYOUT)


def cut_off_at_the_right(page, container: str, items: str) -> list[str]:
    """The ``items`` (a selector) inside ``container`` drawn past the right edge of a box that
    clips them (an ancestor whose overflow is not visible), or whose own content is wider than
    they are (a button squeezed narrower than its label): what a reader of a narrow side panel
    sees cut off."""
    return page.evaluate("""([container, items]) => {
      const clippedAt = (e) => {
        let right = Infinity;
        for (let a = e.parentElement; a; a = a.parentElement) {
          if (getComputedStyle(a).overflowX !== 'visible')
            right = Math.min(right, a.getBoundingClientRect().right);
        }
        return right;
      };
      return [...document.querySelectorAll(`${container} ${items}`)]
        .filter((e) => e.getClientRects().length
          && (e.getBoundingClientRect().right > clippedAt(e) + 0.5 || e.scrollWidth > e.clientWidth + 1))
        .map((e) => (e.innerText || e.getAttribute('aria-label') || e.tagName).trim());
    }""", [container, items])
