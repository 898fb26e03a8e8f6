"""Keeps KubeSpawner's vendored suite out of classhub's own test run.

Its conftest loads a kubeconfig at import time, so it only runs when
tests/test_kubefake_conformance.py starts it against a fake cluster (it sets
KUBEFAKE_CONFORMANCE=1 and KUBECONFIG).
"""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("KUBEFAKE_CONFORMANCE") == "1" else ["suite"]
