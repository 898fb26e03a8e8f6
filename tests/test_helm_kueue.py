"""helm-values/ with Kueue: what ``kubectl apply`` would make of the Kueue objects shipped there,
and the ``hub.config`` settings that turn Kueue on (docs/deploy-jobs.md, "Distributed jobs": its Kueue step).

Every Kueue object in helm-values/ (the ResourceFlavor and the ClusterQueue of
``kueue-queues.yaml``) is validated against the CustomResourceDefinitions of the Kueue release the
docs pin (v0.14.1, copied unchanged into tests/data/crds) the way ``kubectl apply`` validates it:
the CRD's OpenAPI schema with unknown fields refused (kubectl's default strict field validation),
and the CRD's CEL rules that such an object meets or breaks (jsonschema does not evaluate CEL, so
those are written out here). The commented Kueue lines of ``jobs.yaml``, uncommented as an admin
does, make values the chart's schema takes and settings the job service takes, and name that
ClusterQueue; the LocalQueue names they make per course are names Kubernetes takes.
"""

from __future__ import annotations

import re
from copy import deepcopy
from typing import Any

import jsonschema
import pytest
import yaml
from traitlets.config import Config

from tests.helmchart import HELM_VALUES, REPO, chart_values, read_yaml, schema_errors

pytestmark = pytest.mark.unit

CRDS = REPO / "tests" / "data" / "crds"
BASE = HELM_VALUES / "base.yaml"
JOBS = HELM_VALUES / "jobs.yaml"
KUEUE_KINDS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
               "LocalQueue": "localqueues"}
#: A Kubernetes object name (RFC 1123 subdomain; LocalQueue names are validated as such).
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD's structural schema with unknown fields refused, as kube-apiserver does for
    ``kubectl apply`` (fieldValidation=Strict): an object schema with properties and neither
    ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields`` takes no other key."""
    schema = deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def crd_schema(kind: str, version: str) -> dict[str, Any]:
    crd = read_yaml(CRDS / f"kueue.x-k8s.io_{KUEUE_KINDS[kind]}.yaml")
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    assert version in served, f"Kueue v0.14.1 serves {kind} as {sorted(served)}, not {version}"
    return strict(served[version]["schema"]["openAPIV3Schema"])


def kueue_objects() -> list[tuple[str, dict[str, Any]]]:
    """(file, object) for every Kueue object in helm-values/*.yaml."""
    found = []
    for path in sorted(HELM_VALUES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
                found.append((path.name, doc))
    return found


def kueue_errors(obj: dict[str, Any]) -> list[str]:
    """What kube-apiserver with Kueue v0.14.1's CRDs would refuse in ``obj``, one line each."""
    kind, version = obj.get("kind"), obj["apiVersion"].split("/", 1)[1]
    if kind not in KUEUE_KINDS:
        return [f"kind {kind!r} is not one of Kueue's {sorted(KUEUE_KINDS)}"]
    validator = jsonschema.Draft7Validator(crd_schema(kind, version))
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
              for e in validator.iter_errors(obj)]
    name = (obj.get("metadata") or {}).get("name", "")
    if not NAME.fullmatch(name) or len(name) > 253:
        errors.append(f"metadata.name: {name!r} is not a valid object name")
    if kind == "ClusterQueue":  # the CRD's CEL rules (x-kubernetes-validations)
        spec = obj.get("spec") or {}
        for i, group in enumerate(spec.get("resourceGroups") or []):
            covered = group.get("coveredResources") or []
            for flavor in group.get("flavors") or []:
                named = [r.get("name") for r in flavor.get("resources") or []]
                if named != covered:  # size by CEL, order and names by Kueue's webhook
                    errors.append(f"spec.resourceGroups.{i}: flavor {flavor.get('name')} lists "
                                  f"{named}, not the covered resources {covered} in order")
                borrows = any("borrowingLimit" in r for r in flavor.get("resources") or [])
                if borrows and not spec.get("cohort"):
                    errors.append(f"spec.resourceGroups.{i}: borrowingLimit must be nil when cohort is empty")
    return sorted(errors)


def kueue_settings() -> dict[str, Any]:
    """The ClasshubJobs settings of jobs.yaml with its commented Kueue lines uncommented."""
    section = dict(read_yaml(JOBS)["hub"]["config"]["ClasshubJobs"])
    for line in JOBS.read_text().splitlines():
        match = re.fullmatch(r"\s*#\s*(kueue_[a-z_]+:.*)", line)
        if match:
            section.update(yaml.safe_load(match.group(1)))
    return section


def test_the_shipped_kueue_objects_are_what_kubectl_apply_takes():
    objects = kueue_objects()
    kinds = sorted(obj["kind"] for _, obj in objects)
    assert "ClusterQueue" in kinds and "ResourceFlavor" in kinds, kinds
    for name, obj in objects:
        assert kueue_errors(obj) == [], (name, obj["kind"], obj["metadata"]["name"])


def test_each_flavor_a_clusterqueue_uses_is_shipped_with_it():
    objects = [obj for _, obj in kueue_objects()]
    flavors = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceFlavor"}
    for queue in (o for o in objects if o["kind"] == "ClusterQueue"):
        used = {f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]}
        assert used <= flavors, (queue["metadata"]["name"], used - flavors)
        covered = {r for g in queue["spec"]["resourceGroups"] for r in g["coveredResources"]}
        assert {"cpu", "memory", "nvidia.com/gpu"} <= covered  # what a job's replicas ask for


def test_the_validation_refuses_what_kubectl_refuses():
    """The check can fail: a misspelt field, a flavor that lists other resources than the group
    covers, a wrong type, a bad name."""
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
             "metadata": {"name": "Classhub"},
             "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "quotas": {},
                      "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [
                          {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}]}}
    errors = kueue_errors(queue)
    assert any(e.startswith("spec:") and "'quotas' was unexpected" in e for e in errors), errors
    assert any("not the covered resources" in e for e in errors), errors
    assert any(e.startswith("metadata.name:") for e in errors), errors
    errors = kueue_errors({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                           "metadata": {"name": "gpu101-queue"}, "spec": {"clusterQueue": 7}})
    assert any(e.startswith("spec.clusterQueue:") for e in errors), errors
    assert kueue_errors({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                         "metadata": {"name": "gpu101-queue"}, "spec": {"clusterQueue": "classhub"}}) == []


def test_kueue_through_hub_config_validates_and_names_the_shipped_clusterqueue():
    """jobs.yaml's commented Kueue lines, uncommented: values the chart takes, settings the job
    service takes (its start-up check), each course's LocalQueue a valid name, and the
    ClusterQueue they feed is the one kueue-queues.yaml ships."""
    from hub_ext.envtraits import check_sections
    from hub_ext.service.jobs.settings import ClasshubJobs

    section = kueue_settings()
    assert section["kueue_queue"] == "{course}-queue"
    values = chart_values(BASE, JOBS, {"hub": {"config": {"ClasshubJobs": section}}})
    assert schema_errors(values) == []
    check_sections(Config({"ClasshubJobs": section}), [ClasshubJobs])
    settings = ClasshubJobs(config=Config({"ClasshubJobs": section}))
    for course in ("gpu101", "dl-2026", "cs229"):
        queue = settings.kueue_queue.format(course=course)
        assert NAME.fullmatch(queue) and len(queue) <= 63, queue
        assert kueue_errors({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                             "metadata": {"name": queue, "namespace": settings.namespace},
                             "spec": {"clusterQueue": "classhub"}}) == []
    shipped = {o["metadata"]["name"] for _, o in kueue_objects() if o["kind"] == "ClusterQueue"}
    # the trait classhub feeds each course's LocalQueue from names the shipped ClusterQueue
    assert settings.kueue_cluster_queue in shipped, (settings.kueue_cluster_queue, shipped)
