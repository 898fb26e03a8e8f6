"""Node objects built from a small YAML description.

Format (a list, or a mapping with key ``nodes``)::

    - name: gpu-h200-0
      allocatable: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
      capacity: {...}            # optional, defaults to allocatable
      labels: {nvidia.com/gpu.product: NVIDIA-H200}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      unschedulable: false
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

KUBELET_VERSION = "v1.32.0-kubefake"


def node_object(spec: dict[str, Any]) -> dict[str, Any]:
    """A v1 Node (without server-set metadata) from one YAML entry."""
    name = spec["name"]
    allocatable = {k: str(v) for k, v in (spec.get("allocatable") or {}).items()}
    allocatable.setdefault("pods", "110")
    allocatable.setdefault("cpu", "4")
    allocatable.setdefault("memory", "16Gi")
    allocatable.setdefault("ephemeral-storage", "100Gi")
    capacity = {k: str(v) for k, v in (spec.get("capacity") or allocatable).items()}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        **{k: str(v) for k, v in (spec.get("labels") or {}).items()},
    }
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict(spec.get("annotations") or {})},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "kubefake://1.0.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "kubefake",
                "kernelVersion": "kubefake",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }
    if spec.get("taints"):
        node["spec"]["taints"] = [dict(t) for t in spec["taints"]]
    if spec.get("unschedulable"):
        node["spec"]["unschedulable"] = True
    return node


def load_nodes(source: str | Path | list[dict[str, Any]] | dict[str, Any] | None) -> list[dict[str, Any]]:
    """Node objects from a YAML path, YAML text, or already-parsed data."""
    if source is None:
        return []
    data: Any = source
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and Path(source).exists()):
        data = yaml.safe_load(Path(source).read_text())
    elif isinstance(source, str):
        data = yaml.safe_load(source)
    if isinstance(data, dict):
        data = data.get("nodes") or []
    return [node_object(entry) for entry in data]


SAMPLE_NODES = Path(__file__).parent / "nodes" / "sample.yaml"
