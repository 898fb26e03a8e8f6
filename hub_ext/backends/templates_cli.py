"""``python -m hub_ext.backends.templates_cli seed|install ...``: templates in containers.

``install`` runs in the short-lived publisher pod on Kubernetes (see
hub_ext.backends.kubernetes.templates.publish_with_pod); ``seed`` in the user pod:

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
import os
import signal
import sys
import time
import urllib.request

from hub_ext.backends.seeding import HomeError
from hub_ext.backends.templates import TemplateStorage
from hub_ext.backends.templates_spawn import SeedJob, seed_local
from hub_ext.core.seeding import SeedLimits, TemplateRefused


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hub_ext.backends.templates_cli")
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
    install = sub.add_parser("install", help="download a checked upload and store it as a version")
    install.add_argument("--url", required=True, help="where the classhub service serves the upload")
    install.add_argument("--root", required=True, help="the template storage (the template volume)")
    install.add_argument("--location", required=True, help="the new version's folder below --root")
    install.add_argument("--manifest-sha256", required=True, help="what the service's checks found")
    install.add_argument("--max-files", type=int, default=SeedLimits.max_files)
    install.add_argument("--max-bytes", type=int, default=SeedLimits.max_bytes)
    return parser


def install(args: argparse.Namespace) -> int:
    """The publisher pod: fetch the tar the service checked, unpack it with the same checks onto
    the volume, and move it into place only if its manifest is exactly the one the service found.

    The one-time token of the upload comes in $CLASSHUB_UPLOAD_TOKEN (not in the pod's argv).
    """
    limits = SeedLimits(max_files=args.max_files, max_bytes=args.max_bytes)
    storage = TemplateStorage(args.root)
    staged = storage.staging()
    try:
        archive = staged / "upload.tar"
        budget = limits.max_bytes + 1024 * limits.max_files + 1024 * 1024
        request = urllib.request.Request(args.url, headers={
            "Authorization": f"token {os.environ.get('CLASSHUB_UPLOAD_TOKEN', '')}"})
        with urllib.request.urlopen(request, timeout=60) as response, open(archive, "wb") as out:
            while chunk := response.read(1 << 20):
                budget -= len(chunk)
                if budget < 0:
                    raise TemplateRefused("the upload is larger than the limits allow")
                out.write(chunk)
        print(f"classhub: fetched {archive.stat().st_size} bytes", flush=True)
        storage.extract(archive, staged, limits)
        archive.unlink()
        _, digest = storage.seal(staged, limits)
        if digest != args.manifest_sha256:
            raise TemplateRefused("the unpacked files differ from what the service checked")
        storage.commit(staged, args.location)
        staged = None
        print(json.dumps({"installed": args.location, "manifest_sha256": digest}), flush=True)
        return 0
    except (TemplateRefused, OSError, FileExistsError) as e:
        print(f"classhub: not installed: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        if staged is not None:
            TemplateStorage.discard(staged)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "install":
        return install(args)
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
