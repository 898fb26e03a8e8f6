"""Convert Alibaba's GPU-sharing production trace (PAI "openb", 2023) for bench/admission.py.

Source: https://github.com/alibaba/clusterdata, folder ``cluster-trace-gpu-v2023/csv``: 8,152
tasks of a production GPU cluster (``openb_pod_list_default.csv``; the ``multigpu*`` and
``gpushare*`` variants carry no times and cannot be replayed) and its 1,213 GPU nodes
(``openb_node_list_gpu_node.csv``). Described in Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023.
License: the repository puts a license (CC BY 4.0) only in its ``cluster-trace-gpu-v2020``
folder; ``cluster-trace-gpu-v2023`` states none and asks users to cite the paper. So the
converted CSVs are not committed: this script rebuilds them from a checkout in seconds.

Conversion rules (each a choice, so that the benchmark's figures can be read):
- a task with ``num_gpu`` 0 is dropped (CPU only: gang admission of GPU jobs is measured); so
  is a task that was never scheduled (``Pending``, no ``scheduled_time``: no run time is known);
- run time = ``deletion_time`` - ``scheduled_time`` (a task still running at the end of the trace
  ends there); tasks of 0 s are dropped; run times are clipped to [60 s, 24 h] (a class
  cluster's longest max_runtime, the synthetic generator's bound);
- one task = one job of one replica (the trace has no gangs): ``num_gpu`` whole GPUs, or, when
  ``gpu_milli`` < 1000, that share of one GPU (``gpu_milli``);
- course = the task's QoS class (``LS``, ``BE``, ``Burstable``, lower case); priority 0;
  ``gpu_spec`` (a GPU model constraint on a few tasks) is ignored;
- nodes: ``--nodes`` nodes taken evenly from the node list in its order (the mix of 2-, 4- and
  8-GPU nodes and of models is kept), with their GPUs, CPU and memory;
- submit times keep their order and gaps but are scaled so that the offered load on those nodes
  is ``--load`` (bench/traces/_common.py); max_runtime = run time x uniform(1, 2) rounded up to
  5 minutes (seeded).

    .venv/bin/python bench/traces/convert_alibaba_openb.py --clusterdata DIR --out bench/traces/openb
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Node, TraceJob, every_kth, scale_to_load, trace_parser, write

DAY = 86400.0


def read_nodes(path: Path, count: int) -> list[Node]:
    with path.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if int(r["gpu"] or 0) > 0]
    nodes = [Node(r["sn"], int(r["gpu"]), r["model"] or "unknown", int(r["cpu_milli"]),
                  int(r["memory_mib"])) for r in rows]
    return every_kth(nodes, count)


def read_jobs(path: Path) -> list[TraceJob]:
    jobs = []
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if rows and "creation_time" not in rows[0]:
        raise SystemExit(f"{path} has no creation/deletion times (the multigpu* and gpushare* "
                         "lists are resampled without them): use openb_pod_list_default.csv "
                         "or a gpuspec* list")
    for r in rows:
        gpus = int(r["num_gpu"] or 0)
        if gpus == 0 or not r.get("scheduled_time"):
            continue
        duration = float(r["deletion_time"]) - float(r["scheduled_time"])
        if duration <= 0:
            continue
        milli = int(r.get("gpu_milli") or 1000)
        shared = gpus == 1 and 0 < milli < 1000
        jobs.append(TraceJob(
            name=r["name"], submit_s=float(r["creation_time"]),
            duration_s=min(max(duration, 60.0), DAY), replicas=1, gpus_per_replica=gpus,
            gpu_milli=milli if shared else 1000, course=(r.get("qos") or "default").lower()))
    return jobs


def main(argv: list[str] | None = None) -> None:
    parser = trace_parser(__doc__, 64, "how many GPU nodes to keep")
    parser.add_argument("--pods", default="openb_pod_list_default.csv",
                        help="which pod list of cluster-trace-gpu-v2023/csv")
    args = parser.parse_args(argv)
    folder = args.clusterdata / "cluster-trace-gpu-v2023" / "csv"
    if not folder.is_dir():
        parser.error(f"{folder} does not exist: give the root of a clusterdata checkout")
    nodes = read_nodes(folder / "openb_node_list_gpu_node.csv", args.nodes)
    jobs = read_jobs(folder / args.pods)
    gpus = sum(n.gpus for n in nodes)
    factor = scale_to_load(jobs, gpus, args.load)
    write(args.out, nodes, jobs, args.seed)
    print(f"{args.out}: {len(nodes)} nodes, {gpus} GPUs, {len(jobs)} jobs, submit times x "
          f"{factor:.4f} for an offered load of {args.load}")


if __name__ == "__main__":
    main()
