"""The hub harness says how a hub that died during its start ended, and where a hung one hung.

Why: a CI report shows the end of the output only. A hub that dies before it answers fails its
test with the hub's log; the last line after it says whether the hub exited with a status or was
killed by a signal (and which); a crash prints the hub's Python stacks into the log
(faulthandler), and so does a hub that never answered, before it is stopped. Without them, a log
that stops mid-start says nothing of why it stopped.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hubproc import HubProcess
from tests.ports import free_port

pytestmark = pytest.mark.unit


@dataclass
class _Dies(HubProcess):
    """A 'hub' that logs a line, then ends as ``code`` says, before it ever answers."""

    port: int
    proc: subprocess.Popen | None = None
    log_path: Path | None = None

    def run(self, code: str, log: Path, timeout: float = 30) -> None:
        self._launch([sys.executable, "-c", f"print('starting', flush=True)\n{code}"], log, {},
                     timeout=timeout)

    def stop(self, timeout: float = 15) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.parametrize(("code", "said"), [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", "was killed by SIGTERM"),
    ("raise SystemExit(3)", "exited with status 3"),
])
def test_the_last_line_says_how_the_hub_ended(tmp_path, code, said):
    hub = _Dies(port=free_port())
    with pytest.raises(RuntimeError) as e:
        hub.run(code, tmp_path / "hub.log")
    lines = str(e.value).splitlines()
    assert "starting" in lines  # the log comes first
    assert lines[-1] == f"--- the hub on port {hub.port} (pid {hub.proc.pid}) {said}"


def test_a_crashing_hub_prints_its_stack_into_the_log(tmp_path):
    hub = _Dies(port=free_port())
    with pytest.raises(RuntimeError) as e:
        hub.run("import ctypes\nctypes.string_at(0)", tmp_path / "hub.log")
    assert "Fatal Python error: Segmentation fault" in str(e.value)
    assert str(e.value).splitlines()[-1].endswith("was killed by SIGSEGV")


def test_a_hub_that_never_answers_is_shown_where_it_waits_then_stopped(tmp_path):
    hub = _Dies(port=free_port())
    with pytest.raises(AssertionError) as e:
        hub.run("import threading\ndef waiting_forever():\n    threading.Event().wait()\n"
                "waiting_forever()", tmp_path / "hub.log", timeout=3)
    said = str(e.value)
    assert "most recent call first" in said and "in waiting_forever" in said, said
    assert said.splitlines()[-1] == (f"--- the hub on port {hub.port} (pid {hub.proc.pid}) did not "
                                     "answer within 3 s")
    assert hub.proc.poll() is not None
