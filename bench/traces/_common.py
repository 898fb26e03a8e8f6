"""What the trace converters share: the CSV files bench/admission.py reads, and load scaling.

Why one place: every converter must write the same columns (bench/admission.py, "Input") and
apply the same two documented rules that no public trace records:
- ``max_runtime_s`` (what a student would ask for, and what admission plans with): the run time
  times uniform(1, 2), rounded up to 5 minutes, drawn from a seeded generator so a conversion is
  reproducible (the same rule as ``--synthetic``);
- the offered load: submit times are scaled by one factor so that the GPU-seconds asked for,
  divided by the cluster's GPUs times the span of submissions, equals ``--load``. Order, gaps
  and bursts of the arrivals are kept; only their time scale changes.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NODE_COLUMNS = ("name", "gpus", "gpu_model", "cpu_milli", "memory_mib")
JOB_COLUMNS = ("name", "submit_s", "duration_s", "replicas", "gpus_per_replica", "gpu_milli",
               "course", "priority", "max_runtime_s")


@dataclass
class Node:
    name: str
    gpus: int
    gpu_model: str
    cpu_milli: int
    memory_mib: int


@dataclass
class TraceJob:
    name: str
    submit_s: float
    duration_s: float
    replicas: int
    gpus_per_replica: int
    gpu_milli: int
    course: str
    priority: int = 0

    @property
    def gpus(self) -> float:
        return self.replicas * (self.gpus_per_replica if self.gpu_milli >= 1000
                                else self.gpu_milli / 1000)


def every_kth(items: Sequence, count: int) -> list:
    """`count` items spread evenly over `items` (their mix of kinds is kept)."""
    if count <= 0 or count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(k * step)] for k in range(count)]


def scale_to_load(jobs: list[TraceJob], gpus: int, load: float) -> float:
    """Scale submit times in place (first submission at 0) so the offered load is `load`;
    returns the factor applied."""
    if not jobs:
        return 1.0
    first = min(j.submit_s for j in jobs)
    span = max(j.submit_s for j in jobs) - first
    work = sum(j.gpus * j.duration_s for j in jobs)
    factor = work / (load * gpus * span) if span > 0 else 1.0
    for j in jobs:
        j.submit_s = round((j.submit_s - first) * factor, 3)
    return factor


def write(out: Path, nodes: Sequence[Node], jobs: Sequence[TraceJob], seed: int) -> None:
    """Write ``out``/nodes.csv and ``out``/jobs.csv (jobs in submit order)."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "nodes.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(NODE_COLUMNS)
        for n in nodes:
            writer.writerow((n.name, n.gpus, n.gpu_model, n.cpu_milli, n.memory_mib))
    rng = random.Random(seed)
    with (out / "jobs.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMNS)
        for j in sorted(jobs, key=lambda j: (j.submit_s, j.name)):
            max_runtime = math.ceil(j.duration_s * rng.uniform(1.0, 2.0) / 300) * 300
            writer.writerow((j.name, j.submit_s, round(j.duration_s), j.replicas,
                             j.gpus_per_replica, j.gpu_milli if j.gpu_milli < 1000 else "",
                             j.course, j.priority, max_runtime))


def trace_parser(doc: str, nodes: int, nodes_help: str) -> argparse.ArgumentParser:
    """The options every converter takes (the clusterdata checkout, how many nodes, the load,
    the seed, the output folder); a converter adds its own."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--clusterdata", type=Path, required=True,
                        help="a checkout of github.com/alibaba/clusterdata")
    parser.add_argument("--nodes", type=int, default=nodes, help=nodes_help)
    parser.add_argument("--load", type=float, default=1.3, help="offered load to scale to")
    parser.add_argument("--seed", type=int, default=1, help="seed of the max_runtime draws")
    parser.add_argument("--out", type=Path, required=True, help="folder for nodes.csv, jobs.csv")
    return parser
