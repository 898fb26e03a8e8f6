"""The parent of one replica of a local distributed job: claims the replica, runs it, records its end.

Why a wrapper instead of starting the command directly: the classhub service may be killed at
any moment (SIGKILL, a host restart of the hub) while replicas keep running. On its way back it
must know, without having been their parent, which replicas run and how each one ended:

- the wrapper *claims* the replica by creating ``<replica>.pid`` with O_EXCL before running
  anything, so a launch repeated after a crash finds the claim and starts no second copy
  (create-if-absent, as Kubernetes' create with a deterministic name); the claim holds the
  wrapper's pid and start time, so a recycled pid is never taken for it;
- it writes the command's exit status to ``<replica>.exit`` (atomically) when the command ends;
  a replica whose wrapper is gone without that file was killed;
- it survives the SIGTERM sent to its process group on cancel, preemption or max_runtime (the
  command gets it and may checkpoint), so the exit status is still recorded.

Why it runs as the service's account, never as the job's owner (docs/admins/security.md, "Security model"):
the claim, the exit status and the log live in the service's own folder (0700), where no user can
write, so nothing a student controls names a process for the service to signal or a file for it
to open. Only the command switches to the owner's account (``--uid``/``--gid``) and enters its
working folder *after* switching, so the kernel checks that folder against the owner, not root.
The command's environment comes from ``<replica>.env`` (written by the service, removed once
read): the wrapper's own environment stays the service's clean one, so variables a user chose
(``PYTHONPATH``, ``LD_PRELOAD``) never reach a process with the service's rights.

A sandbox job (grading, competitions) also gets ``--lock PATH``: the wrapper holds that lock for
the job's whole life and kills what the grading account left behind before the command starts
and after it ends, before its exit status is recorded (hub_ext.backends.local.sandbox).

Usage (by hub_ext.backends.local.jobs): ``python -I -m hub_ext.backends.local.jobwrap DIR REPLICA
[--uid N --gid N] [--cwd PATH] [--lock PATH] -- COMMAND...``; stdout and stderr are the replica's
log already.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from hub_ext.backends.local import sandbox

#: Exit status of a wrapper that found the replica already claimed: it ran nothing.
ALREADY_CLAIMED = 75
#: Exit status recorded when the command could not be started (as a shell's "not found").
CANNOT_RUN = 127


def _record(path: Path, code: int) -> None:
    tmp = path.with_suffix(".exit.tmp")
    tmp.write_text(f"{code}\n")
    os.replace(tmp, path)


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """``--name value`` pairs before ``--``, and the command after it (None: malformed)."""
    if "--" not in argv:
        return None
    cut = argv.index("--")
    head, command = argv[:cut], argv[cut + 1:]
    if len(head) % 2 or not command:
        return None
    pairs = dict(zip(head[::2], head[1::2], strict=True))
    if any(k not in ("--uid", "--gid", "--cwd", "--lock") for k in pairs):
        return None
    return pairs, command


def _become(uid: int | None, gid: int | None, cwd: str | None):
    """The child's first steps: the owner's account (no supplementary groups), a private umask,
    then its working folder, entered with the owner's rights."""

    def preexec() -> None:
        if gid is not None:
            os.setgid(gid)
            os.setgroups([])
        if uid is not None:
            os.setuid(uid)
        os.umask(0o077)
        if cwd is not None:
            try:
                os.chdir(cwd)
            except OSError as e:  # said in the log; the exit status is the shell's "not found"
                os.write(2, f"classhub: cannot enter the job's workdir {cwd}: {e.strerror}\n".encode())
                os._exit(CANNOT_RUN)

    return preexec


def _environment(path: Path) -> dict[str, str]:
    try:
        with open(path) as f:
            env = json.load(f)
    except FileNotFoundError:
        return dict(os.environ)
    os.unlink(path)
    return {str(k): str(v) for k, v in env.items()}


def main(argv: list[str]) -> int:
    parsed = _options(argv[2:]) if len(argv) >= 4 else None
    if parsed is None:
        print("usage: jobwrap DIR REPLICA [--uid N --gid N] [--cwd PATH] [--lock PATH] -- COMMAND...",
              file=sys.stderr)
        return 2
    folder, replica = Path(argv[0]), argv[1]
    options, command = parsed
    try:
        fd = os.open(folder / f"{replica}.pid",
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return ALREADY_CLAIMED
    me = psutil.Process()
    with os.fdopen(fd, "w") as claim:
        claim.write(f"{me.pid} {me.create_time()!r}\n")
    env = _environment(folder / f"{replica}.env")
    # A Python handler (not SIG_IGN) so the command, after exec, gets the default action again.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    uid = int(options["--uid"]) if "--uid" in options else None
    gid = int(options["--gid"]) if "--gid" in options else None
    lock = options.get("--lock") if uid is not None else None
    begins = None
    if lock is not None:  # held until this process exits: no other sandbox job meanwhile
        held = sandbox.hold(Path(lock), uid)
        begins = sandbox.recorded_start(held) if held is not None else None
    try:
        child = subprocess.Popen(command, env=env, preexec_fn=_become(uid, gid, options.get("--cwd")))
    except (OSError, subprocess.SubprocessError) as e:
        where = options.get("--cwd", "")
        reason = getattr(e, "strerror", None) or str(e)
        print(f"classhub: cannot run {command[0]!r} in {where or 'the home'}: {reason}",
              file=sys.stderr, flush=True)
        _record(folder / f"{replica}.exit", CANNOT_RUN)
        return CANNOT_RUN
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
            continue
    code = 128 - code if code < 0 else code
    if lock is not None:  # nothing the job started outlives it (a daemon, a double fork)
        sandbox.sweep(uid, begins)
    _record(folder / f"{replica}.exit", code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
