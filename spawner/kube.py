"""ClasshubKubeSpawner: the Kubernetes-mode spawner (KubeSpawner with classhub's additions).

In this release it is KubeSpawner registered under the ``classhub-kube`` entry point, so a z2jh
install can already select it; profiles, quotas and friendly scheduling messages build on it.
"""

from __future__ import annotations

from kubespawner import KubeSpawner


class ClasshubKubeSpawner(KubeSpawner):
    """KubeSpawner, as selected by ``classhub.configure(c, mode="kubernetes")``."""
