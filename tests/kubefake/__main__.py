"""Standalone fake cluster: ``python -m tests.kubefake --port 0 --kubeconfig kc.yaml``.

Writes the kubeconfig once listening, prints the URL, and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from .cluster import FakeCluster
from .nodes import SAMPLE_NODES


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m tests.kubefake", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: pick a free one)")
    parser.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig")
    parser.add_argument("--nodes", default=str(SAMPLE_NODES), help="nodes YAML (default: the sample)")
    parser.add_argument("--kubelet-mode", choices=("standin", "process"), default="standin")
    parser.add_argument(
        "--latencies",
        default=os.environ.get("KUBEFAKE_LATENCIES", ""),
        help="realistic, none, or name=seconds,... (see latency.py; default: $KUBEFAKE_LATENCIES or none)",
    )
    args = parser.parse_args(argv)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        cluster = FakeCluster(
            nodes=args.nodes, port=args.port, kubelet_mode=args.kubelet_mode, latencies=args.latencies
        )

        async def announce() -> None:
            while cluster.port == 0 or not getattr(cluster, "api", None) or not cluster.api.address:
                await asyncio.sleep(0.01)
            cluster.write_kubeconfig(args.kubeconfig)
            print(f"kubefake serving on {cluster.url}", flush=True)

        announcer = asyncio.ensure_future(announce())
        await cluster.serve_forever(stop)
        announcer.cancel()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
