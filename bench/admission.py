"""Gang admission on a GPU-cluster trace: classhub's policy against strict and best-effort FIFO.

Why: gang admission must keep GPUs busy (no half-started jobs holding GPUs idle), must not let a
big multi-node job starve behind a stream of 1-GPU jobs, and must decide fast enough for a cluster
of 1,000 nodes with 10,000 waiting jobs. This is a discrete-event simulation (no sleeping, no hub):
the same trace goes through three policies, in one run:

- classhub: `hub_ext.core.admission.admission_cycle` (DRF across courses, conservative
  backfilling: a reservation for each of the first ``--depth`` blocked jobs, kept from cycle to
  cycle, and no backfill that delays any of them, plus one for each starving job of a whole node
  or more, up to ``--starving-reservations`` (8) more; borrowing with preemption of borrowed
  jobs); the two options are `c.ClasshubJobs.reservation_depth` and `starving_reservations`;
- strict FIFO gang: jobs in (priority, submit) order; the first job that does not fit blocks all
  others (Kueue's StrictFIFO);
- best-effort FIFO gang: the same order; a job that does not fit is skipped, with no reservation
  (Kueue's BestEffortFIFO).
All three place replicas with the same all-or-nothing best-fit assigner (`FreeIndex.place`), so
only the queueing policy differs. A cycle runs at every instant something happens (arrivals, ends,
the end of a preemption's grace).

Input, either:
- ``--nodes FILE --jobs FILE``: CSV with a header line.
  nodes: ``name,gpus[,gpu_model][,cpu_milli][,memory_mib]``;
  jobs: ``name,submit_s,duration_s,replicas,gpus_per_replica``
  ``[,gpu_milli][,course][,priority][,max_runtime_s]``.
  ``gpu_milli`` < 1000 is a shared fraction of one GPU (``gpus_per_replica`` must then be 1); it is
  modelled as that fraction of ``nvidia.com/gpu`` on a node, packed by amount (time-slicing).
  ``max_runtime_s`` (what the policy plans with) defaults to ``duration_s``; a job runs
  ``min(duration_s, max_runtime_s)`` (the backend stops it at its max runtime). Unknown columns are
  ignored; bad rows are reported with their line number and skipped.
- ``--synthetic SEED`` (the default, seed 1): a generator shaped like published GPU-cluster traces
  (Microsoft Philly, SenseTime Helios, Alibaba PAI: most jobs ask for one GPU or less, a tail of
  multi-node jobs holds a large share of GPU time, durations are heavy-tailed, users over-estimate
  runtimes):
  * cluster: ``--synthetic-nodes`` (64) nodes of 8 NVIDIA-H200, 112 CPUs, 1 TiB;
  * ``--synthetic-jobs`` (3,000) jobs in four courses (cs101 40 %, ml201 30 %, dl501 20 %,
    research 10 %); GPUs per job: a shared quarter or half GPU 10 %, 1 GPU 55 %, 2 GPUs 10 %,
    4 GPUs 10 % (1 x 4 or 2 x 2), 8 GPUs 8 % (1 x 8 or 2 x 4), 16 GPUs 4 % (2 x 8),
    32 GPUs 3 % (4 x 8);
  * durations log-normal, median 20 min (x 2 for jobs of 8 GPUs or more), clipped to [1 min, 24 h];
  * max_runtime = duration x uniform(1, 2), rounded up to 5 min (what a student would ask for);
  * priority 0, except 5 % of jobs at priority 1;
  * Poisson arrivals at an offered load of 0.95 of the cluster's GPUs (queues form and drain).
  Every course has a nominal share of a quarter of the GPUs and may borrow idle ones.

Output: per policy, GPU utilisation over the makespan (GPU-seconds held / (GPUs x makespan)), mean
and p95 queueing delay (submit to start), p95 delay of jobs of 8 GPUs or more, makespan; then the
admission cycle's median and p99 time with ``--cycle-nodes`` (1,000) nodes x 8 GPUs and
``--cycle-waiting`` (10,000) waiting jobs (snapshot, queue snapshot and cycle, ``--cycle-runs``
cycles over four cluster states ~97 % busy, after one untimed warm-up cycle per state: a service
keeps its job objects between cycles, so their exact request forms are computed once).
The last line is exactly

    util_vs_besteffort=<x> delay_vs_strict=<y> bigjob_delay_vs_strict=<z> cycle_ms_p50=<ms>

(classhub / best-effort utilisation, classhub / strict mean delay, classhub / strict p95 delay of
big jobs; goals, docs/admission.md: x >= 1.0, y < 0.6, z <= 1.0, ms < 50). ``--seeds 1-20`` runs
every seed, prints one row each (with the load average: the machine is shared and cycle times
are noisy) and ends with the same line holding the worst figure of each over the seeds.
Converters of public traces into the CSV input are in bench/traces/. ``--baseline-cache DIR``
keeps the two FIFO baselines' figures per trace (the simulation is deterministic) and reuses them
while the trace and the code they ran are unchanged, so a rerun after a policy change simulates
only classhub.

    .venv/bin/python bench/admission.py [--synthetic SEED | --seeds 1-20 | --nodes F --jobs F]
"""

from __future__ import annotations

import argparse
import csv
import gc
import heapq
import math
import os
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The classes the service's job loop runs (hub_ext/service/jobs/loop.py), imported from where the
# loop imports them: the queue, the cluster picture and the cycle (tests/test_bench_admission.py
# checks that these are the loop's own).
from hub_ext.core.admission import (  # noqa: E402
    RESERVATION_DEPTH,
    STARVING_RESERVATIONS,
    WAIT_WINDOW,
    CourseQuota,
    FreeIndex,
    NodeState,
    RunningJob,
    Snapshot,
    admission_cycle,
    nearest_rank,
    policy_problem,
)
from hub_ext.core.admission.queue import QueueManager  # noqa: E402
from hub_ext.core.admission.snapshot import ClusterState  # noqa: E402
from hub_ext.core.jobs import Job, JobError, Role  # noqa: E402
from hub_ext.core.quota import Usage  # noqa: E402
from hub_ext.core.resources import CPU, MEMORY, NVIDIA_GPU, ResourceVector  # noqa: E402

GRACE = 30.0
DEPTH = RESERVATION_DEPTH
STARVING = STARVING_RESERVATIONS
BIG_JOB_GPUS = 8
COURSES = (("cs101", 0.40), ("ml201", 0.30), ("dl501", 0.20), ("research", 0.10))


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class TraceJob:
    job: Job
    duration: float

    @property
    def runtime(self) -> float:
        """How long it really runs: its duration, cut at max_runtime."""
        return min(self.duration, self.job.max_runtime)


def node_state(name: str, gpus: int, model: str | None = "NVIDIA-H200", cpu_milli: int = 112_000,
               memory_mib: int = 1_048_576) -> NodeState:
    alloc = ResourceVector({NVIDIA_GPU: gpus, CPU: f"{cpu_milli}m", MEMORY: f"{memory_mib}Mi"})
    return NodeState(name, alloc, alloc, model)


def _rows(path: Path, required: Sequence[str]) -> Iterable[tuple[int, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"{path}: the header must name {', '.join(required)}; "
                             f"missing {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, {k.strip(): (v or "").strip() for k, v in row.items() if k}


def read_nodes(path: Path, errors: list[str]) -> list[NodeState]:
    nodes, seen = [], set()
    for line, row in _rows(path, ("name", "gpus")):
        try:
            name = row["name"]
            if not name or name in seen:
                raise ValueError(f"node name {name!r} is empty or repeated")
            gpus = int(row["gpus"])
            if gpus < 0:
                raise ValueError("gpus must be >= 0")
            nodes.append(node_state(
                name, gpus, row.get("gpu_model") or "NVIDIA-H200",
                int(row.get("cpu_milli") or 112_000), int(row.get("memory_mib") or 1_048_576)))
            seen.add(name)
        except (ValueError, TypeError) as exc:
            errors.append(f"{path}:{line}: {exc}; row skipped")
    return nodes


def make_job(name: str, submit: float, replicas: int, gpus: int, milli: int, course: str,
             priority: int, max_runtime: float) -> Job:
    per_replica = Fraction(milli, 1000) if milli < 1000 else Fraction(gpus)
    if milli < 1000 and gpus != 1:
        raise ValueError("gpu_milli below 1000 is a share of one GPU: gpus_per_replica must be 1")
    request = ResourceVector({NVIDIA_GPU: per_replica, CPU: 2, MEMORY: "16Gi"})
    return Job(name, f"{course}-user", course, (Role("worker", replicas, request),), max_runtime,
               submit, priority)


def read_jobs(path: Path, errors: list[str]) -> list[TraceJob]:
    jobs, seen = [], set()
    for line, row in _rows(path, ("name", "submit_s", "duration_s", "replicas", "gpus_per_replica")):
        try:
            duration = float(row["duration_s"])
            if not duration > 0 or not math.isfinite(duration):
                raise ValueError("duration_s must be a positive number")
            max_runtime = float(row.get("max_runtime_s") or duration)
            milli = int(row.get("gpu_milli") or 1000)
            if milli <= 0:
                raise ValueError("gpu_milli must be positive")
            job = make_job(
                row["name"], float(row["submit_s"]), int(row["replicas"]),
                int(row["gpus_per_replica"]), milli, row.get("course") or "default",
                int(row.get("priority") or 0), max_runtime)
            if job.name in seen:
                raise ValueError(f"job name {job.name!r} is repeated")
            seen.add(job.name)
            jobs.append(TraceJob(job, duration))
        except (ValueError, TypeError, JobError) as exc:
            errors.append(f"{path}:{line}: {exc}; row skipped")
    return jobs


def synthetic(seed: int, n_nodes: int = 64, n_jobs: int = 3000, load: float = 0.95,
              prefix: str = "job") -> tuple[list[NodeState], list[TraceJob]]:
    """The generator documented in the module docstring."""
    rng = random.Random(seed)
    nodes = [node_state(f"node-{i:04d}", 8) for i in range(n_nodes)]
    shapes = [  # (weight, replicas, gpus per replica, gpu_milli)
        (0.05, 1, 1, 250), (0.05, 1, 1, 500), (0.55, 1, 1, 1000), (0.10, 1, 2, 1000),
        (0.05, 1, 4, 1000), (0.05, 2, 2, 1000), (0.04, 1, 8, 1000), (0.04, 2, 4, 1000),
        (0.04, 2, 8, 1000), (0.03, 4, 8, 1000),
    ]
    drafts = []
    for _ in range(n_jobs):
        _, replicas, gpus, milli = rng.choices(shapes, weights=[s[0] for s in shapes])[0]
        total = replicas * (gpus if milli == 1000 else milli / 1000)
        median = 1200.0 * (2 if total >= BIG_JOB_GPUS else 1)
        duration = min(max(rng.lognormvariate(math.log(median), 1.2), 60.0), 86400.0)
        drafts.append((replicas, gpus, milli, total, round(duration)))
    mean_work = statistics.fmean(total * d for _, _, _, total, d in drafts)
    rate = load * 8 * n_nodes / mean_work
    t = 0.0
    jobs = []
    for k, (replicas, gpus, milli, _total, duration) in enumerate(drafts):
        t += rng.expovariate(rate)
        course = rng.choices([c for c, _ in COURSES], weights=[w for _, w in COURSES])[0]
        max_runtime = math.ceil(duration * rng.uniform(1.0, 2.0) / 300) * 300
        priority = 1 if rng.random() < 0.05 else 0
        job = make_job(f"{prefix}-{k:05d}", round(t, 3), replicas, gpus, milli, course, priority,
                       max_runtime)
        jobs.append(TraceJob(job, duration))
    return nodes, jobs


# --------------------------------------------------------------------------- simulation


@dataclass
class Outcome:
    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    gpu_seconds: float = 0.0
    preemptions: int = 0
    wasted_gpu_seconds: float = 0.0
    cycles: int = 0


Decider = Callable[["Simulation"], tuple[list[tuple[Job, Any, bool]], list[Any]]]


class Simulation:
    """Event loop shared by the three policies: what runs where, and what waits."""

    def __init__(self, nodes: Sequence[NodeState], trace: Sequence[TraceJob], shares: bool) -> None:
        self.cluster = ClusterState(nodes)
        self.trace = {t.job.name: t for t in trace}
        self.queue = QueueManager()
        self.end_at: dict[str, float] = {}
        self.usage: dict[str, ResourceVector] = {}
        self.now = 0.0
        self.reservations: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...] = ()
        self.recent_waits: tuple[float, ...] = ()
        self.out = Outcome()
        total = sum((n.allocatable[NVIDIA_GPU] for n in nodes), Fraction(0))
        courses = sorted({t.job.course for t in trace})
        self.nominal = {c: ResourceVector({NVIDIA_GPU: total / len(courses)}) if shares else None
                        for c in courses}
        self._events: list[tuple[float, int, int, str]] = []
        self._seq = 0
        for t in trace:
            self._push(t.job.submit_time, 1, t.job.name)

    def _push(self, when: float, kind: int, name: str) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, kind, self._seq, name))

    @property
    def running(self) -> Any:
        return self.cluster.running

    def start(self, job: Job, placement: Any, borrowed: bool) -> None:
        for role, _r, node in placement.replicas:
            request = next(r.request for r in job.roles if r.name == role)
            self.cluster.adjust(node, -request)
        run = RunningJob(job, placement.replicas, self.now, borrowed)
        self.cluster.start(run)
        end = self.now + self.trace[job.name].runtime
        self.end_at[job.name] = end
        self._push(end, 0, job.name)
        self.queue.remove(job.name)
        self.usage[job.course] = self.usage.get(job.course, ResourceVector()) + job.total
        self.out.starts.setdefault(job.name, self.now)

    def stop(self, name: str) -> RunningJob:
        run = self.cluster.end(name)
        assert run is not None
        for node, held in run.per_node.items():
            self.cluster.adjust(node, held)
        self.usage[run.job.course] = self.usage[run.job.course] - run.job.total
        if not run.preempted:  # only work that completes counts as utilisation
            self.out.gpu_seconds += run.job.gpus * (self.now - run.started)
        del self.end_at[name]
        return run

    def snapshot(self) -> Snapshot:
        courses = {
            c: CourseQuota(nominal=nominal or ResourceVector(),
                           usage=Usage(self.usage.get(c, ResourceVector())))
            for c, nominal in self.nominal.items()
        }
        return self.cluster.snapshot(self.now, courses, reservations=self.reservations,
                                     recent_waits=self.recent_waits, grace=GRACE)

    def run(self, decide: Decider) -> Outcome:
        while self._events:
            self.now = self._events[0][0]
            while self._events and self._events[0][0] == self.now:
                _, kind, _, name = heapq.heappop(self._events)
                if kind == 1:
                    self.queue.add(self.trace[name].job)
                elif name in self.running and self.end_at[name] == self.now:
                    run = self.stop(name)
                    if kind == 2:  # preempted: back to the queue, keeping its place
                        self.out.preemptions += 1
                        self.out.wasted_gpu_seconds += run.job.gpus * (self.now - run.started)
                        self.out.starts.pop(name, None)
                        self.queue.add(run.job)
                    else:
                        self.out.ends[name] = self.now
            if len(self.queue):
                self.out.cycles += 1
                admissions, preemptions = decide(self)
                for job, placement, borrowed in admissions:
                    self.start(job, placement, borrowed)
                for p in preemptions:
                    run = self.running.get(p.job)
                    if run is not None and not run.preempted and p.ends_by < self.end_at[p.job]:
                        self.cluster.preempt(p.job, p.ends_by)
                        self.end_at[p.job] = p.ends_by
                        self._push(p.ends_by, 2, p.job)
        return self.out


def classhub_policy(sim: Simulation) -> tuple[list[tuple[Job, Any, bool]], list[Any]]:
    result = admission_cycle(sim.snapshot(), sim.queue.snapshot(), depth=DEPTH,
                             starving_extra=STARVING)
    sim.reservations, sim.recent_waits = result.carried, result.recent_waits
    return [(a.job, a.placement, a.borrowed) for a in result.admitted], list(result.preemptions)


def fifo_policy(strict: bool) -> Decider:
    def decide(sim: Simulation) -> tuple[list[tuple[Job, Any, bool]], list[Any]]:
        index = FreeIndex(sim.cluster.nodes)
        queues = sim.queue.snapshot().by_course.values()
        waiting = sorted((j for jobs in queues for j in jobs),
                         key=lambda j: (-j.priority, j.submit_time, j.name))
        out = []
        for job in waiting:
            placement = index.place(job) if all(index.can_hold(r) for r in job.roles) else None
            if placement is not None:
                out.append((job, placement, False))
            elif strict or index.max_free_any() == 0:
                break
        return out, []
    return decide


@dataclass(frozen=True)
class Metrics:
    utilisation: float
    mean_delay: float
    p95_delay: float
    p95_big_delay: float
    makespan: float
    jobs: int
    preemptions: int
    wasted_gpu_hours: float
    cycles: int
    seconds: float


def p95(values: Sequence[float]) -> float:
    return nearest_rank(values, 0.95) or 0.0


def measure(nodes: Sequence[NodeState], trace: Sequence[TraceJob], decide: Decider,
            shares: bool) -> Metrics:
    began = time.perf_counter()
    out = Simulation(nodes, trace, shares).run(decide)
    seconds = time.perf_counter() - began
    missing = [t.job.name for t in trace if t.job.name not in out.ends]
    if missing:
        raise SystemExit(f"{len(missing)} jobs never finished (first: {missing[0]}): a policy starved them")
    first = min(t.job.submit_time for t in trace)
    makespan = max(out.ends.values()) - first
    gpus = sum(float(n.allocatable[NVIDIA_GPU]) for n in nodes)
    delays = [out.starts[t.job.name] - t.job.submit_time for t in trace]
    big = [out.starts[t.job.name] - t.job.submit_time for t in trace if t.job.gpus >= BIG_JOB_GPUS]
    return Metrics(out.gpu_seconds / (gpus * makespan) if makespan > 0 else 0.0,
                   statistics.fmean(delays), p95(delays), p95(big), makespan, len(trace),
                   out.preemptions, out.wasted_gpu_seconds / 3600, out.cycles, seconds)


def _baseline_key(nodes: Sequence[NodeState], trace: Sequence[TraceJob], strict: bool) -> str:
    """A digest of what a FIFO baseline's figures depend on: the nodes, the jobs, and the code
    that simulates them (this file and the assigner's and cluster state's modules), so that a
    cached figure is never reused after either changed."""
    import hashlib
    import inspect

    from hub_ext.core.admission import assigner, snapshot
    from hub_ext.core.admission import nodes as node_module

    digest = hashlib.sha256(f"strict={strict}".encode())
    digest.update(Path(__file__).read_bytes())
    for module in (assigner, node_module, snapshot):
        digest.update(inspect.getsource(module).encode())
    for n in nodes:
        digest.update(repr((n.name, sorted(n.allocatable.items()), sorted(n.free.items()),
                            n.gpu_product, n.schedulable)).encode())
    for t in trace:
        j = t.job
        digest.update(repr((j.name, j.submit_time, t.duration, j.max_runtime, j.priority, j.course,
                            [(r.name, r.replicas, sorted(r.request.items())) for r in j.roles])
                           ).encode())
    return digest.hexdigest()[:24]


def baseline(nodes: Sequence[NodeState], trace: Sequence[TraceJob], strict: bool,
             cache: Path | None) -> Metrics:
    """Strict or best-effort FIFO's figures, from `cache` when this trace was simulated there
    with the same code (the simulation is deterministic; a public trace costs minutes of CPU)."""
    if cache is None:
        return measure(nodes, trace, fifo_policy(strict=strict), shares=False)
    import json

    path = cache / f"{'strict' if strict else 'besteffort'}-{_baseline_key(nodes, trace, strict)}.json"
    if path.is_file():
        return Metrics(**json.loads(path.read_text()))
    metrics = measure(nodes, trace, fifo_policy(strict=strict), shares=False)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics.__dict__))
    return metrics


# --------------------------------------------------------------------------- cycle timing


def cycle_scenario(seed: int, n_nodes: int, n_waiting: int) -> tuple[ClusterState, QueueManager,
                                                                     dict[str, CourseQuota], float]:
    """A cluster ~97 % busy with running jobs from the generator, and `n_waiting` jobs queued:
    the loop's `ClusterState` and `QueueManager`, the courses' quotas and the time."""
    rng = random.Random(seed)
    nodes, trace = synthetic(seed, n_nodes, n_nodes * 8 // 2 + n_waiting, prefix="t")
    index = FreeIndex(nodes)
    used = {n.name: ResourceVector() for n in nodes}
    running, usage = [], {}
    now = 1_000_000.0
    target = 0.97 * 8 * n_nodes
    busy = 0.0
    pending = list(trace)
    while pending and busy < target:
        t = pending.pop()
        placement = index.place(t.job)
        if placement is None:
            continue
        for _role, _r, node in placement.replicas:
            used[node] = used[node] + t.job.roles[0].request
        started = now - rng.uniform(0, t.job.max_runtime)
        running.append(RunningJob(t.job, placement.replicas, started))
        usage[t.job.course] = usage.get(t.job.course, ResourceVector()) + t.job.total
        busy += t.job.gpus
    cluster = ClusterState(replace(n, free=(n.allocatable - used[n.name]).clamp()) for n in nodes)
    for run in running:
        cluster.start(run)
    manager = QueueManager()
    for t in pending[:n_waiting]:
        manager.add(replace(t.job, submit_time=now - rng.uniform(0, 7200)))
    total = sum((n.allocatable[NVIDIA_GPU] for n in nodes), Fraction(0))
    courses = {c: CourseQuota(nominal=ResourceVector({NVIDIA_GPU: total / len(COURSES)}),
                              usage=Usage(usage.get(c, ResourceVector()))) for c, _ in COURSES}
    return cluster, manager, courses, now


@dataclass(frozen=True)
class CycleTiming:
    p50_ms: float
    p99_ms: float
    cpu_ms: float
    """Median CPU time of this process per cycle (all threads)."""
    cpu_p99_ms: float
    admitted: int
    examined: int
    state_mib: float
    """What one scenario's loop state (ClusterState + QueueManager) holds, by tracemalloc."""
    peak_mib: float
    """The most one cycle allocated on top of it, by tracemalloc."""
    rss_mib: float


STARVING_EVERY_BIG_JOB = (0.0,) * WAIT_WINDOW
"""Recent waits for the timed cycles: all 0, so every job of a whole node that waited an hour
(about half of the scenario's queue) is starving and the cycle plans the most reservations it
can (the depth and every one beyond it): the costliest cycle the policy allows."""


def time_cycles(n_nodes: int, n_waiting: int, runs: int) -> CycleTiming:
    """Cycles as the loop runs them: `ClusterState.snapshot()` + `QueueManager.snapshot()` +
    `admission_cycle`, over four scenarios, after one untimed warm-up cycle each (a service
    keeps its job objects between cycles, so their exact request forms are computed once)."""
    tracemalloc.start()
    first = cycle_scenario(1, n_nodes, n_waiting)
    state = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    scenarios = [first] + [cycle_scenario(seed, n_nodes, n_waiting) for seed in range(2, 5)]

    def one(k: int) -> Any:
        cluster, manager, courses, now = scenarios[k % len(scenarios)]
        snapshot = cluster.snapshot(now, courses, recent_waits=STARVING_EVERY_BIG_JOB, grace=GRACE)
        return admission_cycle(snapshot, manager.snapshot(), depth=DEPTH, starving_extra=STARVING)

    for k in range(len(scenarios)):
        one(k)
    gc.collect()  # the loop freezes a large kept state (JobLoop.cycle, FREEZE_FROM): the same here
    gc.freeze()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    one(0)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    times, cpus = [], []
    result = None
    for k in range(runs):
        began, cpu = time.perf_counter(), time.process_time()
        result = one(k)
        times.append((time.perf_counter() - began) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    p99 = nearest_rank(times, 0.99)
    assert result is not None
    cpu_p99 = nearest_rank(cpus, 0.99)
    return CycleTiming(statistics.median(times), p99, statistics.median(cpus), cpu_p99, len(result.admitted),
                       result.examined, state / 2**20, peak / 2**20, _rss_mib())


def _rss_mib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- the service's loop


class InMemoryCluster:
    """A job backend (hub_ext.backends.jobs.JobBackend) over fixed nodes where every replica runs
    at once and nothing changes between cycles: what the loop costs by itself, without a cluster.
    The loop under measure is the product's `JobLoop` with its `JobStore` on sqlite."""

    def __init__(self, nodes: Sequence[NodeState]) -> None:
        self._state = ClusterState(nodes)
        self._launched: set[str] = set()

    async def nodes(self, held: Any, other: Any = None, running: Sequence[Any] = ()) -> tuple[NodeState, ...]:
        return self._state.nodes  # kept as a watch would keep it: changed at launch and stop

    def _hold(self, launch: Any, sign: int) -> None:
        for replica in launch.replicas:
            request = ResourceVector.from_k8s(launch.requests.get(replica.role, {}))
            self._state.adjust(replica.node, -request if sign > 0 else request)

    def devices_for(self, node: str, resource: str, count: int, taken: set[str],
                    product: str | None = None) -> list[str]:
        return []

    async def launch(self, launch: Any) -> None:
        if launch.job_id not in self._launched:
            self._launched.add(launch.job_id)
            self._hold(launch, +1)

    async def status(self, launch: Any) -> dict[tuple[str, int], Any]:
        from hub_ext.backends.jobs import RUNNING, ReplicaStatus
        return {(r.role, r.index): ReplicaStatus(RUNNING, None, r.node) for r in launch.replicas}

    async def stop(self, launch: Any, grace: float) -> None:
        if launch.job_id in self._launched:
            self._launched.discard(launch.job_id)
            self._hold(launch, -1)

    async def logs(self, launch: Any, role: str, index: int, offset: int, limit: int) -> bytes:
        return b""

    def changed_jobs(self) -> set[str]:
        return set()  # a watch that saw nothing happen


def loop_cpu(n_running: int, runs: int) -> tuple[float, float, int, int]:
    """The service's `JobLoop`, on sqlite, with `n_running` 1-GPU jobs running on full nodes and
    as many waiting: (median CPU ms per cycle, median wall ms, running, waiting)."""
    import asyncio
    import tempfile
    from datetime import datetime, timezone

    from hub_ext.core import jobs as J
    from hub_ext.service.jobs.bodies import parse_submission
    from hub_ext.service.jobs.loop import JobLoop
    from hub_ext.service.jobs.records import JobStore
    from hub_ext.store import Ledger, add_member, connect, ensure_course

    nodes = [node_state(f"node-{i:04d}", 8) for i in range(max(1, math.ceil(n_running / 8)))]
    with tempfile.TemporaryDirectory() as folder:
        sessions = connect(f"sqlite:///{folder}/classhub.sqlite")
        now = datetime.now(timezone.utc)
        with sessions.begin() as session:
            add_member(session, ensure_course(session, "cs101", now), "student", "student")
        store = JobStore(sessions, Ledger(sessions))

        def submit(k: int, gpus: int) -> None:
            sub = parse_submission({"name": f"job-{k}", "command": ["true"], "replicas": 1,
                                    "resources": {"nvidia.com/gpu": gpus, "cpu": "1"}})
            job = J.parse_job({**sub.job_fields, "name": sub.name}, owner="student", course="cs101",
                              submit_time=now.timestamp() + k, default_max_runtime=86400)
            store.submit("student", "cs101", sub, job, now)

        async def run() -> tuple[list[float], list[float]]:
            loop = JobLoop(store, InMemoryCluster(nodes), grace=1.0)
            for k in range(n_running):
                submit(k, 1)
            while len(loop.holding) < n_running or any(
                    h.record.state != J.RUNNING for h in loop.holding.values()):
                await loop.cycle()
            for k in range(n_running):
                submit(n_running + k, 8)  # no node has 8 free: they wait
            await loop.cycle()
            cpus, walls = [], []
            for _ in range(runs):
                began, cpu = time.perf_counter(), time.process_time()
                await loop.cycle()
                walls.append((time.perf_counter() - began) * 1000)
                cpus.append((time.process_time() - cpu) * 1000)
            assert (len(loop.holding), len(loop.queue)) == (n_running, n_running)
            return cpus, walls

        cpus, walls = asyncio.run(run())
        sessions.kw["bind"].dispose()
    return statistics.median(cpus), statistics.median(walls), n_running, n_running


# --------------------------------------------------------------------------- main


def _load() -> str:
    """The machine's load average (these machines are shared: a figure needs its load)."""
    import os
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


GOALS = "util_vs_besteffort >= 1.0, delay_vs_strict < 0.6, bigjob_delay_vs_strict <= 1.0, " \
    "cycle_ms_p50 < 50"


def meets_goals(util: float, delay: float, big: float, cycle_ms: float) -> bool:
    """The goals of issue 30, each seed on its own (docs/admission.md)."""
    return util >= 1.0 and delay < 0.6 and big <= 1.0 and cycle_ms < 50


def seed_range(text: str) -> list[int]:
    """"1-20" or "3" or "1,4,7" -> seeds; a clear sentence when the text is not one."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            seeds.extend(range(int(low), int(high or low) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds takes a range such as 1-20 or a list such as 1,4,7, not {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"--seeds {text!r} names no seed: write e.g. 1-20")
    return seeds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=Path, help="nodes CSV")
    p.add_argument("--jobs", type=Path, help="jobs CSV")
    p.add_argument("--synthetic", type=int, metavar="SEED", help="generate a trace (default seed 1)")
    p.add_argument("--seeds", type=seed_range, metavar="RANGE",
                   help="run every synthetic seed of RANGE (e.g. 1-20) and print a table; the "
                        "last line then gives the worst figure of each over the seeds")
    p.add_argument("--synthetic-nodes", type=int, default=64)
    p.add_argument("--synthetic-jobs", type=int, default=3000)
    p.add_argument("--cycle-nodes", type=int, default=1000)
    p.add_argument("--cycle-waiting", type=int, default=10_000)
    p.add_argument("--cycle-runs", type=int, default=20)
    p.add_argument("--loop-running", type=int, default=1000,
                   help="running jobs in the measure of the service's loop's CPU per cycle")
    p.add_argument("--loop-runs", type=int, default=10)
    p.add_argument("--depth", type=int, default=RESERVATION_DEPTH,
                   help="how many waiting jobs hold a reservation at once (1: EASY backfilling)")
    p.add_argument("--starving-reservations", type=int, default=STARVING_RESERVATIONS,
                   help="how many reservations beyond the depth starving jobs of a whole node or "
                        "more may hold (0: none)")
    p.add_argument("--baseline-cache", type=Path, metavar="DIR",
                   help="keep the strict and best-effort FIFO figures of each trace in DIR and "
                        "reuse them (keyed by the trace and the code they ran): a rerun of a "
                        "policy change simulates only classhub")
    p.add_argument("--shares", action="store_true",
                   help="give each course a nominal share (an equal part of the GPUs): "
                        "borrowing and preemption")
    return p


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    if args.seeds is not None:
        return main_seeds(args)
    return run(args)


def main_seeds(args: argparse.Namespace) -> dict[str, Any]:
    """One run per seed, a table, and the worst of each figure in the usual last line."""
    rows = []
    for seed in args.seeds:
        args.synthetic = seed
        result = run(args, quiet=True)
        rows.append((seed, result))
    print(f"goals, each seed: {GOALS}; depth {args.depth}, "
          f"{args.starving_reservations} starving reservations")
    print("seed  util_vs_besteffort  delay_vs_strict  bigjob_delay_vs_strict  cycle_ms_p50  "
          "cycle_ms_p99  cycle_cpu_ms_p50  load_avg_1m  goals  goals_cycle_by_cpu")
    for seed, r in rows:
        f = r["figures"]
        by_cpu = (*f[:3], r["cycle_cpu_p50"])
        print(f"{seed:4d}  {f[0]:18.3f}  {f[1]:15.3f}  {f[2]:22.3f}  {f[3]:12.1f}  "
              f"{r['cycle_p99']:12.1f}  {r['cycle_cpu_p50']:16.1f}  {r['load']:11.2f}  "
              f"{'met' if meets_goals(*f) else 'MISSED':5s}  "
              f"{'met' if meets_goals(*by_cpu) else 'MISSED'}")
    worst = (min(r["figures"][0] for _, r in rows), max(r["figures"][1] for _, r in rows),
             max(r["figures"][2] for _, r in rows), max(r["figures"][3] for _, r in rows))
    met = sum(1 for _, r in rows if meets_goals(*r["figures"]))
    print(f"{met} of {len(rows)} seeds meet every goal")
    line = _line(*worst)
    print(line)
    return {"line": line, "rows": rows, "met": met}


def _line(util: float, delay: float, big: float, cycle_ms: float) -> str:
    return (f"util_vs_besteffort={util:.3f} delay_vs_strict={delay:.3f} "
            f"bigjob_delay_vs_strict={big:.3f} cycle_ms_p50={cycle_ms:.1f}")


def run(args: argparse.Namespace, quiet: bool = False) -> dict[str, Any]:
    global DEPTH, STARVING
    if args.depth < 1:
        raise SystemExit(f"--depth must be at least 1 (one reservation: EASY backfilling), not {args.depth}")
    problem = policy_problem("starving_extra", args.starving_reservations)
    if problem:
        raise SystemExit(f"--starving-reservations {problem}")
    DEPTH = args.depth
    STARVING = args.starving_reservations
    if (args.nodes is None) != (args.jobs is None):
        raise SystemExit("--nodes and --jobs go together")
    errors: list[str] = []
    if args.nodes is not None:
        if args.synthetic is not None:
            raise SystemExit("give either --synthetic or --nodes/--jobs")
        nodes, trace = read_nodes(args.nodes, errors), read_jobs(args.jobs, errors)
        source = f"{args.nodes} + {args.jobs}"
    else:
        seed = 1 if args.synthetic is None else args.synthetic
        nodes, trace = synthetic(seed, args.synthetic_nodes, args.synthetic_jobs)
        source = f"synthetic seed {seed}"
    for error in errors:
        print(error)
    if not nodes or not trace:
        raise SystemExit("nothing to simulate: no valid nodes or no valid jobs")
    from hub_ext.core.admission import refuse_at_submit
    kept = []
    for t in trace:
        why = refuse_at_submit(t.job, nodes)
        if why:
            print(f"{t.job.name}: refused at submit: {why}")
        else:
            kept.append(t)
    trace = kept
    gpus = sum(int(n.allocatable[NVIDIA_GPU]) for n in nodes)
    print(f"trace: {source}: {len(nodes)} nodes, {gpus} GPUs, {len(trace)} jobs "
          f"({sum(1 for t in trace if t.job.gpus >= BIG_JOB_GPUS)} of {BIG_JOB_GPUS}+ GPUs)")
    results = {
        "classhub": measure(nodes, trace, classhub_policy, shares=args.shares),
        "strict": baseline(nodes, trace, True, args.baseline_cache),
        "besteffort": baseline(nodes, trace, False, args.baseline_cache),
    }
    for name, m in results.items():
        print(f"{name:10s} utilisation={m.utilisation:.3f} mean_delay_s={m.mean_delay:.0f} "
              f"p95_delay_s={m.p95_delay:.0f} p95_bigjob_delay_s={m.p95_big_delay:.0f} "
              f"makespan_s={m.makespan:.0f} preemptions={m.preemptions} "
              f"wasted_gpu_h={m.wasted_gpu_hours:.1f} cycles={m.cycles} sim_s={m.seconds:.1f}")
    timing = time_cycles(args.cycle_nodes, args.cycle_waiting, args.cycle_runs)
    p50, p99 = timing.p50_ms, timing.p99_ms
    print(f"cycle: {args.cycle_nodes} nodes x 8 GPUs, {args.cycle_waiting} waiting, "
          f"{args.cycle_runs} cycles: p50={p50:.1f} ms p99={p99:.1f} ms "
          f"cpu_p50={timing.cpu_ms:.1f} ms cpu_p99={timing.cpu_p99_ms:.1f} ms "
          f"(last cycle admitted {timing.admitted}, examined {timing.examined}); "
          f"loop state {timing.state_mib:.1f} MiB, cycle peak +{timing.peak_mib:.1f} MiB "
          f"(tracemalloc), max RSS {timing.rss_mib:.0f} MiB; load average {_load()}")
    cpu = None
    if not quiet:  # once per run, not once per seed of --seeds
        cpu, wall, n_run, n_wait = loop_cpu(args.loop_running, args.loop_runs)
        print(f"loop: the service's JobLoop on sqlite, {n_run} jobs running, {n_wait} waiting, "
              f"nothing changing: cpu_per_cycle={cpu:.1f} ms wall={wall:.1f} ms")
    c, s, b = results["classhub"], results["strict"], results["besteffort"]
    figures = (_ratio(c.utilisation, b.utilisation), _ratio(c.mean_delay, s.mean_delay),
               _ratio(c.p95_big_delay, s.p95_big_delay), p50)
    line = _line(*figures)
    if not quiet:
        print(line)
    return {"line": line, "results": results, "cycle_p50": p50, "cycle_p99": p99, "errors": errors,
            "cycle": timing, "loop_cpu_ms": cpu, "figures": figures, "load": os.getloadavg()[0],
            "cycle_cpu_p50": timing.cpu_ms}


if __name__ == "__main__":
    main()
