"""Kueue's LocalQueues for classhub's courses: every course's queue feeds one ClusterQueue.

Why (docs/kueue.md): with Kueue, a course's quota must be counted in exactly one place. classhub's
ledger counts it (notebooks and jobs together, per-student limits included, which a ClusterQueue
cannot express), and reserves a job at hand-over; Kueue only queues the jobs classhub handed over
against the whole share of classhub (one ClusterQueue, no per-course quota). So classhub makes
each course's LocalQueue itself, pointing at that ClusterQueue, and refuses to hand a job over to
a LocalQueue that an admin pointed elsewhere (a per-course ClusterQueue with a quota would be a
second controller counting the course's quota).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

__all__ = ["KUEUE_GROUP", "KUEUE_VERSION", "LOCAL_QUEUES", "LocalQueues", "local_queue"]

KUEUE_GROUP = "kueue.x-k8s.io"
#: The version Kueue v0.14 serves and stores (docs/deploy-jobs.md pins Kueue v0.14.1).
KUEUE_VERSION = "v1beta1"
LOCAL_QUEUES = "localqueues"
MANAGED_BY = "app.kubernetes.io/managed-by"


class NoKueue(Exception):
    """The cluster serves no LocalQueue kind; the message says what an admin does."""


def local_queue(name: str, namespace: str, cluster_queue: str, course: str) -> dict[str, Any]:
    """The LocalQueue of one course, feeding `cluster_queue` (Kueue's `spec.clusterQueue`)."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {MANAGED_BY: "classhub", "classhub.io/course": course}},
        "spec": {"clusterQueue": cluster_queue},
    }


class LocalQueues:
    """Makes (once) and checks each course's LocalQueue; `refusal(queue, course)` is None when
    jobs may be handed over, else the sentence that tells an admin what to change."""

    def __init__(self, custom: Any, namespace: str, cluster_queue: str) -> None:
        self.custom, self.namespace, self.cluster_queue = custom, namespace, cluster_queue
        self._checked: set[str] = set()

    async def refusal(self, name: str, course: str) -> str | None:
        if name in self._checked:
            return None
        try:
            found = await self._get(name)
        except NoKueue as e:
            return str(e)
        if found is None:
            try:
                found = await self.custom.create_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, self.namespace, LOCAL_QUEUES,
                    local_queue(name, self.namespace, self.cluster_queue, course))
            except ApiException as e:
                if e.status != 409:  # 409: made meanwhile (another service); read what it says
                    raise
                found = await self._get(name)
        named = ((found or {}).get("spec") or {}).get("clusterQueue")
        if named != self.cluster_queue:
            return (f"Kueue's LocalQueue {self.namespace}/{name} sends jobs to ClusterQueue "
                    f"{named!r}, not to {self.cluster_queue!r}: course quotas are counted by classhub "
                    f"only (docs/kueue.md), so every course's queue must feed the one ClusterQueue "
                    f"c.ClasshubJobs.kueue_cluster_queue names; an admin deletes it "
                    f"(kubectl -n {self.namespace} delete localqueue {name}; Kueue does not let "
                    "spec.clusterQueue change) and classhub makes it anew at the next job")
        self._checked.add(name)
        return None

    async def _get(self, name: str) -> dict[str, Any] | None:
        """The LocalQueue, None when it does not exist; NoKueue when the API server serves no
        LocalQueue kind at all (a plain-text 404 instead of a NotFound Status)."""
        try:
            return await self.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, self.namespace, LOCAL_QUEUES, name)
        except ApiException as e:
            if e.status != 404:
                raise
            try:
                status = json.loads(e.body or "")
            except ValueError:
                status = None
            if isinstance(status, dict) and status.get("kind") == "Status":
                return None
            raise NoKueue(f"Kueue is not installed in this cluster (it serves no {KUEUE_GROUP}/"
                          f"{KUEUE_VERSION} LocalQueue): an admin installs Kueue v0.14.1 "
                          "(docs/deploy-jobs.md) or unsets c.ClasshubJobs.kueue_queue") from None
