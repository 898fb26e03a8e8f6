"""kubefake: a fake Kubernetes API server, scheduler and kubelet for classhub's tests.

A test double only; nothing in the product imports it. Start it in-process with
:class:`FakeCluster` or standalone with ``python -m tests.kubefake --port P --kubeconfig F``.
"""

from .cluster import FakeCluster
from .kubelet import EXIT_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION, RUN_ANNOTATION
from .nodes import SAMPLE_NODES

__all__ = ["EXIT_AFTER_ANNOTATION", "EXIT_CODE_ANNOTATION", "RUN_ANNOTATION", "SAMPLE_NODES", "FakeCluster"]
