"""What every command of a job in the grading sandbox does around its own work: the grader
(hub_ext.backends.grader) and a competition's runner (hub_ext.backends.competition_runner).

Why one module: the sandbox's promises are the same for every command that runs in it, so they
are kept in one place (docs/teachers/autograding.md, "Isolation"):
- **Arguments**: ``<folder> [--drop-to UID --work DIR]``, as the service's command line gives
  them (hub_ext.service.jobs.sandboxed.grader_command); each command says what its folder holds.
- **Before any student's or teacher's code runs**: the one-time settings are read and, where
  they say ``private`` (jobs that run as a grading account, not as the service's own), the
  process is non-dumpable, so no other process of that account reads its memory, environment or
  open files through /proc. Locally the one-time inputs are then deleted; on Kubernetes (a
  read-only Secret, root's) the process copies what the code may see into its scratch folder and
  becomes the sandbox's uid, and makes itself non-dumpable again.
- **Limits**: the memory limit becomes the address-space limit of this process, which its
  children (a notebook's kernel, a scoring script) inherit.
- **The result is the log's last line**, ``<MARKER> <nonce> <json>``: the nonce, which the
  job's code never saw, tells the command's line from one that code printed.

It travels in the grading pod's Secret beside the commands
(hub_ext.backends.kubernetes.jobs.grader_bundle), so it imports nothing they do not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
from pathlib import Path
from typing import Any

from hub_ext.backends import autograde

__all__ = ["arguments", "enter", "hand_over", "report", "settings"]


def arguments(prog: str, argv: list[str] | None, *, inputs: str, drop_to: str,
              work: str) -> argparse.Namespace | int:
    """The command's arguments (``inputs``, ``drop_to``, ``work``: the help of each), or the exit
    status of a command line that argparse refused (it has said why on stderr)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("folder", help=inputs)
    parser.add_argument("--drop-to", type=int, help=drop_to)
    parser.add_argument("--work", help=work)
    try:
        return parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return int(e.code or 0) or 2


def settings(folder: Path, name: str) -> tuple[dict[str, Any], bool]:
    """The job's one-time settings (``folder/name``, JSON) and whether the job is private; a
    private job's process is non-dumpable from here on."""
    config = json.loads((folder / name).read_text())
    private = bool(config.get("private", True))
    if private:
        autograde.undumpable()
    return config, private


def enter(folder: Path, args: argparse.Namespace, config: dict[str, Any], private: bool, *,
          keep: str, one_time: tuple[str, ...]) -> Path:
    """Leave the inputs behind, then take on the memory limit; the folder the job's code works
    in (its ``keep`` folder is there).

    Started as root (``--drop-to``): a copy of ``keep`` in ``--work``, for that uid, which this
    process becomes. Else the job's own ``folder``, less its ``one_time`` inputs."""
    if args.drop_to is not None:
        folder = hand_over(folder, Path(args.work), args.drop_to, keep)
        if private:
            autograde.undumpable()  # a change of uid makes a process dumpable again
    else:
        for done in (folder / name for name in one_time):  # one-time: gone before code runs
            with contextlib.suppress(OSError):
                shutil.rmtree(done) if done.is_dir() else done.unlink()
    if config.get("memory"):
        limit = int(config["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return folder


def hand_over(inputs: Path, work: Path, uid: int, keep: str) -> Path:
    """Copy ``inputs/keep`` into ``work`` for ``uid`` and become ``uid`` (no groups): the inputs,
    root's and read-only, are out of the job's code's reach from here on."""
    shutil.copytree(inputs / keep, work / keep, dirs_exist_ok=True)
    for path in [work, *work.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    os.environ["HOME"] = str(work)
    return work


def report(marker: str, nonce: str, result: Any) -> None:
    """Write the result as the log's last line, after whatever the job's code left buffered."""
    line = json.dumps(result, separators=(",", ":"))
    sys.stdout.flush()
    os.write(1, f"\n{marker} {nonce} {line}\n".encode())
