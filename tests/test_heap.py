"""The hub freezes its startup heap once it runs, and nothing else does (hub_ext.heap).

Each case runs in a fresh Python: a freeze is for the whole process, and pytest's own process
must keep collecting its garbage.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.hubproc import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _frozen_after(*code: str) -> int:
    """How many objects a fresh Python holds frozen after ``code`` (configure() in some setting)."""
    script = textwrap.dedent("""
        import gc
        from traitlets.config import Config
        from hub_ext.config import configure
    """) + "".join(textwrap.dedent(part) for part in code) + "\nprint(gc.get_freeze_count())\n"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


@pytest.mark.unit
def test_building_a_configuration_outside_a_hub_leaves_the_heap_alone():
    # a test, `classhub local` building its configuration, a tool printing one: not a hub
    assert _frozen_after('configure(Config(), mode="kubernetes")') == 0


#: A JupyterHub of this process whose start does nothing: the real start needs a whole hub (the
#: last test checks a real one); what is checked here is configure()'s hook on it.
HUB_ABOUT_TO_START = """
    import asyncio
    from jupyterhub.app import JupyterHub
    app = JupyterHub.instance()
    async def start():
        pass
    app.start = start
"""


@pytest.mark.unit
def test_a_hub_loading_the_configuration_freezes_its_heap_when_started():
    frozen = _frozen_after(HUB_ABOUT_TO_START, """
        configure(Config(), mode="kubernetes")
        configure(Config(), mode="kubernetes")  # a configuration that calls it twice
        assert gc.get_freeze_count() == 0, "frozen before the hub started"
        asyncio.run(app.start())
    """)
    assert frozen > 50_000  # JupyterHub's and classhub's imports: modules, classes, functions


@pytest.mark.unit
def test_a_hub_told_not_to_freeze_does_not():
    assert _frozen_after(HUB_ABOUT_TO_START, """
        configure(Config(), mode="kubernetes", freeze_heap=False)
        asyncio.run(app.start())
    """) == 0


@pytest.mark.hub
def test_a_running_hub_froze_its_heap_once_started(demo_hub):
    # `classhub local` (its own hook, see hub_ext.cli): once the hub runs, in the hub's log
    assert demo_hub.log_path is not None
    # the hub answers before its start() has returned and frozen: wait for the line (a shared
    # hub may have been started by this very test)
    def frozen_log() -> str | None:
        text = demo_hub.log_path.read_text(errors="replace")
        return text if "froze the hub's startup heap" in text else None

    log = wait_for(frozen_log, 60, "the heap freeze line")
    started = log.index("JupyterHub is now running")
    frozen = log.index("froze the hub's startup heap")
    assert frozen > started, "the heap was frozen before the hub had started"
    assert log.count("froze the hub's startup heap") == 1
