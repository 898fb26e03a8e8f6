"""Convert Alibaba's GPU-disaggregated DLRM trace (2025) into gangs for bench/admission.py.

Source: https://github.com/alibaba/clusterdata, file
``cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv``: 23,871 instances of 156 services on a
production cluster over about a month, 7,386 of them on GPU nodes ("HN", one GPU each), with
creation, scheduling and deletion times. Described in Yang et al., "GPU-Disaggregated Serving for
Deep Learning Recommendation Models at Scale", USENIX NSDI 2025.
License: the repository puts a license (CC BY 4.0) only in its ``cluster-trace-gpu-v2020``
folder; ``cluster-trace-gpu-v2025`` states none and asks users to cite the paper. So the
converted CSVs are not committed: this script rebuilds them from a checkout in seconds.

Why this trace: it is the public GPU trace whose arrivals come in groups: a service scales out by
creating several GPU instances in the same second, which must all run for the scale-out to help,
i.e. a gang. (Microsoft Philly's and SenseTime Helios's job logs were the first choice; the stored
snapshots of github.com/msr-fiddle/philly-traces and S-Lab-System-Group/HeliosData hold only a
Git LFS pointer and no data file, see docs/admission.md.)

Conversion rules:
- only GPU instances (``role`` HN) created during the trace (``creation_time`` given) count;
  CPU instances and those alive before the trace began are dropped;
- one gang = the instances of one ``app_name`` created in the same second: ``replicas`` = their
  count, ``gpus_per_replica`` = their ``gpu_request`` (1 in this trace);
- run time = the longest of the gang's ``deletion_time`` - ``scheduled_time`` (an instance not
  deleted by the end of the trace ends at the trace's last timestamp), clipped to [60 s, 24 h]
  (services run for weeks; a class cluster's jobs do not);
- course = one of four, by the CRC-32 of ``app_name`` (a service stays in one course); priority 0;
- nodes: the trace names none; ``--nodes`` nodes of 8 GPUs (``max_instance_per_node`` is 8);
- submit times keep their order and gaps, scaled to the offered load ``--load``; max_runtime =
  run time x uniform(1, 2) rounded up to 5 minutes (bench/traces/_common.py).

    .venv/bin/python bench/traces/convert_alibaba_dlrm.py --clusterdata DIR --out bench/traces/dlrm
"""

from __future__ import annotations

import csv
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Node, TraceJob, scale_to_load, trace_parser, write

DAY = 86400.0
COURSES = ("c0", "c1", "c2", "c3")


def read_gangs(path: Path) -> list[TraceJob]:
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    times = [float(r[k]) for r in rows for k in ("creation_time", "scheduled_time", "deletion_time")
             if r[k]]
    end = max(times)
    gangs: dict[tuple[str, float], list[dict[str, str]]] = {}
    for r in rows:
        if r["role"] != "HN" or not r["creation_time"] or not r["scheduled_time"]:
            continue
        if int(float(r["gpu_request"] or 0)) < 1:
            continue
        gangs.setdefault((r["app_name"], float(r["creation_time"])), []).append(r)
    jobs = []
    for k, ((app, created), members) in enumerate(sorted(gangs.items(), key=lambda g: (g[0][1], g[0][0]))):
        duration = max((float(r["deletion_time"]) if r["deletion_time"] else end)
                       - float(r["scheduled_time"]) for r in members)
        if duration <= 0:
            continue
        jobs.append(TraceJob(
            name=f"dlrm-{k:05d}", submit_s=created, duration_s=min(max(duration, 60.0), DAY),
            replicas=len(members), gpus_per_replica=int(float(members[0]["gpu_request"])),
            gpu_milli=1000, course=COURSES[zlib.crc32(app.encode()) % len(COURSES)]))
    return jobs


def main(argv: list[str] | None = None) -> None:
    parser = trace_parser(__doc__, 16, "how many 8-GPU nodes")
    args = parser.parse_args(argv)
    source = args.clusterdata / "cluster-trace-gpu-v2025" / "disaggregated_DLRM_trace.csv"
    if not source.is_file():
        parser.error(f"{source} does not exist: give the root of a clusterdata checkout")
    nodes = [Node(f"hn-{i:03d}", 8, "unknown", 128_000, 1_048_576) for i in range(args.nodes)]
    jobs = read_gangs(source)
    factor = scale_to_load(jobs, 8 * args.nodes, args.load)
    write(args.out, nodes, jobs, args.seed)
    print(f"{args.out}: {len(nodes)} nodes, {8 * args.nodes} GPUs, {len(jobs)} gangs "
          f"({sum(1 for j in jobs if j.replicas > 1)} of 2+ replicas), submit times x "
          f"{factor:.4f} for an offered load of {args.load}")


if __name__ == "__main__":
    main()
