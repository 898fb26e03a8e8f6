"""How long the fake cluster's slow steps take: off by default, ``Latencies.realistic()`` on demand.

A real cluster is never instant: pulling an image and starting a container take seconds, a
dynamically provisioned volume binds after a second or two, a new namespace's ``default``
ServiceAccount appears a moment after the namespace, a container needs time to exit on SIGTERM,
and an emptied namespace is finalized later. Spawner code that races these (start timeouts,
time-bounded cleanup, waiting for a pod to disappear) is only exercised with them turned on.
Tests that measure something else keep them off, so they stay fast.

Select with ``FakeCluster(latencies=...)``, ``python -m tests.kubefake --latencies realistic``
or the ``KUBEFAKE_LATENCIES`` environment variable (``realistic``, ``none`` or
``image_pull=2,container_start=0.5``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Latencies:
    """Seconds each step takes; 0 means instant."""

    image_pull: float = 0.0  # Pulling -> Pulled, for an image not yet on the node (or policy Always)
    container_start: float = 0.0  # Created -> Started, per container start
    volume_bind: float = 0.0  # a new PVC stays Pending this long before the provisioner binds it
    service_account: float = 0.0  # a new namespace gets its "default" ServiceAccount after this
    container_stop: float = 0.0  # a stand-in container exits this long after SIGTERM (within grace)
    namespace_finalize: float = 0.0  # an emptied Terminating namespace disappears after this
    too_large_rv_wait: float = 0.0  # a read at a future resourceVersion waits this long, then 504

    @classmethod
    def realistic(cls) -> Latencies:
        """Numbers of the order a small managed cluster shows (kube-apiserver waits 3 s on a
        too large resourceVersion before its 504)."""
        return cls(
            image_pull=1.5,
            container_start=0.5,
            volume_bind=1.0,
            service_account=0.1,
            container_stop=0.5,
            namespace_finalize=1.0,
            too_large_rv_wait=3.0,
        )

    @classmethod
    def parse(cls, text: str | None) -> Latencies:
        """``realistic``, ``none``/empty, or ``name=seconds,...`` (starting from none)."""
        text = (text or "").strip()
        if text in ("", "none", "off", "0"):
            return cls()
        if text == "realistic":
            return cls.realistic()
        known = {f.name for f in fields(cls)}
        values: dict[str, float] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            key = key.strip()
            if key not in known:
                raise ValueError(f"unknown latency {key!r}; known: {', '.join(sorted(known))}")
            values[key] = float(value)
        return replace(cls(), **values)

    @classmethod
    def from_env(cls) -> Latencies:
        """What ``KUBEFAKE_LATENCIES`` asks for (none when unset)."""
        return cls.parse(os.environ.get("KUBEFAKE_LATENCIES"))
