"""``python -m hub_ext.backends.local.templates_cli seed ...``: seed a home in a container.

The Kubernetes spawner runs this in an init or sidecar container of the user pod (see
hub_ext.backends.kubernetes.templates); it is the local mode's seeding (templates_spawn.seed_local)
with its inputs as arguments. It prints one line per phase (the container's log) and a JSON
summary last; it exits 0 when seeded (or nothing to do), 2 when the template is refused (its
manifest does not match what was published, or it is over the limits) and 3 when the home cannot
be seeded (e.g. ``.classhub`` is not a folder) -- the server then does not start, with the reason
in the pod's log and events.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from hub_ext.backends.local.seeding import HomeError
from hub_ext.backends.local.templates import TemplateStorage
from hub_ext.backends.local.templates_spawn import SeedJob, seed_local
from hub_ext.core.seeding import SeedLimits, TemplateRefused


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hub_ext.backends.local.templates_cli")
    sub = parser.add_subparsers(dest="command", required=True)
    seed = sub.add_parser("seed", help="seed (or re-seed) a home from a stored template version")
    seed.add_argument("--root", required=True, help="the template storage (mount of the template volume)")
    seed.add_argument("--location", required=True, help="the version's folder below --root")
    seed.add_argument("--manifest-sha256", required=True, help="sha256 of the published manifest")
    seed.add_argument("--home", required=True, help="the home to seed")
    seed.add_argument("--course", required=True)
    seed.add_argument("--name", required=True)
    seed.add_argument("--version", required=True, type=int)
    seed.add_argument("--max-files", type=int, default=SeedLimits.max_files)
    seed.add_argument("--max-bytes", type=int, default=SeedLimits.max_bytes)
    seed.add_argument("--restore-deleted", action="store_true",
                      help="bring back template files the student deleted")
    seed.add_argument("--only-if-from", default=None,
                      help="re-seed only when the home's marker names this template (on_start)")
    seed.add_argument("--then-wait", action="store_true",
                      help="keep running after seeding (a sidecar container must not exit)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    job = SeedJob(args.course, args.name, args.version, args.location, args.manifest_sha256, 0, 0,
                  None, None, restore_deleted=args.restore_deleted, only_if_from=args.only_if_from)
    limits = SeedLimits(max_files=args.max_files, max_bytes=args.max_bytes)
    print(f"classhub: seeding {job.key} v{job.version} into {args.home}", flush=True)
    code = 0
    try:
        result = seed_local(job, TemplateStorage(args.root), args.home, limits)
    except TemplateRefused as e:
        print(f"classhub: template refused: {e}", file=sys.stderr, flush=True)
        code = 2
    except (HomeError, OSError) as e:
        print(f"classhub: cannot seed the home: {e}", file=sys.stderr, flush=True)
        code = 3
    else:
        summary = result.plan.summary() if result is not None else {}
        print(json.dumps({"template": job.key, "version": job.version, "summary": summary,
                          "skipped": result is None}), flush=True)
    if args.then_wait and code == 0:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(3600)
    return code


if __name__ == "__main__":
    sys.exit(main())
