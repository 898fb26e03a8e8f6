"""helm-values/: what ``helm install`` and the GPU Operator would make of each values file.

Every values file, and the base with each overlay, is validated against the z2jh chart's own
``values.schema.yaml`` over the chart's default values (what Helm validates). Each overlay's
profiles are parsed by classhub's catalog parser (the hub refuses a bad catalog at start), and
each must fit on a node as the GPU Operator settings beside the overlay leave it: the right
extended resource, the product label its node selector asks for, the GPU taint tolerated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.profiles import parse_profile, pod_settings
from tests.helmchart import (
    HELM_VALUES,
    Z2JH,
    chart_values,
    coalesce,
    operator_nodes,
    overlays,
    read_yaml,
    schema_errors,
    unknown_operator_keys,
)
from tests.kubefake.nodes import node_object

pytestmark = pytest.mark.unit

BASE = HELM_VALUES / "base.yaml"
OVERLAYS = overlays()
GPU_OVERLAYS = [o for o in OVERLAYS if o != "cpu-only"]
#: The machines each GPU setup is written for: (node, gpu_product label, GPUs per node).
HARDWARE = {
    "whole-gpus": [("h200-0", "NVIDIA-H200", 8), ("l40s-0", "NVIDIA-L40S", 4)],
    "mig-mixed": [("h200-mig-0", "NVIDIA-H200", 8)],
    "mig-single": [("h200-mig-0", "NVIDIA-H200", 8)],
    "shared": [("l40s-0", "NVIDIA-L40S", 4)],
    "cpu-only": [],
}


def overlay_path(name: str) -> Path:
    return HELM_VALUES / "overlays" / f"{name}.yaml"


def profiles_of(name: str) -> list[dict]:
    return chart_values(BASE, overlay_path(name))["hub"]["config"]["ClasshubKubeSpawner"]["profiles"]


def test_the_overlays_cover_every_gpu_setup():
    assert OVERLAYS == ["cpu-only", "mig-mixed", "mig-single", "shared", "whole-gpus"]
    assert set(HARDWARE) == set(OVERLAYS)


def test_the_chart_defaults_alone_validate():
    """The copies of values.yaml and values.schema.yaml belong together (same chart version)."""
    assert schema_errors(chart_values()) == []


@pytest.mark.parametrize("path", [BASE, *map(overlay_path, OVERLAYS)], ids=lambda p: p.stem)
def test_each_values_file_validates_on_its_own(path):
    assert schema_errors(chart_values(path)) == []


@pytest.mark.parametrize("name", OVERLAYS)
def test_base_with_each_overlay_validates(name):
    values = chart_values(BASE, overlay_path(name))
    assert schema_errors(values) == []
    # the overlay adds profiles; the base's classhub settings survive the merge
    spawner = values["hub"]["config"]["ClasshubKubeSpawner"]
    assert spawner["profiles"] and spawner["volume_mounts"][0]["mountPath"] == "/home/jovyan"
    assert values["cull"]["enabled"] is False
    assert "configure(" in values["hub"]["extraConfig"]["00-classhub"]


def test_validation_refuses_what_helm_refuses():
    """The check can fail: a misspelt key and a wrong type are named with their path."""
    errors = schema_errors(chart_values(BASE, {"hub": {"extraconfig": {}}, "singleuser": {"storage": {
        "type": "pvc"}}}))
    assert any(e.startswith("hub:") and "'extraconfig' was unexpected" in e for e in errors), errors
    assert any(e.startswith("singleuser.storage.type:") for e in errors), errors


def test_helm_merge_semantics():
    """Maps merge, lists replace, null removes a default (so overlays replace the profile list)."""
    merged = coalesce({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "d": None})
    assert merged == {"a": {"b": 1, "c": [3]}}


@pytest.mark.parametrize("name", OVERLAYS)
def test_each_overlays_profiles_parse(name):
    parsed = [parse_profile(p, i) for i, p in enumerate(profiles_of(name))]
    assert len({p.slug for p in parsed}) == len(parsed)
    assert [p.slug for p in parsed if p.default], "one profile is the default"
    if name == "cpu-only":
        assert all(p.kind == "cpu" for p in parsed)
    else:
        assert any(p.kind != "cpu" for p in parsed)


@pytest.mark.parametrize("name", OVERLAYS)
def test_gpu_operator_settings_sit_beside_each_gpu_overlay(name):
    operator = HELM_VALUES / "overlays" / f"{name}.gpu-operator.yaml"
    assert operator.exists() == (name in GPU_OVERLAYS)
    if operator.exists():
        assert unknown_operator_keys(read_yaml(operator)) == []
        assert f"# GPU Operator settings: {operator.name}" in overlay_path(name).read_text()


def test_unknown_gpu_operator_keys_are_named():
    assert unknown_operator_keys({"migManager": {"confg": {}}, "mig": {"strategy": "mixed"},
                                  "devicePlugin": {"config": {"data": {"anything": "x"}}}}) == [
        "migManager.confg"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_profile_fits_a_node_the_gpu_operator_makes(name):
    """The profiles ask for what the GPU Operator settings beside them advertise."""
    nodes = [node_object(n) for n in operator_nodes(name, HARDWARE[name])]
    snapshot = CapacitySnapshot.from_k8s(nodes, [])
    for i, entry in enumerate(profiles_of(name)):
        profile = parse_profile(entry, i)
        settings = pod_settings(profile)
        fits = snapshot.max_fit(profile.request, settings["node_selector"], settings["tolerations"])
        assert fits >= 1, (name, profile.slug, settings, nodes)
        if profile.kind != "cpu":  # and only on GPU nodes
            gpu_nodes = [n for n in nodes if n["metadata"]["name"] != "cpu-0"]
            assert CapacitySnapshot.from_k8s(gpu_nodes, []).max_fit(
                profile.request, settings["node_selector"], settings["tolerations"]) == fits


def test_the_mig_single_profile_stays_off_whole_gpus():
    """A single-strategy slice is plain nvidia.com/gpu: only the product label keeps it apart."""
    entry = next(p for p in profiles_of("mig-single") if p["kind"] == "mig")
    profile = parse_profile(entry)
    settings = pod_settings(profile)
    whole = [node_object(n) for n in operator_nodes("whole-gpus", HARDWARE["whole-gpus"])]
    assert CapacitySnapshot.from_k8s(whole, []).max_fit(
        profile.request, settings["node_selector"], settings["tolerations"]) == 0
    sliced = [node_object(n) for n in operator_nodes("mig-single", HARDWARE["mig-single"])]
    assert CapacitySnapshot.from_k8s(sliced, []).max_fit(
        profile.request, settings["node_selector"], settings["tolerations"]) == 7 * 8


def test_profile_images_are_built_from_images():
    """Every image a profile offers, and the hub image, has a Dockerfile in images/."""
    images = Path(__file__).resolve().parent.parent / "images"
    base = chart_values(BASE)
    hub_image = f"{base['hub']['image']['name']}:{base['hub']['image']['tag']}"
    # templates' publisher pod (a trait the chart's hub.config sets, README "Configuration")
    assert base["hub"]["config"]["ClasshubTemplates"]["publisher_image"] == hub_image
    named = {hub_image, f"{base['singleuser']['image']['name']}:{base['singleuser']['image']['tag']}"}
    for name in OVERLAYS:
        for entry in profiles_of(name):
            named.update(entry.get("images", []))
    for ref in sorted(named):
        match = re.fullmatch(r"registry\.example\.org/classhub/([a-z0-9-]+):(.+)", ref)
        assert match, ref
        assert (images / match.group(1) / "Dockerfile").exists(), ref
        assert match.group(2) == "0.1.0", ref


def test_the_chart_copies_name_their_source():
    source = (Z2JH / "SOURCE").read_text()
    assert "tag:        4.4.0" in source and "5c5f5df751588a68a7781ead01d0f62e88e2e72f" in source
    for name in ("values.schema.yaml", "values.yaml", "jupyterhub_config.py", "z2jh.py", "LICENSE"):
        assert (Z2JH / name).stat().st_size > 0 and f"-> {name}" in source


def test_the_capacity_rbac_is_valid_and_grants_what_the_live_view_reads():
    """helm-values/capacity-rbac.yaml: valid RBAC objects (Kubernetes' own schema) that let the
    chart's hub ServiceAccount read nodes and watch the pods of every namespace."""
    import kubernetes_validate
    import yaml

    docs = list(yaml.safe_load_all((HELM_VALUES / "capacity-rbac.yaml").read_text()))
    version = kubernetes_validate.latest_version()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("nodes", "list"), ("pods", "list"), ("pods", "watch")} <= granted
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "classhub"}]
