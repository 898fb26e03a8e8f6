"""Spawn-path overhead of ClasshubKubeSpawner against stock KubeSpawner, on one fake cluster.

Why: ClasshubKubeSpawner wraps KubeSpawner's spawn path (deadline, failure bookkeeping, sorted
API errors); a student should not pay for that in spawn time. Both spawners run in this process
against the same fake cluster (tests/kubefake in its own process, stand-in containers), with the
same settings (a per-user PVC, the same volumes), interleaved (the order alternates every round) and with the
same random seed per round, so KubeSpawner's jittered polling waits the same for both. The wall
time measured is ``await spawner.start()``: PVC and pod creation until the pod is running.

    .venv/bin/python bench/spawn_overhead.py [--spawns 20]

The last line is the ratio of medians, classhub / stock (target: <= 1.10).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# kubernetes_asyncio reads $KUBECONFIG when it is imported: name the file before any import.
KUBECONFIG = Path(tempfile.mkdtemp(prefix="classhub-bench-")) / "kubeconfig"
os.environ["KUBECONFIG"] = str(KUBECONFIG)

from kubespawner import KubeSpawner  # noqa: E402
from traitlets.config import Config  # noqa: E402

from spawner.kube import ClasshubKubeSpawner  # noqa: E402

NODES_YAML = """\
nodes:
  - {name: cpu-0, allocatable: {cpu: "64", memory: 256Gi, pods: "110"}}
  - {name: cpu-1, allocatable: {cpu: "64", memory: 256Gi, pods: "110"}}
"""


class _Stub:
    """The few attributes of a hub User / Hub object that the spawn path reads."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


def config() -> Config:
    """Identical settings for both classes: what ClasshubKubeSpawner defaults to, made explicit."""
    c = Config()
    for section in ("KubeSpawner", "ClasshubKubeSpawner"):
        c[section].namespace = "default"
        c[section].image = "quay.io/jupyter/base-notebook:2025-01-01"
        c[section].start_timeout = 60
        c[section].storage_pvc_ensure = True
        c[section].storage_capacity = "10Gi"
        c[section].volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
        c[section].volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]
        c[section].cpu_guarantee = 0.1
    return c


def make_spawner(cls: type[KubeSpawner], name: str, uid: int) -> KubeSpawner:
    user = _Stub(name=name, id=uid, url=f"/user/{name}/")
    hub = _Stub(public_host="", url="http://127.0.0.1:8081/hub/", base_url="/hub/",
                api_url="http://127.0.0.1:8081/hub/api")
    spawner = cls(user=user, hub=hub, config=config(), _mock=True)
    spawner.api_token = "bench-token"
    return spawner


async def timed_spawn(cls: type[KubeSpawner], name: str, uid: int, seed: int) -> float:
    spawner = make_spawner(cls, name, uid)
    random.seed(seed)
    started = time.perf_counter()
    await spawner.start()
    elapsed = time.perf_counter() - started
    await KubeSpawner.stop(spawner, now=True)
    await spawner.delete_forever()  # the PVC, so every round creates one (not timed)
    return elapsed


def start_cluster() -> subprocess.Popen:
    """The fake cluster in its own process, so it does not compete with the spawners for the GIL."""
    nodes = KUBECONFIG.parent / "nodes.yaml"
    nodes.write_text(NODES_YAML)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.kubefake", "--port", "0", "--kubeconfig", str(KUBECONFIG),
         "--nodes", str(nodes), "--kubelet-mode", "standin"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not KUBECONFIG.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("the fake cluster (python -m tests.kubefake) did not start")
        time.sleep(0.05)
    return proc


async def run(spawns: int) -> dict[str, list[float]]:
    kinds = {"classhub": ClasshubKubeSpawner, "stock": KubeSpawner}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        for kind, cls in kinds.items():  # warm-up: reflectors, client pool, imports
            await timed_spawn(cls, f"warm-{kind}", 0, 0)
        for round_ in range(spawns):
            order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
            for kind in order:
                times[kind].append(
                    await timed_spawn(kinds[kind], f"{kind}-{round_}", round_ + 1, round_)
                )
    finally:
        await KubeSpawner._stop_all_reflectors()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=20, help="spawns per spawner class (20)")
    args = parser.parse_args(argv)
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    cluster = start_cluster()
    try:
        times = asyncio.run(run(args.spawns))
    finally:
        cluster.terminate()
        cluster.wait(10)
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    for kind, values in times.items():
        print(f"{kind:9s} n={len(values)} median={medians[kind] * 1000:7.1f} ms "
              f"min={min(values) * 1000:7.1f} ms max={max(values) * 1000:7.1f} ms")
    paired = statistics.median(c / s for c, s in zip(times["classhub"], times["stock"], strict=True))
    print(f"median of per-round ratios (same seed) = {paired:.3f}")
    print(f"ratio of medians classhub/stock = {medians['classhub'] / medians['stock']:.3f}")


if __name__ == "__main__":
    main()
