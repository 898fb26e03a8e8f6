"""Template seeding against ``cp -a`` of the same tree, and a no-change re-seed against the first.

Why: seeding runs before a student's JupyterLab opens (local mode) or in the user pod
(Kubernetes); it must cost about what a plain copy costs, and starting again with nothing new
must be nearly free. Both are measured in this run, on this disk, against the same tree:

- the tree: 2,000 files (mixed sizes: many small notebooks and scripts, some MB-sized data, a few
  large files) in 40 folders, about 500 MB, written once to a temporary folder;
- publish (printed, not in the ratio): :func:`scan_template`, hashing the tree once, as publishing
  does; seeding then uses the stored manifest;
- ``cp -a src dstN`` (a subprocess) and ``seed_home(src, manifest, homeN)`` into an empty home,
  interleaved over ``--rounds`` rounds (order alternating, ``sync`` before each, untimed), medians;
- a no-change re-seed of the last home (median of ``--rounds``).

    .venv/bin/python bench/seeding.py [--rounds 3] [--mb 500] [--files 2000]

The last line: ``seed/cp-a = X.XX, reseed/seed = Y.YY`` (targets: <= 1.2 and <= 0.1).
Temporary files are removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hub_ext.backends.seeding import scan_template, seed_home  # noqa: E402
from hub_ext.core.seeding import SeedLimits  # noqa: E402


def file_sizes(count: int, total: int, rng: random.Random) -> list[int]:
    """Mixed sizes: 85% small (1-64 KiB), 13% medium (0.2-2 MiB), 2% large; scaled to ``total``."""
    sizes = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.85:
            sizes.append(rng.randint(1024, 64 * 1024))
        elif roll < 0.98:
            sizes.append(rng.randint(200 * 1024, 2 * 1024 * 1024))
        else:
            sizes.append(rng.randint(8 * 1024 * 1024, 24 * 1024 * 1024))
    scale = total / sum(sizes)
    return [max(1, int(s * scale)) for s in sizes]


def make_tree(root: Path, count: int, total: int) -> int:
    rng = random.Random(6)
    pool = os.urandom(8 * 1024 * 1024)
    subs = ("notebooks", "data", "scripts", "extra")
    folders = [root / f"week{w:02d}" / sub for w in range(10) for sub in subs]
    written = 0
    for i, size in enumerate(file_sizes(count, total, rng)):
        folder = folders[i % len(folders)]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"file{i:04d}{rng.choice(['.ipynb', '.py', '.csv', '.bin', '.md'])}"
        with open(path, "wb") as out:
            left = size
            while left:
                start = rng.randrange(0, len(pool) - 1)
                chunk = pool[start:start + min(left, len(pool) - start)]
                out.write(chunk)
                left -= len(chunk)
        if path.suffix == ".py":
            path.chmod(0o755)
        written += size
    return written


def timed(fn) -> float:
    subprocess.run(["sync"])
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="classhub-bench-seeding-"))
    try:
        src = work / "template"
        size = make_tree(src, args.files, args.mb * 1024 * 1024)
        print(f"tree: {args.files} files, {size / 1e6:.0f} MB in {src}")
        start = time.perf_counter()
        manifest = scan_template(src, SeedLimits(max_files=args.files * 2, max_bytes=size * 2))
        print(f"publish (scan + sha256, once per version): {time.perf_counter() - start:.2f} s")

        cp_times: list[float] = []
        seed_times: list[float] = []
        home = work / "home"
        for i in range(args.rounds):
            dst = work / f"cp{i}"
            home = work / f"home{i}"
            home.mkdir()
            runs = [
                lambda dst=dst: subprocess.run(["cp", "-a", str(src), str(dst)], check=True),
                lambda home=home: seed_home(src, manifest, home, template="bench", version=1),
            ]
            if i % 2:
                seed_times.append(timed(runs[1]))
                cp_times.append(timed(runs[0]))
            else:
                cp_times.append(timed(runs[0]))
                seed_times.append(timed(runs[1]))
            print(f"round {i + 1}: cp -a {cp_times[-1]:.3f} s, first seed {seed_times[-1]:.3f} s")
            shutil.rmtree(dst)
            if i + 1 < args.rounds:
                shutil.rmtree(home)

        reseed_times = []
        for _ in range(args.rounds):
            result = None

            def reseed() -> None:
                nonlocal result
                result = seed_home(src, manifest, home, template="bench", version=1)

            reseed_times.append(timed(reseed))
            assert result is not None and not result.plan.writes(), "a no-change re-seed wrote files"
        cp, seed, reseed_t = (statistics.median(t) for t in (cp_times, seed_times, reseed_times))
        print(f"median: cp -a {cp:.3f} s, first seed {seed:.3f} s, no-change re-seed {reseed_t:.3f} s")
        print(f"seed/cp-a = {seed / cp:.2f}, reseed/seed = {reseed_t / seed:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
