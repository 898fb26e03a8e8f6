"""``classhub job ...``: submit, list, show, follow and cancel distributed jobs from a terminal.

``classhub job submit --replicas 2 --gpus 1 -- python train.py`` (or ``--profile gpu-1``: what
a notebook of that profile gets) inside a user's server needs no setup (the server's token and
the service's address are in its environment); elsewhere add
``--url https://<hub>/services/classhub/api --token <hub API token>``. Output is for people;
``--json`` prints the API's answer for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import requests

from hub_ext.jobclient import JobAPIError, JobClient, workdir_in_home

__all__ = ["add_job_parser", "run_job"]


def add_job_parser(sub: Any) -> None:
    """Add ``job`` and its commands to the ``classhub`` parser's subcommands."""
    job = sub.add_parser("job", help="submit, list, show, follow and cancel distributed jobs")
    job.add_argument("--url", help="the classhub API (default: $CLASSHUB_SERVICE_API_URL or "
                     "$CLASSHUB_URL)")
    job.add_argument("--token", help="a hub API token (default: $CLASSHUB_TOKEN or the server's own)")
    job.add_argument("--json", action="store_true", help="print the API's JSON answer")
    verbs = job.add_subparsers(dest="verb", required=True)
    submit = verbs.add_parser("submit", help="queue a job: classhub job submit --replicas 2 "
                              "--gpus 1 -- python train.py")
    submit.add_argument("--replicas", type=int, default=1, help="replicas started together (1)")
    submit.add_argument("--profile", default=None, metavar="SLUG",
                        help="each replica gets what a notebook of this profile of your course "
                        "gets (CPU, memory, GPUs), e.g. gpu-1; instead of --gpus/--cpu/--memory")
    submit.add_argument("--gpus", type=int, default=0, help="GPUs per replica (0)")
    submit.add_argument("--gpu-resource", default="nvidia.com/gpu",
                        help="the GPU resource (nvidia.com/gpu, or a MIG slice such as "
                        "nvidia.com/mig-1g.18gb)")
    submit.add_argument("--cpu", default=None, help="CPUs per replica (1 when no GPU is asked)")
    submit.add_argument("--memory", default=None, help="memory per replica, e.g. 8Gi")
    submit.add_argument("--name", default="job", help="a name for the job (job)")
    submit.add_argument("--id", default=None, help="your id for the job: submitting it again "
                        "returns the same job")
    submit.add_argument("--course", default=None, help="the course (needed in several courses)")
    submit.add_argument("--max-runtime", type=float, default=None, help="seconds before it is stopped")
    submit.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    submit.add_argument("--wait", action="store_true", help="wait until the job ends; exit 0 "
                        "only if it succeeded")
    submit.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="the command and its arguments")
    listing = verbs.add_parser("list", help="my jobs (and my courses' queues for teachers and TAs)")
    listing.add_argument("--course", default=None)
    listing.add_argument("--state", default=None, help="e.g. queued,running")
    for verb, text in (("show", "state, reason, queue position and replicas of a job"),
                       ("cancel", "stop a job"), ("logs", "a replica's log")):
        parser = verbs.add_parser(verb, help=text)
        parser.add_argument("id")
        if verb == "logs":
            parser.add_argument("-f", "--follow", action="store_true", help="until the replica ends")
            parser.add_argument("--role", default=None)
            parser.add_argument("--index", type=int, default=0)


def run_job(args: argparse.Namespace) -> int:
    """Run one ``classhub job`` command; its exit status."""
    try:
        client = JobClient(args.url, args.token)
        return _VERBS[args.verb](client, args)
    except JobAPIError as e:
        print(f"classhub: {e}", file=sys.stderr)
        return 1
    except requests.RequestException as e:
        print(f"classhub: cannot reach classhub at {args.url or 'the configured URL'} "
              f"({type(e).__name__}); check --url", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _submit(client: JobClient, args: argparse.Namespace) -> int:
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        print("classhub: give the command after --, e.g. classhub job submit -- python train.py",
              file=sys.stderr)
        return 2
    resources: dict[str, Any] = {}
    if args.gpus:
        resources[args.gpu_resource] = args.gpus
    if args.cpu or not (args.gpus or args.profile):
        resources["cpu"] = args.cpu or "1"
    if args.memory:
        resources["memory"] = args.memory
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"classhub: --env {item!r}: write NAME=VALUE", file=sys.stderr)
            return 2
        env[name] = value
    # With --profile, explicit --gpus/--cpu/--memory are sent too: the service refuses the mix.
    job = client.submit(command, replicas=args.replicas, resources=resources or None, name=args.name,
                        id=args.id, course=args.course, max_runtime=args.max_runtime, env=env or None,
                        workdir=workdir_in_home(), profile=args.profile)
    shape = job.get("profile") or ", ".join(f"{v} {k}" for k, v in resources.items())
    _print(args, job, f"{job['id']}: {job['state']} in {job['course']} ({args.replicas} x {shape})")
    if not args.wait:
        return 0
    job = client.wait(job["id"])
    _print(args, job, _summary(job))
    return 0 if job["state"] == "succeeded" else 1


def _list(client: JobClient, args: argparse.Namespace) -> int:
    page = client.list(course=args.course, state=args.state)
    lines = [f"{'ID':<24} {'STATE':<10} {'OWNER':<12} {'COURSE':<10} WHY / WHEN"]
    for job in page["jobs"]:
        why = job.get("reason") or job.get("finished_at") or job.get("started_at") or ""
        lines.append(f"{job['id']:<24} {job['state']:<10} {job['owner']:<12} {job['course']:<10} {why}")
    _print(args, page, "\n".join(lines))
    return 0


def _show(client: JobClient, args: argparse.Namespace) -> int:
    job = client.show(args.id)
    _print(args, job, _summary(job, history=True))
    return 0


def _cancel(client: JobClient, args: argparse.Namespace) -> int:
    job = client.cancel(args.id)
    _print(args, job, f"{job['id']}: " + ("stopping its replicas" if job["stop_requested"]
                                           and job["state"] not in ("cancelled", "succeeded", "failed")
                                           else job["state"]))
    return 0


def _logs(client: JobClient, args: argparse.Namespace) -> int:
    for text in client.logs(args.id, args.role, args.index, follow=args.follow):
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _summary(job: dict, history: bool = False) -> str:
    lines = [f"{job['id']} ({job['name']}) of {job['owner']} in {job['course']}: {job['state']}"]
    if job.get("reason"):
        lines.append(f"  why: {job['reason']}")
    for replica in job.get("replicas", []):
        code = "" if replica["exit_code"] is None else f", exit {replica['exit_code']}"
        lines.append(f"  {replica['role']}-{replica['index']} (rank {replica['rank']}): "
                     f"{replica['state']} on {replica['node']}{code}")
    for event in job.get("events", []) if history else []:
        lines.append(f"  {event['at']}  {event['state']:<10} {event['message']}")
    return "\n".join(lines)


def _print(args: argparse.Namespace, payload: Any, text: str) -> None:
    print(json.dumps(payload, indent=2) if args.json else text)


_VERBS = {"submit": _submit, "list": _list, "show": _show, "cancel": _cancel, "logs": _logs}
