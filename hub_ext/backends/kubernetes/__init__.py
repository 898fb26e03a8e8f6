"""The kubernetes backend: the only classhub code that calls a Kubernetes API server.

- :mod:`.client` builds the kubernetes_asyncio client the way KubeSpawner does (in-cluster
  service account first, then kubeconfig), sharing KubeSpawner's one-client-per-loop cache;
- :mod:`.capacity` answers "what can the cluster give right now" as a core ``CapacitySnapshot``;
- :mod:`.servers` creates and deletes the objects of a user's server (pod, PVC) and sorts every
  API failure into "retry" or "give up with this status", for ``ClasshubKubeSpawner``.
"""

from .capacity import KubernetesBackend
from .servers import ApiFailure, Attempt

__all__ = ["ApiFailure", "Attempt", "KubernetesBackend"]
