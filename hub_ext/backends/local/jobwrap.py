"""The parent of one replica of a local distributed job: claims the replica, runs it, records its end.

Why a wrapper instead of starting the command directly: the classhub service may be killed at
any moment (SIGKILL, a host restart of the hub) while replicas keep running. On its way back it
must know, without having been their parent, which replicas run and how each one ended:

- the wrapper *claims* the replica by creating ``<replica>.pid`` with O_EXCL before running
  anything, so a launch repeated after a crash finds the claim and starts no second copy
  (create-if-absent, as Kubernetes' create with a deterministic name);
- it writes the command's exit status to ``<replica>.exit`` (atomically) when the command ends;
  a replica whose wrapper is gone without that file was killed;
- it survives the SIGTERM sent to its process group on cancel, preemption or max_runtime (the
  command gets it and may checkpoint), so the exit status is still recorded.

Usage (by hub_ext.backends.local.jobs): ``python -m hub_ext.backends.local.jobwrap DIR REPLICA
-- COMMAND...``; stdout and stderr are the replica's log file already.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

#: Exit status of a wrapper that found the replica already claimed: it ran nothing.
ALREADY_CLAIMED = 75


def _record(path: Path, code: int) -> None:
    tmp = path.with_suffix(".exit.tmp")
    tmp.write_text(f"{code}\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: jobwrap DIR REPLICA -- COMMAND...", file=sys.stderr)
        return 2
    folder, replica, command = Path(argv[0]), argv[1], argv[3:]
    try:
        fd = os.open(folder / f"{replica}.pid", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return ALREADY_CLAIMED
    with os.fdopen(fd, "w") as claim:
        claim.write(f"{os.getpid()}\n")
    # A Python handler (not SIG_IGN) so the command, after exec, gets the default action again.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    try:
        child = subprocess.Popen(command)
    except OSError as e:
        print(f"classhub: cannot run {command[0]!r}: {e.strerror or e}", file=sys.stderr, flush=True)
        _record(folder / f"{replica}.exit", 127)
        return 127
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
            continue
    code = 128 - code if code < 0 else code
    _record(folder / f"{replica}.exit", code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
