"""Find flaky tests: run test modules (or the whole suite) N times and count the passes.

A test that fails one time in ten costs a whole CI run now and then; running it once says nothing
about that. This runs each module in a fresh pytest process, one after the other, and prints
per module how many runs passed and how long they took:

    python -m tests.flakecheck -n 20 tests/test_quota_spawns.py tests/test_culler_local.py
    python -m tests.flakecheck -n 20 --load          # every hub, cluster and browser module
    python -m tests.flakecheck -n 3 --suite --load   # the whole suite, 3 times, under load
    python -m tests.flakecheck -n 50 -j 3 "tests/test_x.py::test_y"   # 3 runs at a time

(``make flake-check N=20 MODULES="..." LOAD=1`` runs the same.) ``--load`` keeps one core busy
with a spinning process for the whole check: races that an idle machine hides show up when the
hub, its services and the test share less CPU. Without modules, every module that holds a test of
the hub, cluster or browser tier (tests/conftest.py) is checked. A failed run's output is kept
under ``--logs`` (default ``var/flakecheck-logs/``); the exit status is 1 when any run failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
#: How ``make test`` runs the suite (the Makefile passes its TEST_WORKERS).
SUITE_ARGS = ["-n", os.environ.get("TEST_WORKERS", "4"), "--dist", "loadfile"]


@dataclass
class Tally:
    """The runs of one target (a module, or the whole suite)."""

    target: str
    seconds: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)  # run numbers, from 1

    def line(self) -> str:
        n = len(self.seconds)
        passed = n - len(self.failed)
        timing = (f"mean {statistics.mean(self.seconds):.1f} s, max {max(self.seconds):.1f} s"
                  if self.seconds else "no run")
        failed = f"; failed runs {self.failed}" if self.failed else ""
        return f"{self.target}: {passed} of {n} passed ({timing}){failed}"


def slow_modules() -> list[str]:
    """Modules with at least one test of the hub, cluster or browser tier (as the modules mark them)."""
    out = subprocess.run([*PYTEST, "--collect-only", "-m", "hub or cluster or browser", "tests"],
                         cwd=ROOT, capture_output=True, text=True)
    modules = {line.split("::", 1)[0] for line in out.stdout.splitlines() if "::" in line}
    if not modules:
        raise SystemExit(f"no hub, cluster or browser tests collected:\n{out.stdout}{out.stderr}")
    return sorted(modules)


def spin() -> subprocess.Popen:
    """A process that keeps one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _run(target: str, extra: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """One run of ``target`` (runs side by side get ports of their own: tests/ports.py). The
    whole suite runs as ``make test`` runs it (on xdist workers)."""
    args = ["tests", *SUITE_ARGS] if target == "suite" else [target, "-x"]
    started = time.monotonic()
    result = subprocess.run([*PYTEST, *args, *extra], cwd=ROOT, capture_output=True, text=True)
    return time.monotonic() - started, result


def check(targets: list[str], runs: int, logs: Path, extra: list[str], jobs: int = 1) -> list[Tally]:
    tallies = []
    for target in targets:
        tally = Tally(target)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_run, target, extra) for run in range(1, runs + 1)]
            for run, future in enumerate(futures, start=1):
                seconds, result = future.result()
                tally.seconds.append(seconds)
                if result.returncode != 0:
                    tally.failed.append(run)
                    logs.mkdir(parents=True, exist_ok=True)
                    log = logs / f"{Path(target.split('::')[0]).stem}-run{run}.log"
                    log.write_text(result.stdout + result.stderr)
                    print(f"  {target} run {run}: FAILED ({seconds:.1f} s), output in {log}", flush=True)
                else:
                    print(f"  {target} run {run}: passed ({seconds:.1f} s)", flush=True)
        tallies.append(tally)
        print(tally.line(), flush=True)
    return tallies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="test modules (default: every hub, cluster and "
                        "browser module)")
    parser.add_argument("-n", "--runs", type=int, default=20, help="runs per module (default 20)")
    parser.add_argument("--suite", action="store_true", help="run the whole suite instead of modules")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="runs of a target at the same "
                        "time (default 1; each with its own ports)")
    parser.add_argument("--load", action="store_true", help="keep one core busy while checking")
    parser.add_argument("--logs", type=Path, default=ROOT / "var" / "flakecheck-logs",
                        help="folder for the output of failed runs")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, one string")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("-n must be at least 1")
    targets = ["suite"] if args.suite else (args.modules or slow_modules())
    load = spin() if args.load else None
    try:
        print(f"flake check: {len(targets)} target(s) x {args.runs} run(s)"
              f"{', one core kept busy' if load else ''}", flush=True)
        tallies = check(targets, args.runs, args.logs, args.pytest_args.split(), max(1, args.jobs))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    print("\nsummary" + (" (under CPU load)" if load else ""))
    for tally in tallies:
        print(tally.line())
    return 1 if any(t.failed for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
