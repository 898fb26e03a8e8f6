"""classhub's commands in the test's own process: the console script's ``main`` function.

Why: a ``classhub`` process pays about 1.3 s of CPU for its imports (JupyterHub's among them)
before it checks anything, the classhub service's as much, and most tests of a command are about
what it does before it starts anything: a bad flag, port, data dir or setting refused in one line,
``upgrade-db``, ``propose-profiles``. That is main()'s own code, the same in this process. What
the interpreter adds around main() (the console script or ``python -m``; a SystemExit message
printed on stderr with exit status 1) stays shown by the tests that still run each command as a
process: tests/test_cli.py (the runs up to the hub's start, ``--version``),
tests/test_store_upgrade.py (the upgrade of a sqlite file; the service and the culler on a schema
behind) and tests/test_service_config.py (the service without a database, the culler's refusal).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from unittest import mock

from hub_ext.cli import main as classhub_main


@dataclass
class Ran:
    """What the process would have ended with (``subprocess.CompletedProcess``'s names)."""

    returncode: int
    stdout: str
    stderr: str


def call_main(main: Callable[[list[str]], None], argv: list[str],
              env: Mapping[str, str] | None = None) -> Ran:
    """``main(argv)`` in this process, with ``env`` (the whole environment, as ``subprocess.run``
    takes it) for the call; this process's umask is kept (``upgrade-db`` sets its own). A
    SystemExit ends it as the interpreter ends a process: a message is printed on stderr with
    status 1, a number is the status. Any other exception fails the test, as its traceback would
    fail the process's one-line check; a warning a process would print (Python's default
    filters) is on stderr too."""
    out, err = io.StringIO(), io.StringIO()
    umask = os.umask(0o022)
    os.umask(umask)
    code: object = None
    with (mock.patch.dict(os.environ, dict(env) if env is not None else {}, clear=env is not None),
          contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          warnings.catch_warnings(record=True) as caught):
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
        finally:
            os.umask(umask)
    for w in caught:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    if code is None or isinstance(code, int):
        return Ran(code or 0, out.getvalue(), err.getvalue())
    return Ran(1, out.getvalue(), f"{err.getvalue()}{code}\n")


def call_cli(*args: str, env: Mapping[str, str] | None = None) -> Ran:
    """``classhub *args`` (``hub_ext.cli.main``) in this process: see `call_main`."""
    return call_main(classhub_main, list(args), env)
